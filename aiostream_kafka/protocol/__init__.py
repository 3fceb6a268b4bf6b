"""The Kafka wire protocol, sans-IO: bytes in, typed objects out, and back.

Nothing in this package performs I/O or imports asyncio.
"""
