"""Quota entities and Kafka's precedence rules for finding the quota that applies to a client.

An entity is (user, client-id), either part a name, `<default>`, or absent (None). For a client
(user U, client-id C) and one quota key, the first of these entities that sets that key applies
(Kafka's ClientQuotaManager order):

    1 U/C   2 U/<default>   3 U   4 <default>/C   5 <default>/<default>   6 <default>   7 C   8 <default> client

The matched level also decides who shares a bucket: levels 1, 2, 4, 5 give each (user, client-id)
its own; levels 3 and 6 give one per user (all its client-ids share it); 7 and 8 one per client-id
(shared across users).

Client-id prefixes (Redpanda's `client-id-prefix` entity; not in Kafka): an entity may name a
prefix P instead of a client id. A prefix entry stands where an exact client-id entry of the same
shape would, just below it: 1p U/P* after 1, 4p <default>/P* after 4, 7p P* after 7 (Redpanda has
only the last: exact client id, then prefix, then the default client id). Among the prefixes of
one shape that set the key, the longest that C starts with wins (Redpanda leaves overlapping
prefixes unordered). A prefix's bucket is shared by every client id with that prefix: 1p and 4p
one per (user, prefix), 7p one per prefix, across users.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from quotagate.quotas.tenants import Tenant, Tenants

DEFAULT = "<default>"
ANONYMOUS = "ANONYMOUS"  # Kafka's principal for unauthenticated connections (User:ANONYMOUS)


class QuotaKey(StrEnum):
    PRODUCER_BYTE_RATE = "producer_byte_rate"
    CONSUMER_BYTE_RATE = "consumer_byte_rate"
    REQUEST_PERCENTAGE = "request_percentage"
    CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
    # New producer IDs per second (KIP-936): a Produce with an idempotent producer ID not seen for
    # the entity within producer_id_window_seconds is charged one; checked only where it is set.
    PRODUCER_IDS_RATE = "producer_ids_rate"


class IpQuotaKey(StrEnum):
    """The key of the `ip` entity (KIP-612): new connections per second from one address, checked
    when a client connects. Kept apart from QuotaKey, whose keys every client request may charge."""

    CONNECTION_CREATION_RATE = "connection_creation_rate"


def quota_key(name: str) -> QuotaKey | IpQuotaKey:
    """The key named `name`, of either kind; ValueError if it is neither."""
    return IpQuotaKey(name) if name == IpQuotaKey.CONNECTION_CREATION_RATE else QuotaKey(name)


# Kafka keeps an ip's connection_creation_rate in a Java int.
CONNECTION_RATE_MAX = 2**31 - 1


def connection_creation_rate_problem(value: float) -> str | None:
    """Why `value` cannot be an ip's connection_creation_rate, as words to follow the key, or None."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if abs(round(value) - value) > INTEGER_TOLERANCE or not 1 <= round(value) <= CONNECTION_RATE_MAX:
        return f"must be an Integer value (whole connections per second, 1 to {CONNECTION_RATE_MAX}), got {value!r}"
    return None


def ip_entity_name(name: str) -> str | None:
    """The address an ip entity names, in one spelling (`::1` for `0:0::1`), or None if `name` is
    not an IP address (the proxy matches clients by their address, never by a host name)."""
    if name == DEFAULT:
        return name
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        return None


# Clients whose resolutions are kept; at this many the cache starts again (random client ids must not
# grow it forever). A client resolves once per connection and reload, so a small cache costs little,
# and at 100 000 it held ~10 MB (30 000 ids: RSS +31 MB instead of +20; bench/README.md).
MAX_CACHED_CLIENTS = 4096
# Longest user or client id kept anywhere an entity is tracked (resolutions, buckets, metrics, Redis
# keys). Kafka bounds a client id only by its int16 length (32 767 bytes): kept whole, 20 000 such
# ids took the RSS from 64 to 721 MB. Longer names are cut, and a hash of the whole name keeps two
# long names apart (and a configured long name matches the same bounded name).
MAX_NAME_CHARS = 128
_HASH_CHARS = 24  # 96 bits of blake2b
_KEPT_CHARS = MAX_NAME_CHARS - _HASH_CHARS - 1  # of a longer name, before "~" and the hash
# Longest client-id prefix: no longer than what a bounded name keeps whole, so that a long client id
# and its bounded form (which a client may also send, 128 characters) match the same prefixes, and
# the resolutions cached under the bounded form answer both alike (a longer prefix matched the long
# id but not its bounded form: sent first, the form cached "no prefix quota, no tenant" for the id).
MAX_PREFIX_CHARS = _KEPT_CHARS


