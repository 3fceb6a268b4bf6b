"""The Admin client's config calls: describe and incrementally alter the configs of
topics, brokers, broker loggers, client metrics and groups. A broker's own configs are
asked of that broker, the rest of any."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence

from aiostream_kafka import _args
from aiostream_kafka.admin.plumbing import AdminCore, broker_error
from aiostream_kafka.admin.types import (
    AlterConfigOp,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
)
from aiostream_kafka.errors import ConfigError, KafkaError
from aiostream_kafka.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResponse,
)
from aiostream_kafka.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

__all__ = ["ConfigCalls"]


class ConfigCalls(AdminCore):
    """Configs (``Admin``'s calls of that area)."""

    @staticmethod
    def config_node(resource: ConfigResource) -> int | None:
        """The broker that answers for ``resource``: a broker's (or broker logger's) own
        configs that broker, the rest any (None). Raises ``ConfigError`` for a broker
        resource not named by its id."""
        if resource.type in (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER):
            if resource.name:
                try:
                    return int(resource.name)
                except ValueError:
                    raise ConfigError(
                        f"a BROKER config resource is named by the broker id, got {resource.name!r}"
                    ) from None
        return None

    @classmethod
    def config_nodes(
        cls, resources: Iterable[ConfigResource]
    ) -> dict[int | None, list[ConfigResource]]:
        """Group config resources by the broker that answers for them (None: any)."""
        by_node: dict[int | None, list[ConfigResource]] = defaultdict(list)
        for resource in resources:
            by_node[cls.config_node(resource)].append(resource)
        return by_node

    async def describe_configs(
        self, resources: Collection[ConfigResource], *, keys: Collection[str] | None = None
    ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Does :meth:`Admin.describe_configs` (documented there)."""
        _args.collection(
            resources, "describe_configs", ConfigResource, "describe_configs([resource])"
        )
        if keys is not None:
            _args.names(keys, "describe_configs", "config names")
        by_node = self.config_nodes(resources)
        results: dict[ConfigResource, dict[str, ConfigEntry]] = {}

        async def attempt() -> dict[ConfigResource, dict[str, ConfigEntry]]:
            errors: dict[str, KafkaError] = {}
            for node, group in by_node.items():
                request = DescribeConfigsRequest(
                    resources=[
                        DescribeConfigsRequest.DescribeConfigsResource(
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configuration_keys=sorted(keys) if keys is not None else None,
                        )
                        for r in group
                    ],
                    include_synonyms=False,
                    include_documentation=False,
                )
                response = await self.cluster.send(node, request)
                assert isinstance(response, DescribeConfigsResponse)
                for result in response.results:
                    resource = ConfigResource(
                        ConfigResourceType(result.resource_type), result.resource_name
                    )
                    if result.error_code:
                        errors[f"{resource.type.name} {resource.name!r}"] = broker_error(
                            result.error_code,
                            f"describe_configs {resource.type.name} {resource.name!r}",
                            result.error_message,
                        )
                        continue
                    results[resource] = {
                        c.name: ConfigEntry(
                            name=c.name,
                            value=c.value,
                            source=_config_source(c.config_source),
                            read_only=c.read_only,
                            is_sensitive=c.is_sensitive,
                            is_default=c.config_source == ConfigSource.DEFAULT_CONFIG,
                        )
                        for c in result.configs
                    }
            self.raise_first(errors)
            return results

        return await self.with_retries("describe_configs", attempt)

    async def incremental_alter_configs(
        self,
        changes: Mapping[ConfigResource, Sequence[AlterConfigOp]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Does :meth:`Admin.incremental_alter_configs` (documented there)."""
        by_node = self.config_nodes(changes)

        async def attempt() -> None:
            errors: dict[str, KafkaError] = {}
            for node, group in by_node.items():
                request = IncrementalAlterConfigsRequest(
                    resources=[
                        IncrementalAlterConfigsRequest.AlterConfigsResource(
                            resource_type=int(r.type),
                            resource_name=r.name,
                            configs=[
                                IncrementalAlterConfigsRequest.AlterableConfig(
                                    name=op.name, config_operation=int(op.op), value=op.value
                                )
                                for op in changes[r]
                            ],
                        )
                        for r in group
                    ],
                    validate_only=validate_only,
                )
                response = await self.cluster.send(node, request)
                assert isinstance(response, IncrementalAlterConfigsResponse)
                for result in response.responses:
                    if result.error_code:
                        kind = ConfigResourceType(result.resource_type).name
                        label = f"{kind} {result.resource_name!r}"
                        errors[label] = broker_error(
                            result.error_code,
                            f"incremental_alter_configs {label}",
                            result.error_message,
                        )
            self.raise_first(errors)

        await self.with_retries("incremental_alter_configs", attempt)


def _config_source(value: int) -> ConfigSource:
    try:
        return ConfigSource(value)
    except ValueError:
        return ConfigSource.UNKNOWN
