"""DescribeClientQuotas (48) and AlterClientQuotas (49): decoded into plain values and answered with
frames the proxy makes itself, with kafka-python's classes (generated from Kafka's JSON schemas).

This module only translates between bytes and values; what a filter matches, what is valid and who
may alter live in quotagate.quotas.admin. Every request is walked whole first, as the broker parses it
(protocol/wire_walk.py: Kafka's limits on strings and arrays), so that kafka-python decodes only what
a bounded, small amount of work allows: a describe filter's first components, an alteration within
max_decoded_elements; a refusal of a whole AlterClientQuotas decodes nothing.

Kafka's entity types are "user", "client-id" and "ip" (Redpanda adds "client-id-prefix"); a name of
None is the default entity (`--entity-default`).
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import pack, unpack_from

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from quotagate import compiled
from quotagate.protocol.apis import ApiKey, is_flexible
from quotagate.protocol.framing import FrameError, decoded
from quotagate.protocol.headers import RequestHeader, encode_count, encode_string, encode_uvarint, response_body_offset
from quotagate.protocol.limits import DECODED_ELEMENTS_KEY, MAX_ARRAY_ELEMENTS, NO_LIMIT

_wire = compiled.load("quotagate.protocol.wire_walk")
CLUSTER_AUTHORIZATION_FAILED = 31
SMALL_COUNTS = 16  # counts the describe answer writes from a table: an entity's parts, its values

# The highest versions whose requests the proxy reads and whose responses it writes (version_caps.py).
_DESCRIBE = (DescribeClientQuotasRequest, DescribeClientQuotasResponse)
_ALTER = (AlterClientQuotasRequest, AlterClientQuotasResponse)
READABLE_UP_TO: dict[int, int] = {
    ApiKey.DESCRIBE_CLIENT_QUOTAS: min(cls.max_version for cls in _DESCRIBE),
    ApiKey.ALTER_CLIENT_QUOTAS: min(cls.max_version for cls in _ALTER),
}

# An entity as Kafka sends it: (entity type, name or None for the default), in the order given.
EntityParts = tuple[tuple[str, str | None], ...]


@dataclass(frozen=True, slots=True)
class FilterComponent:
    entity_type: str
    match_type: int  # 0 exact name, 1 default name, 2 any specified name
    match: str | None


@dataclass(frozen=True, slots=True)
class DescribeQuery:
    components: tuple[FilterComponent, ...]
    strict: bool


@dataclass(frozen=True, slots=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True, slots=True)
class Alteration:
    entity: EntityParts
    ops: tuple[QuotaOp, ...]


@dataclass(frozen=True, slots=True)
class AlterQuery:
    alterations: tuple[Alteration, ...]
    validate_only: bool


@dataclass(frozen=True, slots=True)
class DescribeResult:
    error_code: int
    error_message: str | None
    entries: tuple[tuple[EntityParts, dict[str, float]], ...]


@dataclass(frozen=True, slots=True)
class AlterResult:
    entity: EntityParts
    error_code: int
    error_message: str | None


def decode_describe(
    frame: memoryview | bytes, body_offset: int, version: int, keep: int = MAX_ARRAY_ELEMENTS
) -> DescribeQuery:
    """The filter of a DescribeClientQuotas request, with at most its first `keep` components: the
    request is checked whole, but a filter holding more than one component per entity type is
    refused by its first duplicate or unknown type (quotas.admin.describe, as the broker), which
    lies among the first (entity types + 1)."""
    program = _wire.program(DescribeClientQuotasRequest, version)
    walk = _wire.Walk(program, frame)
    walk.message(body_offset)
    count, first, kept_end, array_end = walk.first_elements(body_offset, program.ops_at["Components"], keep)
    if count > keep:  # the first `keep` components and what follows the array, as a smaller request
        flexible = program.flexible
        head = bytes(frame[:body_offset]) + encode_count(keep, flexible)
        frame = b"".join((head, frame[first:kept_end], frame[array_end:]))
    request = decoded(DescribeClientQuotasRequest, frame, body_offset, version)
    components = tuple(FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components)
    return DescribeQuery(components, bool(request.strict))


def decode_alter(frame: memoryview | bytes, body_offset: int, version: int, max_elements: int = NO_LIMIT) -> AlterQuery:
    """An AlterClientQuotas request, checked whole first; one of more than `max_elements` array
    elements is refused (ElementsOverLimit, naming max_decoded_elements) before it is decoded."""
    _wire.check(AlterClientQuotasRequest, version, frame, body_offset, max_elements, f"proxy.{DECODED_ELEMENTS_KEY}")
    request = decoded(AlterClientQuotasRequest, frame, body_offset, version)
    alterations = tuple(
        Alteration(
            tuple((part.entity_type, part.entity_name) for part in entry.entity),
            tuple(QuotaOp(op.key, op.value, bool(op.remove)) for op in entry.ops),
        )
        for entry in request.entries
    )
    return AlterQuery(alterations, bool(request.validate_only))


def alter_refusal(frame: memoryview | bytes, header: RequestHeader, error_code: int, message: str) -> bytes:
    """The answer to an AlterClientQuotas refused whole (AlterClientQuotasRequest.getErrorResponse):
    every entry, in order, with the entity as the client sent it, `error_code` and `message`. Made
    from the request's bytes as it is walked (wire_walk's echo): nothing is decoded, whatever the
    number of entries."""
    version = header.api_version
    program = _wire.program(AlterClientQuotasRequest, version)
    flexible = program.flexible
    walk = _wire.Walk(program, frame)
    entries_at = program.ops_at["Entries"]
    prefix = pack(">h", error_code) + encode_string(message, flexible)
    suffix = b"\x00" if flexible else b""  # the entry's tagged fields
    entries, count, pos = walk.echo(header.body_offset, entries_at, program.ops_at["Entries.Entity"], prefix, suffix)
    walk.after(pos, entries_at)  # validate_only and the tags: the whole request is as Kafka parses it
    response_header = pack(">i", header.correlation_id) + (b"\x00" if flexible else b"")
    head = response_header + pack(">i", 0) + encode_count(count, flexible)  # throttle_time_ms, entry count
    size = len(head) + len(entries) + len(suffix)
    return b"".join((pack(">i", size), head, entries, suffix))


def describe_verdict(frame: memoryview | bytes, version: int) -> tuple[bool, int]:
    """What a broker's DescribeClientQuotas response says of the principal: whether it refused it
    (CLUSTER_AUTHORIZATION_FAILED), and the throttle it asked for (throttle_time_ms)."""
    view = memoryview(frame)
    at = response_body_offset(view, ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    if len(view) < at + 6:
        raise FrameError("truncated DescribeClientQuotas response")
    throttle_ms, error_code = unpack_from(">ih", view, at)
    return error_code == CLUSTER_AUTHORIZATION_FAILED, max(throttle_ms, 0)


def describe_response(correlation_id: int, version: int, result: DescribeResult, throttle_ms: int = 0) -> bytes:
    """The answer to a DescribeClientQuotas: kafka-python's encoding of its head, and its entries (as
    many as the proxy's quotas match: kafka-python took ~50 us each, half a second for 10 000 on the
    loop) written field by field as the schema lays them out, in place of its empty array."""
    cls = DescribeClientQuotasResponse
    flexible = is_flexible(ApiKey.DESCRIBE_CLIENT_QUOTAS, version)
    entries = [] if result.error_code == 0 else None
    response = cls(
        version=version,
        throttle_time_ms=throttle_ms,
        error_code=result.error_code,
        error_message=result.error_message,
        entries=entries,
    )
    frame = _frame(ApiKey.DESCRIBE_CLIENT_QUOTAS, correlation_id, version, response)
    if entries is None:
        return frame
    tags = b"\x00" if flexible else b""  # the response's, after the entries
    empty = encode_count(0, flexible) + tags
    written = _described_entries(result.entries, flexible)
    size = len(frame) - 4 - len(empty) + len(written) + len(tags)
    return b"".join((pack(">i", size), frame[4 : len(frame) - len(empty)], written, tags))


def _described_entries(entries: tuple[tuple[EntityParts, dict[str, float]], ...], flexible: bool) -> bytes:
    """DescribeClientQuotasResponse's entries array: per entry its entity (type, name) and its values
    (key, float64), each struct ending with its tagged fields (flexible versions). No Python call an
    entry: entity types and keys (a handful) are encoded once, names and counts inline."""
    tags = b"\x00" if flexible else b""
    null = encode_string(None, flexible)
    small = [encode_count(n, flexible) for n in range(SMALL_COUNTS)]  # an entity's parts, its values
    known: dict[str, bytes] = {}
    parts = [encode_count(len(entries), flexible)]
    for entity, values in entries:
        parts.append(small[len(entity)] if len(entity) < SMALL_COUNTS else encode_count(len(entity), flexible))
        for kind, name in entity:
            head = known.get(kind)
            if head is None:
                head = known[kind] = encode_string(kind, flexible)
            if name is None:
                parts += (head, null, tags)
                continue
            data = name.encode()
            if not flexible:
                parts += (head, pack(">h", len(data)), data)
            elif len(data) < 0x7F:
                parts += (head, bytes((len(data) + 1,)), data, tags)
            else:
                parts += (head, encode_uvarint(len(data) + 1), data, tags)
        parts.append(small[len(values)] if len(values) < SMALL_COUNTS else encode_count(len(values), flexible))
        for key, value in values.items():
            head = known.get(key)
            if head is None:
                head = known[key] = encode_string(key, flexible)
            parts += (head, pack(">d", value), tags)
        parts.append(tags)
    return b"".join(parts)


def alter_response(correlation_id: int, version: int, results: list[AlterResult]) -> bytes:
    cls = AlterClientQuotasResponse
    response = cls(
        version=version,
        throttle_time_ms=0,
        entries=[
            cls.EntryData(
                version=version,
                error_code=result.error_code,
                error_message=result.error_message,
                entity=[
                    cls.EntryData.EntityData(version=version, entity_type=t, entity_name=n) for t, n in result.entity
                ],
            )
            for result in results
        ],
    )
    return _frame(ApiKey.ALTER_CLIENT_QUOTAS, correlation_id, version, response)


def _frame(api_key: int, correlation_id: int, version: int, response: object) -> bytes:
    header = pack(">i", correlation_id) + (b"\x00" if is_flexible(api_key, version) else b"")
    body = bytes(response.encode())  # type: ignore[attr-defined]
    return pack(">i", len(header) + len(body)) + header + body
