"""Tenants: named groups of entities sharing one quota, above Kafka's per-entity quotas.

An operator declares each tenant ([[tenants]] in the file) with its members and the same quota keys
as an entity. A member is a (user, client-id) whose
- user is one of `users` (exact principal names), or is mapped to the tenant's name by one of
  `user_rules` (Kafka's principal mapping rules, `RULE:pattern/replacement/[LU]`: the pattern
  matches the whole user and the result is the tenant's name), or
- client id is one of `client_ids`, or starts with one of `client_id_prefixes`.
Any one rule makes it a member. An entity that two tenants' rules match belongs to the first tenant
in the file that takes it by its USER, and only if none does, to the first that takes it by its
client id: as Kafka's precedence puts every level naming the user before the client-id-only ones, a
client cannot leave its user's tenant by the client id it picks itself. Among rules of one kind the
first in the file wins (as Kafka's mapping rules: the first that applies); an exact user or client
id listed by two tenants is refused when the file is read, since that is always a mistake. User
rules run on the whole user name (the user is authenticated, so it cannot forge another's bounded
form); only the caches are keyed by the bounded one.

A tenant's quota for a key is one bucket shared by all its members (bucket id (key, "tenant", None,
name)), drawn on as well as the member's own entity quota (Kafka's 8-level precedence, unchanged):
every charge goes to both, and the member is held by whichever binds first (the throttle is the
larger of the two). quotas/engine.py composes them into a MemberBucket (quotas/token_bucket.py,
compiled with the token bucket: a member's charge is a C call as an entity's); this module only
says who is in which tenant.

Pure, no I/O. Resolution is cached per bounded (user, client id), and the user rules' answer per
bounded user, MAX_CACHED_CLIENTS entries each at most (emptied when full): whatever names a client
invents, the memory stays bounded. A new user costs, per tenant, a set look-up and one full match
per user rule (users are authenticated: their names are the operator's, not a client's choice); a
new client id of a user in a tenant by its user costs nothing more, and one of a user in none, per
tenant, a set look-up and a startswith per prefix (no regular expression: 16 µs, not 80 µs, for a
new client id with 50 tenants of one user rule and one prefix).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from quotagate.quotas.entities import (
    ANONYMOUS,
    MAX_CACHED_CLIENTS,
    MAX_NAME_CHARS,
    SCOPE_TENANT,
    QuotaKey,
    bounded_name,
)
from quotagate.security.principal_mapping import MappingRule, parse_rule

# A tenant's member rules, as [[tenants]] names them.
TENANT_LISTS = ("users", "user_rules", "client_ids", "client_id_prefixes")


def rule_text(kind: str, value: str) -> str:
    """One member rule as explain, /quotas and the configuration's errors write it: `user=alice`,
    `user_rule=RULE:...`, `client_id=...`, `client_id_prefix=...`."""
    return f"{kind}={value}"


def by_client_id(rule: str) -> bool:
    """Whether a rule_text takes members by their client id (which comes after every rule by user)."""
    return rule.startswith("client_id")


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
    _users: frozenset[str] = field(init=False, compare=False, repr=False)  # one look-up each, not a scan
    _client_ids: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "quotas", MappingProxyType(dict(self.quotas)))
        object.__setattr__(self, "rules", tuple(user_rule(text, self.name) for text in self.user_rules))
        object.__setattr__(self, "_users", frozenset(self.users))
        object.__setattr__(self, "_client_ids", frozenset(self.client_ids))

    def __hash__(self) -> int:
        return hash(self.name)

    def rule_texts(self) -> list[str]:
        """The member rules as the file writes them (explain, /quotas)."""
        texts = [rule_text("user", user) for user in self.users]
        texts += [rule_text("user_rule", rule) for rule in self.user_rules]
        texts += [rule_text("client_id", client_id) for client_id in self.client_ids]
        texts += [rule_text("client_id_prefix", prefix) for prefix in self.client_id_prefixes]
        return texts

    def matches_user(self, user: str) -> str | None:
        """The rule by user (exact, or a user rule) that makes `user` a member, or None."""
        if user in self._users:
            return rule_text("user", user)
        for text, rule in zip(self.user_rules, self.rules, strict=True):
            if rule.apply(user) == self.name:
                return rule_text("user_rule", text)
        return None

    def matches_client_id(self, client_id: str) -> str | None:
        """The rule by client id (exact, or a prefix) that makes `client_id` a member, or None."""
        if client_id in self._client_ids:
            return rule_text("client_id", client_id)
        for prefix in self.client_id_prefixes:
            if client_id.startswith(prefix):
                return rule_text("client_id_prefix", prefix)
        return None


def user_rule(text: str, tenant: str) -> MappingRule:
    """One member rule of `tenant`, Kafka's `RULE:pattern/replacement/[LU]`; ValueError saying why it
    is not one, or why no user could be a member by it."""
    expected = "must be a rule RULE:pattern/replacement/ (optionally /L or /U) whose result is the tenant's name"
    try:
        rule = parse_rule(text.strip())
    except ValueError as exc:
        raise ValueError(f"{expected}: {exc}") from exc
    if rule is None or rule.pattern is None:
        raise ValueError(f"{expected}, got {text!r}")
    fixed = rule.fixed_result()
    if fixed is not None and fixed != tenant:  # a typo: no user could ever be a member by it
        raise ValueError(f"{expected}: {text!r} gives {fixed!r} for every user it matches, never {tenant!r}")
    for probe in (tenant, "x", ANONYMOUS) if fixed is not None else ():
        got = rule.apply(probe)
        if got is not None and got != fixed:
            raise ValueError(
                f"{expected}: {text!r} gives {got!r} for the user {probe!r}: as in Kafka, every match of the "
                f"pattern is replaced, and it also matches the empty string at the end; anchor it "
                f"(RULE:^...$/{fixed}/)"
            )
    return rule


class Tenants:
    """The tenants in force, in file order, and who is in which. Immutable once built, but for its
    resolution cache."""

    def __init__(self, tenants: tuple[Tenant, ...] = ()) -> None:
        self.tenants = tenants
        self.by_name = {tenant.name: tenant for tenant in tenants}
        self._cache: dict[tuple[str, str], Tenant | None] = {}
        self._by_user: dict[str, int] = {}  # bounded user -> _first_by_user

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
        """The tenant (user, client_id) belongs to (resolve), kept per bounded (user, client id)."""
        if not self.tenants:
            return None
        entry = (user, client_id)
        if len(user) > MAX_NAME_CHARS or len(client_id) > MAX_NAME_CHARS:
            entry = (bounded_name(user), bounded_name(client_id))
        cache = self._cache
        found = cache.get(entry, _UNRESOLVED)
        if found is not _UNRESOLVED:
            return found
        if len(cache) >= MAX_CACHED_CLIENTS:  # random client ids must not grow it forever
            cache.clear()
        found = cache[entry] = self.resolve(user, client_id)
        return found

    def resolve(self, user: str, client_id: str, remember: bool = True) -> Tenant | None:
        """tenant_of without its cache: the first tenant that takes `user` by its user, else the first
        that takes `client_id` (prefixes match the whole client id, as quota prefixes do). remember=False
        (the scrape thread, which has only bounded names): the user rules' answer is read from the
        loop's cache, never written there."""
        if not self.tenants:
            return None
        first = self._first_by_user(user, remember)
        if first < len(self.tenants):
            return self.tenants[first]
        return next((tenant for tenant in self.tenants if tenant.matches_client_id(client_id)), None)

    def _first_by_user(self, user: str, remember: bool = True) -> int:
        """The index of the first tenant whose user rules match `user` (len(tenants): none), kept per
        bounded user: a client inventing client ids under one user pays the regular expressions once."""
        key = bounded_name(user) if len(user) > MAX_NAME_CHARS else user
        by_user = self._by_user
        first = by_user.get(key)
        if first is None:
            tenants = self.tenants
            first = next((index for index, tenant in enumerate(tenants) if tenant.matches_user(user)), len(tenants))
            if remember:
                if len(by_user) >= MAX_CACHED_CLIENTS:
                    by_user.clear()
                by_user[key] = first
        return first

    def matching(self, user: str, client_id: str) -> list[tuple[Tenant, str]]:
        """Every tenant whose rules match (user, client_id), with the rule that does, in the order
        resolve chooses from: those taking it by its user in file order, then those by its client id.
        For explaining; reads no cache."""
        by_user = [(tenant, rule) for tenant in self.tenants if (rule := tenant.matches_user(user)) is not None]
        taken = {tenant.name for tenant, _ in by_user}
        by_client_id = [
            (tenant, rule)
            for tenant in self.tenants
            if tenant.name not in taken and (rule := tenant.matches_client_id(client_id)) is not None
        ]
        return by_user + by_client_id

    def forget_resolutions(self) -> None:
        self._cache.clear()
        self._by_user.clear()

    def bucket_id(self, tenant: Tenant, key: QuotaKey) -> tuple[str, str, None, str]:
        return (key.value, SCOPE_TENANT, None, tenant.name)


_UNRESOLVED = object()  # tenant_of's cache miss (None is an answer: in no tenant)
NO_TENANTS = Tenants()
