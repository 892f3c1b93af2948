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

import uuid
from array import array
from collections.abc import Callable, Iterable
from struct import pack, unpack_from
from typing import Any, Protocol

from quotagate import compiled
from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, decoded, frame_errors
from quotagate.protocol.headers import encode_count, encode_string, encode_uvarint, response_body_offset
from quotagate.protocol.produce import node_endpoints_edits
from quotagate.protocol.share import share_response_node_endpoints
from quotagate.protocol.version_caps import UNSUPPORTED_VERSION, cap_api_versions

RewriteMemo = compiled.load("quotagate.protocol.rewrite_memo").RewriteMemo
_wire = compiled.load("quotagate.protocol.wire_walk")
_walk = compiled.load("quotagate.protocol.response_walk")


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
# Any other value is hidden too when it holds a host:port (response_walk.holds_host_port).
ADDRESS_CONFIGS = frozenset(
    {
        "listeners",
        "advertised.listeners",
        "controller.quorum.bootstrap.servers",
        "controller.quorum.voters",
        "zookeeper.connect",
    }
)
_ADDRESS_CONFIG_NAMES = frozenset(name.encode() for name in ADDRESS_CONFIGS)
# What config_edits puts in place of a hidden value and of is_sensitive, per flexibility.
_HIDDEN = {False: [pack(">h", -1), b"\x01"], True: [b"\x00", b"\x01"]}


def _decode(api_key: int, frame: memoryview, version: int) -> tuple[int, object]:
    body_offset = response_body_offset(frame, api_key, version)
    return body_offset, decoded(RESPONSE_CLASSES[api_key], frame, body_offset, version)


def _reframe(frame: memoryview, body_offset: int, message: object) -> bytes:
    # The decoded message keeps its version; passing it again would trip kafka-python's header code.
    body = message.encode()  # type: ignore[attr-defined]
    header = frame[FRAME_SIZE_BYTES:body_offset]
    return b"".join((pack(">i", len(header) + len(body)), header, body))


def _program(api_key: int, version: int) -> Any:
    """The schema walk (wire_walk.Program) of an API's response at `version`."""
    return _wire.program(RESPONSE_CLASSES[api_key], version)


def advertised(addresses: list[tuple[int, bytes, int]], cluster: ClusterView, flexible: bool) -> list[bytes]:
    """What replaces each distinct broker address (node id, host, port) that response_walk.address_edits
    found: the host and port `cluster.advertise` answers for it, encoded as they stand in the message."""
    replacements = []
    for node_id, host, port in addresses:
        new_host, new_port = cluster.advertise(node_id, str(host, "utf-8", "replace"), port)
        replacements.append(encode_string(new_host, flexible) + pack(">i", new_port))
    return replacements


def _rewrite_addresses(
    frame: memoryview, api_key: int, version: int, cluster: ClusterView, array: str, node: str, error: str | None
) -> bytes | None:
    """The response with the host and port of each entry of `array` (a struct array of the message;
    "": the message's own fields) that names a broker in `node` (and has no error in `error`)
    replaced where they stand; every other byte copied as it came. None when no entry names one."""
    prog = _program(api_key, version)
    ops_at = prog.ops_at
    prefix = f"{array}." if array else ""
    addresses, edits, _start, _end, _after = _walk.address_edits(
        prog,
        frame,
        response_body_offset(frame, api_key, version),
        ops_at[array] if array else -1,
        ops_at[prefix + node],
        ops_at[prefix + error] if error is not None else -1,
        True,
    )
    if not edits:
        return None
    return _walk.splice(frame, edits, advertised(addresses, cluster, prog.flexible), True)


