"""The quota engine: charges what clients use to the bucket their quota says, returns throttle times.

One engine serves the whole proxy, so an entity's connections to every broker draw on the same
buckets: the quota holds for the cluster, not per broker.

Units per key (tokens are in these units, rates per second):
- producer_byte_rate, consumer_byte_rate: bytes;
- request_percentage: milliseconds of request time; p % of one thread = 10·p ms per second;
- controller_mutation_rate: partitions;
- producer_ids_rate: new producer IDs (quotas.producer_ids says which are new).
Burst, as Kafka sizes it from its sample windows: B = rate × window_num × window_size_seconds
(quota.window.* for the client quotas, controller.quota.window.* for mutations). Request-time
throttles are capped at one window so heartbeats are never held long (KIP-124).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from quotagate.quotas.bucket import MemberBucket, ShadowTokenBucket, TokenBucket
from quotagate.quotas.entities import IpQuotaKey, QuotaKey, QuotaTable, Resolution
from quotagate.quotas.lease import LeasedBucket
from quotagate.quotas.producer_ids import ProducerIdMemory

BucketId = tuple[str | None, ...]
# Makes the bucket for (bucket id, rate, burst, now): a TokenBucket alone, a LeasedBucket when
# processes share the quotas (quotagate.proxy.cluster). Both answer charge/refill/record/
# throttle_ms/give_back/reconfigure/is_full and expose tokens, rate, burst and updated.
Bucket = TokenBucket | LeasedBucket
BucketFactory = Callable[[BucketId, float, float, float], Bucket]


def local_bucket(_bucket_id: BucketId, rate: float, burst: float, now: float) -> Bucket:
    return TokenBucket.full(rate, burst, now)


MS_PER_SECOND_PER_PERCENT = 10.0
# A fetch's max_bytes is an int32: no cap above it.
FETCH_MAX_BYTES_LIMIT = 2**31 - 1
# A bucket idle this long is full again and holds nothing worth keeping (Kafka expires idle quota
# sensors after an hour; a full bucket can go sooner because dropping it changes no decision).
IDLE_BUCKET_SECONDS = 3600.0


# The most windows, and the longest window, a configuration may give (the config parser reads these
# bounds from the fields' metadata, as it reads its own keys').
WINDOW_NUM_MAX = 3600
WINDOW_SECONDS_MAX = 3600.0
# A day: seen producer IDs are kept in Bloom filters sized for the IDs one window admits.
PRODUCER_ID_WINDOW_SECONDS_MAX = 86400.0


@dataclass(frozen=True, slots=True)
class QuotaWindows:
    """Kafka's sample-window settings; here they size the bursts (and the request-time cap)."""

    quota_window_num: int = field(
        default=11,
        metadata={
            "doc": "Kafka's quota.window.num: the client quotas' burst is this many windows.",
            "min": 1,
            "max": WINDOW_NUM_MAX,
        },
    )
    # Whole seconds in Kafka; fractions are allowed here, to size a burst that is not a whole
    # number of seconds of quota (e.g. 20 partitions/s with a burst of 50: 5 windows of 0.5 s).
    quota_window_size_seconds: float = field(
        default=1,
        metadata={
            "doc": "Kafka's quota.window.size.seconds; also the longest request-time throttle (KIP-124).",
            "max": WINDOW_SECONDS_MAX,
        },
    )
    controller_quota_window_num: int = field(
        default=11,
        metadata={
            "doc": "Kafka's controller.quota.window.num, for controller_mutation_rate.",
            "min": 1,
            "max": WINDOW_NUM_MAX,
        },
    )
    controller_quota_window_size_seconds: float = field(
        default=1,
        metadata={
            "doc": "Kafka's controller.quota.window.size.seconds, for controller_mutation_rate.",
            "max": WINDOW_SECONDS_MAX,
        },
    )
    producer_id_quota_window_size_seconds: float = field(
        default=3600,
        metadata={
            "doc": "Kafka's producer.id.quota.window.size.seconds (KIP-936): how long a producer ID counts as seen "
            "for producer_ids_rate (between half of it and all of it: two Bloom filters, each turned over every half).",
            "max": PRODUCER_ID_WINDOW_SECONDS_MAX,
        },
    )

    def burst_seconds(self, key: QuotaKey) -> float:
        if key is QuotaKey.CONTROLLER_MUTATION_RATE:
            return float(self.controller_quota_window_num * self.controller_quota_window_size_seconds)
        return float(self.quota_window_num * self.quota_window_size_seconds)

    @property
    def request_throttle_cap_ms(self) -> int:
        return round(self.quota_window_size_seconds * 1000)

    def fetch_max_bytes(self, consumer_byte_rate: float) -> int:
        """The most one fetch may ask for under `consumer_byte_rate` (KAFKA-9677, the broker's
        ClientQuotaManager.getMaxValueInQuotaWindow): what the quota allows over the window's samples
        but the current one, rate x (quota_window_num - 1) x quota_window_size_seconds, so that one
        response never puts a client that had fetched nothing into debt, and a small quota is not
        spent by one huge response followed by a long mute. One window when quota_window_num is 1
        (Kafka's figure would be 0 there: every fetch one record batch)."""
        windows = max(self.quota_window_num - 1, 1)
        return min(int(consumer_byte_rate * windows * self.quota_window_size_seconds), FETCH_MAX_BYTES_LIMIT)


