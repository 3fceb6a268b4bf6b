"""Generate ``docs/configuration.md`` from the config classes.

Names, types and defaults come from the code (``ClientConfig``, ``ProducerConfig``,
``ConsumerConfig`` and ``GroupOptions``); the units and the descriptions are
written here, one entry per option. The script refuses to run when an option of the code
has no entry here or an entry names an option the code does not have, so a new option
cannot go undocumented and a removed one cannot linger.

    python tools/gen_config_docs.py           # rewrite docs/configuration.md
    python tools/gen_config_docs.py --check   # exit 1 (with a diff) if it is stale

``tests/test_docs.py`` runs the check.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import inspect
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from aiostream_kafka.config import ClientConfig  # noqa: E402
from aiostream_kafka.consumer import Consumer, ConsumerConfig  # noqa: E402
from aiostream_kafka.consumer.config import GroupOptions  # noqa: E402
from aiostream_kafka.producer import ProducerConfig  # noqa: E402

OUTPUT = ROOT / "docs" / "configuration.md"

REQUIRED = object()

# name -> (unit, description). Units: "ms", "bytes", "count" or "" (none).
CLIENT_OPTIONS: dict[str, tuple[str, str]] = {
    "bootstrap_servers": (
        "",
        'Where to find the cluster: `"host:port[,host:port]"` or a list of `"host:port"`'
        ' (IPv6 hosts in brackets: `"[::1]:9092"`). After the first metadata answer the'
        " client talks to the brokers the metadata names, and falls back to these"
        " addresses only when none of those answers.",
    ),
    "client_id": (
        "",
        "Sent in the header of every request; brokers show it in their logs and request"
        " metrics and apply client quotas by it.",
    ),
    "request_timeout_ms": (
        "ms",
        "How long to wait for the answer to one request. When it runs out the connection"
        " is closed and every request in flight on it fails with a retriable"
        " `NetworkError`, which the caller retries within its own deadline. A Fetch gets"
        " `fetch_max_wait_ms` on top, since the broker may hold it that long. The producer"
        " uses the same value for its Produce requests.",
    ),
    "socket_connection_setup_timeout_ms": (
        "ms",
        "How long opening one connection (TCP connect, and the TLS handshake with `SSL`)"
        " may take before it fails with `KafkaTimeoutError`.",
    ),
    "reconnect_backoff_ms": (
        "ms",
        "Wait before connecting again to an address whose last attempt failed; it doubles"
        " with each further failure up to `reconnect_backoff_max_ms`, with ±20 % jitter.",
    ),
    "reconnect_backoff_max_ms": (
        "ms",
        "Upper bound of the reconnect back-off. Must be at least `reconnect_backoff_ms`.",
    ),
    "retry_backoff_ms": (
        "ms",
        "First wait before retrying an operation that failed with a retriable error"
        " (metadata refreshes, Admin calls, offset lookups, produce retries); it doubles"
        " with each further failure up to `retry_backoff_max_ms`.",
    ),
    "retry_backoff_max_ms": ("ms", "Upper bound of the retry back-off."),
    "metadata_max_age_ms": (
        "ms",
        "Cluster metadata older than this is refreshed even when no error asked for it."
        " A consumer subscribed with a `pattern` also looks for new matching topics this"
        " often.",
    ),
    "metadata_max_idle_ms": (
        "ms",
        "A topic the producer has not sent to for this long is dropped from its metadata"
        " requests (KIP-526), and its per-partition state with it; sending to it again"
        " fetches its metadata again.",
    ),
    "bootstrap_timeout_ms": (
        "ms",
        "How long `start()` keeps trying the bootstrap addresses (each failed attempt"
        " logs a warning) before it raises `BootstrapError` naming every address and its"
        " last error. Only the first metadata request has this short deadline; later"
        " refreshes use `default_api_timeout_ms`.",
    ),
    "connections_max_idle_ms": (
        "ms",
        "A connection with nothing in flight that has not been used for this long is"
        " closed (below the broker's own 10-minute limit, so that the client ends it"
        " cleanly); the next request opens a new one.",
    ),
    "default_api_timeout_ms": (
        "ms",
        "Deadline of operations that retry as a whole: `start()` (the first metadata),"
        " Admin calls without their own `timeout_ms`, the consumer's offset lookups"
        " (`seek_to_beginning`, `seek_to_end`, `offsets_for_times`, ...), commits and"
        " reading committed offsets. Past it they raise `KafkaTimeoutError` with the last"
        " error.",
    ),
    "security_protocol": (
        "",
        '`"PLAINTEXT"`, `"SSL"` (TLS), `"SASL_PLAINTEXT"` or `"SASL_SSL"` (SASL'
        " authentication, without or with TLS; see [Security](security.md)).",
    ),
    "ssl_context": (
        "",
        "The `ssl.SSLContext` for `SSL` and `SASL_SSL` connections. Without one, a context"
        " is built from the system's trust store (or `ssl_cafile`, and `ssl_certfile` for"
        " mutual TLS); giving both a context and the files is a `ConfigError`, and so is a"
        " context with a protocol without TLS.",
    ),
    "ssl_cafile": (
        "",
        "PEM file of the certificate authorities to trust instead of the system's (Kafka's"
        " `ssl.truststore.location` with a PEM truststore).",
    ),
    "ssl_certfile": (
        "",
        "PEM file of the client certificate (chain) for mutual TLS; its key is in it or in"
        " `ssl_keyfile`.",
    ),
    "ssl_keyfile": ("", "PEM file of the client certificate's private key."),
    "ssl_password": (
        "",
        "Password of an encrypted `ssl_keyfile`. Never shown in a repr or a message.",
    ),
    "ssl_check_hostname": (
        "",
        "Check that the broker's certificate names the host connected to. Turning it off"
        " still verifies the certificate against the trusted authorities.",
    ),
    "sasl_mechanism": (
        "",
        '`"PLAIN"`, `"SCRAM-SHA-256"`, `"SCRAM-SHA-512"` or `"OAUTHBEARER"`; required with'
        " `SASL_PLAINTEXT` and `SASL_SSL`. GSSAPI (Kerberos) is not supported yet.",
    ),
    "sasl_plain_username": (
        "",
        "User name for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API key).",
    ),
    "sasl_plain_password": (
        "",
        "Password for `PLAIN` and `SCRAM-*` (Confluent Cloud: the API secret). Never shown"
        " in a repr, log line or error message.",
    ),
    "sasl_oauth_token_provider": (
        "",
        "For `OAUTHBEARER`: an object with `async def token(self) -> str`, asked for a token"
        " at every (re-)authentication; `aiostream_kafka.security."
        "OAuthClientCredentialsProvider` is a ready OIDC client-credentials one (KIP-768).",
    ),
    "max_pipelined_requests": (
        "count",
        "Requests written to one connection and not yet answered. A caller beyond it waits"
        " for a slot; a slot frees when the answer is read, not when a caller gives up.",
    ),
    "opentelemetry": (
        "",
        "Producer, Consumer, ShareConsumer: emit OpenTelemetry spans and metrics of the"
        " messaging conventions when `opentelemetry-api` is installed and an SDK is behind"
        " the providers (read when the client starts); `False`: never. See"
        " [Observability](concepts/observability.md). Admin emits none.",
    ),
    "tracer_provider": (
        "",
        "The OpenTelemetry `TracerProvider` to use instead of the global one.",
    ),
    "meter_provider": (
        "",
        "The OpenTelemetry `MeterProvider` to use instead of the global one.",
    ),
    "enable_metrics_push": (
        "",
        "Push client metrics to the broker when it asks for them (KIP-714, Java's"
        " `enable.metrics.push`): the Producer's, Consumer's and ShareConsumer's standard"
        " metrics in OTLP, every interval the cluster's client-metrics subscription sets."
        " Without a subscription it costs one small request per interval (5 min by"
        " default), and nothing against a broker without the API. The Admin pushes"
        " nothing. See [Observability](concepts/observability.md).",
    ),
}

PRODUCER_OPTIONS: dict[str, tuple[str, str]] = {
    "acks": (
        "",
        "How many replicas must have the records before the broker acknowledges them:"
        ' `"all"` (or `-1`, every in-sync replica), `1` (the leader) or `0` (no answer'
        " is awaited; offsets come back as -1).",
    ),
    "linger_ms": (
        "ms",
        "How long a batch that is not full waits for more records before it is sent."
        " `flush()`, `close()` and callers waiting for buffer memory make every batch"
        " ready at once.",
    ),
    "batch_size": (
        "bytes",
        "Target size of one partition's batch; a batch this full is sent without waiting"
        " for `linger_ms`. A single record larger than it gets a batch of its own. 0 means"
        " one record per batch. 16 KiB as in Java; for throughput, 65536: measured with"
        " 100 B records over 3 partitions, `enqueue` +34 %, `enqueue_nowait` +70 %.",
    ),
    "buffer_memory": (
        "bytes",
        "All batches not yet acknowledged, together. `send` and `enqueue` wait (first come,"
        " first served) for memory to free up, at most `max_block_ms`.",
    ),
    "max_block_ms": (
        "ms",
        "How long `send`/`enqueue` may wait for buffer memory, or for the metadata of a"
        " topic not seen before, before raising (`KafkaTimeoutError`,"
        " `UnknownTopicOrPartitionError`).",
    ),
    "max_request_size": (
        "bytes",
        "Largest Produce request, and so the largest record. A bigger record raises"
        " `RecordTooLargeError` before anything is sent.",
    ),
    "compression_type": (
        "",
        'Batch compression: `None`, `"gzip"`, `"snappy"` (needs the `snappy` extra),'
        ' `"lz4"` or `"zstd"`.',
    ),
    "compression_level": (
        "",
        "Codec level; `None` takes the codec's default. An int in -131072..22 (what is"
        " meaningful depends on the codec).",
    ),
    "enable_idempotence": (
        "",
        '`None`: on unless `acks` is not `"all"` or'
        " `max_in_flight_requests_per_connection` is above 5 (as in the Java client since"
        " Kafka 3.2). `True` with such settings is a `ConfigError`; `False` turns it off."
        " With idempotence, retries write no duplicates and keep each partition's order.",
    ),
    "max_in_flight_requests_per_connection": (
        "count",
        "Produce requests sent to one broker and not yet answered. Idempotence allows at most 5.",
    ),
    "delivery_timeout_ms": (
        "ms",
        "Bound on the time from `send`/`enqueue` until the record is acknowledged or"
        " failed, retries included: a record still unacknowledged then fails with"
        " `KafkaTimeoutError`. Must be at least `linger_ms + request_timeout_ms`.",
    ),
    "key_serializer": (
        "",
        "Callable `(key) -> bytes | None`; without it keys must be bytes-like or `None`"
        " (`TypeError` otherwise). See `aiostream_kafka.serde`.",
    ),
    "value_serializer": ("", "As `key_serializer`, for values."),
    "transactional_id": (
        "",
        "Makes the producer transactional (implies idempotence; `ConfigError` with"
        " `enable_idempotence=False`): records are sent inside transactions"
        " (`producer.transaction()`), committed or aborted as a whole, and a consumer"
        " group's offsets can be committed with them. The id names one logical producer"
        " across restarts: a new instance's `init_transactions()` fences the old one and"
        " aborts its open transaction. See [Exactly-once](exactly-once.md).",
    ),
    "transaction_timeout_ms": (
        "ms",
        "How long the transaction coordinator lets a transaction stay open before it aborts"
        " it (and bumps the producer's epoch). Must not exceed the broker's"
        " `transaction.max.timeout.ms` (15 min by default): `init_transactions()` raises"
        " `InvalidTransactionTimeoutError` then.",
    ),
}
# ProducerConfig.request_timeout_ms is filled from the common option of the same name.
PRODUCER_FROM_CLIENT = {"request_timeout_ms"}

CONSUMER_OPTIONS: dict[str, tuple[str, str]] = {
    "group_id": (
        "",
        "The consumer group; `None` for a consumer of partitions given to `assign()`. Needed"
        " for `subscribe()`, `commit()`, `committing()` and the group options below.",
    ),
    "auto_offset_reset": (
        "",
        "Where a partition without a committed offset (or whose position is out of range)"
        ' starts: `"earliest"`, `"latest"`, or `"none"` (the iterator raises'
        " `NoOffsetForPartitionError` / `OffsetOutOfRangeError`; `seek` first).",
    ),
    "enable_auto_commit": (
        "",
        "Commit the delivered positions (what the iterators handed out, never what is only"
        " prefetched) every `auto_commit_interval_ms` and before a partition is revoked."
        " Needs a `group_id`.",
    ),
    "isolation_level": (
        "",
        '`"read_uncommitted"` or `"read_committed"` (records of aborted transactions'
        " are dropped, and reading stops at the last stable offset).",
    ),
    "max_prefetch_batches": (
        "count",
        "Fetched chunks (what one Fetch returned for one partition) queued per partition,"
        " besides the one being handed out. A partition with a full queue is not fetched."
        " 1..1024.",
    ),
    "max_prefetch_bytes": (
        "bytes",
        "All queued chunks of all partitions together, counted decompressed; a fetch"
        " round reserves its share before it is sent. Must be at least"
        " `max_partition_fetch_bytes`.",
    ),
    "poll_interval_ms": (
        "ms",
        "Fetch rounds to a broker that return no records start at most this often (the"
        " broker's long poll of up to `fetch_max_wait_ms` counts towards it); capped at"
        " `fetch_max_wait_ms`.",
    ),
    "key_deserializer": (
        "",
        "Callable `(bytes | None) -> key`, applied as records are handed out; an exception"
        " from it raises `RecordDeserializationError` at that record.",
    ),
    "value_deserializer": ("", "As `key_deserializer`, for values."),
    "fetch_max_wait_ms": (
        "ms",
        "How long the broker may hold a Fetch while it has less than `fetch_min_bytes`.",
    ),
    "fetch_min_bytes": (
        "bytes",
        "The broker answers a Fetch as soon as it has this much (or after `fetch_max_wait_ms`).",
    ),
    "fetch_max_bytes": ("bytes", "Largest Fetch response (the broker's `max_bytes`)."),
    "max_partition_fetch_bytes": (
        "bytes",
        "Most one partition contributes to one Fetch response. The consumer may ask for"
        " less so that full queues of every partition fit `max_prefetch_bytes` (never less"
        " than 64 KiB). A single batch larger than this still comes whole.",
    ),
    "check_crcs": (
        "",
        "Verify each fetched batch's CRC-32C (each legacy magic 0/1 message's CRC-32); a"
        " mismatch raises `CorruptRecordError` (`CorruptPartitionDataError`) at that offset.",
    ),
    "client_rack": (
        "",
        "The consumer's rack, sent with Fetch so that a broker configured with a replica"
        " selector can serve it from a replica in the same rack (KIP-392): the leader names"
        " that replica, which then serves the partition for `metadata_max_age_ms` (any error"
        " from it sends the partition back to the leader). With a `group_id` it is also the"
        " member's rack for rack-aware assignment (KIP-881).",
    ),
    "missing_topic_timeout_ms": (
        "ms",
        "How long an assigned topic or partition may be missing from the metadata before"
        " the iterators raise `UnknownTopicOrPartitionError` (`TopicDeletedError`).",
    ),
}

# The group options (GroupOptions) are keyword options of Consumer, which only a
# group_id lets differ from their defaults.
GROUP_OPTION_DOCS: dict[str, tuple[str, str]] = {
    "group_protocol": (
        "",
        '`"classic"` (JoinGroup/SyncGroup, client-side assignment; every broker) or'
        ' `"consumer"` (KIP-848, Kafka 4.0+: the broker assigns, members reconcile'
        " incrementally through ConsumerGroupHeartbeat; see Choosing the group protocol)."
        ' Under `"consumer"`, `session_timeout_ms`, `heartbeat_interval_ms` and'
        " `partition_assignment_strategy` are group configs of the broker and raise"
        " `ConfigError` here.",
    ),
    "group_remote_assignor": (
        "",
        'With `group_protocol="consumer"`: the broker-side assignor, `"uniform"` or'
        ' `"range"` (None: the broker\'s default, the first of `group.consumer.assignors`).',
    ),
    "group_instance_id": (
        "",
        "Static membership (KIP-345): a stable id per instance. A static member does not"
        " leave the group on close, so a restart within `session_timeout_ms` gets the same"
        " partitions without a rebalance. A second consumer with the same id fences the"
        " first (`FencedMemberError`).",
    ),
    "session_timeout_ms": (
        "ms",
        "How long the coordinator keeps a member that sends no heartbeat before it removes"
        " the member and rebalances. Brokers bound it (`group.min.session.timeout.ms`,"
        " `group.max.session.timeout.ms`).",
    ),
    "heartbeat_interval_ms": (
        "ms",
        "Time between two heartbeats. Heartbeats run in their own task, through rebalances"
        " and callbacks, and never wait for record processing. Must be below"
        " `session_timeout_ms`.",
    ),
    "max_poll_interval_ms": (
        "ms",
        "Poll liveness, as in the Java client: when the application has not asked for"
        " records for this long (no iterator waiting, none handed out), or one of its"
        " rebalance callbacks has run this long, the member leaves the group until it asks"
        " again (see Rebalances). Also sent as the rebalance timeout.",
    ),
    "partition_assignment_strategy": (
        "",
        '`"cooperative-sticky"`, `"range"` or `"roundrobin"`, or a list of them in'
        " order of preference. Cooperative (incremental) rebalancing is used when every"
        " listed assignor is cooperative; otherwise every partition is revoked on each"
        " rebalance (eager).",
    ),
    "auto_commit_interval_ms": (
        "ms",
        "With `enable_auto_commit`, time between two background commits of the delivered"
        " positions.",
    ),
}

UNIT_NAMES = {"ms": "ms", "bytes": "bytes", "count": "count", "": ""}


def _human(value: int, unit: str) -> str:
    if unit == "bytes" and value >= 1024:
        for size, name in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if value % size == 0:
                return f"{value // size} {name}"
    if unit == "ms" and value >= 1000:
        seconds = value / 1000
        if seconds >= 60 and seconds % 60 == 0:
            return f"{int(seconds // 60)} min"
        return f"{seconds:g} s"
    return ""


def format_default(value: Any, unit: str, html: bool = True) -> str:
    """The default as a Python literal in backticks, its unit, and a readable size or time
    (``html=False``: without the unit and non-breaking spaces, for docstrings)."""
    if value is REQUIRED:
        return "required"
    text = f"`{value!r}`"
    if not html:
        human = (
            _human(value, unit) if isinstance(value, int) and not isinstance(value, bool) else ""
        )
        return f"{text} ({human})" if human else text
    if isinstance(value, int) and not isinstance(value, bool):
        # &nbsp;: a number and its unit stay on one line of the narrow column.
        if unit in ("ms", "bytes"):
            text += f"&nbsp;{UNIT_NAMES[unit]}"
        human = _human(value, unit)
        if human:
            text += " (" + human.replace(" ", "&nbsp;") + ")"
    return text


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _field_defaults(cls: type) -> dict[str, tuple[str, Any]]:
    """Name -> (annotation, default) of a dataclass's constructor fields."""
    out = {}
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = REQUIRED
        out[f.name] = (str(f.type), default)
    return out


