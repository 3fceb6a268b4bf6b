"""Options of the Spark data source, parsed and checked before any network I/O.

Names and meanings follow Spark's built-in Kafka source and sink (``subscribe``,
``startingOffsets``, ``kafka.bootstrap.servers``, ...). Spark hands options over with
lower-cased keys; everything here works on lower-cased keys. Every check raises
:class:`~aiostream_kafka.errors.ConfigError` naming the option, the bad value and what is
accepted.

Settings for the Kafka client travel as the ``kafka.``-prefixed options, translated to this
client's keyword arguments by :class:`KafkaClientOptions` (``kafka.request.timeout.ms`` ->
``request_timeout_ms``). The TLS context is built from file paths or PEM text only where a
client is created (an ``ssl.SSLContext`` does not pickle).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiostream_kafka.errors import ConfigError
from aiostream_kafka.structs import TopicPartition

__all__ = [
    "DEFAULT_MAX_BYTES_PER_ARROW_BATCH",
    "DEFAULT_MAX_RECORDS_PER_ARROW_BATCH",
    "EARLIEST",
    "LATEST",
    "KafkaClientOptions",
    "OffsetBound",
    "SinkOptions",
    "SourceOptions",
    "group_for",
    "parse_duration_ms",
    "parse_sink_options",
    "parse_source_options",
]

log = logging.getLogger(__name__)

#: Offsets in ``startingOffsets``/``endingOffsets`` JSON that stand for a position.
EARLIEST = -2
LATEST = -1

# -- the kafka.* options -------------------------------------------------------------------

_INT, _BOOL, _STR = "int", "bool", "str"

#: Kafka setting -> (keyword argument, kind), for every client.
_COMMON: dict[str, tuple[str, str]] = {
    "client.id": ("client_id", _STR),
    "request.timeout.ms": ("request_timeout_ms", _INT),
    "socket.connection.setup.timeout.ms": ("socket_connection_setup_timeout_ms", _INT),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", _INT),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", _INT),
    "retry.backoff.ms": ("retry_backoff_ms", _INT),
    "retry.backoff.max.ms": ("retry_backoff_max_ms", _INT),
    "metadata.max.age.ms": ("metadata_max_age_ms", _INT),
    "default.api.timeout.ms": ("default_api_timeout_ms", _INT),
}
_CONSUMER: dict[str, tuple[str, str]] = {
    "fetch.max.wait.ms": ("fetch_max_wait_ms", _INT),
    "fetch.min.bytes": ("fetch_min_bytes", _INT),
    "fetch.max.bytes": ("fetch_max_bytes", _INT),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", _INT),
    "check.crcs": ("check_crcs", _BOOL),
    "client.rack": ("client_rack", _STR),
}
_PRODUCER: dict[str, tuple[str, str]] = {
    "acks": ("acks", _STR),
    "linger.ms": ("linger_ms", _INT),
    "batch.size": ("batch_size", _INT),
    "buffer.memory": ("buffer_memory", _INT),
    "max.block.ms": ("max_block_ms", _INT),
    "max.request.size": ("max_request_size", _INT),
    "compression.type": ("compression_type", _STR),
    "compression.level": ("compression_level", _INT),
    "enable.idempotence": ("enable_idempotence", _BOOL),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", _INT),
    "delivery.timeout.ms": ("delivery_timeout_ms", _INT),
}
_SSL = {
    "security.protocol",
    "ssl.truststore.location",
    "ssl.truststore.type",
    "ssl.truststore.certificates",
    "ssl.keystore.location",
    "ssl.keystore.type",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.key.password",
    "ssl.endpoint.identification.algorithm",
}
#: SASL settings of the Java client this source understands (the JVM connector's names).
_SASL = {"sasl.mechanism", "sasl.jaas.config", "sasl.oauthbearer.token.endpoint.url"}
#: Java-only SASL settings, accepted silently: the JAAS config says what they would.
_SASL_JAVA_ONLY = {"sasl.login.callback.handler.class", "sasl.client.callback.handler.class"}
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
_JAAS = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


def parse_jaas_config(text: str, mechanism: str) -> dict[str, str]:
    """The options of a ``sasl.jaas.config`` line (``<LoginModule> required k="v" ...;``),
    checked against the login module ``mechanism`` needs.

    Raises:
        ConfigError: not a JAAS line, or the wrong login module. The message names keys,
            never values (they hold the password).
    """
    match = _JAAS.match(text)
    if match is None:
        raise ConfigError(
            "option 'kafka.sasl.jaas.config' is not a JAAS line: expected "
            '\'<LoginModule class> required username="..." password="...";\''
        )
    module, _, rest = match.groups()
    expected = _LOGIN_MODULES[mechanism]
    if module != expected:
        raise ConfigError(
            f"option 'kafka.sasl.jaas.config' uses {module}, but sasl.mechanism {mechanism} "
            f"needs {expected}"
        )
    return {
        m.group(1): m.group(2).replace('\\"', '"') if m.group(2) is not None else m.group(3)
        for m in _JAAS_OPTION.finditer(rest)
    }


#: Settings the built-in source refuses too, with what to do instead.
_SOURCE_REFUSED = {
    "auto.offset.reset": "set the source option 'startingOffsets' instead",
    "enable.auto.commit": "the source keeps its offsets in the Spark checkpoint, not in Kafka",
    "key.deserializer": "keys are always read as bytes; cast or decode them in a DataFrame",
    "value.deserializer": "values are always read as bytes; cast or decode them in a DataFrame",
    "interceptor.classes": "interceptors are a Java client feature",
}
_SINK_REFUSED = {
    "key.serializer": "write the key column as binary or string",
    "value.serializer": "write the value column as binary or string",
    "interceptor.classes": "interceptors are a Java client feature",
    "transactional.id": "the sink is at-least-once and does not use transactions",
}
#: Accepted and ignored (the built-in source uses them for its own consumer group).
_IGNORED = {"group.id", "bootstrap.servers", "isolation.level", "session.timeout.ms"}


def _convert(option: str, value: str, kind: str) -> Any:
    if kind == _INT:
        try:
            return int(value.strip())
        except ValueError:
            raise ConfigError(f"option {option!r} must be an integer, got {value!r}") from None
    if kind == _BOOL:
        return _parse_bool(option, value)
    return value


def _parse_bool(option: str, value: str) -> bool:
    text = value.strip().lower()
    if text in ("true", "false"):
        return text == "true"
    raise ConfigError(f"option {option!r} must be 'true' or 'false', got {value!r}")


@dataclass(frozen=True)
class KafkaClientOptions:
    """The ``kafka.*`` options, checked, as plain data (picklable).

    ``common``/``consumer``/``producer`` map this client's keyword arguments to values.
    """

    bootstrap_servers: str
    isolation_level: str = "read_uncommitted"
    common: Mapping[str, Any] = field(default_factory=dict)
    consumer: Mapping[str, Any] = field(default_factory=dict)
    producer: Mapping[str, Any] = field(default_factory=dict)
    tls: Mapping[str, str] = field(default_factory=dict)
    sasl: Mapping[str, str] = field(default_factory=dict, repr=False)  # holds secrets

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments every client takes (``ClientConfig`` fields), with the TLS
        context built from the ``kafka.ssl.*`` options.

        Raises:
            ConfigError: a TLS file cannot be read or is not PEM.
        """
        kwargs = dict(self.common)
        protocol = self.tls.get("security.protocol", "PLAINTEXT").upper()
        kwargs["security_protocol"] = protocol
        if protocol in ("SSL", "SASL_SSL"):
            kwargs["ssl_context"] = self._ssl_context()
        if protocol.startswith("SASL_"):
            kwargs.update(_sasl_kwargs(self.sasl))
        return kwargs

    def consumer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a group-less :class:`~aiostream_kafka.consumer.Consumer`."""
        return {**self.client_kwargs(), **self.consumer, "isolation_level": self.isolation_level}

    def producer_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for a :class:`~aiostream_kafka.producer.Producer`."""
        return {**self.client_kwargs(), **self.producer}

    def _ssl_context(self) -> ssl.SSLContext:
        opts = self.tls
        for kind in ("truststore", "keystore"):
            store_type = opts.get(f"ssl.{kind}.type", "PEM").upper()
            if store_type != "PEM":
                raise ConfigError(
                    f"option 'kafka.ssl.{kind}.type' is {store_type!r}: only PEM stores are "
                    "supported (convert JKS/PKCS12 with keytool/openssl and set it to 'PEM')"
                )
        try:
            ctx = ssl.create_default_context()
            if "ssl.truststore.location" in opts:
                ctx.load_verify_locations(cafile=opts["ssl.truststore.location"])
            if "ssl.truststore.certificates" in opts:
                ctx.load_verify_locations(cadata=opts["ssl.truststore.certificates"])
            password = opts.get("ssl.key.password")
            if "ssl.keystore.location" in opts:
                ctx.load_cert_chain(opts["ssl.keystore.location"], password=password)
            elif "ssl.keystore.certificate.chain" in opts:
                # load_cert_chain reads files only: write the PEM text to a private file.
                with tempfile.NamedTemporaryFile("w", suffix=".pem") as pem:
                    pem.write(opts["ssl.keystore.key"] + "\n")
                    pem.write(opts["ssl.keystore.certificate.chain"] + "\n")
                    pem.flush()
                    ctx.load_cert_chain(pem.name, password=password)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load the kafka.ssl.* TLS material: {exc}") from exc
        if opts.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
            ctx.check_hostname = False
        return ctx


