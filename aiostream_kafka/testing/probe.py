"""Minimal hand-written protocol probes used by the harness to tell a broker is ready.

The harness must not depend on the client it is there to test, so it speaks just enough
of the protocol itself: ApiVersions v0 (request header v1, response header v0) and
Metadata v1 (all topics), both non-flexible, both encoded here by hand from the protocol
specification.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Mapping

from aiostream_kafka.errors import ProtocolError

API_VERSIONS_KEY = 18
METADATA_KEY = 3
_CLIENT_ID = b"aiostream-kafka-harness"
_MAX_PROBE_FRAME = 16 * 1024 * 1024


def encode_request_v1_header(api_key: int, api_version: int, correlation_id: int) -> bytes:
    """Return request header v1: api_key, api_version, correlation_id, client_id (string)."""
    return struct.pack(">hhih", api_key, api_version, correlation_id, len(_CLIENT_ID)) + _CLIENT_ID


def frame(payload: bytes) -> bytes:
    """Prefix ``payload`` with its 4-byte big-endian size."""
    return struct.pack(">i", len(payload)) + payload


def encode_api_versions_v0(correlation_id: int) -> bytes:
    """Return a framed ApiVersions v0 request (its body is empty)."""
    return frame(encode_request_v1_header(API_VERSIONS_KEY, 0, correlation_id))


def decode_api_versions_v0(payload: bytes) -> tuple[int, int, dict[int, tuple[int, int]]]:
    """Decode an ApiVersions v0 response (after the size prefix).

    Returns ``(correlation_id, error_code, {api_key: (min_version, max_version)})``.
    Raises :class:`ProtocolError` on malformed input.
    """
    try:
        correlation_id, error_code, count = struct.unpack_from(">ihi", payload, 0)
        if count < 0 or 10 + count * 6 > len(payload):
            raise ProtocolError(f"ApiVersions response claims {count} entries")
        apis = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", payload, 10 + i * 6)
            apis[key] = (lo, hi)
    except struct.error as exc:
        raise ProtocolError(f"truncated ApiVersions response: {exc}") from None
    return correlation_id, error_code, apis


def encode_metadata_v1_all_topics(correlation_id: int) -> bytes:
    """Return a framed Metadata v1 request for all topics (topics array = null)."""
    return frame(encode_request_v1_header(METADATA_KEY, 1, correlation_id) + struct.pack(">i", -1))


def decode_metadata_v1_brokers(payload: bytes) -> tuple[int, list[tuple[int, str, int]], int]:
    """Decode the broker list of a Metadata v1 response (after the size prefix).

    Returns ``(correlation_id, [(node_id, host, port), ...], controller_id)``; the topics
    that follow are not decoded.
    """
    try:
        correlation_id, count = struct.unpack_from(">ii", payload, 0)
        pos = 8
        if count < 0 or count > 10_000:
            raise ProtocolError(f"Metadata response claims {count} brokers")
        brokers = []
        for _ in range(count):
            node_id, host_len = struct.unpack_from(">ih", payload, pos)
            pos += 6
            host = payload[pos : pos + host_len].decode("utf-8")
            pos += host_len
            (port, rack_len) = struct.unpack_from(">ih", payload, pos)
            pos += 6 + max(rack_len, 0)
            brokers.append((node_id, host, port))
        (controller_id,) = struct.unpack_from(">i", payload, pos)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"truncated Metadata response: {exc}") from None
    return correlation_id, brokers, controller_id


async def _roundtrip(host: str, port: int, request: bytes, timeout_s: float) -> bytes:
    async def go() -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(request)
            await writer.drain()
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            if not 0 <= size <= _MAX_PROBE_FRAME:
                raise ProtocolError(f"response frame of {size} bytes")
            return await reader.readexactly(size)
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except OSError:
                pass

    return await asyncio.wait_for(go(), timeout_s)


async def api_versions(host: str, port: int, timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    """Ask the broker at ``host:port`` for its API version ranges.

    Raises ``OSError``/``asyncio.TimeoutError`` when it does not answer and
    :class:`ProtocolError` when the answer is malformed or carries an error code.
    """
    payload = await _roundtrip(host, port, encode_api_versions_v0(1), timeout_s)
    correlation_id, error_code, apis = decode_api_versions_v0(payload)
    if correlation_id != 1:
        raise ProtocolError(f"ApiVersions answer has correlation id {correlation_id}, sent 1")
    if error_code != 0:
        raise ProtocolError(f"ApiVersions answered error code {error_code}")
    return apis


async def metadata_brokers(
    host: str, port: int, timeout_s: float = 5.0
) -> list[tuple[int, str, int]]:
    """Return the live brokers ``[(node_id, host, port)]`` that ``host:port`` knows of."""
    payload = await _roundtrip(host, port, encode_metadata_v1_all_topics(2), timeout_s)
    correlation_id, brokers, _ = decode_metadata_v1_brokers(payload)
    if correlation_id != 2:
        raise ProtocolError(f"Metadata answer has correlation id {correlation_id}, sent 2")
    return brokers


CREATE_TOPICS_KEY = 19


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return struct.pack(">h", len(raw)) + raw


def encode_create_topics_v4(
    correlation_id: int,
    name: str,
    partitions: int,
    replication_factor: int,
    config: Mapping[str, str],
    timeout_ms: int,
) -> bytes:
    """Return a framed CreateTopics v4 request for one topic."""
    body = (
        struct.pack(">i", 1)
        + _string(name)
        + struct.pack(">ihi", partitions, replication_factor, 0)
    )
    body += struct.pack(">i", len(config))
    for key, value in config.items():
        body += _string(key) + _string(value)
    body += struct.pack(">ib", timeout_ms, 0)
    return frame(encode_request_v1_header(CREATE_TOPICS_KEY, 4, correlation_id) + body)


def decode_create_topics_v4(payload: bytes) -> list[tuple[str, int, str | None]]:
    """Return ``[(topic, error_code, error_message)]`` from a CreateTopics v4 response."""
    try:
        _, _, count = struct.unpack_from(">iii", payload, 0)
        pos = 12
        out = []
        for _ in range(count):
            (n,) = struct.unpack_from(">h", payload, pos)
            name = payload[pos + 2 : pos + 2 + n].decode()
            pos += 2 + n
            code, mlen = struct.unpack_from(">hh", payload, pos)
            pos += 4
            message = payload[pos : pos + mlen].decode() if mlen >= 0 else None
            pos += max(mlen, 0)
            out.append((name, code, message))
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"truncated CreateTopics response: {exc}") from None
    return out


def decode_metadata_v1_leaders(payload: bytes) -> dict[str, tuple[int, dict[int, int]]]:
    """Return ``{topic: (error_code, {partition: leader_id})}`` from a Metadata v1 response."""
    try:
        pos = 4
        (count,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        for _ in range(count):
            (host_len,) = struct.unpack_from(">h", payload, pos + 4)
            pos += 6 + host_len
            (rack_len,) = struct.unpack_from(">h", payload, pos + 4)
            pos += 6 + max(rack_len, 0)
        pos += 4  # controller id
        (ntopics,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        topics: dict[str, tuple[int, dict[int, int]]] = {}
        for _ in range(ntopics):
            code, name_len = struct.unpack_from(">hh", payload, pos)
            pos += 4
            name = payload[pos : pos + name_len].decode()
            pos += name_len + 1  # is_internal
            (nparts,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            leaders = {}
            for _ in range(nparts):
                _pcode, index, leader, nreplicas = struct.unpack_from(">hiii", payload, pos)
                pos += 14 + 4 * nreplicas
                (nisr,) = struct.unpack_from(">i", payload, pos)
                pos += 4 + 4 * nisr
                leaders[index] = leader
            topics[name] = (code, leaders)
    except (struct.error, UnicodeDecodeError) as exc:
        raise ProtocolError(f"truncated Metadata response: {exc}") from None
    return topics


async def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int = 1,
    replication_factor: int = 1,
    config: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
) -> None:
    """Create topic ``name`` and wait until every partition has a leader on every broker.

    Raises :class:`ProtocolError` with the broker's error code and message when the broker
    refuses (e.g. 36 TOPIC_ALREADY_EXISTS), ``TimeoutError`` when leaders do not appear.
    """
    host, _, port_text = bootstrap_servers.split(",")[0].rpartition(":")
    port = int(port_text)
    request = encode_create_topics_v4(
        3, name, partitions, replication_factor, dict(config or {}), int(timeout_s * 1000)
    )
    payload = await _roundtrip(host, port, request, timeout_s + 5)
    for topic, code, message in decode_create_topics_v4(payload):
        if code != 0:
            raise ProtocolError(f"CreateTopics {topic!r} failed with error {code}: {message}")
    deadline = asyncio.get_running_loop().time() + timeout_s
    addresses = [a.rpartition(":") for a in bootstrap_servers.split(",")]
    while True:
        ready = True
        for h, _, p in addresses:
            try:
                meta = decode_metadata_v1_leaders(
                    await _roundtrip(h, int(p), encode_metadata_v1_all_topics(4), 5.0)
                )
            except (TimeoutError, OSError, asyncio.IncompleteReadError):
                continue  # a stopped broker in a fault test: the others decide
            code, leaders = meta.get(name, (3, {}))
            if code != 0 or len(leaders) != partitions or min(leaders.values()) < 0:
                ready = False
                break
        if ready:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(
                f"topic {name!r} has no leader for every partition after {timeout_s}s"
            )
        await asyncio.sleep(0.05)
