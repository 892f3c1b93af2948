"""Where a response carries throttle_time_ms, and raising it without decoding the response.

The proxy tells a client to back off the way a broker does: through the int32 throttle_time_ms of
the response (KIP-219). Every response passes through `patch_throttle_time`, so the common case must
cost a dict lookup and a few comparisons: the field's place is worked out once, at import, per API:

- for the APIs kafka-python knows, from its copies of Kafka's JSON schemas: the versions with a
  ThrottleTimeMs field, and what comes before it. In nearly every response it is the first body
  field. The exceptions: OffsetDelete (after a fixed int16 ErrorCode), Produce (after the
  per-partition results, walked by `produce_response_throttle_offset`) and ApiVersions (after the
  api_keys array, walked below);
- for the APIs it does not know, from a static table read off Apache Kafka's schemas (`_STATIC`),
  with two more exceptions: the delegation-token responses.

A leading field is trusted in versions newer than the schemas describe (Kafka declares it "N+" and
has never moved one); a field behind others only in the versions whose layout is known. An API in
neither table has no known throttle field: nothing is guessed, its responses pass untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from struct import Struct, unpack_from

from kafka.protocol.schemas.fields.base import BaseField

from quotagate.protocol.apis import RESPONSE_CLASSES, ApiKey, is_flexible, response_header_is_flexible
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_errors
from quotagate.protocol.headers import read_count, read_uvarint, skip_string, skip_tagged_fields
from quotagate.protocol.produce import produce_response_throttle_offset

__all__ = ["THROTTLE_MAX_MS", "patch_throttle_time", "throttle_time_offset"]

_INT32 = Struct(">i")
# The field is an int32: a client deep in debt is told the largest value it can hold.
THROTTLE_MAX_MS = 2**31 - 1
_HEADER_TAGS = FRAME_SIZE_BYTES + _INT32.size  # response header: size, correlation id, (flexible) tags
_NEVER = 1 << 15  # above every int16 version: "this API's header is never flexible"
_OPEN_ENDED = (1 << 15) - 1  # the last version of a field declared "N+" (as kafka-python parses it)
_UNSUPPORTED_VERSION = 35

# Finds throttle_time_ms behind variable-size fields: (frame, body offset, version) -> offset, or None
# when this particular response has no such field. Raises FrameError on truncated input.
Walker = Callable[[memoryview, int, int], "int | None"]
# (first and last version where the field is known to be, first version with a flexible response
#  header, offset of the field from the body start or None to ask the walker, walker)
_Entry = tuple[int, int, int, "int | None", "Walker | None"]


def _api_versions_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int | None:
    """ApiVersions v1+: error_code int16, api_keys array (api_key, min, max int16 each), throttle_time_ms."""
    if len(frame) < body_offset + 2:
        raise FrameError("truncated ApiVersions response")
    if unpack_from(">h", frame, body_offset)[0] == _UNSUPPORTED_VERSION:
        # The broker answers a version it does not speak with a v0 body, which has no throttle time (KIP-511).
        return None
    pos = body_offset + 2
    if is_flexible(ApiKey.API_VERSIONS, version):
        count_plus_one, pos = read_uvarint(frame, pos)
        for _ in range(count_plus_one - 1):
            pos = skip_tagged_fields(frame, pos + 6)
        return pos
    if len(frame) < pos + 4:
        raise FrameError("truncated ApiVersions response")
    return pos + 4 + 6 * max(unpack_from(">i", frame, pos)[0], 0)


def _skip_bytes(buf: memoryview, pos: int, flexible: bool) -> int:
    """Skips a bytes field: int32 length, or in flexible versions uvarint length + 1."""
    if flexible:
        length_plus_one, pos = read_uvarint(buf, pos)
        return pos + max(length_plus_one - 1, 0)
    return pos + 4 + max(unpack_from(">i", buf, pos)[0], 0)


def _skip_token_fields(frame: memoryview, pos: int, version: int, flexible: bool) -> int:
    """Principal type and name, (v3+) requester type and name, three int64 timestamps, token id, hmac."""
    for _ in range(4 if version >= 3 else 2):
        pos = skip_string(frame, pos, flexible)
    return _skip_bytes(frame, skip_string(frame, pos + 24, flexible), flexible)


@frame_errors("CreateDelegationToken response")
def _create_delegation_token_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """CreateDelegationToken v0-3: error_code, the token's fields, then throttle_time_ms (last)."""
    return _skip_token_fields(frame, body_offset + 2, version, version >= 2)


