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

import functools
import math
from collections.abc import Iterable, Mapping

from quotagate.protocol.client_quotas import (
    Alteration,
    AlterResult,
    DescribeQuery,
    DescribeResult,
    EntityParts,
)
from quotagate.protocol.limits import string_problem
from quotagate.quotas import java_hashmap
from quotagate.quotas.entities import (
    DEFAULT,
    INTEGER_TOLERANCE,
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
_KNOWN_KEYS = _QUOTA_KEYS | {IpQuotaKey.CONNECTION_CREATION_RATE.value}
# The Java type Kafka's QuotaConfig gives its integral keys (the others are doubles), and the
# largest value each holds with the article the broker's message puts before its name.
_JAVA_TYPES = {
    QuotaKey.PRODUCER_BYTE_RATE.value: "LONG",
    QuotaKey.CONSUMER_BYTE_RATE.value: "LONG",
    IpQuotaKey.CONNECTION_CREATION_RATE.value: "INT",
}
_JAVA_LIMITS = {"LONG": (float(2**63 - 1), "a"), "INT": (float(2**31 - 1), "an")}
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
    # An entity the file marks shadow stays shadow, whichever source set its values; tenants are the file's.
    return QuotaTable({entity: values for entity, values in merged.items() if values}, file.shadow, file.tenants)


def source_of(api: Mapping[QuotaEntity, Mapping[QuotaKey, float | None]], entity: QuotaEntity, key: QuotaKey) -> str:
    return SOURCE_API if api.get(entity, {}).get(key) is not None else SOURCE_FILE


def entity_parts(entity: QuotaEntity) -> EntityParts:
    """A quota entity as the broker lists it: its components in the order of Kafka's entity map
    (client-id before user: quotas/java_hashmap.py); None names the default."""
    parts: list[tuple[str, str | None]] = []
    if entity.user is not None:
        parts.append((USER, None if entity.user == DEFAULT else entity.user))
    if entity.client_id is not None:
        parts.append((CLIENT_ID, None if entity.client_id == DEFAULT else entity.client_id))
    if entity.client_id_prefix is not None:
        parts.append((CLIENT_ID_PREFIX, entity.client_id_prefix))
    if entity.ip is not None:
        parts.append((IP, None if entity.ip == DEFAULT else entity.ip))
    return _components_in_kafka_order(parts, len(parts), None)


def _components_in_kafka_order(parts: Iterable[tuple[str, str | None]], sent: int, initial: int | None) -> EntityParts:
    """An entity's components, one per type (the last one given, as Kafka's map keeps it), in the
    order of a `new HashMap<>(initial)` holding them (None: `new HashMap<>()`); `sent` components
    were put in it."""
    names = dict(parts)
    order = java_hashmap.hashmap_order(list(names), initial=initial, puts=sent)
    return tuple((kind, names[kind]) for kind in order)


def _entity_text(parts: EntityParts) -> str:
    """ClientQuotaEntity.toString, as the broker's messages name an entity."""
    return "ClientQuotaEntity(entries={" + ", ".join(f"{kind}={name}" for kind, name in parts) + "})"


def _values_in_kafka_order(values: Mapping[str, float]) -> dict[str, float]:
    """An entity's quota values in the order of the broker's map of them (ClientQuotaImage)."""
    order = java_hashmap.rebuilt_order(list(values))
    return {key: values[key] for key in order}


def describe(quotas: QuotaTable, query: DescribeQuery) -> DescribeResult:
    """The entities whose quotas match a DescribeClientQuotas filter, as the broker answers it
    (Kafka's ClientQuotasImage.describe): its errors and messages, and its order (quotas/java_hashmap.py)."""
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
            return _describe_error(INVALID_REQUEST, f"Unknown match type {component.match_type}")
    named = exact.keys() | any_name
    if IP in named and (USER in named or CLIENT_ID in named or CLIENT_ID_PREFIX in named):
        return _describe_error(
            INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component should not be used with "
            "user or clientId filter component.",
        )
    # The broker walks its map of every entity and keeps the matches: their order is the map's.
    entries = [(entity_parts(entity), values) for entity, values in quotas.items()]
    matched = []
    for parts, values in java_hashmap.rebuilt_order(entries, lambda entry: _entity_hash(entry[0])):
        names = dict(parts)
        if query.strict and len(names) != len(named):
            continue
        if all(kind in names and names[kind] == name for kind, name in exact.items()) and all(
            kind in names for kind in any_name
        ):
            matched.append((parts, _values_in_kafka_order({key.value: value for key, value in values.items()})))
    return DescribeResult(NONE, "", tuple(matched))


@functools.lru_cache(maxsize=4096)
def _entity_hash(parts: EntityParts) -> int:
    return java_hashmap.entity_hash(parts)


def _describe_error(code: int, message: str) -> DescribeResult:
    return DescribeResult(code, message, ())


def check_alteration(alteration: Alteration) -> tuple[QuotaEntity | None, str | None]:
    """The entity an alteration names and None, or (None, the broker's INVALID_REQUEST message).

    In the broker's order (Kafka's ClientQuotaControlManager): the entity's components (one per type,
    the last one given), their combination, then each key set (a removal is never checked: there is
    nothing to refuse in removing what is not set). Where the broker would take what the proxy
    cannot hold (NaN, an infinite double rate, a host name for an ip), the proxy's own message says why."""
    parts = _components_in_kafka_order(alteration.entity, len(alteration.entity), len(alteration.entity))
    names = dict(parts)
    if not parts:
        return None, "Invalid empty client quota entity"
    for kind, name in parts:
        if kind not in ENTITY_TYPES:
            return None, f"Unhandled client quota entity type: {kind}"
        if name is not None and not name:
            return None, f"Empty {kind} not supported"
        # Kafka's readers refuse a longer string (the wire refuses it first: this holds for a state file)
        too_long = string_problem(f"{kind} name", len(name.encode())) if name is not None else None
        if too_long is not None:
            return None, too_long
    ip = None
    if IP in names:
        if len(names) > 1:
            return None, "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
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
    ops = {op.key: op for op in alteration.ops}
    keys = java_hashmap.hashmap_order(list(ops), initial=len(ops))
    for key in keys:
        op = ops[key]
        if op.remove:
            continue
        problem = _value_problem(op.key, op.value, ip is not None)
        if problem is not None:
            return None, problem
    return entity, None


def _value_problem(key: str, value: float, ip_entity: bool) -> str | None:
    """Why `value` cannot be set for `key`: the broker's checks and words first (each entity type
    takes its own keys; a value above 0, whole for the integral keys, within a Java long or int),
    then what the proxy refuses beyond them, as its configuration file does."""
    if ip_entity != (key == IpQuotaKey.CONNECTION_CREATION_RATE) or not (key in _QUOTA_KEYS or ip_entity):
        return f"Invalid configuration key {key}"
    if value <= 0.0:
        return f"Quota {key} must be greater than 0"
    java_type = _JAVA_TYPES.get(key)
    if java_type is not None:
        largest, article = _JAVA_LIMITS[java_type]
        if value > largest:
            return f"Proposed value for {key} is too large for {article} {java_type}."
        if abs(math.fmod(value, 1.0)) > INTEGER_TOLERANCE:
            return f"{key} cannot be a fractional value."
    if ip_entity:
        problem = connection_creation_rate_problem(value)
    else:
        # The broker would take NaN, an infinite double rate and rates too small for a bucket to
        # turn into a finite throttle; the proxy refuses them, as its file does.
        problem = quota_value_problem(QuotaKey(key), value)
    return None if problem is None else f"Configuration {key} {problem}"


def alter(api: ApiQuotas, alterations: Iterable[Alteration], validate_only: bool) -> list[AlterResult]:
    """Checks each alteration and, unless validate_only, applies the valid ones to `api` in place.

    One result per entity, as the broker's controller answers (a map of entity to outcome): an
    entity named again, or an entry naming a key twice, gets "Ignoring duplicate entity" (what an
    earlier entry of that entity applied stays applied); results and components in Kafka's order."""
    results: dict[frozenset[tuple[str, str | None]], AlterResult] = {}
    for alteration in alterations:
        parts = _components_in_kafka_order(alteration.entity, len(alteration.entity), len(alteration.entity))
        key = frozenset(parts)
        keys = [op.key for op in alteration.ops]
        if key in results or len(set(keys)) != len(keys):
            problem = f"Ignoring duplicate entity {_entity_text(parts)}"
            results[key] = AlterResult(results[key].entity if key in results else parts, INVALID_REQUEST, problem)
            continue
        entity, problem = check_alteration(alteration)
        if entity is None or problem is not None:
            results[key] = AlterResult(parts, INVALID_REQUEST, problem)
            continue
        if not validate_only:
            values = api.setdefault(entity, {})
            for op in alteration.ops:
                if op.remove and op.key not in _KNOWN_KEYS:
                    continue  # nothing set under a key the proxy does not know: nothing to remove
                values[quota_key(op.key)] = None if op.remove else float(op.value)  # type: ignore[index]
            if not values:
                del api[entity]
        results[key] = AlterResult(parts, NONE, None)
    order = java_hashmap.hashmap_order(list(results), lambda k: java_hashmap.entity_hash(results[k].entity))
    return [results[k] for k in order]


def prune(api: ApiQuotas, file: QuotaTable) -> None:
    """Drops removals of keys the file no longer sets, and entities left with nothing."""
    in_file = dict(file.items())
    for entity in list(api):
        values = api[entity]
        for key in [k for k, v in values.items() if v is None and k not in in_file.get(entity, {})]:
            del values[key]
        if not values:
            del api[entity]
