"""Per-entity quota metrics in Prometheus form, with bounded label cardinality.

Kafka's quota metrics (groups Produce, Fetch, Request, ControllerMutation; byte-rate,
throttle-time, request-time, tokens) become counters and gauges labelled (user, client_id). Byte
rates are `rate()` of the byte counters, as Prometheus prefers counters to pre-computed rates.

Cardinality: at scrape time the entities are ranked by traffic and only the top `max_entities` are
exported; the others are summed into one user="other", client_id="other" series. Memory: at
most `max_tracked` entities are tracked at all (idle ones are dropped first, then new ones are
counted straight into "other"). Cost: about 15 series per exported entity (8 counters, 4 throttle
groups, and 2 gauges per quota key in use). When an entity enters or leaves the top N, the "other"
counters step down or up: Prometheus treats a step down as a counter reset.

Tenants (docs/quotas.md): the same counters summed over each tenant's members, labelled `tenant`
(quotagate_tenant_*), and the tenant buckets' tokens and quotas: one series per configured tenant
and key, whatever entities exist. A member's counts move with it when a reload moves it to another
tenant, so a tenant's counters can step (Prometheus reads a step down as a reset). Entities beyond
max_tracked, counted into "other" without their names, still count in their tenant's sums: one per
configured tenant at most, so a client inventing names cannot take another tenant's traffic out of them.

Recording is a dict lookup and a few float additions per response, on the event loop (an entity
beyond max_tracked: and its tenant, from the loop's resolution cache; a new one's is resolved once,
from its whole names, and kept on its stats). The
collector runs in a worker thread (a scrape of many entities must not stall every client): it only
reads, from a copy of the entity table, so the hot path still takes no lock. User and client id
labels are bounded in length (`quotas.entities.bounded_name`: a 32 KB id times every series made a
291 MB /metrics), and so are the keys kept for them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from quotagate import compiled
from quotagate.quotas import QuotaEngine, QuotaKey
from quotagate.quotas.engine import tokens_per_second
from quotagate.quotas.entities import bounded_name
from quotagate.quotas.tenants import Tenant, Tenants

OTHER = "other"
IDLE_SECONDS = 3600.0
DROP_SCAN_SECONDS = 1.0  # at max_tracked, the least time between two scans for idle entities
GROUPS = ("produce", "fetch", "request", "controller_mutation")
# An entity's counters: a C type in the compiled build, so the session core counts an exchange with C
# field additions (quotas/charging.py's count_exchange).
EntityStats = compiled.load("quotagate.quotas.charging").EntityStats


_COUNTERS = (
    ("quotagate_produce_bytes", "Produce request bytes charged to producer_byte_rate", "produce_bytes"),
    ("quotagate_fetch_bytes", "Fetch and ShareFetch response bytes charged to consumer_byte_rate", "fetch_bytes"),
    ("quotagate_request_time_seconds", "Request time charged to request_percentage", "request_seconds"),
    ("quotagate_controller_mutations", "Partitions charged to controller_mutation_rate", "mutations"),
    ("quotagate_produce_throttle_time_seconds", "Throttle time of produce responses", "produce_throttle_seconds"),
    ("quotagate_fetch_throttle_time_seconds", "Throttle time of (share) fetch responses", "fetch_throttle_seconds"),
    ("quotagate_request_throttle_time_seconds", "Throttle time of other responses", "request_throttle_seconds"),
    (
        "quotagate_controller_mutation_throttle_time_seconds",
        "Throttle time of topic mutation responses",
        "mutation_throttle_seconds",
    ),
    (
        "quotagate_shadow_throttle_time_seconds",
        "Time shadow quotas would have held the entity at their rate: what was charged while over the quota, "
        "divided by it (never applied)",
        "shadow_throttle_seconds",
    ),
    (
        "quotagate_shadow_throttled_responses",
        "Responses whose charges a shadow quota would have held (never applied)",
        "shadow_throttled",
    ),
)


class EntityMetrics(Collector):
    def __init__(self, engine: Callable[[], QuotaEngine], clock: Callable[[], float], max_entities: int) -> None:
        self._engine = engine
        self._clock = clock
        self.max_entities = max_entities
        self.max_tracked = max(10 * max_entities, 10_000)
        self.stats: dict[tuple[str, str], EntityStats] = {}
        # The whole names of a tracked entity whose key is cut to 128 characters (bounded_name): its
        # tenant is resolved from them after a reload, as a user rule may look past the cut.
        self.whole_names: dict[tuple[str, str], tuple[str, str]] = {}
        self.untracked = EntityStats()  # entities beyond max_tracked, always in "other"
        # Those of them in a tenant, per tenant: in "other" too, and in their tenant's sums.
        self.untracked_by_tenant: dict[str, EntityStats] = {}
        # What idle entities, forgotten, had counted in their tenant: keeps the tenant sums monotonic.
        self.retired_by_tenant: dict[str, EntityStats] = {}
        self.exempt_request_seconds = 0.0
        self.exported = 0
        self.folded = 0
        self._next_drop_scan = 0.0

    def entity(self, user: str, client_id: str, now: float) -> EntityStats:
        key = (user, client_id)
        stats = self.stats.get(key)
        if stats is None:
            key = (bounded_name(user), bounded_name(client_id))  # what is kept is bounded too
            stats = self.stats.get(key)
        if stats is None:
            if len(self.stats) >= self.max_tracked and not self._drop_idle(now):
                tenant = self._engine().table.tenants.tenant_of(user, client_id)  # the loop's cache
                if tenant is None:
                    return self.untracked
                stats = self.untracked_by_tenant.get(tenant.name)
                if stats is None:
                    stats = self.untracked_by_tenant[tenant.name] = EntityStats()
                return stats
            stats = self.stats[key] = EntityStats()
            if key[0] is not user or key[1] is not client_id:
                self.whole_names[key] = (user, client_id)
            # Its tenant now, from the whole names (a scrape has only the bounded ones kept in `key`).
            tenants = self._engine().table.tenants
            stats.tenant, stats.tenants = tenants.tenant_of(user, client_id), tenants
        stats.last_seen = now
        return stats

    def record_shadow(self, user: str, client_id: str, would_throttle_ms: int, now: float) -> None:
        if would_throttle_ms > 0:
            stats = self.entity(user, client_id, now)
            stats.shadow_throttled += 1
            stats.shadow_throttle_seconds += would_throttle_ms / 1000

    def record_exempt(self, latency_ms: float) -> None:
        self.exempt_request_seconds += latency_ms / 1000

    def record_mutations(self, user: str, client_id: str, partitions: int, now: float) -> None:
        self.entity(user, client_id, now).mutations += partitions

    def _drop_idle(self, now: float) -> bool:
        """Makes room by dropping idle entities; a scan that found none is not made again for
        DROP_SCAN_SECONDS: at max_tracked, scanning all of them for each new client id made every
        request of a new id O(entities) (throughput fell from ~526 to ~108 requests/s at 10 000)."""
        if now < self._next_drop_scan:
            return False
        if self.expire_idle(now) > 0:
            return True
        self._next_drop_scan = now + DROP_SCAN_SECONDS
        return False

    def expire_idle(self, now: float, idle_seconds: float = IDLE_SECONDS) -> int:
        """Folds entities unseen for idle_seconds into "other" (kept monotonic) and forgets them;
        returns how many. The proxy calls it periodically, so idle entities free their memory."""
        idle = [key for key, stats in list(self.stats.items()) if now - stats.last_seen >= idle_seconds]
        tenants = self._engine().table.tenants
        for key in idle:
            stats = self.stats.pop(key)
            self.untracked.add(stats)
            tenant = self.tenant_of(key, stats, tenants)
            self.whole_names.pop(key, None)
            if tenant is not None:
                self.retired_by_tenant.setdefault(tenant.name, EntityStats()).add(stats)
        for name in [name for name in self.retired_by_tenant if name not in tenants.by_name]:
            del self.retired_by_tenant[name]  # a tenant a reload removed: no series to keep monotonic
        for name in [name for name in self.untracked_by_tenant if name not in tenants.by_name]:
            self.untracked.add(self.untracked_by_tenant.pop(name))  # still in "other", in no tenant's sums
        return len(idle)

    def ranked(self) -> tuple[list[tuple[tuple[str, str], EntityStats]], EntityStats]:
        """The exported entities (top by traffic) and the sum of all the others. Runs in a worker
        thread while the loop records: list() of the dict's items is one C call the loop cannot
        interleave with, and a counter read mid-update is off by one exchange at most."""
        ranked = sorted(list(self.stats.items()), key=lambda item: item[1].traffic, reverse=True)
        exported = ranked[: self.max_entities]
        other = EntityStats()
        other.add(self.untracked)
        for stats in list(self.untracked_by_tenant.values()):
            other.add(stats)
        for _, stats in ranked[self.max_entities :]:
            other.add(stats)
        self.exported, self.folded = len(exported), len(ranked) - len(exported)
        return exported, other

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        exported, other = self.ranked()
        rows = [*exported, ((OTHER, OTHER), other)]
        labels = ["user", "client_id"]
        for name, documentation, attribute in _COUNTERS:
            family = CounterMetricFamily(name, documentation, labels=labels)
            for (user, client_id), stats in rows:
                family.add_metric([user, client_id], getattr(stats, attribute))
            yield family
        throttled = CounterMetricFamily(
            "quotagate_throttled_responses",
            "Responses that carried a throttle, by quota group",
            labels=[*labels, "group"],
        )
        for (user, client_id), stats in rows:
            for group in GROUPS:
                throttled.add_metric([user, client_id, group], getattr(stats, f"throttled_{group}"))
        yield throttled
        exempt = CounterMetricFamily(
            "quotagate_request_exempt_time_seconds", "Request time of requests exempt from request quotas"
        )
        exempt.add_metric([], self.exempt_request_seconds)
        yield exempt
        yield from self._quota_gauges(exported)
        yield from self._tenant_series()
        yield GaugeMetricFamily("quotagate_entities_exported", "Entities with series of their own", value=self.exported)
        yield GaugeMetricFamily("quotagate_entities_folded", "Entities summed into user=other", value=self.folded)

    def tenant_of(self, key: tuple[str, str], stats: EntityStats, tenants: Tenants) -> Tenant | None:
        """The tenant of a tracked entity, resolved once per tenants in force and kept on its stats: a
        scrape sums every tracked entity, more than the loop's resolution cache holds, and must neither
        empty nor write that cache, nor run the member rules again."""
        if stats.tenants is not tenants:  # tenants reloaded since the entity was first seen
            stats.tenant, stats.tenants = tenants.resolve(*self.whole_names.get(key, key), remember=False), tenants
        return stats.tenant

    def tenant_sums(self) -> dict[str, tuple[EntityStats, int]]:
        """Per configured tenant: its members' counters summed (those forgotten since included), and
        how many members are tracked now. Read from a worker thread, as ranked()."""
        tenants = self._engine().table.tenants
        sums = {tenant.name: (EntityStats(), [0]) for tenant in tenants.tenants}
        for forgotten in (self.retired_by_tenant, self.untracked_by_tenant):
            for name, stats in list(forgotten.items()):
                if name in sums:
                    sums[name][0].add(stats)
        for key, stats in list(self.stats.items()):
            tenant = self.tenant_of(key, stats, tenants)
            if tenant is not None:
                total, members = sums[tenant.name]
                total.add(stats)
                members[0] += 1
        return {name: (total, members[0]) for name, (total, members) in sums.items()}

    def _tenant_series(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        sums = self.tenant_sums()
        for name, documentation, attribute in _COUNTERS:
            family = CounterMetricFamily(
                name.replace("quotagate_", "quotagate_tenant_", 1),
                f"{documentation}, summed over the tenant's members",
                labels=["tenant"],
            )
            for tenant, (stats, _) in sums.items():
                family.add_metric([tenant], getattr(stats, attribute))
            yield family
        members = GaugeMetricFamily("quotagate_tenant_members", "Entities of the tenant tracked now", labels=["tenant"])
        for tenant, (_, count) in sums.items():
            members.add_metric([tenant], count)
        yield members
        engine = self._engine()
        now = self._clock()
        labels = ["tenant", "quota"]
        tokens = GaugeMetricFamily(
            "quotagate_tenant_quota_tokens", "Tokens left in the tenant's bucket (shared by its members)", labels=labels
        )
        limits = GaugeMetricFamily("quotagate_tenant_quota_limit", "The tenant's quota", labels=labels)
        for tenant in engine.table.tenants.tenants:
            for key in tenant.quotas:
                resolution = engine.table.tenant_resolution(tenant, key)
                tokens.add_metric([tenant.name, key.value], engine.tokens(resolution, now))
                limits.add_metric([tenant.name, key.value], resolution.value)
        yield tokens
        yield limits

    def _quota_gauges(self, exported: list[tuple[tuple[str, str], EntityStats]]) -> Iterator[GaugeMetricFamily]:
        engine = self._engine()
        now = self._clock()
        labels = ["user", "client_id", "quota"]
        tokens = GaugeMetricFamily("quotagate_quota_tokens", "Tokens left in the entity's bucket", labels=labels)
        limits = GaugeMetricFamily("quotagate_quota_limit", "The quota that applies to the entity", labels=labels)
        debt = GaugeMetricFamily(
            "quotagate_shadow_debt_seconds",
            "How long a shadow quota would hold the entity now (its debt in time; never applied)",
            labels=labels,
        )
        for (user, client_id), _ in exported:
            for key in QuotaKey:
                resolution = engine.resolve(user, client_id, key)
                if resolution is None:
                    continue
                tokens.add_metric([user, client_id, key.value], engine.tokens(resolution, now))
                limits.add_metric([user, client_id, key.value], resolution.value)
                if resolution.shadow:
                    tokens_left = engine.tokens(resolution, now)
                    rate = tokens_per_second(key, resolution.value)
                    debt.add_metric([user, client_id, key.value], max(-tokens_left, 0.0) / rate)
        yield tokens
        yield limits
        yield debt