def parse_kafka_options(
    options: Mapping[str, str], *, role: Literal["source", "sink"]
) -> KafkaClientOptions:
    """Collect the ``kafka.*`` options.

    Raises:
        ConfigError: ``kafka.bootstrap.servers`` missing, a bad value, SASL, or a setting
            the built-in source/sink refuses too.
    """
    kafka = {k[len("kafka.") :]: v for k, v in options.items() if k.startswith("kafka.")}
    servers = kafka.get("bootstrap.servers", "").strip()
    if not servers:
        raise ConfigError(
            "option 'kafka.bootstrap.servers' is required: set it to the cluster's "
            '\'host:port[,host:port]\', e.g. .option("kafka.bootstrap.servers", "broker:9092")'
        )
    refused = _SOURCE_REFUSED if role == "source" else _SINK_REFUSED
    own = _CONSUMER if role == "source" else _PRODUCER
    common: dict[str, Any] = {}
    specific: dict[str, Any] = {}
    tls: dict[str, str] = {}
    sasl: dict[str, str] = {}
    isolation = kafka.get("isolation.level", "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ConfigError(
            "option 'kafka.isolation.level' must be 'read_uncommitted' or 'read_committed', "
            f"got {kafka['isolation.level']!r}"
        )
    for name, value in sorted(kafka.items()):
        option = f"kafka.{name}"
        if name in refused:
            raise ConfigError(f"Kafka option {option!r} is not supported: {refused[name]}")
        if name in _SASL:
            sasl[name] = value
            continue
        if name in _SASL_JAVA_ONLY:
            continue
        if name in _COMMON:
            key, kind = _COMMON[name]
            common[key] = _convert(option, value, kind)
        elif name in own:
            key, kind = own[name]
            specific[key] = _convert(option, value, kind)
        elif name in _SSL:
            tls[name] = value
        elif name not in _IGNORED:
            log.warning("Kafka option %r is not used by aiostream_kafka; ignored", option)
    protocol = tls.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise ConfigError(
            "option 'kafka.security.protocol' must be PLAINTEXT, SSL, SASL_PLAINTEXT or "
            f"SASL_SSL, got {tls['security.protocol']!r}"
        )
    if protocol.startswith("SASL_"):
        _sasl_kwargs(sasl)  # checked now, at load(), not in the executors
    elif sasl:
        raise ConfigError(
            f"option 'kafka.{min(sasl)}' is set but 'kafka.security.protocol' is {protocol}: "
            "use SASL_PLAINTEXT or SASL_SSL"
        )
    if "ssl.keystore.certificate.chain" in tls and "ssl.keystore.key" not in tls:
        raise ConfigError(
            "option 'kafka.ssl.keystore.certificate.chain' needs 'kafka.ssl.keystore.key'"
        )
    if "acks" in specific:
        acks = str(specific["acks"]).strip()
        specific["acks"] = int(acks) if acks.lstrip("-").isdigit() else acks
    return KafkaClientOptions(
        bootstrap_servers=servers,
        isolation_level=isolation,
        common=common,
        consumer=specific if role == "source" else {},
        producer=specific if role == "sink" else {},
        tls=tls,
        sasl=sasl,
    )