def bounded_name(name: str) -> str:
    """`name`, or its first characters and a hash of all of it when it is longer than MAX_NAME_CHARS
    (what is kept for it; the same name always gives the same result, and a result is its own)."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=_HASH_CHARS // 2).hexdigest()
    return f"{name[:_KEPT_CHARS]}~{digest}"


INTEGER_KEYS = frozenset({QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONSUMER_BYTE_RATE})
# Kafka keeps the byte rates in a Java long: no quota above Long.MAX_VALUE means anything, and below
# it every burst (rate x at most 3600 x 3600 s of windows) and throttle the engine derives is finite.
QUOTA_VALUE_MAX = float(2**63 - 1)  # as Java compares it: 2**63 - 1 as a double passes
# The smallest request_percentage or controller_mutation_rate: below it one request's debt divided
# by the rate can overflow a float (a subnormal rate makes every throttle infinite).
QUOTA_VALUE_MIN = 1e-6
# How far from a whole number a byte rate may be (Kafka's ClientQuotaControlManager tolerance).
INTEGER_TOLERANCE = 1e-6


def quota_value_problem(key: QuotaKey, value: float) -> str | None:
    """Why `value` cannot be `key`'s quota, as words to follow the key's name, or None if it can.

    The one check of a quota value, for every way one comes in: the file, AlterClientQuotas and
    the state file. NaN and the infinities are refused before any arithmetic touches them, and an
    integer (TOML, JSON) is compared as it is: one too large for a float is refused, not rounded."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if value <= 0:
        return f"must be greater than 0, got {value!r}"
    if value > QUOTA_VALUE_MAX:
        return f"must be at most {2**63 - 1} (a Long), got {value!r}"
    if key in INTEGER_KEYS:
        if abs(round(value) - value) > INTEGER_TOLERANCE or round(value) < 1:
            return f"must be a Long value (whole bytes per second, at least 1), got {value!r}"
    elif value < QUOTA_VALUE_MIN:
        return f"must be at least {QUOTA_VALUE_MIN}, got {value!r}"
    return None


@dataclass(frozen=True, slots=True)
class QuotaEntity:
    user: str | None = None
    client_id: str | None = None
    client_id_prefix: str | None = None  # never with client_id; never <default>
    ip: str | None = None  # an address (ip_entity_name) or <default>; never with the other parts

    def __str__(self) -> str:
        parts = []
        if self.user is not None:
            parts.append(f"user={self.user}")
        if self.client_id is not None:
            parts.append(f"client-id={self.client_id}")
        if self.client_id_prefix is not None:
            parts.append(f"client-id-prefix={self.client_id_prefix}")
        if self.ip is not None:
            parts.append(f"ip={self.ip}")
        return ",".join(parts) or "(empty)"


