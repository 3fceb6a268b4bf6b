"""Sans-IO request logic shared by the clients: which broker gets what, the request
bodies, what the answers mean (no sockets, no asyncio; the callers send, retry and
gather). ``errors``: a broker's error code as our typed exception; ``offsets``:
ListOffsets by partition leader and OffsetFetch for a group."""