def _sasl_kwargs(sasl: Mapping[str, str]) -> dict[str, Any]:
    """Client keyword arguments from the ``kafka.sasl.*`` options (the JVM connector's):
    ``sasl.mechanism`` (default GSSAPI in Java: required here), and ``sasl.jaas.config``
    with the PLAIN/SCRAM login modules' ``username``/``password`` or, for OAUTHBEARER, the
    KIP-768 client-credentials login (``clientId``, ``clientSecret``, ``scope``) with
    ``sasl.oauthbearer.token.endpoint.url``."""
    from aiostream_kafka.security import OAuthClientCredentialsProvider

    mechanism = sasl.get("sasl.mechanism", "").strip().upper()
    if mechanism not in _LOGIN_MODULES:
        raise ConfigError(
            "option 'kafka.sasl.mechanism' must be PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or "
            f"OAUTHBEARER with a SASL security.protocol, got {sasl.get('sasl.mechanism')!r}"
            " (GSSAPI is not supported yet)"
        )
    if "sasl.jaas.config" not in sasl:
        raise ConfigError(f"sasl.mechanism {mechanism} needs option 'kafka.sasl.jaas.config'")
    jaas = parse_jaas_config(sasl["sasl.jaas.config"], mechanism)
    if mechanism != "OAUTHBEARER":
        missing = [k for k in ("username", "password") if k not in jaas]
        if missing:
            raise ConfigError(
                f"option 'kafka.sasl.jaas.config' lacks {' and '.join(missing)} for {mechanism}"
            )
        return {
            "sasl_mechanism": mechanism,
            "sasl_plain_username": jaas["username"],
            "sasl_plain_password": jaas["password"],
        }
    url = sasl.get("sasl.oauthbearer.token.endpoint.url")
    missing = [k for k in ("clientId", "clientSecret") if k not in jaas]
    if not url or missing:
        raise ConfigError(
            "OAUTHBEARER needs 'kafka.sasl.oauthbearer.token.endpoint.url' and clientId and "
            "clientSecret in 'kafka.sasl.jaas.config' (KIP-768 client credentials)"
        )
    return {
        "sasl_mechanism": mechanism,
        "sasl_oauth_token_provider": OAuthClientCredentialsProvider(
            url, jaas["clientId"], jaas["clientSecret"], scope=jaas.get("scope")
        ),
    }


