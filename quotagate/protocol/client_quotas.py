"""DescribeClientQuotas (48) and AlterClientQuotas (49): decoded into plain values and answered with
frames the proxy makes itself, with kafka-python's classes (generated from Kafka's JSON schemas).

This module only translates between bytes and values; what a filter matches, what is valid and who
may alter live in quotagate.quotas.admin. Kafka's entity types are "user", "client-id" and "ip"
(Redpanda adds "client-id-prefix"); a name of None is the default entity (`--entity-default`).
"""

from __future__ import annotations

from dataclasses import dataclass
from struct import pack

from kafka.protocol.admin import (
    AlterClientQuotasRequest,
    AlterClientQuotasResponse,
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)

from quotagate.protocol.apis import ApiKey, is_flexible
from quotagate.protocol.framing import FrameError

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


def decode_describe(frame: memoryview, body_offset: int, version: int) -> DescribeQuery:
    request = _decode(DescribeClientQuotasRequest, frame, body_offset, version)
    components = tuple(FilterComponent(c.entity_type, c.match_type, c.match) for c in request.components)
    return DescribeQuery(components, bool(request.strict))


def decode_alter(frame: memoryview, body_offset: int, version: int) -> AlterQuery:
    request = _decode(AlterClientQuotasRequest, frame, body_offset, version)
    alterations = tuple(
        Alteration(
            tuple((part.entity_type, part.entity_name) for part in entry.entity),
            tuple(QuotaOp(op.key, op.value, bool(op.remove)) for op in entry.ops),
        )
        for entry in request.entries
    )
    return AlterQuery(alterations, bool(request.validate_only))


def describe_response(correlation_id: int, version: int, result: DescribeResult) -> bytes:
    cls = DescribeClientQuotasResponse
    entries = None
    if result.error_code == 0:
        entries = [
            cls.EntryData(
                version=version,
                entity=[cls.EntryData.EntityData(version=version, entity_type=t, entity_name=n) for t, n in entity],
                values=[
                    cls.EntryData.ValueData(version=version, key=key, value=value) for key, value in values.items()
                ],
            )
            for entity, values in result.entries
        ]
    response = cls(
        version=version,
        throttle_time_ms=0,
        error_code=result.error_code,
        error_message=result.error_message,
        entries=entries,
    )
    return _frame(ApiKey.DESCRIBE_CLIENT_QUOTAS, correlation_id, version, response)


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


def _decode(cls: type, frame: memoryview, body_offset: int, version: int):  # type: ignore[no-untyped-def]
    try:
        return cls.decode(frame[body_offset:], version=version)  # type: ignore[attr-defined]
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc


def _frame(api_key: int, correlation_id: int, version: int, response: object) -> bytes:
    header = pack(">i", correlation_id) + (b"\x00" if is_flexible(api_key, version) else b"")
    body = bytes(response.encode())  # type: ignore[attr-defined]
    return pack(">i", len(header) + len(body)) + header + body