@dataclass(slots=True)
class EntityBuckets:
    """The client-quota buckets one (user, client_id) draws on, looked up once (None: no quota).

    A connection keeps it across requests instead of resolving the entity and finding its bucket
    for every charge; it holds while the engine's `generation` is the one it was made in (a
    reload or an expiry may change which bucket an entity draws on)."""

    generation: int
    # A tenant member's are MemberBuckets (its own bucket and its tenant's, charged together).
    produce: Bucket | MemberBucket | None
    fetch: Bucket | MemberBucket | None
    request: Bucket | MemberBucket | None
    request_cap_ms: int
    shadow: bool = False  # one of them is a shadow quota's: the session reports what it would do
    # The most a fetch may ask for (QuotaWindows.fetch_max_bytes); FETCH_MAX_BYTES_LIMIT without a
    # binding consumer_byte_rate (none, or a shadow one: a quota being tried changes no request).
    fetch_max_bytes: int = FETCH_MAX_BYTES_LIMIT


def tokens_per_second(key: QuotaKey, value: float) -> float:
    return value * MS_PER_SECOND_PER_PERCENT if key is QuotaKey.REQUEST_PERCENTAGE else value


class QuotaEngine:
    def __init__(
        self,
        table: QuotaTable | None = None,
        windows: QuotaWindows | None = None,
        bucket_factory: BucketFactory = local_bucket,
    ) -> None:
        self.bucket_factory = bucket_factory
        self.table = table or QuotaTable()
        self.windows = windows or QuotaWindows()
        self.limits_anyone = self.table.limits_clients  # read per exchange: an attribute, not a __bool__ call
        self.buckets: dict[tuple[str, str, str | None, str | None], Bucket] = {}
        self.generation = 0  # bumped whenever an entity's bucket may change (see EntityBuckets)
        # The producer IDs each entity with a producer_ids_rate used within the window (KIP-936).
        self.producer_ids = ProducerIdMemory(self.windows.producer_id_quota_window_size_seconds)

    def resolve(self, user: str, client_id: str, key: QuotaKey) -> Resolution | None:
        return self.table.resolve(user, client_id, key)

    def resolutions(self, user: str, client_id: str, key: QuotaKey) -> list[Resolution]:
        """The quotas (user, client_id) is held to for `key`: its own entity's (Kafka's precedence),
        then its tenant's; each charge goes to all of them, the larger throttle applies."""
        found = []
        own = self.table.resolve(user, client_id, key)
        if own is not None:
            found.append(own)
        if self.table.tenants:
            tenant = self.table.resolve_tenant(user, client_id, key)
            if tenant is not None:
                found.append(tenant)
        return found

    def enforces(self, key: QuotaKey) -> bool:
        """Whether any quota sets `key` (lets the proxy skip work for keys nobody limits)."""
        return key in self.table.keys_in_use

    def charge(self, user: str, client_id: str, key: QuotaKey, amount: float, now: float) -> int:
        """Records `amount` against the client's quotas for `key` (its own and its tenant's); returns
        the throttle time in ms (the larger)."""
        throttle = 0
        for resolution in self.resolutions(user, client_id, key):
            throttle = max(throttle, self._bucket(resolution, now).charge(amount, now))
        if key is QuotaKey.REQUEST_PERCENTAGE:
            return min(throttle, self.windows.request_throttle_cap_ms)
        return throttle

    def entity_buckets(self, user: str, client_id: str, now: float) -> EntityBuckets:
        """The buckets (user, client_id) draws on for the client quotas, valid for this generation."""

        def bucket(key: QuotaKey) -> Bucket | MemberBucket | None:
            buckets = [self._bucket(resolution, now) for resolution in self.resolutions(user, client_id, key)]
            return None if not buckets else buckets[0] if len(buckets) == 1 else MemberBucket(*buckets)

        produce, fetch, request = (
            bucket(QuotaKey.PRODUCER_BYTE_RATE),
            bucket(QuotaKey.CONSUMER_BYTE_RATE),
            bucket(QuotaKey.REQUEST_PERCENTAGE),
        )
        shadow = any(
            isinstance(b, ShadowTokenBucket) or (isinstance(b, MemberBucket) and b.shadow)
            for b in (produce, fetch, request)
        )
        fetch_max_bytes = FETCH_MAX_BYTES_LIMIT
        for consumer in self.resolutions(user, client_id, QuotaKey.CONSUMER_BYTE_RATE):
            if not consumer.shadow:  # the smaller cap of the member's own quota and its tenant's
                fetch_max_bytes = min(fetch_max_bytes, self.windows.fetch_max_bytes(consumer.value))
        cap_ms = self.windows.request_throttle_cap_ms
        return EntityBuckets(self.generation, produce, fetch, request, cap_ms, shadow, fetch_max_bytes)

    def admit(self, user: str, client_id: str, key: QuotaKey, costs: list[int], strict: bool, now: float) -> list[bool]:
        """Admits a request's items (topics) in order and charges each admitted one its cost.

        Strict (KIP-599): an item is admitted iff the bucket is not in debt before it; an admitted
        item is charged in full, so the bucket may go deep into debt. Permissive: every item is
        admitted and charged. Unlimited clients get everything admitted and nothing charged. A tenant
        member is admitted while neither its own bucket nor its tenant's is in debt; both are charged."""
        resolutions = self.resolutions(user, client_id, key)
        if not resolutions:
            return [True] * len(costs)
        buckets = [(self._bucket(resolution, now), resolution.shadow) for resolution in resolutions]
        admitted = []
        for cost in costs:
            refused = False
            for bucket, shadow in buckets:
                bucket.refill(now)
                refused = refused or (strict and bucket.tokens < 0 and not shadow)
            if refused:
                admitted.append(False)
                continue
            for bucket, _ in buckets:
                bucket.record(cost, now)
            admitted.append(True)
        return admitted

    def admit_producer_id(self, user: str, client_id: str, producer_id: int, now: float) -> int:
        """A Produce from (user, client_id) with `producer_id` under its producer_ids_rate (KIP-936):
        0 to admit it, or the throttle in ms when it is refused (new, and the bucket is in debt).

        An ID the entity used within the window is free; a new one is admitted while the bucket is
        not in debt (strict, as `admit`), charged one and remembered; a refused one is not
        remembered, so its retry is new again. -1 (not idempotent) is never counted. A tenant member's
        ID is checked against its own quota and its tenant's alike (new to either: charged there)."""
        if producer_id < 0:
            return 0
        new = []
        for resolution in self.resolutions(user, client_id, QuotaKey.PRODUCER_IDS_RATE):
            seen = self.producer_ids.entity(resolution.bucket_id, resolution.value, self.burst(resolution), now)
            if not seen.seen(producer_id, now):
                new.append((resolution, seen, self._bucket(resolution, now)))
        throttle = 0
        for resolution, _, bucket in new:
            bucket.refill(now)
            if bucket.tokens < 0 and not resolution.shadow:
                throttle = max(throttle, bucket.throttle_ms(now), 1)
        if throttle:
            return throttle
        for _, seen, bucket in new:
            bucket.record(1.0, now)
            seen.add(producer_id, now)
        return 0

    def admit_connection(self, address: str, now: float) -> float:
        """A new connection from `address` under its ip's connection_creation_rate (KIP-612): 0.0 to
        admit it (charged one connection), or the seconds after which the broker would close it.
        As Kafka's ConnectionQuotas: a connection over the rate is not counted, and its throttle is
        capped at one quota window."""
        if not self.table.ip_rates:  # none configured: not even the address is parsed
            return 0.0
        resolution = self.table.resolve_ip(address)
        if resolution is None:
            return 0.0
        bucket = self._bucket(resolution, now)
        bucket.record(1.0, now)
        throttle_ms = bucket.throttle_ms(now)
        if throttle_ms <= 0:
            return 0.0
        bucket.give_back(1.0, now)
        return min(throttle_ms, self.windows.request_throttle_cap_ms) / 1000

    def refund(self, user: str, client_id: str, key: QuotaKey, amount: float, now: float) -> None:
        """Gives back tokens charged for work that did not happen (a topic the broker rejected)."""
        for resolution in self.resolutions(user, client_id, key):
            bucket = self.buckets.get(resolution.bucket_id)
            if bucket is not None:
                bucket.give_back(amount, now)

    def throttle_ms(self, user: str, client_id: str, key: QuotaKey, now: float) -> int:
        """The client's current throttle for `key` (the larger of its own and its tenant's), without
        charging anything."""
        throttle = 0
        for resolution in self.resolutions(user, client_id, key):
            bucket = self.buckets.get(resolution.bucket_id)
            if bucket is not None:
                throttle = max(throttle, bucket.throttle_ms(now))
        return throttle

    def would_throttle_ms(self, user: str, client_id: str, key: QuotaKey, now: float) -> int:
        """The throttle the client's quota for `key` calls for now, applied or not (a shadow quota's
        never is; the larger of its own quota's and its tenant's). Reads only: /quotas calls it from a
        worker thread."""
        throttle = 0
        for resolution in self.resolutions(user, client_id, key):
            bucket = self.buckets.get(resolution.bucket_id)
            if bucket is not None:
                shadow = isinstance(bucket, ShadowTokenBucket)
                throttle = max(throttle, bucket.would_throttle_ms(now) if shadow else bucket.throttle_ms(now))
        return min(throttle, self.windows.request_throttle_cap_ms) if key is QuotaKey.REQUEST_PERCENTAGE else throttle

    def tokens(self, resolution: Resolution, now: float) -> float:
        """Tokens left in the bucket of `resolution` (a full bucket if it has not been used yet)."""
        bucket = self.buckets.get(resolution.bucket_id)
        if bucket is None:
            return self.burst(resolution)
        return bucket.tokens_at(now)  # never writes: scrapes read this from a worker thread

    def update(self, table: QuotaTable, windows: QuotaWindows, now: float) -> None:
        """Applies new quotas live. A bucket whose quota changed keeps its balance (debt is never
        forgiven) and earns at the new rate from now on. A client whose matched entity changes draws
        on the new entity's bucket, as in Kafka, where the metric tags and so the sensor change."""
        self.table = table
        self.windows = windows
        self.limits_anyone = table.limits_clients
        self.producer_ids.reconfigure(windows.producer_id_quota_window_size_seconds)
        self.generation += 1
        by_bucket: dict[tuple[str, str, str | None, str | None], Resolution] = {}
        for bucket_id in list(self.buckets):
            resolution = table.resolve_bucket(bucket_id)
            if resolution is not None and resolution.bucket_id == bucket_id:
                by_bucket[bucket_id] = resolution
        for bucket_id, bucket in list(self.buckets.items()):
            resolution = by_bucket.get(bucket_id)
            if resolution is None:
                # No quota gives this bucket any more; a client that still maps to it will get a
                # fresh one sized by its quota.
                del self.buckets[bucket_id]
                continue
            rate = tokens_per_second(resolution.key, resolution.value)
            bucket.reconfigure(rate, self.burst(resolution), now)
            if resolution.shadow != isinstance(bucket, ShadowTokenBucket):  # made binding, or shadow again
                if resolution.shadow:
                    self.buckets[bucket_id] = ShadowTokenBucket(
                        bucket.rate, bucket.burst, bucket.tokens, bucket.updated
                    )
                    continue
                binding = self.bucket_factory(bucket_id, bucket.rate, bucket.burst, now)
                if isinstance(binding, TokenBucket):  # local: the debt run up while shadow is kept
                    binding.tokens, binding.updated = bucket.tokens, bucket.updated
                self.buckets[bucket_id] = binding

    def expire_idle(self, now: float, idle_seconds: float = IDLE_BUCKET_SECONDS) -> int:
        """Drops buckets unused for idle_seconds that are full again; returns how many."""
        expired = []
        for bucket_id, bucket in self.buckets.items():
            if now - bucket.updated >= idle_seconds and bucket.is_full(now):
                expired.append(bucket_id)
        for bucket_id in expired:
            del self.buckets[bucket_id]
        self.producer_ids.expire(now)
        if expired:
            self.generation += 1
            # The resolutions cached for the entities gone with them, too (every client resolves
            # again at a new generation anyway): random client ids cost memory for a minute.
            self.table.forget_resolutions()
        return len(expired)

    def levels(self, now: float) -> dict[BucketId, float]:
        """The balance of every local bucket that is not full (in debt, or spent below its burst):
        what a restart would otherwise forgive. Shared buckets are kept by Redis, not here."""
        return {
            bucket_id: bucket.tokens_at(now)
            for bucket_id, bucket in list(self.buckets.items())
            if isinstance(bucket, TokenBucket) and not bucket.is_full(now)
        }

    def restore(self, levels: dict[BucketId, float], elapsed: float, now: float) -> int:
        """Puts back balances saved `elapsed` seconds ago (by `levels`), each refilled at its current
        rate for that time, into the buckets the current quotas give; a bucket no quota gives any more
        is dropped. Returns how many were restored."""
        restored = 0
        for bucket_id, tokens in levels.items():
            try:
                resolution = self.table.resolve_bucket(bucket_id)
            except ValueError:  # a key this version does not know
                continue
            if resolution is None or resolution.bucket_id != bucket_id:
                continue
            bucket = self._bucket(resolution, now)
            if isinstance(bucket, TokenBucket):
                bucket.tokens, bucket.updated = min(tokens, bucket.burst), now - max(elapsed, 0.0)
                bucket.refill(now)
                restored += 1
        self.generation += 1
        return restored

    def burst(self, resolution: Resolution) -> float:
        """The burst of the bucket `resolution` draws on."""
        burst = tokens_per_second(resolution.key, resolution.value) * self.windows.burst_seconds(resolution.key)
        # A connection is one token: a smaller burst would refuse every connection (as max_connection_creation_rate).
        return max(burst, 1.0) if resolution.key is IpQuotaKey.CONNECTION_CREATION_RATE else burst

    def _bucket(self, resolution: Resolution, now: float) -> Bucket:
        bucket = self.buckets.get(resolution.bucket_id)
        if bucket is None:
            rate = tokens_per_second(resolution.key, resolution.value)
            if resolution.shadow:  # a quota being tried: charged per process, never shared, never applied
                bucket = ShadowTokenBucket.full(rate, self.burst(resolution), now)
            else:
                bucket = self.bucket_factory(resolution.bucket_id, rate, self.burst(resolution), now)
            self.buckets[resolution.bucket_id] = bucket
        return bucket