# -- the source ---------------------------------------------------------------------------


@dataclass(frozen=True)
class OffsetBound:
    """Where a read starts or ends.

    ``kind`` is ``"earliest"``, ``"latest"``, ``"offsets"`` (``offsets`` per partition, where
    -2 is earliest and -1 latest), ``"timestamps"`` (``timestamps`` per partition, ms) or
    ``"timestamp"`` (one ``timestamp`` for every partition).
    """

    kind: Literal["earliest", "latest", "offsets", "timestamps", "timestamp"]
    offsets: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamps: Mapping[TopicPartition, int] = field(default_factory=dict)
    timestamp: int = -1


_SOURCE_OPTIONS = {
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingoffsetsbytimestamp",
    "endingoffsetsbytimestamp",
    "startingtimestamp",
    "endingtimestamp",
    "startingoffsetsbytimestampstrategy",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "failondataloss",
    "includeheaders",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "groupidprefix",
    "maxrecordsperpartition",
    "commitoffsetstogroup",
    "maxrecordsperarrowbatch",
    "maxbytesperarrowbatch",
}

#: Defaults of ``maxRecordsPerArrowBatch`` and ``maxBytesPerArrowBatch``: what one Arrow
#: batch a task hands Spark holds at most (records; bytes of keys, values and headers
#: decompressed), unless one Kafka record batch alone is more bytes (it is decoded whole).
DEFAULT_MAX_RECORDS_PER_ARROW_BATCH = 32_768
DEFAULT_MAX_BYTES_PER_ARROW_BATCH = 8 << 20

