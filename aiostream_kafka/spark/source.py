"""The ``DataSource`` class Spark instantiates: name, schema and the reader/writer factories.

Spark creates it from the options on the driver (and pickles it to executors), so
``__init__`` only keeps the options; they are checked where Spark lets a clear error
surface at the right moment: ``schema()`` runs at ``load()``, ``writer()`` at ``save()``
and ``streamWriter()`` at ``start()``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from aiostream_kafka.errors import ConfigError

from .arrow import spark_schema
from .options import SourceOptions, parse_sink_options, parse_source_options

__all__ = ["NAME", "KafkaDataSource"]

log = logging.getLogger(__name__)

#: The format name: ``spark.read.format("aiostream_kafka")``.
NAME = "aiostream_kafka"


class KafkaDataSource(DataSource):
    """Kafka through aiostream_kafka, with the built-in Kafka source's schema and options.

    Raises (from the factories, i.e. at ``load()``/``save()``/``start()``):
        ConfigError: a missing or bad option, with what to set instead.
    """

    def __init__(self, options: Mapping[str, str]) -> None:
        super().__init__(dict(options))
        self.options: dict[str, str] = {str(k).lower(): str(v) for k, v in options.items()}

    @classmethod
    def name(cls) -> str:
        """The format name, ``"aiostream_kafka"``."""
        return NAME

    def _source_options(self) -> SourceOptions:
        return parse_source_options(self.options)

    def schema(self) -> StructType:
        """The read schema (with ``headers`` when ``includeHeaders`` is true).

        Raises:
            ConfigError: bad read options (this is what makes ``load()`` fail early).
        """
        return spark_schema(self._source_options().include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        """The batch reader.

        Raises:
            ConfigError: options a batch read cannot use.
        """
        from .reader import KafkaBatchReader

        opts = self._source_options()
        opts.check_batch()
        return KafkaBatchReader(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The streaming reader (micro-batches, ``Trigger.AvailableNow``).

        Raises:
            ConfigError: options a streaming read cannot use (ending offsets).
        """
        from .stream_reader import KafkaStreamReader

        opts = self._source_options()
        opts.check_stream()
        return KafkaStreamReader(opts, schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """The batch writer (append only): write with ``.mode("append")``. (Without a mode
        Spark refuses the write itself, UNSUPPORTED_DATA_SOURCE_SAVE_MODE, before calling
        this: it accepts only Append and Overwrite for Python data sources.)

        Raises:
            ConfigError: overwrite mode, a bad ``kafka.*`` option, or columns that do not
                fit the sink (no ``value``, no topic, wrong types).
        """
        from .writer import KafkaBatchWriter, check_sink_schema

        if overwrite:
            raise ConfigError(
                "the aiostream_kafka sink cannot overwrite: Kafka topics are append-only. "
                'Write with .mode("append")'
            )
        opts = parse_sink_options(self.options)
        check_sink_schema(schema, opts)
        return KafkaBatchWriter(opts, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """The streaming writer. Every output mode appends to the topic (as the built-in
        sink: ``complete`` mode writes the whole result table again each trigger).

        Raises:
            ConfigError: as :meth:`writer`.
        """
        from .writer import KafkaStreamWriter, check_sink_schema

        opts = parse_sink_options(self.options)
        check_sink_schema(schema, opts)
        return KafkaStreamWriter(opts, schema)
