"""Kafka record batches, sans-IO: the ``records`` bytes of Produce and Fetch.

One module per job; a change goes where its job is:

* :mod:`~aiostream_kafka.protocol.records.record_batch` -- message format v2 ("magic 2"):
  the batch and record layout, :class:`RecordBatchBuilder` (the producer's open batch),
  :func:`restamp_batch`, :func:`build_control_batch`, and :class:`RecordBatch` (one
  fetched batch: header fields, CRC, decompression, :meth:`~RecordBatch.records`,
  :meth:`~RecordBatch.control_records`).
* :mod:`~aiostream_kafka.protocol.records.message_set` -- legacy message sets (magic 0
  and 1, before Kafka 0.11), read as :class:`LegacyBatch`, a :class:`RecordBatch`
  subclass, so that the consumer's path is the v2 one.
* :mod:`~aiostream_kafka.protocol.records.bulk_decode` -- the consumer's hot loop: the
  records section of a batch into :class:`~aiostream_kafka.structs.Record` objects
  (interpreted, or ``protocol/fastrecords.py`` when compiled), and one record's headers.
* :mod:`~aiostream_kafka.protocol.records.reader` -- a fetched buffer walked batch by batch
  (:func:`iter_batches`, either format), into records (:func:`read_records`) or into
  columns (:func:`decode_columns`).

Every public name is importable from here, as before the split.

Errors: any malformed input raises :class:`~aiostream_kafka.errors.ProtocolError` or its
subclass :class:`~aiostream_kafka.errors.CorruptRecordError`, never ``IndexError``,
``struct.error`` or ``UnicodeDecodeError``; no allocation is sized from an unchecked
length field.
"""

from __future__ import annotations

# The decoder and encoders in use (tests check which one was chosen).
from aiostream_kafka.protocol.records.bulk_decode import _DECODE as _DECODE
from aiostream_kafka.protocol.records.bulk_decode import _decode_records as _decode_records
from aiostream_kafka.protocol.records.bulk_decode import decode_record_headers
from aiostream_kafka.protocol.records.message_set import LegacyBatch
from aiostream_kafka.protocol.records.reader import decode_columns, iter_batches, read_records
from aiostream_kafka.protocol.records.record_batch import _ENCODE as _ENCODE
from aiostream_kafka.protocol.records.record_batch import _ENCODE_KEYED as _ENCODE_KEYED
from aiostream_kafka.protocol.records.record_batch import _ENCODE_PAIRS as _ENCODE_PAIRS
from aiostream_kafka.protocol.records.record_batch import (
    HEADER_SIZE,
    MAGIC,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    ControlRecord,
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    build_control_batch,
    restamp_batch,
)

__all__ = [
    "HEADER_SIZE",
    "MAGIC",
    "NO_PARTITION_LEADER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "NO_SEQUENCE",
    "NO_TIMESTAMP",
    "ControlRecord",
    "ControlRecordType",
    "LegacyBatch",
    "RecordBatch",
    "RecordBatchBuilder",
    "build_control_batch",
    "decode_columns",
    "decode_record_headers",
    "iter_batches",
    "read_records",
    "restamp_batch",
]