#: The built-in source's default ``groupIdPrefix``.
DEFAULT_GROUP_ID_PREFIX = "spark-kafka-source"


def group_for(
    group_id: str | None,
    prefix: str,
    subscribe: tuple[str, ...] | None,
    pattern: str | None,
    assign: tuple[TopicPartition, ...] | None,
) -> str:
    """The consumer group ``commitOffsetsToGroup`` commits to: ``kafka.group.id`` when set,
    else ``<groupIdPrefix>-<digest>``, the digest being the first 16 hex digits of the
    SHA-256 of the read's subscription as UTF-8 text: ``subscribe=<topics, sorted,
    comma-separated>``, ``subscribePattern=<pattern>`` or ``assign=<topic>:<partition>,...``
    (sorted). The same query gets the same group across restarts. (Spark does not tell a
    Python source its query id or checkpoint on the driver, so the name cannot come from
    them: two queries with the same subscription and prefix share a group; give them
    ``kafka.group.id`` or a ``groupIdPrefix`` each.)"""
    if group_id:
        return group_id
    if subscribe is not None:
        what = "subscribe=" + ",".join(sorted(subscribe))
    elif pattern is not None:
        what = f"subscribePattern={pattern}"
    else:
        what = "assign=" + ",".join(f"{tp.topic}:{tp.partition}" for tp in sorted(assign or ()))
    return f"{prefix}-{hashlib.sha256(what.encode()).hexdigest()[:16]}"