@frame_errors("Metadata response")
def rewrite_metadata(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """Each broker's host and port replaced where they stand; every other byte copied as it came.
    The topics, which a client sizes (a request may name 50 000), are walked in C (wire_walk) only
    to tell the cluster view the partition counts of those answered without error: never decoded."""
    prog = _program(ApiKey.METADATA, version)
    ops_at = prog.ops_at
    brokers_at = ops_at["Brokers"]
    addresses, edits, _start, brokers_end, _after = _walk.address_edits(
        prog,
        frame,
        response_body_offset(frame, ApiKey.METADATA, version),
        brokers_at,
        ops_at["Brokers.NodeId"],
        -1,
        False,
    )
    replacements = advertised(addresses, cluster, prog.flexible)
    topics_at = _walk.fields_end(prog, frame, brokers_end, prog.following(brokers_at), ops_at["Topics"])
    topics, _end = _wire.metadata_topics(prog, frame, topics_at)
    cluster.observe_topics(
        (str(name, "utf-8", "replace"), _topic_id(topic_id), partitions) for name, topic_id, partitions in topics
    )
    return _walk.splice(frame, edits, replacements, True) if edits else None


def _topic_id(raw: bytes | None) -> uuid.UUID | None:
    """A topic id as kafka-python decodes it (the catalog keys names by it)."""
    return None if raw is None or raw == bytes(16) else uuid.UUID(bytes=raw)


@frame_errors("FindCoordinator response")
def rewrite_find_coordinator(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """The coordinator's host and port (v0-3), or each found coordinator's (batched, v4+: a client
    may ask for 20 000 keys), replaced where they stand; errors left alone."""
    if version < 4:
        return _rewrite_addresses(frame, ApiKey.FIND_COORDINATOR, version, cluster, "", "NodeId", "ErrorCode")
    return _rewrite_addresses(frame, ApiKey.FIND_COORDINATOR, version, cluster, "Coordinators", "NodeId", "ErrorCode")


@frame_errors("DescribeCluster response")
def rewrite_describe_cluster(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    prog = _program(ApiKey.DESCRIBE_CLUSTER, version)
    ops_at = prog.ops_at
    body = response_body_offset(frame, ApiKey.DESCRIBE_CLUSTER, version)
    if "EndpointType" in ops_at:
        at = _walk.fields_end(prog, frame, body, 0, ops_at["EndpointType"])
        if at >= len(frame):
            raise FrameError("truncated DescribeCluster response")
        if frame[at] == DESCRIBE_CLUSTER_ENDPOINT_CONTROLLERS:
            # Controller endpoints are not reachable through the proxy: name none of them.
            _addresses, _edits, start, end, _after = _walk.address_edits(
                prog, frame, body, ops_at["Brokers"], ops_at["Brokers.BrokerId"], -1, True
            )
            return _walk.splice(frame, array("q", (start, end, 0)), [encode_count(0, prog.flexible)], True)
    return _rewrite_addresses(frame, ApiKey.DESCRIBE_CLUSTER, version, cluster, "Brokers", "BrokerId", None)


@frame_errors("Produce response")
def rewrite_produce(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """The brokers of KIP-951's NodeEndpoints (a top-level tagged field behind every partition's
    result) advertised; None when the response has none (nearly always): it then goes on untouched."""
    found = node_endpoints_edits(frame, response_body_offset(frame, ApiKey.PRODUCE, version), version)
    if found is None or not found.edits:
        return None
    replacements = advertised(found.addresses, cluster, True)
    edits = found.edits
    grown = sum(len(replacements[edits[i + 2]]) - (edits[i + 1] - edits[i]) for i in range(0, len(edits), 3))
    replacements.append(encode_uvarint(found.size + grown))  # the tagged field's new size, before it
    resized = array("q", (found.size_start, found.size_end, len(replacements) - 1)) + edits
    return _walk.splice(frame, resized, replacements, True)


def _rewrite_share_response(api_key: int, frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """Advertises the proxy for each broker a ShareFetch or ShareAcknowledge response's NodeEndpoints
    names; None when it names none (nearly always): the response then goes on untouched."""
    addresses, edits = share_response_node_endpoints(
        frame, response_body_offset(frame, api_key, version), api_key, version
    )
    if not edits:
        return None
    return _walk.splice(frame, edits, advertised(addresses, cluster, True), True)


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
    return name in ADDRESS_CONFIGS or (value is not None and _walk.holds_host_port(value.encode()))


@frame_errors("DescribeConfigs response")
def rewrite_describe_configs(frame: memoryview, version: int, cluster: ClusterView) -> bytes | None:
    """Hides config values that name broker addresses, as sensitive values are hidden (see
    ADDRESS_CONFIGS): walked in C, whatever the number of resources and configs a client asked for;
    None (the response goes on untouched) when no value names one."""
    prog = _program(ApiKey.DESCRIBE_CONFIGS, version)
    body = response_body_offset(frame, ApiKey.DESCRIBE_CONFIGS, version)
    edits = _walk.config_edits(prog, frame, body, _ADDRESS_CONFIG_NAMES)
    return _walk.splice(frame, edits, _HIDDEN[prog.flexible], True) if edits else None


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