@frame_errors("DescribeDelegationToken response")
def _describe_delegation_token_throttle_offset(frame: memoryview, body_offset: int, version: int) -> int:
    """DescribeDelegationToken v0-3: error_code, tokens (each with its renewers), then throttle_time_ms."""
    flexible = version >= 2
    tokens, pos = read_count(frame, body_offset + 2, flexible)
    for _ in range(tokens):
        renewers, pos = read_count(frame, _skip_token_fields(frame, pos, version, flexible), flexible)
        for _ in range(renewers):
            pos = skip_string(frame, skip_string(frame, pos, flexible), flexible)
            if flexible:
                pos = skip_tagged_fields(frame, pos)
        if flexible:
            pos = skip_tagged_fields(frame, pos)
    return pos


# Known APIs whose ThrottleTimeMs sits behind variable-size fields.
_WALKERS: dict[int, Walker] = {
    ApiKey.PRODUCE: produce_response_throttle_offset,
    ApiKey.API_VERSIONS: _api_versions_throttle_offset,
}

_FIXED_SIZES = {"bool": 1, "int8": 1, "int16": 2, "uint16": 2, "int32": 4, "uint32": 4, "int64": 8, "float64": 8}


def _locate(api_key: int, cls: type) -> _Entry | None:
    """The table entry for an API kafka-python knows, from the fields of its response schema."""
    fields = cls.json["fields"]  # type: ignore[attr-defined]
    index = next((i for i, field in enumerate(fields) if field["name"] == "ThrottleTimeMs"), None)
    if index is None:
        return None
    field = fields[index]
    first, last = BaseField.parse_versions(field["versions"])
    if field["type"] != "int32" or "tag" in field or first < 0:
        return None
    max_version = cls.max_version  # type: ignore[attr-defined]
    flexible_from = next((v for v in range(max_version + 1) if response_header_is_flexible(api_key, v)), _NEVER)
    if index == 0:
        return first, last, flexible_from, 0, None
    # Behind other fields, the layout is only known up to the newest version the schema describes.
    last = min(last, max_version)
    before = fields[:index]
    if all(
        f["type"] in _FIXED_SIZES
        and "tag" not in f
        and BaseField.parse_versions(f["versions"])[0] <= first
        and BaseField.parse_versions(f["versions"])[1] >= last
        for f in before
    ):
        return first, last, flexible_from, sum(_FIXED_SIZES[f["type"]] for f in before), None
    walker = _WALKERS.get(api_key)
    if walker is None:
        return None  # a layout nobody has taught this module: tests/unit/test_throttle.py fails on it
    return first, last, flexible_from, None, walker


# APIs kafka-python 3.0.12 does not know, read off Apache Kafka's response schemas
# (apache/kafka, clients/src/main/resources/common/message/<Name>Response.json, 4.x to 4.4):
# api_key: (first version with ThrottleTimeMs, last version whose layout is known, first flexible
# version, offset from the body start or walker). Each has ThrottleTimeMs declared "N+" and a response
# header v1 exactly when flexible. Where the field is first, it is trusted in newer versions too (Kafka
# has never moved a leading ThrottleTimeMs); behind other fields, only up to the newest version read.
# No ThrottleTimeMs at all (so absent here): LeaderAndIsr 4, StopReplica 5, UpdateMetadata 6,
# ControlledShutdown 7, Vote 52, BeginQuorumEpoch 53, EndQuorumEpoch 54, and the share-group state
# APIs 83-87 (Initialize/Read/Write/DeleteShareGroupState, ReadShareGroupStateSummary).
_STATIC: dict[int, tuple[int, int, int, int | Walker]] = {
    38: (0, 3, 2, _create_delegation_token_throttle_offset),  # CreateDelegationToken: last, after Hmac
    39: (0, 2, 2, 10),  # RenewDelegationToken: after ErrorCode int16 and ExpiryTimestampMs int64
    40: (0, 2, 2, 10),  # ExpireDelegationToken: same layout
    41: (0, 3, 2, _describe_delegation_token_throttle_offset),  # DescribeDelegationToken: after Tokens
    56: (0, _OPEN_ENDED, 0, 0),  # AlterPartition
    58: (0, _OPEN_ENDED, 0, 0),  # Envelope
    59: (0, _OPEN_ENDED, 0, 0),  # FetchSnapshot
    62: (0, _OPEN_ENDED, 0, 0),  # BrokerRegistration
    63: (0, _OPEN_ENDED, 0, 0),  # BrokerHeartbeat
    64: (0, _OPEN_ENDED, 0, 0),  # UnregisterBroker
    67: (0, _OPEN_ENDED, 0, 0),  # AllocateProducerIds
    68: (0, _OPEN_ENDED, 0, 0),  # ConsumerGroupHeartbeat
    69: (0, _OPEN_ENDED, 0, 0),  # ConsumerGroupDescribe
    70: (0, _OPEN_ENDED, 0, 0),  # ControllerRegistration
    71: (0, _OPEN_ENDED, 0, 0),  # GetTelemetrySubscriptions
    72: (0, _OPEN_ENDED, 0, 0),  # PushTelemetry
    73: (0, _OPEN_ENDED, 0, 0),  # AssignReplicasToDirs
    76: (0, _OPEN_ENDED, 0, 0),  # ShareGroupHeartbeat
    77: (1, _OPEN_ENDED, 1, 0),  # ShareGroupDescribe: the schema starts at v1 (v0 was 4.0 early access)
    78: (0, _OPEN_ENDED, 0, 0),  # ShareFetch
    79: (0, _OPEN_ENDED, 0, 0),  # ShareAcknowledge
    80: (0, _OPEN_ENDED, 0, 0),  # AddRaftVoter
    81: (0, _OPEN_ENDED, 0, 0),  # RemoveRaftVoter
    82: (0, _OPEN_ENDED, 0, 0),  # UpdateRaftVoter
    88: (0, _OPEN_ENDED, 0, 0),  # StreamsGroupHeartbeat
    89: (0, _OPEN_ENDED, 0, 0),  # StreamsGroupDescribe
    90: (0, _OPEN_ENDED, 0, 0),  # DescribeShareGroupOffsets
    91: (0, _OPEN_ENDED, 0, 0),  # AlterShareGroupOffsets
    92: (0, _OPEN_ENDED, 0, 0),  # DeleteShareGroupOffsets
    93: (0, _OPEN_ENDED, 0, 0),  # StreamsGroupTopologyDescriptionUpdate (4.4)
    94: (0, _OPEN_ENDED, 0, 0),  # UnregisterController (4.4)
}


