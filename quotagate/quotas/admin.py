"""Quotas set through Kafka's admin APIs, and how they combine with the configuration file.

Pure: no I/O, no clock. The proxy keeps an `ApiQuotas` (what AlterClientQuotas set, persisted in a
state file) and the file's `QuotaTable`; the quotas in force are `effective(file, api)`:

- per (entity, key), a value set through the API wins over the file's;
- a key removed through the API that the file sets stays removed (the API's word is the last one)
  until the file's entry is removed too or the key is set again through the API;
- everything else comes from the file, and file edits apply as before.

Describe filters and alteration checks follow the broker (Kafka's ClientQuotasImage.describe and
ClientQuotaControlManager): the same error codes and, where it helps, the same messages. The
`client-id-prefix` entity type is Redpanda's: a filter component matches a prefix entry's name as a
client-id component matches a client id (exact name, or any), and no prefix has a default entity.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from quotagate.protocol.client_quotas import (
    Alteration,
    AlterResult,
    DescribeQuery,
    DescribeResult,
    EntityParts,
)
from quotagate.protocol.limits import string_problem
from quotagate.quotas.entities import (
    DEFAULT,
    IpQuotaKey,
    QuotaEntity,
    QuotaKey,
    QuotaTable,
    client_id_prefix_problem,
    connection_creation_rate_problem,
    ip_entity_name,
    quota_key,
    quota_value_problem,
)

NONE = 0
INVALID_REQUEST = 42
UNSUPPORTED_VERSION = 35
USER, CLIENT_ID, IP = "user", "client-id", "ip"
CLIENT_ID_PREFIX = "client-id-prefix"  # Redpanda's entity type: every client id starting with the name
ENTITY_TYPES = (USER, CLIENT_ID, CLIENT_ID_PREFIX, IP)
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
# Where an effective quota came from, as /quotas shows it.
SOURCE_FILE, SOURCE_API = "file", "api"

_QUOTA_KEYS = frozenset(key.value for key in QuotaKey)
# What AlterClientQuotas set: entity -> {key: value, or None where the API removed a file's key}.
ApiQuotas = dict[QuotaEntity, dict[QuotaKey, float | None]]


def effective(file: QuotaTable, api: Mapping[QuotaEntity, Mapping[QuotaKey, float | None]]) -> QuotaTable:
    """The quotas in force: the file's, with what the API set or removed laid over them."""
    merged: dict[QuotaEntity, dict[QuotaKey, float]] = {entity: dict(values) for entity, values in file.items()}
    for entity, values in api.items():
        target = merged.setdefault(entity, {})
        for key, value in values.items():
            if value is None:
                target.pop(key, None)
            else:
                target[key] = value
    # An entity the file marks shadow stays shadow, whichever source set its values.
    return QuotaTable({entity: values for entity, values in merged.items() if values}, file.shadow)


def source_of(api: Mapping[QuotaEntity, Mapping[QuotaKey, float | None]], entity: QuotaEntity, key: QuotaKey) -> str:
    return SOURCE_API if api.get(entity, {}).get(key) is not None else SOURCE_FILE


def entity_parts(entity: QuotaEntity) -> EntityParts:
    """A quota entity as Kafka describes it: user first, then client-id (or client-id-prefix, as
    Redpanda names it); None names the default."""
    parts: list[tuple[str, str | None]] = []
    if entity.user is not None:
        parts.append((USER, None if entity.user == DEFAULT else entity.user))
    if entity.client_id is not None:
        parts.append((CLIENT_ID, None if entity.client_id == DEFAULT else entity.client_id))
    if entity.client_id_prefix is not None:
        parts.append((CLIENT_ID_PREFIX, entity.client_id_prefix))
    if entity.ip is not None:
        parts.append((IP, None if entity.ip == DEFAULT else entity.ip))
    return tuple(parts)