def collect() -> dict[str, list[tuple[str, str, Any, str, str]]]:
    """Section -> rows of (name, type, default, unit, description), checked against the
    code; raises ``SystemExit`` naming what is undocumented or out of step."""
    problems: list[str] = []

    def rows(
        what: str, fields: dict[str, tuple[str, Any]], docs: dict[str, tuple[str, str]]
    ) -> list[tuple[str, str, Any, str, str]]:
        for name in fields.keys() - docs.keys():
            problems.append(f"{what} option {name!r} has no entry in {Path(__file__).name}")
        for name in docs.keys() - fields.keys():
            problems.append(f"{what}: {name!r} is documented but is not an option")
        return [
            (name, fields[name][0], fields[name][1], *docs[name]) for name in fields if name in docs
        ]

    client_fields = _field_defaults(ClientConfig)
    producer_fields = _field_defaults(ProducerConfig)
    for name in PRODUCER_FROM_CLIENT:
        if producer_fields[name][1] != client_fields[name][1]:
            problems.append(
                f"ProducerConfig.{name} default {producer_fields[name][1]!r} differs from"
                f" ClientConfig's {client_fields[name][1]!r}"
            )
        del producer_fields[name]
    consumer_fields = _field_defaults(ConsumerConfig)
    # Consumer() repeats some ConsumerConfig defaults in its signature: they must agree.
    for name, param in inspect.signature(Consumer.__init__).parameters.items():
        if name in consumer_fields and param.default is not inspect.Parameter.empty:
            if param.default != consumer_fields[name][1]:
                problems.append(
                    f"Consumer({name}=...) defaults to {param.default!r} but ConsumerConfig"
                    f" to {consumer_fields[name][1]!r}"
                )
    sections = {
        "client": rows("ClientConfig", client_fields, CLIENT_OPTIONS),
        "producer": rows("ProducerConfig", producer_fields, PRODUCER_OPTIONS),
        "consumer": rows("ConsumerConfig", consumer_fields, CONSUMER_OPTIONS),
        "group": rows("GroupOptions", _field_defaults(GroupOptions), GROUP_OPTION_DOCS),
    }
    if problems:
        raise SystemExit("gen_config_docs: " + "\n  ".join(["code and docs disagree:", *problems]))
    return sections