def _build_table() -> dict[int, _Entry]:
    table: dict[int, _Entry] = {}
    for api_key, cls in RESPONSE_CLASSES.items():
        entry = _locate(api_key, cls)
        if entry is not None:
            table[api_key] = entry
    for api_key, (first, last, flexible_from, where) in _STATIC.items():
        if api_key in RESPONSE_CLASSES:
            continue  # a newer kafka-python knows it: its schema wins
        if isinstance(where, int):
            table[api_key] = (first, last, flexible_from, where, None)
        else:
            table[api_key] = (first, last, flexible_from, None, where)
    return table


_TABLE: dict[int, _Entry] = _build_table()


def throttle_time_offset(frame: memoryview, api_key: int, api_version: int) -> int | None:
    """Offset within the frame (size prefix included) of the response's int32 throttle_time_ms.

    None when this API version has no such field (or the API is unknown). Raises FrameError when the
    frame is too short to hold the field where the schema puts it.
    """
    entry = _TABLE.get(api_key)
    if entry is None:
        return None
    first, last, flexible_from, delta, walker = entry
    if not first <= api_version <= last:
        return None
    pos = _HEADER_TAGS
    if api_version >= flexible_from:
        # Response header v1: tagged fields after the correlation id; nearly always none (one 0 byte).
        if len(frame) > pos and frame[pos] == 0:
            pos += 1
        else:
            pos = skip_tagged_fields(frame, pos)
    if walker is None:
        pos += delta  # type: ignore[operator]
    else:
        found = walker(frame, pos, api_version)
        if found is None:
            return None
        pos = found
    if pos + 4 > len(frame):
        raise FrameError(f"response of api {api_key} v{api_version} too short to hold throttle_time_ms")
    return pos


def patch_throttle_time(
    frame: memoryview, api_key: int, api_version: int, throttle_ms: int
) -> tuple[bytes | memoryview, int]:
    """Raises the response's throttle_time_ms to throttle_ms; returns (frame, the upstream's value).

    When nothing changes (no such field, throttle_ms <= 0, or the upstream already asks for at least
    as long) the very same frame object is returned, uncopied. Otherwise the frame is copied once, with
    the field set to throttle_ms (capped at the int32 maximum). The upstream's value is 0 when the
    response has no such field.
    """
    offset = throttle_time_offset(frame, api_key, api_version)
    if offset is None:
        return frame, 0
    current = _INT32.unpack_from(frame, offset)[0]
    if throttle_ms <= current or throttle_ms <= 0:
        return frame, current
    end = offset + 4
    return b"".join((frame[:offset], _INT32.pack(min(throttle_ms, THROTTLE_MAX_MS)), frame[end:])), current
