"""Tenants: named groups of entities sharing one quota, above Kafka's per-entity quotas.

An operator declares each tenant ([[tenants]] in the file) with its members and the same quota keys
as an entity. A member is a (user, client-id) whose
- user is one of `users` (exact principal names), or is mapped to the tenant's name by one of
  `user_rules` (Kafka's principal mapping rules, `RULE:pattern/replacement/[LU]`: the pattern
  matches the whole user and the result is the tenant's name), or
- client id is one of `client_ids`, or starts with one of `client_id_prefixes`.
Any one rule makes it a member. An entity that two tenants' rules match belongs to the FIRST of them
in the file (as Kafka's mapping rules: the first that applies wins); an exact user or client id
listed by two tenants is refused when the file is read, since that is always a mistake.

A tenant's quota for a key is one bucket shared by all its members (bucket id (key, "tenant", None,
name)), drawn on as well as the member's own entity quota (Kafka's 8-level precedence, unchanged):
every charge goes to both, and the member is held by whichever binds first (the throttle is the
larger of the two). quotas/engine.py composes them; this module only says who is in which tenant.

Pure, no I/O. Resolution is cached per bounded (user, client id), MAX_CACHED_CLIENTS entries at
most (emptied when full): whatever names a client invents, the memory stays bounded, and a miss
costs one dict look-up per exact list and one full match per rule, on names of at most
MAX_NAME_CHARS characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from quotagate.quotas.entities import MAX_CACHED_CLIENTS, MAX_NAME_CHARS, SCOPE_TENANT, QuotaKey, bounded_name
from quotagate.security.principal_mapping import MappingRule, parse_rule

# A tenant's member rules, as [[tenants]] names them.
TENANT_LISTS = ("users", "user_rules", "client_ids", "client_id_prefixes")


@dataclass(frozen=True)
class Tenant:
    """One [[tenants]] entry: its name, member rules, quotas and whether they are only tried."""

    name: str
    users: tuple[str, ...] = ()
    user_rules: tuple[str, ...] = ()  # as written; parsed into `rules` (ValueError if one is not a rule)
    client_ids: tuple[str, ...] = ()
    client_id_prefixes: tuple[str, ...] = ()
    quotas: Mapping[QuotaKey, float] = field(default_factory=dict)
    shadow: bool = False
    rules: tuple[MappingRule, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "quotas", MappingProxyType(dict(self.quotas)))
        object.__setattr__(self, "rules", tuple(user_rule(text) for text in self.user_rules))

    def __hash__(self) -> int:
        return hash(self.name)

    def rule_texts(self) -> list[str]:
        """The member rules as the file writes them (explain, /quotas)."""
        texts = [f"user={user}" for user in self.users]
        texts += [f"user_rule={rule}" for rule in self.user_rules]
        texts += [f"client_id={client_id}" for client_id in self.client_ids]
        texts += [f"client_id_prefix={prefix}" for prefix in self.client_id_prefixes]
        return texts

    def matches(self, user: str, client_id: str) -> str | None:
        """The rule that makes (user, client_id) a member, as rule_texts writes it, or None."""
        if user in self.users:
            return f"user={user}"
        for text, rule in zip(self.user_rules, self.rules, strict=True):
            if rule.apply(user) == self.name:
                return f"user_rule={text}"
        if client_id in self.client_ids:
            return f"client_id={client_id}"
        for prefix in self.client_id_prefixes:
            if client_id.startswith(prefix):
                return f"client_id_prefix={prefix}"
        return None


def user_rule(text: str) -> MappingRule:
    """One member rule, Kafka's `RULE:pattern/replacement/[LU]`; ValueError saying why it is not one."""
    expected = "must be a rule RULE:pattern/replacement/ (optionally /L or /U) whose result is the tenant's name"
    try:
        rule = parse_rule(text.strip())
    except ValueError as exc:
        raise ValueError(f"{expected}: {exc}") from exc
    if rule is None or rule.pattern is None:
        raise ValueError(f"{expected}, got {text!r}")
    return rule


class Tenants:
    """The tenants in force, in file order, and who is in which. Immutable once built, but for its
    resolution cache."""

    def __init__(self, tenants: tuple[Tenant, ...] = ()) -> None:
        self.tenants = tenants
        self.by_name = {tenant.name: tenant for tenant in tenants}
        # Exact names, looked up before any rule: user or client id -> the first tenant listing it.
        self._by_user = {bounded_name(user): t for t in reversed(tenants) for user in t.users}
        self._by_client = {bounded_name(client): t for t in reversed(tenants) for client in t.client_ids}
        self._ruled = tuple(t for t in tenants if t.user_rules or t.client_id_prefixes)
        self._cache: dict[tuple[str, str], Tenant | None] = {}

    def __bool__(self) -> bool:
        return bool(self.tenants)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tenants) and self.tenants == other.tenants

    def __hash__(self) -> int:
        return hash(self.tenants)

    def __repr__(self) -> str:
        return f"Tenants({[tenant.name for tenant in self.tenants]})"

    @property
    def keys_in_use(self) -> frozenset[QuotaKey]:
        return frozenset(key for tenant in self.tenants for key in tenant.quotas)

    def tenant_of(self, user: str, client_id: str) -> Tenant | None:
        """The tenant (user, client_id) belongs to: the first in file order whose rules match it."""
        if not self.tenants:
            return None
        full_client_id = client_id  # prefixes match the whole id, as quota prefixes do
        if len(user) > MAX_NAME_CHARS or len(client_id) > MAX_NAME_CHARS:
            user, client_id = bounded_name(user), bounded_name(client_id)
        cache = self._cache
        entry = (user, client_id)
        if entry in cache:
            return cache[entry]
        if len(cache) >= MAX_CACHED_CLIENTS:  # random client ids must not grow it forever
            cache.clear()
        found = cache[entry] = self._match(user, client_id, full_client_id)
        return found

    def _match(self, user: str, client_id: str, full_client_id: str) -> Tenant | None:
        candidates = [t for t in (self._by_user.get(user), self._by_client.get(client_id)) if t is not None]
        for tenant in self._ruled:
            if tenant.matches(user, full_client_id) is not None:
                candidates.append(tenant)
                break  # the first ruled tenant that matches; exact lists may name an earlier one
        if not candidates:
            return None
        order = {id(tenant): index for index, tenant in enumerate(self.tenants)}
        return min(candidates, key=lambda tenant: order[id(tenant)])

    def matching(self, user: str, client_id: str) -> list[tuple[Tenant, str]]:
        """Every tenant whose rules match (user, client_id), in file order, with the rule that does:
        what tenant_of chooses from (the first), for explaining. Reads no cache."""
        full_client_id = client_id
        if len(user) > MAX_NAME_CHARS or len(client_id) > MAX_NAME_CHARS:
            user, client_id = bounded_name(user), bounded_name(client_id)
        found = []
        for tenant in self.tenants:
            rule = tenant.matches(user, full_client_id)
            if rule is None and client_id != full_client_id and client_id in tenant.client_ids:
                rule = f"client_id={client_id}"
            if rule is not None:
                found.append((tenant, rule))
        return found

    def forget_resolutions(self) -> None:
        self._cache.clear()

    def bucket_id(self, tenant: Tenant, key: QuotaKey) -> tuple[str, str, None, str]:
        return (key.value, SCOPE_TENANT, None, tenant.name)


NO_TENANTS = Tenants()
