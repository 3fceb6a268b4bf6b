"""DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: topic configs (set, deleted,
appended to, subtracted from; validated as Kafka validates them) and the configs a
broker answers with (read-only here: the fake's brokers are configured when created).
"""

from __future__ import annotations

from typing import Any

from aiostream_kafka.protocol.base import Response
from aiostream_kafka.protocol.messages.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResponse,
)
from aiostream_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from aiostream_kafka.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from aiostream_kafka.testing.fake import errors
from aiostream_kafka.testing.fake.configs import (
    CONFIG_SOURCE,
    GROUP_CONFIGS,
    LIST,
    TOPIC_CONFIGS,
    broker_configs,
    check_topic_config,
    check_value,
)
from aiostream_kafka.testing.fake.context import RequestContext
from aiostream_kafka.testing.fake.handlers.registry import serve
from aiostream_kafka.testing.fake.share_groups import SHARE_GROUP_DEFAULTS, check_share_config
from aiostream_kafka.testing.fake.state import ClusterState

TOPIC = 2
BROKER = 4
GROUP = 32
_SET, _DELETE, _APPEND, _SUBTRACT = range(4)
_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def _topic_entries(
    state: ClusterState, name: str, keys: list[str] | None, synonyms: bool
) -> tuple[int, str | None, list[_Entry]]:
    topic = state.topic(name)
    if topic is None:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic.", []
    entries = []
    for config, definition in sorted(TOPIC_CONFIGS.items()):
        if keys is not None and config not in keys:
            continue
        own = config in topic.configs
        value = topic.configs[config] if own else definition.default
        source = CONFIG_SOURCE["TOPIC_CONFIG" if own else "DEFAULT_CONFIG"]
        entry = _Entry(
            name=config,
            value=value,
            read_only=False,
            config_source=source,
            is_sensitive=False,
            config_type=definition.type,
            documentation=None,
        )
        if synonyms:
            if own:
                entry.synonyms.append(_Synonym(name=config, value=value, source=source))
            entry.synonyms.append(
                _Synonym(
                    name=definition.broker_name or config,
                    value=definition.default,
                    source=CONFIG_SOURCE["DEFAULT_CONFIG"],
                )
            )
        entries.append(entry)
    return errors.NONE, None, entries


def _broker_entries(
    ctx: RequestContext, name: str, keys: list[str] | None
) -> tuple[int, str | None, list[_Entry]]:
    if name and name != str(ctx.node_id):
        return errors.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.node_id}", []
    entries = [
        _Entry(
            name=config,
            value=value,
            read_only=True,
            config_source=source,
            is_sensitive=False,
            config_type=kind,
            documentation=None,
        )
        for config, (value, source, kind) in sorted(
            broker_configs(ctx.node_id, ctx.state.broker_settings).items()
        )
        if keys is None or config in keys
    ]
    return errors.NONE, None, entries


def _group_entries(state: ClusterState, group_id: str, keys: list[str] | None) -> list[_Entry]:
    own = state.consumer_groups.group_configs.get(group_id, {})
    defaults = {
        "consumer.heartbeat.interval.ms": str(state.consumer_groups.heartbeat_interval_ms),
        "consumer.session.timeout.ms": str(state.consumer_groups.session_timeout_ms),
        **SHARE_GROUP_DEFAULTS,
    }
    return [
        _Entry(
            name=config,
            value=own.get(config, defaults[config]),
            read_only=False,
            config_source=CONFIG_SOURCE["GROUP_CONFIG" if config in own else "DEFAULT_CONFIG"],
            is_sensitive=False,
            config_type=definition.type,
            documentation=None,
        )
        for config, definition in sorted(GROUP_CONFIGS.items())
        if keys is None or config in keys
    ]


def _apply_group(
    state: ClusterState, group_id: str, ops: list[tuple[str, int, str | None]], validate_only: bool
) -> tuple[int, str | None]:
    configs = dict(state.consumer_groups.group_configs.get(group_id, {}))
    for config, op, value in ops:
        definition = GROUP_CONFIGS.get(config)
        if definition is None:
            return errors.INVALID_CONFIG, f"Unknown group config name: {config}"
        if op == _DELETE:
            configs.pop(config, None)
            continue
        if op != _SET:
            return (
                errors.INVALID_CONFIG,
                f"Config value append is not allowed for config key: {config}",
            )
        if config.startswith("share."):
            problem = check_share_config(config, value or "")
        else:
            problem = check_value(config, value, definition)
        if problem is None and not config.startswith("share.") and int(value or 0) <= 0:
            problem = f"Invalid value {value} for configuration {config}: Value must be at least 1"
        if problem is not None:
            return errors.INVALID_CONFIG, problem
        assert value is not None
        configs[config] = value
    if not validate_only:
        state.consumer_groups.group_configs[group_id] = configs
    return errors.NONE, None


