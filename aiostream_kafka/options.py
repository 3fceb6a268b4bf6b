"""The clients' keyword options: names, typed dictionaries of them, and the check of names
that are not options.

The option names, types and defaults are the fields of the config classes
(:class:`~aiostream_kafka.config.ClientConfig`,
:class:`~aiostream_kafka.producer.config.ProducerConfig`,
:class:`~aiostream_kafka.consumer.config.ConsumerConfig`,
:class:`~aiostream_kafka.consumer.config.GroupOptions`). ``tools/gen_signatures.py``
writes them out, in modules of their own, as the constructors' keyword parameters
(``producer/_generated.py``, ``consumer/_generated.py``, ``admin/_generated.py``) and as
the ``TypedDict`` classes re-exported here (``ClientOptions``, ``ProducerOptions``,
``ConsumerOptions``, from ``_generated_options.py``); nothing here lists them by hand.

A name that is not an option arrives in the constructors' ``**unknown`` (typed ``Never``, so
that a type checker flags it) and :func:`check_options` turns it into a
:class:`~aiostream_kafka.errors.ConfigError` that says what to write instead: the closest
option (``difflib``), the equivalent of an aiokafka or Java client setting
(``max_batch_size``, ``linger.ms``), or why there is none.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, Literal

from aiostream_kafka._generated_options import ClientOptions, ConsumerOptions, ProducerOptions
from aiostream_kafka.errors import ConfigError

__all__ = [
    "ClientOptions",
    "ConsumerOptions",
    "ProducerOptions",
    "check_options",
    "option_names",
]

ClientKind = Literal["Producer", "Consumer", "Admin"]

# Settings of aiokafka (AIOKafkaProducer, AIOKafkaConsumer, AIOKafkaAdminClient) and of the
# Java clients (looked up with underscores: ``max.poll.records`` as ``max_poll_records``)
# that are not options here: name -> (whose name, the option to use or None, why). Names
# that are the same here (``acks``, ``linger_ms``, ``retry_backoff_ms``,
# ``security_protocol``, ``sasl_plain_username``, ``enable_auto_commit``,
# ``fetch_max_wait_ms``, ...) need no entry, and a Java name that is an option once its dots
# are underscores (``linger.ms``, ``bootstrap.servers``, ``group.id``) neither.
FOREIGN_OPTIONS: dict[str, tuple[str, str | None, str]] = {
    "loop": ("aiokafka's", None, "the running event loop is used; drop the argument"),
    "api_version": (
        "aiokafka's",
        None,
        "each connection negotiates the API versions with its broker (ApiVersions); drop it",
    ),
    "max_batch_size": ("aiokafka's", "batch_size", "the target size of one partition's batch"),
    "partitioner": (
        "aiokafka's",
        None,
        "keyed records go to Java's murmur2 partition and keyless ones to a sticky partition "
        "(KIP-480); pass partition= to send() to choose one yourself",
    ),
    "sasl_kerberos_service_name": ("aiokafka's", None, "GSSAPI (Kerberos) is not supported yet"),
    "sasl_kerberos_domain_name": ("aiokafka's", None, "GSSAPI (Kerberos) is not supported yet"),
    "rebalance_timeout_ms": (
        "aiokafka's",
        "max_poll_interval_ms",
        "the rebalance timeout is max_poll_interval_ms, as in the Java client",
    ),
    "consumer_timeout_ms": (
        "aiokafka's",
        None,
        "the iterators wait for records; bound a wait with asyncio.timeout() around it",
    ),
    "max_poll_records": (
        "aiokafka's and Java's",
        None,
        "there is no poll: batches() yields what one Fetch returned for one partition, and "
        "max_prefetch_batches / max_prefetch_bytes bound what is fetched ahead",
    ),
    "exclude_internal_topics": (
        "aiokafka's and Java's",
        None,
        "internal topics are never matched by a subscription pattern; drop it",
    ),
    "retries": (
        "Java's",
        None,
        "retries are bounded by time, delivery_timeout_ms (what the Java client recommends); "
        "drop it",
    ),
    "partitioner_class": (
        "Java's",
        None,
        "keyed records go to Java's murmur2 partition and keyless ones to a sticky partition "
        "(KIP-480); pass partition= to send() to choose one yourself",
    ),
    "interceptor_classes": (
        "Java's",
        None,
        "there are no interceptors; wrap send() or the iterators",
    ),
    "sasl_jaas_config": (
        "Java's",
        None,
        "give sasl_plain_username and sasl_plain_password (or sasl_oauth_token_provider) "
        "instead of a JAAS line",
    ),
    "ssl_truststore_location": ("Java's", "ssl_cafile", "a PEM file of the trusted authorities"),
    "ssl_keystore_location": ("Java's", "ssl_certfile", "a PEM file of the client certificate"),
    "ssl_key_password": ("Java's", "ssl_password", "the password of ssl_keyfile"),
    "ssl_endpoint_identification_algorithm": (
        "Java's",
        "ssl_check_hostname",
        "True checks the broker's host name (Java's 'https'), False does not",
    ),
    "group_protocol": (
        "Java's",
        None,
        "the classic group protocol is used (KIP-848's consumer protocol is not supported yet)",
    ),
    "receive_buffer_bytes": ("Java's", None, "the operating system's socket buffer sizes are used"),
    "send_buffer_bytes": ("Java's", None, "the operating system's socket buffer sizes are used"),
}


def option_names(client: ClientKind) -> tuple[str, ...]:
    """The keyword options of ``client``'s constructor, in signature order (the fields of
    its config classes)."""
    from aiostream_kafka.config import ClientConfig
    from aiostream_kafka.consumer.config import ConsumerConfig, GroupOptions
    from aiostream_kafka.producer.config import ProducerConfig

    def init_fields(cls: type) -> list[str]:
        fields: Mapping[str, Any] = cls.__dataclass_fields__  # type: ignore[attr-defined]
        return [name for name, f in fields.items() if f.init]

    names = init_fields(ClientConfig)
    if client == "Producer":
        names += [n for n in init_fields(ProducerConfig) if n not in names]
    elif client == "Consumer":
        names += init_fields(ConsumerConfig) + init_fields(GroupOptions)
    return tuple(names)


def _explain(client: ClientKind, name: str) -> str:
    """What to say about ``name``, which is not an option of ``client``."""
    valid = option_names(client)
    head = f"unknown {client} option `{name}`"
    key = name.replace(".", "_").replace("-", "_")
    if key != name and key in valid:
        return f"{head}: Java's `{name}` is `{key}` here"
    if key in FOREIGN_OPTIONS:
        origin, use, why = FOREIGN_OPTIONS[key]
        if use is not None and use in valid:
            return f"{head}: {origin} `{name}` is `{use}` here ({why})"
        if use is None:
            return f"{head}: {origin} `{name}` has no equivalent here: {why}"
    others: tuple[ClientKind, ...] = ("Producer", "Consumer", "Admin")
    owners = [o for o in others if o != client and key in option_names(o)]
    if owners:
        return f"{head}: `{key}` is an option of {' and '.join(owners)}, not of {client}"
    close = difflib.get_close_matches(key.lower(), valid, n=1, cutoff=0.6)
    if close:
        return f"{head}: did you mean `{close[0]}`?"
    return f"{head}; every option is listed in docs/configuration.md"


def check_options(client: ClientKind, unknown: Mapping[str, object]) -> None:
    """Raise for names given to ``client``'s constructor that are not its options.

    Raises:
        ConfigError: naming each such option and what to write instead (the closest
            option, or the equivalent of an aiokafka or Java setting), or why there is none.
    """
    if unknown:
        raise ConfigError("; ".join(_explain(client, name) for name in unknown))