def table(rows: list[tuple[str, str, Any, str, str]]) -> str:
    """Three columns, so that the description has room at 1280 px: the option with its type
    under it, the default with its unit, what it does."""
    lines = ["| option | default | what it does |", "|---|---|---|"]
    for name, type_, default, unit, description in rows:
        lines.append(
            f"| `{name}`<br><small>{_cell(type_)}</small> "
            f"| {_cell(format_default(default, unit))} | {_cell(description)} |"
        )
    return "\n".join(lines)


HEADER = """\
# Configuration reference

<!-- Generated by tools/gen_config_docs.py from the config classes; do not edit by hand.
     Run `python tools/gen_config_docs.py` after changing an option; tests/test_docs.py
     fails while this page is stale. -->

Every option is a typed keyword parameter of the client's constructor, with the default
shown here and the description in its docstring (so editors complete them and type
checkers flag a misspelled one). Names are Kafka's own settings in snake_case
(`linger.ms` becomes `linger_ms`); times are in milliseconds and sizes in bytes, as in
Kafka. Every value is checked when the client is constructed, before any network I/O: a
wrong type or value, or two settings that contradict each other raise `ConfigError`
naming the option and what it accepts. A name that is not an option raises `ConfigError`
saying what to write instead: the closest option (`lingerms`: did you mean
`linger_ms`?), the equivalent of an aiokafka or Java setting (`max_batch_size` and
`linger.ms` are `batch_size` and `linger_ms`), or why there is none (`max_poll_records`).

```python
Producer(bootstrap_servers="127.0.0.1:9092", client_id="billing", linger_ms=20)
Consumer(bootstrap_servers="127.0.0.1:9092", group_id="billing",
         session_timeout_ms=30_000)
Admin(bootstrap_servers="127.0.0.1:9092", default_api_timeout_ms=10_000)
```
"""