@dataclass(frozen=True)
class SourceOptions:
    """The checked options of a read (batch or stream)."""

    kafka: KafkaClientOptions
    subscribe: tuple[str, ...] | None = None
    subscribe_pattern: str | None = None
    assign: tuple[TopicPartition, ...] | None = None
    starting: OffsetBound | None = None  # None: the default (earliest batch, latest stream)
    ending: OffsetBound | None = None  # None: latest
    starting_no_match: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60_000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    #: ``commitOffsetsToGroup``: the consumer group each finished micro-batch's end
    #: offsets are committed to (see :func:`group_for`), or None (the default: none).
    commit_group: str | None = None
    #: ``maxRecordsPerArrowBatch`` / ``maxBytesPerArrowBatch``: the most records and bytes
    #: of record data (decompressed) in one Arrow batch of a task (see ``spark.fetch``).
    max_records_per_arrow_batch: int = DEFAULT_MAX_RECORDS_PER_ARROW_BATCH
    max_bytes_per_arrow_batch: int = DEFAULT_MAX_BYTES_PER_ARROW_BATCH

    def check_batch(self) -> None:
        """Raise :class:`ConfigError` for options a batch read cannot use (as the built-in
        source does): latest as a start, earliest as an end; ``commitOffsetsToGroup``
        (streams only)."""
        start, end = self.starting, self.ending
        if self.commit_group is not None:
            raise ConfigError(
                "option 'commitOffsetsToGroup' is for streaming reads (it commits each "
                "finished micro-batch); a batch read commits nothing: remove it"
            )
        if start is not None and start.kind == "latest":
            raise ConfigError(
                "startingOffsets='latest' is not valid for batch queries: a batch read would "
                "be empty; use 'earliest', JSON offsets or startingOffsetsByTimestamp"
            )
        if start is not None and start.kind == "offsets":
            for tp, off in start.offsets.items():
                if off == LATEST:
                    raise ConfigError(
                        f"startingOffsets for {tp.topic}-{tp.partition} is -1 (latest), which "
                        "is not valid for batch queries; use -2 (earliest) or an offset"
                    )
        if end is not None and end.kind == "earliest":
            raise ConfigError(
                "endingOffsets='earliest' is not valid for batch queries; use 'latest' or JSON "
                "offsets"
            )
        if end is not None and end.kind == "offsets":
            for tp, off in end.offsets.items():
                if off == EARLIEST:
                    raise ConfigError(
                        f"endingOffsets for {tp.topic}-{tp.partition} is -2 (earliest), which "
                        "is not valid for batch queries; use -1 (latest) or an offset"
                    )

    def check_stream(self) -> None:
        """Raise :class:`ConfigError` for options a streaming read cannot use (ends)."""
        if self.ending is not None:
            raise ConfigError(
                "endingOffsets/endingOffsetsByTimestamp/endingTimestamp are not valid for "
                "streaming queries (a stream has no end); remove the option, or use "
                "Trigger.AvailableNow to read what is there and stop"
            )


def _positive(option: str, value: str, *, allow_zero: bool = False) -> int:
    try:
        number = int(value.strip())
    except ValueError:
        raise ConfigError(f"option {option!r} must be a positive integer, got {value!r}") from None
    if number < 0 or (number == 0 and not allow_zero):
        raise ConfigError(f"option {option!r} must be a positive integer, got {value!r}")
    return number


_DURATION = re.compile(r"^\s*(\d+)\s*(us|ms|s|sec|m|min|h|d)?\s*$", re.IGNORECASE)
_UNIT_MS = {"us": 0.001, "ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000}
_UNIT_MS |= {"h": 3_600_000, "d": 86_400_000}


def parse_duration_ms(option: str, value: str) -> int:
    """Parse a Spark time string (``"15m"``, ``"30s"``, ``"500ms"``, ``"1h"``, a bare number
    is milliseconds) into milliseconds.

    Raises:
        ConfigError: not a duration.
    """
    match = _DURATION.match(value)
    if match is None:
        raise ConfigError(
            f"option {option!r} must be a duration like '30s', '15m', '500ms' or '1h', "
            f"got {value!r}"
        )
    unit = (match.group(2) or "ms").lower()
    return int(int(match.group(1)) * _UNIT_MS[unit])


def _json(option: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        raise ConfigError(f"option {option!r} is not valid JSON ({exc}): {value!r}") from None


def parse_partition_json(option: str, value: str, *, what: str) -> dict[TopicPartition, int]:
    """Parse ``{"topic": {"0": n, "1": n}}`` into ``{TopicPartition: n}``.

    Raises:
        ConfigError: not that shape.
    """
    example = '{"topicA": {"0": 23, "1": -1}, "topicB": {"0": -2}}'
    data = _json(option, value)
    result: dict[TopicPartition, int] = {}
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f"option {option!r} must be a JSON object of {what} per topic and partition, "
            f"like {example}; got {value!r}"
        )
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option {option!r}: topic {topic!r} must map partitions to {what}, "
                f"like {example}; got {parts!r}"
            )
        for part, number in parts.items():
            try:
                partition = int(part)
            except ValueError:
                raise ConfigError(
                    f"option {option!r}: partition {part!r} of topic {topic!r} is not a number"
                ) from None
            if isinstance(number, bool) or not isinstance(number, int):
                raise ConfigError(
                    f"option {option!r}: {topic}-{partition} must be an integer, got {number!r}"
                )
            result[TopicPartition(topic, partition)] = number
    return result


