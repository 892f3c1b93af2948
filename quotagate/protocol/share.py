"""Share groups (KIP-932): where ShareFetch and ShareAcknowledge responses name brokers, and how long
a ShareFetch may wait at the broker.

Both responses end with NodeEndpoints, the leaders of the partitions answered NOT_LEADER_OR_FOLLOWER,
as a plain (untagged) array behind every partition's results, a ShareFetch's records included.
kafka-python's codec does not know these messages, so this walks them with `struct`: it reads the
counts and lengths, skips everything else and never copies a record. Nearly every response has an
empty NodeEndpoints; the proxy then forwards it untouched. Only versions 1 and 2 exist (Kafka 4.1,
4.2; v0 was 4.0's early access and is gone), and every version is flexible:

    ShareFetch response     throttle_time_ms int32, error_code int16, error_message string,
                            acquisition_lock_timeout_ms int32 (v1+), responses [topic_id uuid,
                            partitions [index int32, error_code int16, error_message string,
                            acknowledge_error_code int16, acknowledge_error_message string,
                            current_leader {leader_id int32, leader_epoch int32}, records bytes,
                            acquired_records [first_offset int64, last_offset int64,
                            delivery_count int16]]], node_endpoints, tags
    ShareAcknowledge resp.  throttle_time_ms, error_code, error_message,
                            acquisition_lock_timeout_ms int32 (v2+), responses [topic_id,
                            partitions [index, error_code, error_message, current_leader]],
                            node_endpoints, tags
    node_endpoints          [node_id int32, host string, port int32, rack nullable string]

(every struct and array entry ends with its tagged fields; strings, bytes and arrays are compact.)
"""

from __future__ import annotations

from struct import pack, unpack_from
from typing import NamedTuple

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FrameError, frame_errors
from quotagate.protocol.headers import encode_count, read_count, read_uvarint, skip_string, skip_tagged_fields

# The layouts described above: the walk reads these versions and no later one (version_caps.py).
LAST_KNOWN_VERSION = 2
READABLE_UP_TO: dict[int, int] = {ApiKey.SHARE_FETCH: LAST_KNOWN_VERSION, ApiKey.SHARE_ACKNOWLEDGE: LAST_KNOWN_VERSION}

# Least bytes of one entry, for refusing a count the frame cannot hold before walking it (a loop
# that reads nothing per entry would spin on a count of 2^31).
_TOPIC_MIN = 16 + 1 + 1  # topic id, empty partitions, tags
_FETCH_PARTITION_MIN = 4 + 2 + 1 + 2 + 1 + 9 + 1 + 1 + 1  # ..., leader + tags, records, acquired, tags
_ACKNOWLEDGE_PARTITION_MIN = 4 + 2 + 1 + 9 + 1
_ACQUIRED_RECORDS_MIN = 8 + 8 + 2 + 1
_ENDPOINT_MIN = 4 + 1 + 4 + 1 + 1
_LEADER_BYTES = 8  # leader_id, leader_epoch


class NodeEndpoint(NamedTuple):
    node_id: int
    host: str
    port: int
    rack: str | None
    tags: bytes  # the entry's tagged fields, kept as they came


class NodeEndpoints(NamedTuple):
    start: int  # offset of the array (its count) in the frame
    end: int  # offset after it: the response's top-level tagged fields
    endpoints: list[NodeEndpoint]


def _count(frame: memoryview, pos: int, least_bytes: int) -> tuple[int, int]:
    count, pos = read_count(frame, pos, True)
    if pos + count * least_bytes > len(frame):
        raise FrameError(f"share response announces {count} entries where fewer fit")
    return count, pos


def _read_string(frame: memoryview, pos: int) -> tuple[str | None, int]:
    length_plus_one, pos = read_uvarint(frame, pos)
    if length_plus_one == 0:
        return None, pos
    end = pos + length_plus_one - 1
    if end > len(frame):
        raise FrameError("string runs past the end of the share response")
    return bytes(frame[pos:end]).decode("utf-8"), end


