"""Configs of the fake cluster: Kafka 4's topic configs with their defaults and types
(what DescribeConfigs lists, what CreateTopics and the alter calls validate) and the
broker configs a fake broker answers with.

A topic keeps only what was set on it (``Topic.configs``); the defaults come from here.
Values are checked as Kafka's ``ConfigDef`` checks them: by type (a number where a
number is expected), and for a few by the values allowed; an unknown topic config name
is refused (``INVALID_CONFIG``), as Kafka does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "BOOLEAN",
    "CONFIG_SOURCE",
    "DOUBLE",
    "GROUP_CONFIGS",
    "INT",
    "LIST",
    "LONG",
    "STRING",
    "TOPIC_CONFIGS",
    "ConfigDef",
    "broker_configs",
    "check_topic_config",
]

# DescribeConfigs' ConfigType (v3+)
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)

#: DescribeConfigs' ConfigSource codes, by Kafka's names.
CONFIG_SOURCE = {
    "TOPIC_CONFIG": 1,
    "DYNAMIC_BROKER_CONFIG": 2,
    "DYNAMIC_DEFAULT_BROKER_CONFIG": 3,
    "STATIC_BROKER_CONFIG": 4,
    "DEFAULT_CONFIG": 5,
    "GROUP_CONFIG": 8,
}

_LONG_MAX = str(2**63 - 1)


@dataclass(frozen=True, slots=True)
class ConfigDef:
    """One config: its default, type and (optionally) the values it may take."""

    default: str | None
    type: int
    allowed: frozenset[str] | None = None
    #: The broker config that sets the default (a synonym in DescribeConfigs).
    broker_name: str | None = None


_COMPRESSION = frozenset({"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"})

#: Kafka 4.x topic configs and their defaults.
TOPIC_CONFIGS: dict[str, ConfigDef] = {
    "cleanup.policy": ConfigDef(
        "delete", LIST, frozenset({"delete", "compact"}), "log.cleanup.policy"
    ),
    "compression.gzip.level": ConfigDef("-1", INT),
    "compression.lz4.level": ConfigDef("9", INT),
    "compression.type": ConfigDef("producer", STRING, _COMPRESSION, "compression.type"),
    "compression.zstd.level": ConfigDef("3", INT),
    "delete.retention.ms": ConfigDef("86400000", LONG, None, "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": ConfigDef("60000", LONG),
    "flush.messages": ConfigDef(_LONG_MAX, LONG),
    "flush.ms": ConfigDef(_LONG_MAX, LONG),
    "follower.replication.throttled.replicas": ConfigDef("", LIST),
    "index.interval.bytes": ConfigDef("4096", INT),
    "leader.replication.throttled.replicas": ConfigDef("", LIST),
    "local.retention.bytes": ConfigDef("-2", LONG),
    "local.retention.ms": ConfigDef("-2", LONG),
    "max.compaction.lag.ms": ConfigDef(_LONG_MAX, LONG),
    "max.message.bytes": ConfigDef("1048588", INT, None, "message.max.bytes"),
    "message.timestamp.after.max.ms": ConfigDef("3600000", LONG),
    "message.timestamp.before.max.ms": ConfigDef(_LONG_MAX, LONG),
    "message.timestamp.type": ConfigDef(
        "CreateTime", STRING, frozenset({"CreateTime", "LogAppendTime"})
    ),
    "min.cleanable.dirty.ratio": ConfigDef("0.5", DOUBLE),
    "min.compaction.lag.ms": ConfigDef("0", LONG),
    "min.insync.replicas": ConfigDef("1", INT, None, "min.insync.replicas"),
    "preallocate": ConfigDef("false", BOOLEAN),
    "remote.log.copy.disable": ConfigDef("false", BOOLEAN),
    "remote.log.delete.on.disable": ConfigDef("false", BOOLEAN),
    "remote.storage.enable": ConfigDef("false", BOOLEAN),
    "retention.bytes": ConfigDef("-1", LONG, None, "log.retention.bytes"),
    "retention.ms": ConfigDef("604800000", LONG, None, "log.retention.ms"),
    "segment.bytes": ConfigDef("1073741824", INT, None, "log.segment.bytes"),
    "segment.index.bytes": ConfigDef("10485760", INT),
    "segment.jitter.ms": ConfigDef("0", LONG),
    "segment.ms": ConfigDef("604800000", LONG, None, "log.roll.ms"),
    "unclean.leader.election.enable": ConfigDef(
        "false", BOOLEAN, None, "unclean.leader.election.enable"
    ),
}


def check_value(name: str, value: str | None, definition: ConfigDef) -> str | None:
    """Why ``value`` is not valid for a config of that definition (None: it is)."""
    if value is None:
        return f"Invalid value null for configuration {name}: the value may not be null"
    try:
        if definition.type in (INT, SHORT, LONG):
            int(value.strip())
        elif definition.type == DOUBLE:
            float(value.strip())
        elif definition.type == BOOLEAN and value.strip().lower() not in ("true", "false"):
            raise ValueError(value)
    except ValueError:
        kind = {INT: "int", SHORT: "short", LONG: "long", DOUBLE: "double", BOOLEAN: "boolean"}
        return (
            f"Invalid value {value} for configuration {name}: Not a number of type "
            f"{kind[definition.type].upper()}"
            if definition.type != BOOLEAN
            else f"Invalid value {value} for configuration {name}: Expected value to be "
            "either true or false"
        )
    if definition.allowed is not None:
        items = [v.strip() for v in value.split(",")] if definition.type == LIST else [value]
        bad = [v for v in items if v and v not in definition.allowed]
        if bad:
            return (
                f"Invalid value {value} for configuration {name}: String must be one of: "
                f"{', '.join(sorted(definition.allowed))}"
            )
    return None


def check_topic_config(name: str, value: str | None) -> str | None:
    """Why a topic config cannot be set to ``value`` (None: it can)."""
    definition = TOPIC_CONFIGS.get(name)
    if definition is None:
        return f"Unknown topic config name: {name}"
    return check_value(name, value, definition)


#: KIP-848 group configs (GROUP resources) the fake applies.
GROUP_CONFIGS: dict[str, ConfigDef] = {
    "consumer.heartbeat.interval.ms": ConfigDef(
        None, INT, None, "group.consumer.heartbeat.interval.ms"
    ),
    "consumer.session.timeout.ms": ConfigDef(None, INT, None, "group.consumer.session.timeout.ms"),
    # Share groups (KIP-932; defaults and bounds in ``share_groups.py``).
    "share.session.timeout.ms": ConfigDef(None, INT, None, "group.share.session.timeout.ms"),
    "share.heartbeat.interval.ms": ConfigDef(None, INT, None, "group.share.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ConfigDef(
        None, INT, None, "group.share.record.lock.duration.ms"
    ),
    "share.delivery.count.limit": ConfigDef(None, INT, None, "group.share.delivery.count.limit"),
    "share.partition.max.record.locks": ConfigDef(
        None, INT, None, "group.share.partition.max.record.locks"
    ),
    "share.auto.offset.reset": ConfigDef(None, STRING),
    "share.isolation.level": ConfigDef(None, STRING),
    "share.renew.acknowledge.enable": ConfigDef(None, BOOLEAN),
}


def broker_configs(
    node_id: int, settings: Mapping[str, str]
) -> dict[str, tuple[str | None, int, int]]:
    """A broker's configs: ``name -> (value, ConfigSource, ConfigType)``. ``settings``
    are what the fake was started with (static); the rest are Kafka's defaults."""
    defaults: dict[str, tuple[str | None, int]] = {
        "auto.create.topics.enable": ("true", BOOLEAN),
        "broker.id": (str(node_id), INT),
        "node.id": (str(node_id), INT),
        "compression.type": ("producer", STRING),
        "default.replication.factor": ("1", INT),
        "delete.topic.enable": ("true", BOOLEAN),
        "group.coordinator.rebalance.protocols": ("classic,consumer,streams", LIST),
        "group.initial.rebalance.delay.ms": ("3000", INT),
        "group.max.session.timeout.ms": ("1800000", INT),
        "group.min.session.timeout.ms": ("6000", INT),
        "group.consumer.session.timeout.ms": ("45000", INT),
        "group.consumer.heartbeat.interval.ms": ("5000", INT),
        "log.cleanup.policy": ("delete", LIST),
        "log.retention.bytes": ("-1", LONG),
        "log.retention.hours": ("168", INT),
        "log.retention.ms": (None, LONG),
        "log.segment.bytes": ("1073741824", INT),
        "message.max.bytes": ("1048588", INT),
        "min.insync.replicas": ("1", INT),
        "num.partitions": ("1", INT),
        "offsets.topic.num.partitions": ("50", INT),
        "offsets.topic.replication.factor": ("3", SHORT),
        "transaction.max.timeout.ms": ("900000", INT),
        "transaction.state.log.replication.factor": ("3", SHORT),
        "unclean.leader.election.enable": ("false", BOOLEAN),
    }
    out: dict[str, tuple[str | None, int, int]] = {
        name: (value, CONFIG_SOURCE["DEFAULT_CONFIG"], kind)
        for name, (value, kind) in defaults.items()
    }
    for name, value in settings.items():
        kind = defaults.get(name, (None, STRING))[1]
        out[name] = (value, CONFIG_SOURCE["STATIC_BROKER_CONFIG"], kind)
    return out