def _offset_bound(options: Mapping[str, str], prefix: str) -> OffsetBound | None:
    """``startingTimestamp`` > ``startingOffsetsByTimestamp`` > ``startingOffsets``, as in
    the built-in source (``prefix`` is ``starting`` or ``ending``)."""
    if f"{prefix}timestamp" in options:
        option = f"{prefix}Timestamp"
        ts = _positive(option, options[f"{prefix}timestamp"], allow_zero=True)
        return OffsetBound("timestamp", timestamp=ts)
    if f"{prefix}offsetsbytimestamp" in options:
        option = f"{prefix}OffsetsByTimestamp"
        stamps = parse_partition_json(
            option, options[f"{prefix}offsetsbytimestamp"], what="timestamps (ms since epoch)"
        )
        for tp, ts in stamps.items():
            if ts < 0:
                raise ConfigError(
                    f"option {option!r}: timestamp of {tp.topic}-{tp.partition} must be >= 0, "
                    f"got {ts}"
                )
        return OffsetBound("timestamps", timestamps=stamps)
    key = f"{prefix}offsets"
    if key not in options:
        return None
    option = f"{prefix}Offsets"
    text = options[key].strip()
    if text.lower() in ("earliest", "latest"):
        return OffsetBound(text.lower())  # type: ignore[arg-type]
    if not text.startswith("{"):
        raise ConfigError(
            f"option {option!r} must be 'earliest', 'latest' or JSON offsets like "
            f'{{"topic": {{"0": 23, "1": -2}}}} (-2 = earliest, -1 = latest); '
            f"got {options[key]!r}"
        )
    offsets = parse_partition_json(option, text, what="offsets")
    for tp, off in offsets.items():
        if off < EARLIEST:
            raise ConfigError(
                f"option {option!r}: offset of {tp.topic}-{tp.partition} must be >= 0, or -2 "
                f"(earliest) or -1 (latest); got {off}"
            )
    return OffsetBound("offsets", offsets=offsets)


