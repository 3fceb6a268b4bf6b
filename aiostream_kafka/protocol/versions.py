"""API version negotiation.

After connecting, a client sends ApiVersions; the broker answers with the version range
it supports for each API key. For each API the client then uses the highest version both
sides support: ``min(client max, broker max)``, provided that is not below either
minimum.

The client's ranges come from the generated messages. Their minimums matter: brokers
4.x still advertise Produce v0 (KAFKA-18659, for librdkafka) but reject v0-2, which
Kafka 4.0 removed; the client's Produce minimum of 3 keeps it off those versions. The
client's maximum is the highest *stable* version unless unstable ones are allowed
(``latestVersionUnstable`` in the schemas: at 4.3.1, InitProducerId v6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiostream_kafka.errors import UnsupportedVersionError
from aiostream_kafka.protocol.messages import API_NAMES, API_VERSIONS
from aiostream_kafka.protocol.messages.api_versions import ApiVersionsResponse

__all__ = [
    "ApiVersionTable",
    "VersionRange",
    "broker_version_ranges",
    "client_version_ranges",
    "negotiate_versions",
    "pick_version",
]

VersionRange = tuple[int, int]  # inclusive (min, max)


def _api_name(api_key: int) -> str:
    name = API_NAMES.get(api_key)
    return f"{name} (key {api_key})" if name else f"API key {api_key}"


#: Versions that exist in the schemas but belong to brokers talking to brokers, never to
#: clients: AddPartitionsToTxn v4+ batches several transactions and needs CLUSTER_ACTION
#: (KIP-890; "versions 3 and below will be exclusively used by clients").
CLIENT_MAX_VERSION: dict[int, int] = {24: 3}


def client_version_ranges(*, allow_unstable: bool = False) -> dict[int, VersionRange]:
    """Return ``{api_key: (min, max)}`` for every API this client can encode.

    ``max`` is the highest stable version unless ``allow_unstable``, and never above a
    broker-only version (:data:`CLIENT_MAX_VERSION`).
    """
    ranges: dict[int, VersionRange] = {}
    # From the generated table, which imports no message module (they load on first use).
    for api_key, (low, stable, latest) in API_VERSIONS.items():
        high = latest if allow_unstable else stable
        high = min(high, CLIENT_MAX_VERSION.get(api_key, high))
        ranges[api_key] = (low, high)
    return ranges


def broker_version_ranges(response: ApiVersionsResponse) -> dict[int, VersionRange]:
    """Return ``{api_key: (min, max)}`` from a broker's ApiVersions response."""
    return {api.api_key: (api.min_version, api.max_version) for api in response.api_keys}


def pick_version(api_key: int, client: VersionRange, broker: VersionRange | None) -> int:
    """Return the version to use for ``api_key``: the highest both ranges contain.

    ``broker`` is ``None`` when the broker did not list the API. Raises
    :class:`UnsupportedVersionError`, naming the API and both ranges, when the broker
    lacks the API or the ranges do not overlap.
    """
    if broker is None:
        raise UnsupportedVersionError(
            f"the broker does not support {_api_name(api_key)} "
            f"(this client supports versions {client[0]}-{client[1]})"
        )
    version = min(client[1], broker[1])
    if version < client[0] or version < broker[0]:
        raise UnsupportedVersionError(
            f"no common version of {_api_name(api_key)}: this client supports versions "
            f"{client[0]}-{client[1]}, the broker {broker[0]}-{broker[1]}"
        )
    return version


def negotiate_versions(
    broker: Mapping[int, VersionRange],
    client: Mapping[int, VersionRange] | None = None,
    api_keys: Iterable[int] | None = None,
) -> dict[int, int]:
    """Return ``{api_key: version}`` for the APIs both sides support.

    ``client`` defaults to :func:`client_version_ranges`. If ``api_keys`` is given, every
    one of them must be usable and :class:`UnsupportedVersionError` is raised for the
    first that is not; otherwise APIs without a common version are left out.
    """
    if client is None:
        client = client_version_ranges()
    if api_keys is not None:
        result: dict[int, int] = {}
        for api_key in api_keys:
            if api_key not in client:
                raise UnsupportedVersionError(f"this client does not know {_api_name(api_key)}")
            result[api_key] = pick_version(api_key, client[api_key], broker.get(api_key))
        return result
    result = {}
    for api_key, client_range in client.items():
        broker_range = broker.get(api_key)
        if broker_range is None:
            continue
        try:
            result[api_key] = pick_version(api_key, client_range, broker_range)
        except UnsupportedVersionError:
            continue
    return result


class ApiVersionTable:
    """The versions negotiated with one broker.

    Built from the broker's ranges (usually :func:`broker_version_ranges` of its
    ApiVersions response); :meth:`version_for` answers, for each API, the version to
    send or raises :class:`UnsupportedVersionError` that says why there is none.
    ``finalized_features`` holds the cluster-wide finalized feature levels the broker
    reported (ApiVersions v3+, e.g. ``{"transaction.version": 2}``; empty before).
    """

    __slots__ = ("_broker", "_client", "_versions", "finalized_features")

    def __init__(
        self,
        broker: Mapping[int, VersionRange],
        client: Mapping[int, VersionRange] | None = None,
        finalized_features: Mapping[str, int] | None = None,
    ) -> None:
        self._broker = dict(broker)
        self._client = dict(client if client is not None else client_version_ranges())
        self._versions = negotiate_versions(self._broker, self._client)
        self.finalized_features: dict[str, int] = dict(finalized_features or {})

    @classmethod
    def from_response(
        cls, response: ApiVersionsResponse, client: Mapping[int, VersionRange] | None = None
    ) -> ApiVersionTable:
        """Build the table from a broker's ApiVersions response."""
        # The finalized features are valid only with a non-negative epoch (KIP-584).
        features = (
            {f.name: f.max_version_level for f in response.finalized_features}
            if response.finalized_features_epoch >= 0
            else {}
        )
        return cls(broker_version_ranges(response), client, features)

    def version_for(self, api_key: int) -> int:
        """Return the version to use for ``api_key``; raise UnsupportedVersionError if none."""
        version = self._versions.get(api_key)
        if version is not None:
            return version
        client = self._client.get(api_key)
        if client is None:
            raise UnsupportedVersionError(f"this client does not know {_api_name(api_key)}")
        return pick_version(api_key, client, self._broker.get(api_key))  # raises

    def supports(self, api_key: int) -> bool:
        """Return whether some version of ``api_key`` is usable with this broker."""
        return api_key in self._versions

    def broker_range(self, api_key: int) -> VersionRange | None:
        """Return the broker's advertised range for ``api_key``, or None."""
        return self._broker.get(api_key)

    def __repr__(self) -> str:
        return f"ApiVersionTable({self._versions!r})"
