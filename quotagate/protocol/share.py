"""Share groups (KIP-932): where ShareFetch and ShareAcknowledge responses name brokers, and how long
a ShareFetch may wait at the broker.

Both responses end with NodeEndpoints, the leaders of the partitions answered NOT_LEADER_OR_FOLLOWER,
as a plain (untagged) array behind every partition's results, a ShareFetch's records included, whose
number the client's share session chooses. kafka-python's codec does not know these messages, so
their schemas are stated here (`SCHEMAS`, Kafka's ShareFetchResponse.json and
ShareAcknowledgeResponse.json, the fields and versions alone) and walked in C (response_walk): no
record is copied, and nearly every response, whose NodeEndpoints is empty, goes on untouched. Only
versions 1 and 2 exist (Kafka 4.1, 4.2; v0 was 4.0's early access and is gone), all flexible.
"""

from __future__ import annotations

from array import array
from struct import unpack_from

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FrameError, frame_errors
from quotagate.protocol.headers import skip_string

_wire = compiled.load("quotagate.protocol.wire_walk")
_responses = compiled.load("quotagate.protocol.response_walk")
# The layouts of SCHEMAS: the walk reads these versions and no later one (version_caps.py).
LAST_KNOWN_VERSION = 2
READABLE_UP_TO: dict[int, int] = {ApiKey.SHARE_FETCH: LAST_KNOWN_VERSION, ApiKey.SHARE_ACKNOWLEDGE: LAST_KNOWN_VERSION}


def _field(name: str, kind: str, versions: str = "0+", nullable: bool = False, fields: list | None = None) -> dict:
    field: dict = {"name": name, "type": kind, "versions": versions}
    if nullable:
        field["nullableVersions"] = versions
    if fields is not None:
        field["fields"] = fields
    return field


_LEADER = _field(
    "CurrentLeader", "LeaderIdAndEpoch", fields=[_field("LeaderId", "int32"), _field("LeaderEpoch", "int32")]
)
_NODE_ENDPOINTS = _field(
    "NodeEndpoints",
    "[]NodeEndpoint",
    fields=[
        _field("NodeId", "int32"),
        _field("Host", "string"),
        _field("Port", "int32"),
        _field("Rack", "string", nullable=True),
    ],
)


def _response(lock_timeout_from: str, partition_fields: list[dict]) -> dict:
    """A share response's schema: both have the same head, topics and NodeEndpoints, and differ in
    what follows a partition's error and since which version they carry the acquisition lock."""
    partition = [
        _field("PartitionIndex", "int32"),
        _field("ErrorCode", "int16"),
        _field("ErrorMessage", "string", nullable=True),
    ]
    topics = _field(
        "Responses",
        "[]TopicResponse",
        fields=[
            _field("TopicId", "uuid"),
            _field("Partitions", "[]PartitionData", fields=partition + partition_fields),
        ],
    )
    head = [
        _field("ThrottleTimeMs", "int32"),
        _field("ErrorCode", "int16"),
        _field("ErrorMessage", "string", nullable=True),
    ]
    lock = _field("AcquisitionLockTimeoutMs", "int32", lock_timeout_from)
    return {"flexibleVersions": "0+", "fields": [*head, lock, topics, _NODE_ENDPOINTS]}


_ACQUIRED = _field(
    "AcquiredRecords",
    "[]AcquiredRecords",
    fields=[_field("FirstOffset", "int64"), _field("LastOffset", "int64"), _field("DeliveryCount", "int16")],
)
SCHEMAS: dict[int, dict] = {
    ApiKey.SHARE_FETCH: _response(
        "1+",
        [
            _field("AcknowledgeErrorCode", "int16"),
            _field("AcknowledgeErrorMessage", "string", nullable=True),
            _LEADER,
            _field("Records", "records", nullable=True),
            _ACQUIRED,
        ],
    ),
    ApiKey.SHARE_ACKNOWLEDGE: _response("2+", [_LEADER]),
}


@frame_errors("share response")
def share_response_node_endpoints(
    frame: memoryview, body_offset: int, api_key: int, version: int
) -> tuple[list[tuple[int, bytes, int]], array]:
    """The brokers a ShareFetch or ShareAcknowledge response's NodeEndpoints names, as
    response_walk.address_edits gives them: (each distinct address, the edits that replace them).

    Raises FrameError unless the walk ends exactly at the end of the frame: a response that is not
    what the schema says is refused, never half rewritten."""
    prog = _wire.schema_program(f"{ApiKey(api_key).name}_RESPONSE", SCHEMAS[api_key], version)
    ops_at = prog.ops_at
    addresses, edits, _start, _end, after = _responses.address_edits(
        prog, frame, body_offset, ops_at["NodeEndpoints"], ops_at["NodeEndpoints.NodeId"], -1, True
    )
    if after != len(frame):
        raise FrameError("share response does not end where its schema says")
    return addresses, edits


@frame_errors("ShareFetch request")
def share_fetch_max_wait_ms(frame: memoryview, body_offset: int, version: int) -> int:
    """How long a ShareFetch may wait at the broker for records (its long poll), as Fetch's max_wait_ms.

    The body starts group_id, member_id (compact nullable strings), share_session_epoch int32, then
    max_wait_ms int32."""
    pos = skip_string(frame, skip_string(frame, body_offset, True), True) + 4
    if pos + 4 > len(frame):
        raise FrameError("ShareFetch request too short to hold max_wait_ms")
    return max(unpack_from(">i", frame, pos)[0], 0)
