"""Version negotiation against a broker's ApiVersions ranges."""

from __future__ import annotations

import pytest

from aiostream_kafka.errors import UnsupportedVersionError
from aiostream_kafka.protocol.messages import (
    API_KEYS,
    ApiVersionsResponse,
    InitProducerIdRequest,
    ProduceRequest,
)
from aiostream_kafka.protocol.versions import (
    ApiVersionTable,
    broker_version_ranges,
    client_version_ranges,
    negotiate_versions,
    pick_version,
)

PRODUCE, FETCH, METADATA, INIT_PRODUCER_ID, API_VERSIONS = 0, 1, 3, 22, 18


def test_pick_the_highest_common_version() -> None:
    assert pick_version(METADATA, (0, 13), (0, 12)) == 12
    assert pick_version(METADATA, (0, 13), (0, 20)) == 13
    assert pick_version(METADATA, (4, 13), (4, 4)) == 4


def test_no_overlap_names_the_api_and_both_ranges() -> None:
    with pytest.raises(UnsupportedVersionError) as info:
        pick_version(FETCH, (4, 18), (0, 3))
    message = str(info.value)
    assert "Fetch (key 1)" in message
    assert "4-18" in message and "0-3" in message
    with pytest.raises(UnsupportedVersionError, match="does not support Fetch"):
        pick_version(FETCH, (4, 18), None)


def test_produce_v0_advertised_by_brokers_is_never_used() -> None:
    # Kafka 4.x brokers advertise Produce 0-13 (KAFKA-18659) but reject v0-2.
    client = client_version_ranges()
    assert client[PRODUCE] == (ProduceRequest.MIN_VERSION, 13) == (3, 13)
    assert pick_version(PRODUCE, client[PRODUCE], (0, 13)) == 13
    with pytest.raises(UnsupportedVersionError, match="Produce"):
        pick_version(PRODUCE, client[PRODUCE], (0, 2))


def test_unstable_latest_version_is_opt_in() -> None:
    assert InitProducerIdRequest.MAX_VERSION == 6
    assert InitProducerIdRequest.MAX_STABLE_VERSION == 5
    assert client_version_ranges()[INIT_PRODUCER_ID] == (0, 5)
    assert client_version_ranges(allow_unstable=True)[INIT_PRODUCER_ID] == (0, 6)


def test_negotiate_from_an_api_versions_response() -> None:
    response = ApiVersionsResponse(
        api_keys=[
            ApiVersionsResponse.ApiVersion(PRODUCE, 0, 11),
            ApiVersionsResponse.ApiVersion(FETCH, 4, 17),
            ApiVersionsResponse.ApiVersion(METADATA, 0, 13),
            ApiVersionsResponse.ApiVersion(API_VERSIONS, 0, 4),
            ApiVersionsResponse.ApiVersion(999, 0, 1),  # an API this client does not know
        ]
    )
    broker = broker_version_ranges(response)
    assert negotiate_versions(broker) == {PRODUCE: 11, FETCH: 17, METADATA: 13, API_VERSIONS: 4}
    assert negotiate_versions(broker, api_keys=[FETCH]) == {FETCH: 17}
    with pytest.raises(UnsupportedVersionError, match="InitProducerId"):
        negotiate_versions(broker, api_keys=[FETCH, INIT_PRODUCER_ID])

    table = ApiVersionTable.from_response(response)
    assert table.version_for(FETCH) == 17
    assert table.supports(METADATA)
    assert not table.supports(INIT_PRODUCER_ID)
    assert table.broker_range(PRODUCE) == (0, 11)
    with pytest.raises(UnsupportedVersionError, match="does not support InitProducerId"):
        table.version_for(INIT_PRODUCER_ID)
    with pytest.raises(UnsupportedVersionError, match="does not know"):
        table.version_for(999)


def test_no_common_version_is_explained_by_the_table() -> None:
    table = ApiVersionTable({FETCH: (0, 3)})
    with pytest.raises(UnsupportedVersionError, match="no common version of Fetch"):
        table.version_for(FETCH)


def test_client_ranges_cover_every_generated_api() -> None:
    assert set(client_version_ranges()) == set(API_KEYS)
