"""The sans-IO core of ``consumer.process()``: no asyncio, no network.

| module | responsibility |
|---|---|
| ``scheduler.py`` | :class:`ProcessScheduler`: which record may start (ordering, concurrency), |
|                  | the offset to commit and the completed offsets beyond it |
| ``offsets.py``   | those completed offsets as commit metadata: versioned, size-bound text |
"""

from aiostream_kafka.consumer.processing.offsets import (
    MAX_METADATA_BYTES,
    decode_completed,
    encode_completed,
    fits,
)
from aiostream_kafka.consumer.processing.scheduler import (
    Ordering,
    ProcessScheduler,
    SchedulableRecord,
)

__all__ = [
    "MAX_METADATA_BYTES",
    "Ordering",
    "ProcessScheduler",
    "SchedulableRecord",
    "decode_completed",
    "encode_completed",
    "fits",
]