def describe(quotas: QuotaTable, query: DescribeQuery) -> DescribeResult:
    """The entities whose quotas match a DescribeClientQuotas filter, as the broker answers it."""
    exact: dict[str, str | None] = {}
    any_name: set[str] = set()
    for component in query.components:
        kind = component.entity_type
        if not kind:
            return _describe_error(INVALID_REQUEST, "Invalid empty entity type.")
        if kind in exact or kind in any_name:
            return _describe_error(INVALID_REQUEST, f"Entity type {kind} cannot appear more than once in the filter.")
        if kind not in ENTITY_TYPES:
            return _describe_error(UNSUPPORTED_VERSION, f"Unsupported entity type {kind}")
        if component.match_type == MATCH_EXACT:
            if component.match is None:
                return _describe_error(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
            exact[kind] = component.match
        elif component.match_type == MATCH_DEFAULT:
            if component.match is not None:
                return _describe_error(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_DEFAULT, but also specified a match string."
                )
            exact[kind] = None
        elif component.match_type == MATCH_ANY:
            if component.match is not None:
                return _describe_error(
                    INVALID_REQUEST, "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string."
                )
            any_name.add(kind)
        else:
            return _describe_error(UNSUPPORTED_VERSION, f"Unsupported match type {component.match_type}")
    named = exact.keys() | any_name
    if IP in named and (USER in named or CLIENT_ID in named or CLIENT_ID_PREFIX in named):
        return _describe_error(
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    entries = []
    for entity, values in quotas.items():
        parts = dict(entity_parts(entity))
        if query.strict and len(parts) != len(named):
            continue
        if all(kind in parts and parts[kind] == name for kind, name in exact.items()) and all(
            kind in parts for kind in any_name
        ):
            entries.append((entity_parts(entity), {key.value: value for key, value in values.items()}))
    return DescribeResult(NONE, None, tuple(entries))


def _describe_error(code: int, message: str) -> DescribeResult:
    return DescribeResult(code, message, ())


def check_alteration(alteration: Alteration) -> tuple[QuotaEntity | None, str | None]:
    """The entity an alteration names and None, or (None, the broker's INVALID_REQUEST message)."""
    names: dict[str, str | None] = {}
    if not alteration.entity:
        return None, "Invalid empty client quota entity"
    for kind, name in alteration.entity:
        if kind in names:
            return None, f"Invalid empty client quota entity, duplicate entity entry {kind}"
        if kind not in ENTITY_TYPES:
            return None, f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return None, f"Empty {kind} not supported"
        # Kafka's readers refuse a longer string (the wire refuses it first: this holds for a state file)
        too_long = string_problem(f"{kind} name", len(name.encode())) if name is not None else None
        if too_long is not None:
            return None, too_long
        names[kind] = name
    ip = None
    if IP in names:
        if len(names) > 1:
            return None, "Invalid empty client quota entity"
        ip = DEFAULT if names[IP] is None else ip_entity_name(names[IP])  # type: ignore[arg-type]
        if ip is None:
            return None, f"{names[IP]} is not a valid IP address (quotagate matches clients by address)"
    prefix = names.get(CLIENT_ID_PREFIX)
    if CLIENT_ID_PREFIX in names:
        if CLIENT_ID in names:
            return None, f"Entity types {CLIENT_ID} and {CLIENT_ID_PREFIX} cannot be combined"
        problem = "has no default entity" if prefix is None else client_id_prefix_problem(prefix)
        if problem is not None:
            return None, f"{CLIENT_ID_PREFIX} {problem}"
    entity = QuotaEntity(
        (names[USER] or DEFAULT) if USER in names else None,
        (names[CLIENT_ID] or DEFAULT) if CLIENT_ID in names else None,
        prefix,
        ip,
    )
    seen: set[str] = set()
    for op in alteration.ops:
        if op.key in seen:
            return None, f"Duplicate quota key {op.key} not updating quota for this entity {_kafka_entity(names)}"
        seen.add(op.key)
        if op.remove:
            continue
        problem = _value_problem(op.key, op.value, ip is not None)
        if problem is not None:
            return None, problem
    return entity, None


def _value_problem(key: str, value: float, ip_entity: bool) -> str | None:
    # As the broker, each entity type takes its own keys: connection_creation_rate for ip alone.
    if ip_entity or key == IpQuotaKey.CONNECTION_CREATION_RATE:
        if key != IpQuotaKey.CONNECTION_CREATION_RATE or not ip_entity:
            return f"Invalid configuration key {key}"
        problem = connection_creation_rate_problem(value)
        return None if problem is None else f"Configuration {key} {problem}"
    if key not in _QUOTA_KEYS:
        return f"Invalid configuration key {key}"
    # The broker would take 0 or less (a zero quota then stops the client) and NaN; the proxy
    # refuses them, as its file does, and anything its buckets could not hold as a finite number.
    problem = quota_value_problem(QuotaKey(key), value)
    return None if problem is None else f"Configuration {key} {problem}"


def _kafka_entity(names: Mapping[str, str | None]) -> str:
    return "ClientQuotaEntity(entries=" + str(dict(names)) + ")"


def alter(api: ApiQuotas, alterations: Iterable[Alteration], validate_only: bool) -> list[AlterResult]:
    """Checks each alteration and, unless validate_only, applies the valid ones to `api` in place."""
    results = []
    seen: set[QuotaEntity] = set()
    for alteration in alterations:
        entity, problem = check_alteration(alteration)
        if entity is not None and entity in seen:
            problem = f"Ignoring duplicate entity {_kafka_entity(dict(alteration.entity))}"
        if entity is None or problem is not None:
            results.append(AlterResult(alteration.entity, INVALID_REQUEST, problem))
            continue
        seen.add(entity)
        if not validate_only:
            values = api.setdefault(entity, {})
            for op in alteration.ops:
                values[quota_key(op.key)] = None if op.remove else float(op.value)  # type: ignore[index]
        results.append(AlterResult(alteration.entity, NONE, None))
    return results


def prune(api: ApiQuotas, file: QuotaTable) -> None:
    """Drops removals of keys the file no longer sets, and entities left with nothing."""
    in_file = dict(file.items())
    for entity in list(api):
        values = api[entity]
        for key in [k for k, v in values.items() if v is None and k not in in_file.get(entity, {})]:
            del values[key]
        if not values:
            del api[entity]