@serve(DescribeConfigsRequest)
async def describe_configs(
    ctx: RequestContext, request: DescribeConfigsRequest
) -> DescribeConfigsResponse:
    synonyms = ctx.version >= 1 and request.include_synonyms
    results = []
    for resource in request.resources:
        keys = resource.configuration_keys or None  # null or empty: every config
        if resource.resource_type == TOPIC:
            code, message, entries = _topic_entries(
                ctx.state, resource.resource_name, keys, synonyms
            )
        elif resource.resource_type == BROKER:
            code, message, entries = _broker_entries(ctx, resource.resource_name, keys)
        elif resource.resource_type == GROUP:
            code, message, entries = (
                errors.NONE,
                None,
                _group_entries(ctx.state, resource.resource_name, keys),
            )
        else:
            code, message, entries = (
                errors.INVALID_REQUEST,
                f"the fake cluster serves no configs of resource type {resource.resource_type}",
                [],
            )
        results.append(
            _Result(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
                configs=entries,
            )
        )
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _apply(
    state: ClusterState,
    resource_type: int,
    name: str,
    ops: list[tuple[str, int, str | None]],
    *,
    replace: bool,
    validate_only: bool,
) -> tuple[int, str | None]:
    """Change a resource's configs (all or nothing); ``replace``: AlterConfigs, whose
    configs replace every one set before."""
    if resource_type == BROKER:
        return errors.INVALID_REQUEST, "the fake cluster's broker configs are read-only"
    if resource_type == GROUP:
        if replace:
            state.consumer_groups.group_configs.pop(name, None)
        return _apply_group(state, name, ops, validate_only)
    if resource_type != TOPIC:
        return errors.INVALID_REQUEST, f"unsupported resource type {resource_type}"
    topic = state.topic(name)
    if topic is None:
        return errors.UNKNOWN_TOPIC_OR_PARTITION, "This server does not host this topic."
    configs = {} if replace else dict(topic.configs)
    for config, op, value in ops:
        definition = TOPIC_CONFIGS.get(config)
        if definition is None:
            return errors.INVALID_CONFIG, f"Unknown topic config name: {config}"
        if op == _DELETE:
            configs.pop(config, None)
            continue
        if op in (_APPEND, _SUBTRACT):
            if definition.type != LIST:
                return (
                    errors.INVALID_CONFIG,
                    f"Config value append is not allowed for config key: {config}",
                )
            current = configs.get(config, definition.default) or ""
            items = [v for v in current.split(",") if v]
            for item in (value or "").split(","):
                if op == _APPEND and item and item not in items:
                    items.append(item)
                elif op == _SUBTRACT and item in items:
                    items.remove(item)
            value = ",".join(items)
        elif op != _SET:
            return errors.INVALID_REQUEST, f"unknown config operation {op}"
        problem = check_topic_config(config, value)
        if problem is not None:
            return errors.INVALID_CONFIG, problem
        assert value is not None
        configs[config] = value
    if not validate_only:
        topic.configs = configs
    return errors.NONE, None


@serve(IncrementalAlterConfigsRequest)
async def incremental_alter_configs(
    ctx: RequestContext, request: IncrementalAlterConfigsRequest
) -> IncrementalAlterConfigsResponse:
    responses = []
    for resource in request.resources:
        code, message = _apply(
            ctx.state,
            resource.resource_type,
            resource.resource_name,
            [(c.name, c.config_operation, c.value) for c in resource.configs],
            replace=False,
            validate_only=request.validate_only,
        )
        responses.append(
            IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=responses)


def _fail_alter(request: Any, version: int, code: int) -> Response:
    return AlterConfigsResponse(
        responses=[
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources
        ]
    )


@serve(AlterConfigsRequest, fail=_fail_alter)
async def alter_configs(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    responses = []
    for resource in request.resources:
        code, message = _apply(
            ctx.state,
            resource.resource_type,
            resource.resource_name,
            [(c.name, _SET, c.value) for c in resource.configs],
            replace=True,
            validate_only=request.validate_only,
        )
        responses.append(
            AlterConfigsResponse.AlterConfigsResourceResponse(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    return AlterConfigsResponse(throttle_time_ms=0, responses=responses)
