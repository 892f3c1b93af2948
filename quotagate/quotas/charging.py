"""What each Kafka exchange costs, and under which quota keys (spec §2, §3).

- Produce charges its request size (header + body, no size prefix) to producer_byte_rate when the
  request is read, even with acks=0, when there is no response.
- Fetch charges its response size to consumer_byte_rate, and so does ShareFetch (KIP-932: the
  broker records a share fetch's response in the same fetch quota, and caps its max_bytes by it).
- Every request that is not exempt charges its request time to request_percentage. The proxy
  cannot see broker thread time, so request time here is the upstream service time: from the
  moment the proxy forwards the request to the moment the response is back. For a Fetch, the
  broker may hold the request up to max_wait_ms waiting for data (a long poll): that wait is idle
  time, not work, so a fetch (or share fetch) is charged only what exceeds its max wait. A consumer polling with
  fetch.max.wait.ms=0 is thus charged every millisecond it makes the broker work, while an idle
  consumer with a 500 ms max wait is charged ~0 per fetch.
- Produce and the fetches throttle by the larger of their byte-rate and request-time throttles.

Which API is charged to which key is quotas/apis.py's: each function here is handed the exchange's
policy bits from it. Run per exchange by the session core: compiled with it as charging_c (typed by
charging_c.pxd), interpreted as it is (quotagate/compiled.py).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from quotagate.quotas.apis import BYTES_IN, BYTES_OUT, LONG_POLL, PARTITIONS_MUTATED
from quotagate.quotas.bucket import MemberBucket, ShadowTokenBucket

# Compiled, these are cimported (charging_c.pxd): C calls into token_bucket_c.
from quotagate.quotas.token_bucket import bucket_charge, bucket_throttle_ms

if TYPE_CHECKING:
    from quotagate.quotas.engine import EntityBuckets
    from quotagate.quotas.tenants import Tenant, Tenants


def request_time_ms(policy: int, latency_ms: float, fetch_max_wait_ms: int) -> float:
    if policy & LONG_POLL:
        waited = latency_ms - fetch_max_wait_ms
        return waited if waited > 0.0 else 0.0
    return latency_ms


def charge_request(buckets: EntityBuckets, policy: int, request_size: int, now: float) -> int:
    """Charges what is known when a request is read: a produce's size. Returns the throttle in ms.

    Charging produce bytes as they arrive (not when the answer comes back) lets the proxy stop
    reading from a client the moment it is in debt, as a broker does by reading one request at a
    time: a client that pipelines many produce requests cannot get ahead of its quota."""
    if policy & BYTES_IN:
        bucket = buckets.produce
        if bucket is not None:
            return bucket_charge(bucket, request_size, now)
    return 0


def fetch_throttle_ms(buckets: EntityBuckets, now: float) -> int:
    """The throttle a fetch arriving now would be answered with: the larger of its byte-rate and
    request-time throttles as they stand (the request-time one capped at one window). Above 0, the
    broker answers it with no data at once (KIP-219: FetchContext.getThrottledResponse)."""
    throttle = 0
    # A bucket's tokens only grow until the next charge: one not in debt when last charged is not now
    # (an attribute read, where throttle_ms is a call: this runs for every fetch under a quota).
    bucket = buckets.fetch
    if bucket is not None and bucket.tokens < 0:
        throttle = bucket_throttle_ms(bucket, now)
    bucket = buckets.request
    if bucket is not None and bucket.tokens < 0:
        throttle = _with_request_time(throttle, bucket_throttle_ms(bucket, now), buckets.request_cap_ms)
    return throttle


def _with_request_time(throttle: int, time_throttle: int, cap: int) -> int:
    """The larger of a byte-rate throttle and a request-time one, this capped at one window (KIP-124)."""
    if time_throttle > cap:
        time_throttle = cap
    return time_throttle if time_throttle > throttle else throttle


def shadow_throttle_ms(buckets: EntityBuckets, policy: int, charged_request_time: bool, now: float) -> int:
    """The time, in ms, the shadow quotas among `buckets` would have held the entity at their rates
    for what was charged since the last call (the charges that left a bucket in debt, divided by
    its rate; the larger of the byte-rate and request-time figures, as a throttle is). Summed over
    responses it is the time held at the quota, the figure the usage pipeline compares."""
    held = 0
    bucket = buckets.produce if policy & BYTES_IN else buckets.fetch if policy & BYTES_OUT else None
    if isinstance(bucket, (ShadowTokenBucket, MemberBucket)):  # a member's: its shadow part's
        held = bucket.take_held_ms()
    if charged_request_time and isinstance(buckets.request, (ShadowTokenBucket, MemberBucket)):
        held = max(held, buckets.request.take_held_ms())
    return held


def charge_response(
    buckets: EntityBuckets, policy: int, response_size: int, request_ms: float | None, now: float
) -> int:
    """Charges what is known when the response is back; returns the throttle the response carries.

    request_ms is None for exchanges exempt from request-time quotas. A produce's bytes were charged
    by charge_request; its response carries the produce throttle as it stands now. Request-time
    throttles are capped at one window (KIP-124)."""
    throttle = 0
    if policy & BYTES_IN:
        bucket = buckets.produce
        if bucket is not None:
            throttle = bucket_throttle_ms(bucket, now)
    elif policy & BYTES_OUT:
        bucket = buckets.fetch
        if bucket is not None:
            throttle = bucket_charge(bucket, response_size, now)
    bucket = buckets.request
    if request_ms is not None and bucket is not None:
        throttle = _with_request_time(throttle, bucket_charge(bucket, request_ms, now), buckets.request_cap_ms)
    return throttle


@dataclass
class EntityStats:
    """One entity's counters (quotagate_* per (user, client_id): proxy/entity_metrics.py). Compiled, a C
    type (charging_c.pxd): count_exchange adds an exchange to its fields in C."""

    produce_bytes: float = 0.0
    fetch_bytes: float = 0.0
    request_seconds: float = 0.0
    mutations: float = 0.0
    produce_throttle_seconds: float = 0.0
    fetch_throttle_seconds: float = 0.0
    request_throttle_seconds: float = 0.0
    mutation_throttle_seconds: float = 0.0
    throttled_produce: int = 0
    throttled_fetch: int = 0
    throttled_request: int = 0
    throttled_controller_mutation: int = 0
    # Shadow quotas (tried, never applied): responses that would have been throttled, and by how much.
    shadow_throttled: int = 0
    shadow_throttle_seconds: float = 0.0
    last_seen: float = 0.0
    # The entity's tenant, resolved once for the tenants in force (EntityMetrics.tenant_of).
    tenants: Tenants | None = None
    tenant: Tenant | None = None

    @property
    def traffic(self) -> float:
        return self.produce_bytes + self.fetch_bytes + self.request_seconds * 1e6 + self.mutations * 1e3

    def add(self, other: EntityStats) -> None:
        for name in _SUMMED:  # names worked out once: a scrape folds thousands of entities
            setattr(self, name, getattr(self, name) + getattr(other, name))


_SUMMED = tuple(field.name for field in fields(EntityStats) if field.name not in ("last_seen", "tenants", "tenant"))


def count_exchange(
    stats: EntityStats,
    policy: int,
    request_size: int,
    response_size: int,
    request_ms: float | None,
    throttle_ms: int,
) -> None:
    """Adds one exchange's charges and throttle to its entity's counters (quotagate_* per entity):
    the bytes each byte-rate quota was charged, the request time (None: exempt, counted apart), and
    the throttle by quota group, as Kafka's quota metrics group them."""
    if policy & BYTES_IN:
        stats.produce_bytes += request_size
    elif policy & BYTES_OUT:
        stats.fetch_bytes += response_size
    if request_ms is not None:
        stats.request_seconds += request_ms / 1000
    if throttle_ms > 0:
        seconds = throttle_ms / 1000
        if policy & BYTES_IN:
            stats.produce_throttle_seconds += seconds
            stats.throttled_produce += 1
        elif policy & BYTES_OUT:
            stats.fetch_throttle_seconds += seconds
            stats.throttled_fetch += 1
        elif policy & PARTITIONS_MUTATED:
            stats.mutation_throttle_seconds += seconds
            stats.throttled_controller_mutation += 1
        else:
            stats.request_throttle_seconds += seconds
            stats.throttled_request += 1