SECTIONS = [
    (
        "client",
        "Common client options",
        "Accepted by `Producer`, `Consumer` and `Admin`"
        " (class `aiostream_kafka.config.ClientConfig`).",
    ),
    (
        "producer",
        "Producer",
        "`Producer(bootstrap_servers, *, ...)`: the common options above and these"
        " (class `aiostream_kafka.producer.ProducerConfig`). The defaults are those of Kafka"
        " 4's Java producer.",
    ),
    (
        "consumer",
        "Consumer",
        "`Consumer(*topics, bootstrap_servers=..., ...)`: the common options above and these"
        " (class `aiostream_kafka.consumer.ConsumerConfig`). `max_prefetch_batches`,"
        " `max_prefetch_bytes` and `poll_interval_ms` are this client's own; see"
        " [Backpressure and prefetch](concepts/backpressure.md).",
    ),
    (
        "group",
        "Consumer group options",
        "Keyword options of `Consumer` (class"
        " `aiostream_kafka.consumer.config.GroupOptions`) that only a consumer with a"
        " `group_id` may change from their defaults (a `ConfigError` otherwise); see"
        " [Rebalances](concepts/rebalances.md).",
    ),
]

FOOTER = """
## Admin

`Admin(bootstrap_servers, *, ...)` takes the common options only. Its calls that wait
for the cluster take an optional `timeout_ms` argument of their own, which replaces
`default_api_timeout_ms` for that call.
"""


def render() -> str:
    sections = collect()
    parts = [HEADER]
    for key, title, intro in SECTIONS:
        parts.append(f"## {title}\n\n{intro}\n\n{table(sections[key])}\n")
    parts.append(FOOTER)
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the page differs from the generated one"
    )
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
        if current != text:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                str(args.output),
                "generated",
            )
            sys.stdout.writelines(diff)
            print(
                f"\n{args.output} is stale: run python tools/gen_config_docs.py",
                file=sys.stderr,
            )
            return 1
        return 0
    args.output.write_text(text, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