def _skip_fetch_partition(frame: memoryview, pos: int) -> int:
    pos = skip_string(frame, pos + 6, True)  # index, error_code, error_message
    pos = skip_string(frame, pos + 2, True)  # acknowledge error code and message
    pos = skip_tagged_fields(frame, pos + _LEADER_BYTES)
    pos = skip_string(frame, pos, True)  # records: compact bytes, skipped like a string
    acquired, pos = _count(frame, pos, _ACQUIRED_RECORDS_MIN)
    for _ in range(acquired):
        pos = skip_tagged_fields(frame, pos + 18)
    return skip_tagged_fields(frame, pos)


def _skip_acknowledge_partition(frame: memoryview, pos: int) -> int:
    pos = skip_string(frame, pos + 6, True)  # index, error_code, error_message
    pos = skip_tagged_fields(frame, pos + _LEADER_BYTES)
    return skip_tagged_fields(frame, pos)


@frame_errors("share response")
def share_response_node_endpoints(frame: memoryview, body_offset: int, api_key: int, version: int) -> NodeEndpoints:
    """Where a ShareFetch or ShareAcknowledge response's NodeEndpoints array sits, and what it holds.

    Raises FrameError unless the walk ends exactly at the end of the frame: a response that is not
    what the schema says is refused, never half rewritten."""
    pos = skip_string(frame, body_offset + 6, True)  # throttle_time_ms, error_code, error_message
    if api_key == ApiKey.SHARE_FETCH:
        pos += 4 if version >= 1 else 0  # acquisition_lock_timeout_ms
        skip_partition, partition_min = _skip_fetch_partition, _FETCH_PARTITION_MIN
    else:
        pos += 4 if version >= 2 else 0
        skip_partition, partition_min = _skip_acknowledge_partition, _ACKNOWLEDGE_PARTITION_MIN
    topics, pos = _count(frame, pos, _TOPIC_MIN)
    for _ in range(topics):
        partitions, pos = _count(frame, pos + 16, partition_min)
        for _ in range(partitions):
            pos = skip_partition(frame, pos)
        pos = skip_tagged_fields(frame, pos)
    start = pos
    count, pos = _count(frame, pos, _ENDPOINT_MIN)
    endpoints = []
    for _ in range(count):
        (node_id,) = unpack_from(">i", frame, pos)
        host, pos = _read_string(frame, pos + 4)
        (port,) = unpack_from(">i", frame, pos)
        rack, pos = _read_string(frame, pos + 4)
        tags_start, pos = pos, skip_tagged_fields(frame, pos)
        endpoints.append(NodeEndpoint(node_id, host or "", port, rack, bytes(frame[tags_start:pos])))
    end = pos
    if skip_tagged_fields(frame, pos) != len(frame):
        raise FrameError("share response does not end where its schema says")
    return NodeEndpoints(start, end, endpoints)


def _encode_string(value: str | None) -> bytes:
    if value is None:
        return b"\x00"
    data = value.encode("utf-8")
    return encode_count(len(data), True) + data


def encode_node_endpoints(endpoints: list[NodeEndpoint]) -> bytes:
    """The NodeEndpoints array of a (flexible) share response."""
    parts = [encode_count(len(endpoints), True)]
    for node in endpoints:
        parts += [pack(">i", node.node_id), _encode_string(node.host), pack(">i", node.port)]
        parts += [_encode_string(node.rack), node.tags]
    return b"".join(parts)


@frame_errors("ShareFetch request")
def share_fetch_max_wait_ms(frame: memoryview, body_offset: int, version: int) -> int:
    """How long a ShareFetch may wait at the broker for records (its long poll), as Fetch's max_wait_ms.

    The body starts group_id, member_id (compact nullable strings), share_session_epoch int32, then
    max_wait_ms int32."""
    pos = skip_string(frame, skip_string(frame, body_offset, True), True) + 4
    if pos + 4 > len(frame):
        raise FrameError("ShareFetch request too short to hold max_wait_ms")
    return max(unpack_from(">i", frame, pos)[0], 0)
