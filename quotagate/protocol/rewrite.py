"""Rewrites of the responses that name brokers, so that clients only ever learn proxy addresses.

Each rewriter takes a whole response frame and returns a new frame, or None when nothing needs to
change (then the original bytes are forwarded untouched). Broker addresses go through a
`ClusterView` (the proxy's is proxy/broker_directory.py): `advertise` records the broker's real
address for node_id (so the proxy can connect there) and returns the proxy address clients must use
for that node, queueing in `seen` a node named for the first time; `observe_topics` is told the
partition counts that Metadata responses carry. A rewrite does no I/O: whoever rewrote takes `seen`
and has the listeners opened before the response leaves.

ApiVersions is rewritten too: the proxy caps the versions it lets clients use (version_caps.py).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from struct import pack, unpack_from
from typing import Any, Protocol

from quotagate import compiled
from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_errors
from quotagate.protocol.headers import (
    encode_string,
    read_count,
    read_string,
    response_body_offset,
    skip_string,
    skip_tagged_fields,
)
from quotagate.protocol.produce import produce_response_has_top_level_tags
from quotagate.protocol.share import encode_node_endpoints, share_response_node_endpoints
from quotagate.protocol.version_caps import UNSUPPORTED_VERSION, cap_api_versions

RewriteMemo = compiled.load("quotagate.protocol.rewrite_memo").RewriteMemo
_wire = compiled.load("quotagate.protocol.wire_walk")
METADATA_FLEXIBLE_FROM = 9


class ClusterView(Protocol):
    seen: list[int]  # node ids advertised for the first time, oldest first, until their taker empties it

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]: ...

    def observe_topics(self, topics: Iterable[tuple[str, Any, int]]) -> None:
        """(name, topic id or None, partition count) of topics a broker just described."""


Rewriter = Callable[[memoryview, int, ClusterView], "bytes | None"]

DESCRIBE_CLUSTER_ENDPOINT_CONTROLLERS = 2

# Broker configs whose values name broker or controller addresses. DescribeConfigs answers them, and
# any other config whose value holds a host:port, as the broker answers a secret: value null and
# is_sensitive true. Rewriting them to proxy addresses instead would need to map every listener
# name and security protocol of the broker to one of the proxy's, which has no faithful answer
# (the proxy has one listener per broker, not the broker's set); hiding is what the broker itself
# does for what a client must not read, and clients and tools already show it as "sensitive".
ADDRESS_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "controller.quorum.bootstrap.servers",
        "controller.quorum.voters",
        "zookeeper.connect",
    }
)
_HOST_PORT = re.compile(r"[A-Za-z0-9\]][A-Za-z0-9.\-\[\]:]*:\d{1,5}(?![\d.])")


def _decode(api_key: int, frame: memoryview, version: int) -> tuple[int, object]:
    body_offset = response_body_offset(frame, api_key, version)
    cls = RESPONSE_CLASSES[api_key]
    try:
        return body_offset, cls.decode(frame[body_offset:], version=version)
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc


def _reframe(frame: memoryview, body_offset: int, message: object) -> bytes:
    # The decoded message keeps its version; passing it again would trip kafka-python's header code.
    body = message.encode()  # type: ignore[attr-defined]
    header = frame[FRAME_SIZE_BYTES:body_offset]
    return b"".join((pack(">i", len(header) + len(body)), header, body))


@frame_errors("Metadata response")
def rewrite_metadata(frame: memoryview, version: int, cluster: ClusterView) -> bytes:
    """Each broker's host and port replaced where they stand; every other byte copied as it came.
    The topics, which a client sizes (a request may name 50 000), are walked in C (wire_walk) only
    to tell the cluster view the partition counts of those answered without error: never decoded."""
    flexible = version >= METADATA_FLEXIBLE_FROM
    pos = response_body_offset(frame, ApiKey.METADATA, version) + (4 if version >= 3 else 0)  # throttle_time_ms
    brokers, pos = read_count(frame, pos, flexible)
    parts: list[bytes | memoryview] = [frame[FRAME_SIZE_BYTES:pos]]
    for _ in range(brokers):
        node_id = unpack_from(">i", frame, pos)[0]
        host, at = read_string(frame, pos + 4, flexible)
        port = unpack_from(">i", frame, at)[0]
        rest = end = at + 4
        if version >= 1:
            end = skip_string(frame, end, flexible)  # rack
        if flexible:
            end = skip_tagged_fields(frame, end)
        if host is None:
            raise FrameError("a broker without a host")
        new_host, new_port = cluster.advertise(node_id, host, port)
        parts += (frame[pos : pos + 4], encode_string(new_host, flexible), pack(">i", new_port), frame[rest:end])
        pos = end
    topics_at = pos
    if version >= 2:
        topics_at = skip_string(frame, topics_at, flexible)  # cluster_id
    if version >= 1:
        topics_at += 4  # controller_id
    topics, _end = _wire.metadata_topics(_wire.program(RESPONSE_CLASSES[ApiKey.METADATA], version), frame, topics_at)
    cluster.observe_topics(
        (str(name, "utf-8", "replace"), _topic_id(topic_id), partitions) for name, topic_id, partitions in topics
    )
    parts.append(frame[pos:])
    return b"".join([pack(">i", sum(len(part) for part in parts)), *parts])


def _topic_id(raw: bytes | None) -> uuid.UUID | None:
    """A topic id as kafka-python decodes it (the catalog keys names by it)."""
    return None if raw is None or raw == bytes(16) else uuid.UUID(bytes=raw)


@frame_errors("FindCoordinator response")
def rewrite_find_coordinator(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    body_offset, response = _decode(ApiKey.FIND_COORDINATOR, frame, version)
    if version < 4:
        if response.error_code != 0 or response.node_id < 0:  # type: ignore[attr-defined]
            return None
        response.host, response.port = cluster.advertise(response.node_id, response.host, response.port)  # type: ignore[attr-defined]
    else:
        for coordinator in response.coordinators:  # type: ignore[attr-defined]
            if coordinator.error_code == 0 and coordinator.node_id >= 0:
                coordinator.host, coordinator.port = cluster.advertise(
                    coordinator.node_id, coordinator.host, coordinator.port
                )
    return _reframe(frame, body_offset, response)


@frame_errors("DescribeCluster response")
def rewrite_describe_cluster(frame: memoryview, version: int, cluster: ClusterView) -> bytes:
    body_offset, response = _decode(ApiKey.DESCRIBE_CLUSTER, frame, version)
    if response.endpoint_type == DESCRIBE_CLUSTER_ENDPOINT_CONTROLLERS:  # type: ignore[attr-defined]
        # Controller endpoints are not reachable through the proxy: name none of them.
        response.brokers = []  # type: ignore[attr-defined]
    else:
        for broker in response.brokers:  # type: ignore[attr-defined]
            broker.host, broker.port = cluster.advertise(broker.broker_id, broker.host, broker.port)
    return _reframe(frame, body_offset, response)


@frame_errors("Produce response")
def rewrite_produce(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    # The usual produce response has no top-level tags: check cheaply, decode only when needed.
    body_offset = response_body_offset(frame, ApiKey.PRODUCE, version)
    if not produce_response_has_top_level_tags(frame, body_offset, version):
        return None
    body_offset, response = _decode(ApiKey.PRODUCE, frame, version)
    for node in response.node_endpoints or ():  # type: ignore[attr-defined]
        node.host, node.port = cluster.advertise(node.node_id, node.host, node.port)
    return _reframe(frame, body_offset, response)


def _rewrite_share_response(api_key: int, frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """Advertises the proxy for each broker a ShareFetch or ShareAcknowledge response's NodeEndpoints
    names; None when it names none (nearly always): the response then goes on untouched."""
    body_offset = response_body_offset(frame, api_key, version)
    start, end, endpoints = share_response_node_endpoints(frame, body_offset, api_key, version)
    if not endpoints:
        return None
    advertised = [
        node._replace(host=host, port=port)
        for node in endpoints
        for host, port in (cluster.advertise(node.node_id, node.host, node.port),)
    ]
    encoded = encode_node_endpoints(advertised)
    size = len(frame) - FRAME_SIZE_BYTES - (end - start) + len(encoded)
    return b"".join((pack(">i", size), frame[FRAME_SIZE_BYTES:start], encoded, frame[end:]))


@frame_errors("ShareFetch response")
def rewrite_share_fetch(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    return _rewrite_share_response(ApiKey.SHARE_FETCH, frame, version, cluster)


@frame_errors("ShareAcknowledge response")
def rewrite_share_acknowledge(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    return _rewrite_share_response(ApiKey.SHARE_ACKNOWLEDGE, frame, version, cluster)


@frame_errors("ApiVersions response")
def rewrite_api_versions(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    body_offset = response_body_offset(frame, ApiKey.API_VERSIONS, version)
    if len(frame) < body_offset + 2:
        raise FrameError("truncated ApiVersions response")
    error_code = unpack_from(">h", frame, body_offset)[0]
    if error_code == UNSUPPORTED_VERSION:
        # The answer to a version the broker does not speak has a v0 body (KIP-511), listing what
        # the broker speaks: capped like any other, or it would name what the proxy refuses.
        version = 0
    elif error_code != 0:
        return None
    body_offset, response = _decode(ApiKey.API_VERSIONS, frame, version)
    response.api_keys = cap_api_versions(response.api_keys)  # type: ignore[attr-defined]
    return _reframe(frame, body_offset, response)


def names_an_address(name: str, value: str | None) -> bool:
    """Whether a config (name, value) names a broker or controller address."""
    return name in ADDRESS_CONFIGS or (value is not None and _HOST_PORT.search(value) is not None)


@frame_errors("DescribeConfigs response")
def rewrite_describe_configs(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """Hides config values that name broker addresses, as sensitive values are hidden (see ADDRESS_CONFIGS)."""
    body_offset, response = _decode(ApiKey.DESCRIBE_CONFIGS, frame, version)
    hidden = 0
    for result in response.results:  # type: ignore[attr-defined]
        for config in result.configs:
            if config.is_sensitive:
                continue
            synonyms = (config.synonyms or ()) if version >= 1 else ()
            if names_an_address(config.name, config.value) or any(
                names_an_address(synonym.name, synonym.value) for synonym in synonyms
            ):
                config.value = None
                config.is_sensitive = True
                for synonym in synonyms:
                    synonym.value = None
                hidden += 1
    return _reframe(frame, body_offset, response) if hidden else None


RESPONSE_REWRITERS: dict[int, Rewriter] = {
    ApiKey.PRODUCE: rewrite_produce,
    ApiKey.METADATA: rewrite_metadata,
    ApiKey.FIND_COORDINATOR: rewrite_find_coordinator,
    ApiKey.DESCRIBE_CLUSTER: rewrite_describe_cluster,
    ApiKey.API_VERSIONS: rewrite_api_versions,
    ApiKey.DESCRIBE_CONFIGS: rewrite_describe_configs,
    ApiKey.SHARE_FETCH: rewrite_share_fetch,
    ApiKey.SHARE_ACKNOWLEDGE: rewrite_share_acknowledge,
}

# Responses that differ every time (records, offsets) and have a cheap path of their own: a walk,
# with a decode or a copy only when they name a broker. Memoizing them would copy every body.
_NEVER_MEMOIZED = frozenset({ApiKey.PRODUCE, ApiKey.SHARE_FETCH, ApiKey.SHARE_ACKNOWLEDGE})


def response_rewriters() -> dict[int, Rewriter]:
    """The rewriters one proxy uses: memoized, except those in _NEVER_MEMOIZED."""
    return {
        key: rewrite if key in _NEVER_MEMOIZED else RewriteMemo(rewrite, key)
        for key, rewrite in RESPONSE_REWRITERS.items()
    }
