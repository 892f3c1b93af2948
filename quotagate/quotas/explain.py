"""Why a quota applies to a client (the resolve call Kafka's KIP-546 planned and never finished).

For (user, client id) and each quota key: the entry that applies, its level in the precedence (1-8,
or 1p/4p/7p for a client-id prefix), where it came from, who shares its bucket, the bucket's state
now, and every other entry that matches the client with why it lost; then the tenant the client is
in (and the later tenants that match it too), the tenant's quota for the key with its bucket, and
how the two hold it (`held_by`: both charged, the larger throttle applies). Pure: it reads the
engine (its quotas and buckets) and never changes it, never resolves through the engine's cache (so an
explain from the HTTP thread adds no entry there), and takes the time and the source of each
entry from the caller.

The answer is plain data (dicts, lists, strings, numbers), ready for JSON; `explain_text` writes it
for a terminal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from quotagate.quotas.bucket import ShadowTokenBucket
from quotagate.quotas.engine import QuotaEngine, tokens_per_second
from quotagate.quotas.entities import (
    DEFAULT,
    SCOPE_CLIENT,
    SCOPE_PREFIX,
    SCOPE_USER,
    SCOPE_USER_PREFIX,
    IpQuotaKey,
    QuotaEntity,
    QuotaKey,
    Resolution,
)
from quotagate.quotas.lease import LeasedBucket
from quotagate.quotas.tenants import Tenant, by_client_id

# What each level is, as the docs name it (docs/quotas.md, "Which quota applies").
LEVEL_NAMES = {
    "1": "user + client-id",
    "1p": "user + client-id prefix",
    "2": "user + default client-id",
    "3": "user",
    "4": "default user + client-id",
    "4p": "default user + client-id prefix",
    "5": "default user + default client-id",
    "6": "default user",
    "7": "client-id",
    "7p": "client-id prefix",
    "8": "default client-id",
}

# (entity, key) -> "file" or "api" (QuotaAdmin.source); without one, every entry is the file's.
Source = Callable[[QuotaEntity, QuotaKey], str]


def _file_source(_entity: QuotaEntity, _key: QuotaKey) -> str:
    return "file"


def explain(
    engine: QuotaEngine,
    user: str,
    client_id: str,
    now: float | None,
    source: Source = _file_source,
    ip: str | None = None,
) -> dict[str, Any]:
    """The explanation for (user, client_id), connecting from `ip` if given: per quota key, the entry
    that applies and those that lost. `now` None: no running proxy, so no bucket state (resolving
    from a file)."""
    table = engine.table
    candidates = table.candidates(user, client_id)
    keys: dict[str, Any] = {}
    tenants = table.tenants.matching(user, client_id)  # the first is the entity's
    tenant = tenants[0][0] if tenants else None
    for key in QuotaKey:
        winner: Resolution | None = None
        applied: dict[str, Any] = {}
        lost: list[dict[str, Any]] = []  # every other matching entry, in precedence order
        for level, by_prefix, entity, values in candidates:
            level_name = f"{level}p" if by_prefix else str(level)
            if key not in values:
                lost.append(_entry(entity, level_name, None, None, table.shadow))
                lost[-1]["why"] = f"sets no {key.value}" + ("" if winner else ": the precedence goes on")
                continue
            described = _entry(entity, level_name, values[key], source(entity, key), table.shadow)
            if winner is None:
                winner = table.resolution_for(user, client_id, key, level, by_prefix, entity)
                applied = described
                continue
            described["why"] = _why_lost(winner, level, by_prefix, entity)
            lost.append(described)
        tenant_quota = None
        if tenant is not None and key in tenant.quotas:
            tenant_quota = _tenant_quota(engine, table.tenant_resolution(tenant, key), now)
        if winner is None:
            keys[key.value] = {
                "applies": None,
                "why": "no entry that matches this client sets it",
                "lost": lost,
                "tenant": tenant_quota,
                "held_by": _held_by(None, tenant_quota),
            }
            continue
        applied["shared_by"] = _shared_by(winner)
        applied["bucket"] = _bucket_state(engine, winner, now)
        keys[key.value] = {
            "applies": applied,
            "lost": lost,
            "tenant": tenant_quota,
            "held_by": _held_by(applied, tenant_quota),
        }
    answer: dict[str, Any] = {
        "user": user,
        "client_id": client_id,
        "tenant": _tenant_membership(tenants),
        "quotas": keys,
    }
    if ip is not None:
        answer["ip"] = _explain_ip(engine, ip, now, source)
    return answer


def tenant_states(
    engine: QuotaEngine, now: float, members: Mapping[str, int], muted: Mapping[str, int]
) -> list[dict[str, Any]]:
    """/quotas' `tenants`: each configured tenant, its member rules, how many of its members are
    tracked and muted (by tenant name), and per key its quota and shared bucket now."""
    states = []
    for tenant in engine.table.tenants.tenants:
        quotas = {}
        for key in tenant.quotas:
            resolution = engine.table.tenant_resolution(tenant, key)
            bucket = _bucket_state(engine, resolution, now)
            quotas[key.value] = {
                "level": 0,
                "matched": f"tenant={tenant.name}",
                "quota": resolution.value,
                "tokens": bucket["tokens"],
                "throttle_ms": bucket["throttle_ms"],  # a shadow tenant's is the throttle it would give
                "shadow": resolution.shadow,
            }
        states.append(
            {
                "tenant": tenant.name,
                "rules": tenant.rule_texts(),
                "members": members.get(tenant.name, 0),
                "quotas": quotas,
                "muted_connections": muted.get(tenant.name, 0),
            }
        )
    return states


def _tenant_membership(tenants: list[tuple[Tenant, str]]) -> dict[str, Any] | None:
    """The tenant the client is in, by which rule, and the tenants that match it too but come later."""
    if not tenants:
        return None
    (tenant, rule), later = tenants[0], tenants[1:]
    by_user = not by_client_id(rule)
    return {
        "name": tenant.name,
        "rule": rule,
        "lost": [
            {"name": other.name, "rule": why, "why": _lost_because(tenant.name, by_user, why)} for other, why in later
        ],
    }


def _lost_because(winner: str, winner_by_user: bool, rule: str) -> str:
    if winner_by_user and by_client_id(rule):
        return f"tenant {winner!r} takes the client by its user, which comes before any client id"
    return f"tenant {winner!r} comes first in the file"


def _tenant_quota(engine: QuotaEngine, resolution: Resolution, now: float | None) -> dict[str, Any]:
    return {
        "tenant": resolution.tenant,
        "value": resolution.value,
        "shadow": resolution.shadow,
        # A shadow bucket is this process's, as every shadow quota's (engine._bucket): not shared.
        "shared_by": f"every member of tenant {resolution.tenant!r}, on every listener "
        + ("of this process (shadow: not shared)" if resolution.shadow else "and process"),
        "bucket": _bucket_state(engine, resolution, now),
    }


def _held_by(own: dict[str, Any] | None, tenant: dict[str, Any] | None) -> str:
    """How the client's own quota and its tenant's compose for one key (docs/quotas.md, "Tenants"). A
    shadow quota is charged but holds no one (the engine's throttle from it is 0): it is named as tried."""
    binding = [part for part in (own, tenant) if part is not None and not part["shadow"]]
    tried = [_quota_name(part, own) for part in (own, tenant) if part is not None and part["shadow"]]
    shadow = f" ({' and '.join(tried)}: shadow, tried and never applied)" if tried else ""
    if not binding:
        return f"nothing: unlimited{shadow}"
    if len(binding) == 1:
        alone = " alone (no entry of its own sets the key)" if own is None else ""
        return f"{_quota_name(binding[0], own)}{alone}{shadow}"
    throttles = tuple(part["bucket"].get("throttle_ms") for part in binding)
    rule = "both are charged; the larger throttle holds it (whichever binds first)"
    if None in throttles or throttles == (0, 0):
        return rule
    return f"{rule}: now {_quota_name(binding[0] if throttles[0] >= throttles[1] else binding[1], own)}"


def _quota_name(part: dict[str, Any], own: dict[str, Any] | None) -> str:
    return "its own quota" if part is own else f"the quota of tenant {part['tenant']!r}"


def _explain_ip(engine: QuotaEngine, address: str, now: float | None, source: Source) -> dict[str, Any]:
    """The connection_creation_rate for clients from `address`: its own entry, else the <default> ip's."""
    key = IpQuotaKey.CONNECTION_CREATION_RATE
    resolution = engine.table.resolve_ip(address)
    explained: dict[str, Any] = {"address": address}
    if resolution is None:
        explained["applies"] = None
        explained["why"] = "no ip entry for this address and no <default> ip entry: unlimited"
        return explained
    applied = {
        "matched": str(resolution.entity),
        "level": "ip" if resolution.level == 1 else "default ip",
        "value": resolution.value,
        "source": source(resolution.entity, key),  # type: ignore[arg-type]
        "shared_by": f"every connection from {resolution.bucket_id[2]}, to every listener and process",
        "bucket": _bucket_state(engine, resolution, now),
    }
    explained["applies"] = applied
    default = engine.table.ip_rates.get(DEFAULT)
    if resolution.level == 1 and default is not None:
        explained["lost"] = [
            {"matched": str(default[0]), "value": default[1], "why": "the address's own entry comes first"}
        ]
    return explained


def _entry(
    entity: QuotaEntity, level_name: str, value: float | None, source: str | None, shadow: frozenset[QuotaEntity]
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "entity": {"user": entity.user, "client_id": entity.client_id, "client_id_prefix": entity.client_id_prefix},
        "matched": str(entity),
        "level": level_name,
        "level_name": LEVEL_NAMES[level_name],
    }
    if value is not None:
        entry["value"] = value
        entry["source"] = source
        entry["shadow"] = entity in shadow
    return entry


def _why_lost(winner: Resolution, level: int, by_prefix: bool, entity: QuotaEntity) -> str:
    if by_prefix and winner.by_prefix and level == winner.level:
        return (
            f"a longer prefix of the same level applies ({winner.entity.client_id_prefix!r} is longer than "
            f"{entity.client_id_prefix!r})"
        )
    return f"level {winner.level_name} ({winner.entity}) comes first in the precedence"


def _shared_by(resolution: Resolution) -> str:
    _key, scope, user, name = resolution.bucket_id
    if scope == SCOPE_USER:
        return f"every client id of user {user}"
    if scope == SCOPE_CLIENT:
        return f"client id {name!r} of every user"
    if scope == SCOPE_USER_PREFIX:
        return f"every client id of user {user} that starts with {name!r}"
    if scope == SCOPE_PREFIX:
        return f"every client id that starts with {name!r}, of every user"
    return f"only user {user} with client id {name!r}"


def _bucket_state(engine: QuotaEngine, resolution: Resolution, now: float | None) -> dict[str, Any]:
    rate = tokens_per_second(resolution.key, resolution.value)
    state: dict[str, Any] = {
        "id": [part if part is None else str(part) for part in resolution.bucket_id],
        "rate_per_second": rate,
        "burst": engine.burst(resolution),
    }
    if now is None:
        state["state"] = "unknown: not asked of a running proxy"
        return state
    bucket = engine.buckets.get(resolution.bucket_id)
    tokens = engine.tokens(resolution, now)  # reads only: a full bucket if none was made yet
    state["state"] = "not used yet (full)" if bucket is None else ("in debt" if tokens < 0 else "in use")
    state["tokens"] = round(tokens, 3)
    state["debt"] = round(max(0.0, -tokens), 3)
    throttle_ms = 0
    if bucket is not None:
        throttle_ms = (
            bucket.would_throttle_ms(now) if isinstance(bucket, ShadowTokenBucket) else bucket.throttle_ms(now)
        )
        if resolution.key is QuotaKey.REQUEST_PERCENTAGE:
            throttle_ms = min(throttle_ms, engine.windows.request_throttle_cap_ms)
    state["throttle_ms"] = throttle_ms  # a shadow quota's is what it would give (never applied)
    if isinstance(bucket, LeasedBucket):
        state["shared"] = "through Redis with the other processes: tokens are this process's lease"
    return state


def explain_text(answer: dict[str, Any]) -> str:
    """The explanation written for a terminal, one block per quota key."""
    lines = [f"user {answer['user']!r}, client id {answer['client_id']!r}"]
    membership = answer.get("tenant")
    if membership is None:
        lines.append("tenant: none (no [[tenants]] entry's rules match this client)")
    else:
        lines.append(f"tenant: {membership['name']!r} (by {membership['rule']})")
        for loser in membership["lost"]:
            lines.append(f"  not tenant {loser['name']!r} (by {loser['rule']}): {loser['why']}")
    for key, explained in answer["quotas"].items():
        applied = explained["applies"]
        tenant = explained.get("tenant")
        if applied is None and tenant is None:
            lines.append(f"{key}: unlimited ({explained['why']})")
        elif applied is None:
            lines.append(f"{key}: no quota of its own ({explained['why']})")
        else:
            shadow = ", shadow: never applied" if applied["shadow"] else ""
            lines.append(
                f"{key}: {applied['value']:g} from {applied['matched']} (level {applied['level']}, "
                f"{applied['level_name']}; source {applied['source']}{shadow})"
            )
            lines.append(f"  bucket shared by {applied['shared_by']}")
            bucket = applied["bucket"]
            if "tokens" in bucket:
                lines.append(
                    f"  bucket now: {bucket['state']}, tokens {bucket['tokens']:g} of {bucket['burst']:g}, "
                    f"throttle {bucket['throttle_ms']} ms"
                )
            else:
                lines.append(f"  bucket now: {bucket['state']}")
        for loser in explained["lost"]:
            value = f" = {loser['value']:g} ({loser['source']})" if "value" in loser else ""
            lines.append(f"  not {loser['matched']}{value} (level {loser['level']}): {loser['why']}")
        if tenant is not None:
            shadow = ", shadow: never applied" if tenant["shadow"] else ""
            bucket = tenant["bucket"]
            lines.append(
                f"  and tenant {tenant['tenant']!r}: {tenant['value']:g}{shadow}, shared by {tenant['shared_by']}"
            )
            if "tokens" in bucket:
                lines.append(
                    f"  tenant bucket now: {bucket['state']}, tokens {bucket['tokens']:g} of {bucket['burst']:g}, "
                    f"throttle {bucket['throttle_ms']} ms"
                )
            lines.append(f"  held by: {explained['held_by']}")
    ip = answer.get("ip")
    if ip is not None and ip["applies"] is None:
        lines.append(f"connection_creation_rate for {ip['address']}: unlimited ({ip['why']})")
    elif ip is not None:
        applied = ip["applies"]
        lines.append(
            f"connection_creation_rate for {ip['address']}: {applied['value']:g} from {applied['matched']} "
            f"({applied['level']}; source {applied['source']}), shared by {applied['shared_by']}"
        )
        for loser in ip.get("lost", []):
            lines.append(f"  not {loser['matched']} = {loser['value']:g}: {loser['why']}")
    return "\n".join(lines) + "\n"