def client_id_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot be a client-id prefix entity, as words to follow its key, or None."""
    if not prefix:
        return "must be a non-empty string"
    if prefix == DEFAULT:
        return f"has no default entity ({DEFAULT} is for user and client-id)"
    if len(prefix) > MAX_PREFIX_CHARS:
        return f"must be at most {MAX_PREFIX_CHARS} characters, got {len(prefix)}"
    return None


# Bucket scopes: who shares one bucket, by matched precedence level.
SCOPE_USER_CLIENT = "user+client-id"
SCOPE_USER = "user"
SCOPE_CLIENT = "client-id"
SCOPE_USER_PREFIX = "user+client-id-prefix"
SCOPE_PREFIX = "client-id-prefix"
SCOPE_IP = "ip"  # one bucket per client address, for connection_creation_rate
SCOPE_TENANT = "tenant"  # one bucket per tenant, shared by all its members (quotas/tenants.py)
_SCOPE_BY_LEVEL = {
    1: SCOPE_USER_CLIENT,
    2: SCOPE_USER_CLIENT,
    3: SCOPE_USER,
    4: SCOPE_USER_CLIENT,
    5: SCOPE_USER_CLIENT,
    6: SCOPE_USER,
    7: SCOPE_CLIENT,
    8: SCOPE_CLIENT,
}
# A prefix entry's level is that of the exact client-id entry it stands below (1p, 4p, 7p).
_PREFIX_SCOPE_BY_LEVEL = {1: SCOPE_USER_PREFIX, 4: SCOPE_USER_PREFIX, 7: SCOPE_PREFIX}


@dataclass(frozen=True, slots=True)
class Resolution:
    """The quota that applies to one client for one key, and the bucket it draws on."""

    key: QuotaKey  # or IpQuotaKey, for an ip entity's (level 1: the address's own, 2: <default>)
    level: int  # 1..8, Kafka's precedence level that matched
    entity: QuotaEntity  # the configured entity that matched
    value: float  # the quota, in the key's unit
    bucket_id: tuple[str, str, str | None, str | None]  # (key, scope, user, client-id or prefix)
    shadow: bool = False  # charged and reported, never applied (`shadow = true` in the file)
    by_prefix: bool = False  # a client-id-prefix entry matched, just below `level`'s exact one
    tenant: str | None = None  # a tenant's quota (level 0, entity empty): its bucket is the tenant's

    @property
    def level_name(self) -> str:
        """The level as the docs write it: "1".."8", "1p", "4p", "7p" for a prefix entry, or "tenant"."""
        if self.tenant is not None:
            return "tenant"
        return f"{self.level}p" if self.by_prefix else str(self.level)


def candidate_entities(user: str, client_id: str) -> Iterator[tuple[int, QuotaEntity]]:
    """The entities to look up for (user, client_id), most specific first, with their level."""
    yield 1, QuotaEntity(user, client_id)
    yield 2, QuotaEntity(user, DEFAULT)
    yield 3, QuotaEntity(user, None)
    yield 4, QuotaEntity(DEFAULT, client_id)
    yield 5, QuotaEntity(DEFAULT, DEFAULT)
    yield 6, QuotaEntity(DEFAULT, None)
    yield 7, QuotaEntity(None, client_id)
    yield 8, QuotaEntity(None, DEFAULT)


class QuotaTable:
    """Configured quotas: entity -> {key: value}, and the tenants above them (quotas/tenants.py).
    Immutable once built; resolutions are cached."""

    def __init__(
        self,
        quotas: Mapping[QuotaEntity, Mapping[QuotaKey, float]] | None = None,
        shadow: frozenset[QuotaEntity] = frozenset(),
        tenants: Tenants | None = None,
    ) -> None:
        if tenants is None:
            from quotagate.quotas.tenants import NO_TENANTS as tenants  # tenants.py imports this module
        self.tenants: Tenants = tenants
        self._quotas: dict[QuotaEntity, dict[QuotaKey, float]] = {
            entity: dict(values) for entity, values in (quotas or {}).items() if values
        }
        # Entities whose quotas are only tried: charged and reported, never throttling anyone.
        self.shadow = frozenset(entity for entity in shadow if entity in self._quotas)
        # The ip entities (KIP-612), checked when a client connects, never per request: address or
        # <default> -> (the entity, its connection_creation_rate).
        self.ip_rates: dict[str, tuple[QuotaEntity, float]] = {
            entity.ip: (entity, values[IpQuotaKey.CONNECTION_CREATION_RATE])  # type: ignore[index]
            for entity, values in self._quotas.items()
            if entity.ip is not None and IpQuotaKey.CONNECTION_CREATION_RATE in values
        }
        client_quotas = {entity: values for entity, values in self._quotas.items() if entity.ip is None}
        # Any user, client-id or tenant quota (what requests pay for).
        self.limits_clients = bool(client_quotas) or bool(self.tenants.keys_in_use)
        self.keys_in_use: frozenset[QuotaKey] = (
            frozenset(k for values in client_quotas.values() for k in values) | self.tenants.keys_in_use
        )
        # Looked up by bounded names (a client's names are bounded before any look-up): bounded entity
        # -> (the configured entity, its values).
        self._lookup: dict[QuotaEntity, tuple[QuotaEntity, dict[QuotaKey, float]]] = {
            QuotaEntity(
                None if entity.user is None else bounded_name(entity.user),
                None if entity.client_id is None else bounded_name(entity.client_id),
                entity.client_id_prefix,
            ): (entity, values)
            for entity, values in client_quotas.items()
        }
        # Prefix entries by their bounded user part (a name, <default> or None), longest prefix first.
        # Empty when none is configured: resolving then costs what it did before prefixes existed.
        self._prefixes: dict[str | None, list[tuple[str, QuotaEntity, dict[QuotaKey, float]]]] = {}
        for bounded, (entity, values) in self._lookup.items():
            if bounded.client_id_prefix is not None:
                self._prefixes.setdefault(bounded.user, []).append((bounded.client_id_prefix, entity, values))
        for entries in self._prefixes.values():
            entries.sort(key=lambda entry: -len(entry[0]))
        self._cache: dict[tuple[str, str], dict[QuotaKey, Resolution | None]] = {}

    def __bool__(self) -> bool:
        return bool(self._quotas) or bool(self.tenants)

    def __eq__(self, other: object) -> bool:
        # The entities' quotas: the tenants are a section of their own (Config.tenants), compared there,
        # so that a reload that changes only [[tenants]] reports that key alone.
        return isinstance(other, QuotaTable) and self._quotas == other._quotas and self.shadow == other.shadow

    def __hash__(self) -> int:
        return id(self)

    def items(self) -> Iterator[tuple[QuotaEntity, dict[QuotaKey, float]]]:
        return iter(self._quotas.items())

    def forget_resolutions(self) -> None:
        """Drops the cached resolutions (the engine calls it when idle entities expire): a client's
        next look-up resolves again, at the cost of a few dict look-ups."""
        self._cache.clear()
        self.tenants.forget_resolutions()

    def resolve_tenant(self, user: str, client_id: str, key: QuotaKey) -> Resolution | None:
        """The quota for `key` of the tenant (user, client_id) belongs to, or None: in no tenant, or
        the tenant sets no `key`. Its bucket is shared by every member (quotas/tenants.py)."""
        tenant = self.tenants.tenant_of(user, client_id)
        if tenant is None or key not in tenant.quotas:
            return None
        return self.tenant_resolution(tenant, key)

    def tenant_resolution(self, tenant: Tenant, key: QuotaKey) -> Resolution:
        """The resolution of `tenant`'s quota for `key` (it sets it)."""
        bucket_id = self.tenants.bucket_id(tenant, key)
        return Resolution(key, 0, QuotaEntity(), tenant.quotas[key], bucket_id, tenant.shadow, tenant=tenant.name)

    def resolve(self, user: str, client_id: str, key: QuotaKey) -> Resolution | None:
        """The quota for `key` that applies to (user, client_id), or None: unlimited. Bucket ids
        and the cache hold the bounded names (`bounded_name`), never a client's 32 KB id."""
        full_client_id = client_id  # prefixes match the whole id, not its bounded form
        if len(client_id) > MAX_NAME_CHARS or len(user) > MAX_NAME_CHARS:
            user, client_id = bounded_name(user), bounded_name(client_id)
        cached = self._cache.get((user, client_id))
        if cached is None:
            if len(self._cache) >= MAX_CACHED_CLIENTS:  # random client ids must not grow it forever
                self._cache.clear()
            cached = self._cache[(user, client_id)] = {}
        elif key in cached:
            return cached[key]
        resolution = None
        for level, by_prefix, configured, values in self._candidates(user, client_id, full_client_id):
            if key in values:
                resolution = self._resolution(key, level, by_prefix, configured, values[key], user, client_id)
                break
        cached[key] = resolution
        return resolution

    def candidates(self, user: str, client_id: str) -> list[tuple[int, bool, QuotaEntity, dict[QuotaKey, float]]]:
        """Every configured entity that matches (user, client_id), in precedence order, as (level,
        by_prefix, entity, its values): what `resolve` walks, for explaining its choice."""
        full_client_id = client_id
        if len(client_id) > MAX_NAME_CHARS or len(user) > MAX_NAME_CHARS:
            user, client_id = bounded_name(user), bounded_name(client_id)
        return list(self._candidates(user, client_id, full_client_id))

    def resolution_for(
        self, user: str, client_id: str, key: QuotaKey, level: int, by_prefix: bool, entity: QuotaEntity
    ) -> Resolution:
        """The resolution `entity`, matched at `level`, gives (user, client_id) for `key` (it sets it)."""
        if len(client_id) > MAX_NAME_CHARS or len(user) > MAX_NAME_CHARS:
            user, client_id = bounded_name(user), bounded_name(client_id)
        return self._resolution(key, level, by_prefix, entity, self._quotas[entity][key], user, client_id)

    def resolve_ip(self, address: str) -> Resolution | None:
        """The connection_creation_rate for clients connecting from `address` (its own entry, else
        the <default> ip's), or None: unlimited. Its bucket is the address's."""
        try:
            parsed = ipaddress.ip_address(address)
        except ValueError:
            return None
        if isinstance(parsed, ipaddress.IPv6Address) and parsed.ipv4_mapped is not None:
            parsed = parsed.ipv4_mapped  # a dual-stack listener's view of an IPv4 client
        address = parsed.compressed
        level, found = 1, self.ip_rates.get(address)
        if found is None:
            level, found = 2, self.ip_rates.get(DEFAULT)
            if found is None:
                return None
        entity, rate = found
        key = IpQuotaKey.CONNECTION_CREATION_RATE
        return Resolution(key, level, entity, rate, (key, SCOPE_IP, address, None))  # type: ignore[arg-type]

    def resolve_bucket(self, bucket_id: tuple[str | None, ...]) -> Resolution | None:
        """What gives the bucket `bucket_id` now, or None if no quota does any more (after a reload
        or an API change). Raises ValueError for a key that is not a quota key."""
        key_name, scope, user, name = bucket_id
        if scope == SCOPE_IP:
            return self.resolve_ip(user or "")
        key = QuotaKey(key_name)
        if scope == SCOPE_TENANT:  # lives while its tenant sets the key
            tenant = self.tenants.by_name.get(name or "")
            return None if tenant is None or key not in tenant.quotas else self.tenant_resolution(tenant, key)
        if scope == SCOPE_PREFIX or scope == SCOPE_USER_PREFIX:
            # A prefix's bucket lives while its entry sets the key, whichever client id uses it.
            shapes = [(7, None)] if scope == SCOPE_PREFIX else [(1, user), (4, DEFAULT)]
            for level, entity_user in shapes:
                found = self._lookup.get(QuotaEntity(entity_user, None, name))
                if found is not None and key in found[1]:
                    resolution = self._resolution(key, level, True, found[0], found[1][key], user or "", name or "")
                    if resolution.bucket_id == bucket_id:
                        return resolution
            return None
        # "" stands for "any other name" (configured names are never empty): a per-user bucket is
        # still live if a client of that user with no entry of its own still maps to it.
        return self.resolve(user or "", name or "", key)

    def _candidates(
        self, user: str, client_id: str, full_client_id: str
    ) -> Iterator[tuple[int, bool, QuotaEntity, dict[QuotaKey, float]]]:
        lookup, prefixes = self._lookup, self._prefixes
        for level, entity in candidate_entities(user, client_id):
            found = lookup.get(entity)
            if found is not None:
                yield level, False, found[0], found[1]
            if prefixes and level in _PREFIX_SCOPE_BY_LEVEL:
                for prefix, configured, values in prefixes.get(entity.user, ()):
                    if full_client_id.startswith(prefix):
                        yield level, True, configured, values

    def _resolution(
        self,
        key: QuotaKey,
        level: int,
        by_prefix: bool,
        configured: QuotaEntity,
        value: float,
        user: str,
        client_id: str,
    ) -> Resolution:
        if by_prefix:
            scope = _PREFIX_SCOPE_BY_LEVEL[level]
            bucket_id = (key, scope, user if scope == SCOPE_USER_PREFIX else None, configured.client_id_prefix)
        else:
            scope = _SCOPE_BY_LEVEL[level]
            bucket_user = user if scope != SCOPE_CLIENT else None
            bucket_client = client_id if scope != SCOPE_USER else None
            bucket_id = (key, scope, bucket_user, bucket_client)
        return Resolution(key, level, configured, value, bucket_id, configured in self.shadow, by_prefix)
