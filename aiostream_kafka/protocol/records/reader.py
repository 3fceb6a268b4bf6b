"""Reading a fetched ``records`` buffer: its batches of either format, their records,
or their records as columns.

:func:`iter_batches` walks the ``records`` bytes of a Fetch response partition, verifies
each batch's CRC and stops silently at a truncated trailing batch (brokers cut responses at
the fetch size limit); v2 batches come as :class:`RecordBatch`, legacy messages (magic 0
and 1) as :class:`LegacyBatch`. :func:`read_records` decodes every non-control batch;
:func:`decode_columns` decodes one batch into columns for columnar consumers such as the
Spark data source.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiostream_kafka.errors import CorruptRecordError
from aiostream_kafka.protocol.compression import DEFAULT_MAX_DECOMPRESSED_BYTES
from aiostream_kafka.protocol.records.bulk_decode import _MIN_RECORD_SIZE, _decode_record_slow
from aiostream_kafka.protocol.records.message_set import (
    _LEGACY_HEAD_SIZE,
    _LEGACY_MIN_LENGTH,
    LegacyBatch,
    _scan_legacy,
)
from aiostream_kafka.protocol.records.record_batch import (
    _CODEC_MASK,
    _CONTROL_BIT,
    _LOG_OVERHEAD,
    _MAGIC_AT,
    _MIN_BATCH_LENGTH,
    _OFFSET_LENGTH,
    _TIMESTAMP_TYPE_BIT,
    MAGIC,
    RecordBatch,
)
from aiostream_kafka.structs import Header, Record


def iter_batches(
    data: bytes | bytearray | memoryview, *, verify_crc: bool = True
) -> Iterator[RecordBatch]:
    """Yield the complete record batches in a Fetch response's ``records`` bytes.

    A truncated batch at the end (the broker stops at the fetch size limit) ends the
    iteration silently. Each batch's CRC is checked unless ``verify_crc`` is false.
    ``data`` other than ``bytes`` is copied once so records can be sliced as ``bytes``.

    Legacy messages (magic 0 and 1) come as :class:`LegacyBatch` instances: one per
    compressed message, one per run of uncompressed ones (their CRC-32 checked likewise).

    Raises ``CorruptRecordError`` (bad CRC, impossible lengths, unknown magic).
    """
    buf = data if isinstance(data, bytes) else bytes(data)
    n = len(buf)
    pos = 0
    while n - pos > _MAGIC_AT:
        base_offset, length = _OFFSET_LENGTH.unpack_from(buf, pos)
        magic = buf[pos + _MAGIC_AT]
        if length < _LEGACY_MIN_LENGTH:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} has impossible length {length}"
            )
        end = pos + _LOG_OVERHEAD + length
        if end > n:
            return  # partial trailing batch
        if magic != MAGIC:
            if magic in (0, 1):
                run = _scan_legacy(buf, pos, n, verify=verify_crc, inner=False)
                attributes = buf[pos + _LEGACY_HEAD_SIZE - 1]
                attributes &= _CODEC_MASK | _TIMESTAMP_TYPE_BIT if magic else _CODEC_MASK
                yield LegacyBatch(buf, pos, run, attributes, verify=verify_crc)
                pos = run.end
                continue
            raise CorruptRecordError(f"record batch at offset {base_offset} has magic {magic}")
        if length < _MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} has impossible length {length}"
            )
        batch = RecordBatch(buf, pos)
        if verify_crc:
            batch.verify_crc()
        yield batch
        pos = end


def read_records(
    data: bytes | bytearray | memoryview,
    topic: str,
    partition: int,
    *,
    max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """Decode the records of every complete, non-control batch in ``data``.

    A convenience for ``read_uncommitted`` consumption and tests; a ``read_committed``
    consumer iterates :func:`iter_batches` to drop aborted transactions.
    """
    out: list[Record] = []
    for batch in iter_batches(data):
        if not batch.attributes & _CONTROL_BIT:
            out += batch.records(topic, partition, max_decompressed_bytes=max_decompressed_bytes)
    return out


# ---------------------------------------------------------------------------------------
# reading into columns (for columnar consumers such as the Spark data source)


def decode_columns(
    batch: RecordBatch, *, max_decompressed_bytes: int = DEFAULT_MAX_DECOMPRESSED_BYTES
) -> tuple[list[int], list[int], list[bytes | None], list[bytes | None], list[list[Header]]]:
    """Decode every record of ``batch`` into columns: ``(offsets, timestamps, keys,
    values, headers)``, lists in record order, without building a Record per row.

    The values are those :meth:`RecordBatch.records` gives each record (``offset``,
    ``timestamp_ms`` -- ``max_timestamp`` for LOG_APPEND_TIME batches --, ``key``,
    ``value``, ``headers``); the timestamp type is the batch's. Control batches decode too.

    Raises ``CorruptRecordError`` on malformed records, ``DecompressionLimitError`` past
    ``max_decompressed_bytes``.
    """
    buf, pos, end = batch.records_span(max_decompressed_bytes)
    count = batch.record_count
    base_offset = batch.base_offset
    if count < 0 or count > (end - pos) // _MIN_RECORD_SIZE:
        raise CorruptRecordError(
            f"batch at offset {base_offset} claims {count} records in {end - pos} bytes"
        )
    offsets: list[int] = []
    timestamps: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[Header]] = []
    base_ts = batch.base_timestamp
    decode = _decode_record_slow
    try:
        for _ in range(count):
            pos, tsd, od, key, value, hdrs = decode(buf, pos, end)
            offsets.append(base_offset + od)
            timestamps.append(base_ts + tsd)
            keys.append(key)
            values.append(value)
            headers.append(hdrs)
    except IndexError:
        raise CorruptRecordError(f"truncated record in batch at offset {base_offset}") from None
    if pos != end:
        raise CorruptRecordError(
            f"batch at offset {base_offset} does not end after its {count} records"
        )
    if batch.attributes & _TIMESTAMP_TYPE_BIT:
        timestamps = [batch.max_timestamp] * count
    return offsets, timestamps, keys, values, headers


__all__ = ["decode_columns", "iter_batches", "read_records"]