def _parse_assign(value: str) -> tuple[TopicPartition, ...]:
    example = '{"topicA": [0, 1], "topicB": [2, 4]}'
    data = _json("assign", value)
    if not isinstance(data, dict) or not data:
        raise ConfigError(
            f"option 'assign' must be a JSON object of partition lists like {example}; "
            f"got {value!r}"
        )
    tps: list[TopicPartition] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise ConfigError(
                f"option 'assign': topic {topic!r} must map to a list of partition numbers "
                f"like {example}; got {parts!r}"
            )
        tps.extend(TopicPartition(topic, p) for p in parts)
    return tuple(sorted(set(tps)))


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check the options of a read.

    Raises:
        ConfigError: not exactly one of ``subscribe``/``subscribePattern``/``assign``, a bad
            value, or a bad ``kafka.*`` option; the message says what to set instead.
    """
    opts = {k.lower(): str(v) for k, v in options.items()}
    kafka = parse_kafka_options(opts, role="source")
    for key in sorted(opts):
        if not key.startswith("kafka.") and key not in _SOURCE_OPTIONS and key != "path":
            log.warning("option %r is not used by the aiostream_kafka source; ignored", key)
    strategies = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    names = {"subscribe": "subscribe", "subscribepattern": "subscribePattern", "assign": "assign"}
    if len(strategies) != 1:
        given = ", ".join(names[s] for s in strategies) or "none"
        raise ConfigError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be "
            f"set to say which topics to read (given: {given}); e.g. "
            '.option("subscribe", "topicA,topicB")'
        )
    subscribe = pattern = None
    assign = None
    if "subscribe" in opts:
        topics = tuple(sorted({t.strip() for t in opts["subscribe"].split(",") if t.strip()}))
        if not topics:
            raise ConfigError("option 'subscribe' is empty: give a comma-separated topic list")
        subscribe = topics
    elif "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        if not pattern:
            raise ConfigError("option 'subscribePattern' is empty: give a regular expression")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(
                f"option 'subscribePattern' is not a valid regular expression ({exc}): {pattern!r}"
            ) from None
    else:
        assign = _parse_assign(opts["assign"])

    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {opts['startingoffsetsbytimestampstrategy']!r}"
        )
    max_offsets = min_offsets = min_parts = max_records = None
    if "maxoffsetspertrigger" in opts:
        max_offsets = _positive("maxOffsetsPerTrigger", opts["maxoffsetspertrigger"])
    if "minoffsetspertrigger" in opts:
        min_offsets = _positive("minOffsetsPerTrigger", opts["minoffsetspertrigger"])
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise ConfigError(
            f"option 'minOffsetsPerTrigger' ({min_offsets}) must not exceed "
            f"'maxOffsetsPerTrigger' ({max_offsets})"
        )
    delay = parse_duration_ms("maxTriggerDelay", opts.get("maxtriggerdelay", "15m"))
    if "minpartitions" in opts:
        min_parts = _positive("minPartitions", opts["minpartitions"])
    if "maxrecordsperpartition" in opts:
        max_records = _positive("maxRecordsPerPartition", opts["maxrecordsperpartition"])
    poll_timeout = _positive(
        "kafkaConsumer.pollTimeoutMs", opts.get("kafkaconsumer.polltimeoutms", "120000")
    )
    arrow_records = _positive(
        "maxRecordsPerArrowBatch",
        opts.get("maxrecordsperarrowbatch", str(DEFAULT_MAX_RECORDS_PER_ARROW_BATCH)),
    )
    arrow_bytes = _positive(
        "maxBytesPerArrowBatch",
        opts.get("maxbytesperarrowbatch", str(DEFAULT_MAX_BYTES_PER_ARROW_BATCH)),
    )
    commit_group = None
    if _parse_bool("commitOffsetsToGroup", opts.get("commitoffsetstogroup", "false")):
        prefix = opts.get("groupidprefix", DEFAULT_GROUP_ID_PREFIX).strip()
        if not prefix:
            raise ConfigError("option 'groupIdPrefix' is empty: give a prefix or leave it out")
        group_id = opts.get("kafka.group.id", "").strip() or None
        commit_group = group_for(group_id, prefix, subscribe, pattern, assign)
    return SourceOptions(
        kafka=kafka,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=_offset_bound(opts, "starting"),
        ending=_offset_bound(opts, "ending"),
        starting_no_match=strategy,  # type: ignore[arg-type]
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=delay,
        min_partitions=min_parts,
        max_records_per_partition=max_records,
        fail_on_data_loss=_parse_bool("failOnDataLoss", opts.get("failondataloss", "true")),
        include_headers=_parse_bool("includeHeaders", opts.get("includeheaders", "false")),
        poll_timeout_ms=poll_timeout,
        commit_group=commit_group,
        max_records_per_arrow_batch=arrow_records,
        max_bytes_per_arrow_batch=arrow_bytes,
    )


# -- the sink -----------------------------------------------------------------------------


@dataclass(frozen=True)
class SinkOptions:
    """The checked options of a write."""

    kafka: KafkaClientOptions
    topic: str | None = None


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check the options of a write.

    Raises:
        ConfigError: ``kafka.bootstrap.servers`` missing or a bad ``kafka.*`` option.
    """
    opts = {k.lower(): str(v) for k, v in options.items()}
    kafka = parse_kafka_options(opts, role="sink")
    topic = opts.get("topic")
    if topic is not None:
        topic = topic.strip()
        if not topic:
            raise ConfigError("option 'topic' is empty: give a topic name or leave it out")
    return SinkOptions(kafka=kafka, topic=topic)
