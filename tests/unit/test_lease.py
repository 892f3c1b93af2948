"""The lease arithmetic of shared quotas (quotagate.quotas.lease), driven by hand: no Redis, no clock.

SharedBucket below is the Lua script of quotagate.proxy.cluster written again in Python, so that
whole runs of several processes can be simulated in virtual time."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from quotagate.quotas.lease import LeasedBucket, LeaseRequest

RATE = 1000.0
BURST = 1000.0
LEASE_SECONDS = 0.1


@dataclass
class SharedBucket:
    """What Redis holds for one entity, and what the Lua script does to it."""

    rate: float
    burst: float
    tokens: float
    ts: float = 0.0
    calls: int = 0

    def lease(self, request: LeaseRequest, now: float) -> tuple[float, float]:
        self.calls += 1
        self.tokens = min(self.burst, self.tokens + (now - self.ts) * self.rate)
        self.ts = now
        self.tokens = min(self.burst, self.tokens + request.held - request.spent)
        grant = min(request.want, max(self.tokens, 0.0))
        self.tokens -= grant
        return grant, self.tokens


def sync_if_wanted(bucket: LeasedBucket, shared: SharedBucket, now: float) -> None:
    """One tick of the sync task for one bucket (SharedQuotas._sync), without credit."""
    if bucket.wants_sync(now, LEASE_SECONDS):
        request = bucket.lease_request(now, LEASE_SECONDS)
        bucket.apply_grant(request, *shared.lease(request, now), now=now, credit_seconds=0.0)


def test_a_new_bucket_enforces_its_share_alone_until_its_first_grant() -> None:
    bucket = LeasedBucket.local(RATE, BURST, 1 / 4, now=0.0)
    assert bucket.charge(250, 0.0) == 0
    assert bucket.charge(100, 0.0) == 400  # 100 tokens of debt at a quarter of the rate
    assert bucket.throttle_ms(0.2) == 200


def test_a_lease_is_spent_locally_and_an_overdraft_throttles_at_the_full_rate() -> None:
    bucket = LeasedBucket.local(RATE, BURST, 1 / 2, now=0.0)
    request = bucket.lease_request(0.0, LEASE_SECONDS)
    bucket.apply_grant(request, grant=300.0, shared_tokens=700.0, now=0.0, credit_seconds=0.0)
    assert bucket.charge(300, 0.01) == 0
    assert bucket.charge(50, 0.01) == 50  # 50 tokens over the lease at 1000/s
    # Local time does not earn tokens beyond the lease: they belong to the shared bucket.
    assert bucket.throttle_ms(0.5) == 50


def test_the_shared_debt_throttles_every_process_alike_and_is_paid_off_at_the_full_rate() -> None:
    shared = SharedBucket(RATE, BURST, tokens=-500.0)
    throttles = []
    for _ in range(3):
        bucket = LeasedBucket.local(RATE, BURST, 1 / 3, now=0.0)
        bucket.spent = 0.0
        bucket.tokens = bucket.ceiling  # unused
        request = bucket.lease_request(0.0, LEASE_SECONDS)
        bucket.apply_grant(request, *shared.lease(request, 0.0), now=0.0, credit_seconds=0.0)
        throttles.append(bucket.throttle_ms(0.0))
        assert bucket.throttle_ms(0.3) == 200
        assert bucket.throttle_ms(1.0) == 0
    assert throttles == [500, 500, 500]


def test_an_entity_without_a_lease_is_served_at_once_from_its_credit_and_charged_at_the_next_sync() -> None:
    shared = SharedBucket(RATE, BURST, tokens=BURST)
    bucket = LeasedBucket.shared(RATE, BURST, 1 / 3, LEASE_SECONDS, now=0.0)
    assert not bucket.wants_sync(0.0, LEASE_SECONDS)  # idle: costs Redis nothing
    assert bucket.charge(60, 0.0) == 0  # within the credit (100 = 0.1 s of rate)
    assert bucket.charge(60, 0.0) == 20  # 20 over it
    assert bucket.wants_sync(0.0, LEASE_SECONDS)
    request = bucket.lease_request(0.01, LEASE_SECONDS)
    bucket.apply_grant(request, *shared.lease(request, 0.01), now=0.01, credit_seconds=LEASE_SECONDS)
    assert shared.tokens + bucket.held == pytest.approx(BURST - 120)  # charged to the (full) shared bucket
    assert bucket.throttle_ms(0.01) == 0


def test_what_is_spent_while_a_sync_is_in_flight_counts_against_the_new_lease() -> None:
    bucket = LeasedBucket.local(RATE, BURST, 1.0, now=0.0)
    bucket.apply_grant(bucket.lease_request(0.0, LEASE_SECONDS), 100.0, 900.0, now=0.0, credit_seconds=0.0)
    bucket.charge(80, 0.05)
    request = bucket.lease_request(0.1, LEASE_SECONDS)
    assert (request.held, request.spent) == (100.0, 80.0)
    bucket.charge(30, 0.101)  # after the request left
    bucket.apply_grant(request, 120.0, 800.0, now=0.102, credit_seconds=0.0)
    assert bucket.ceiling == pytest.approx(90.0)
    assert bucket.spent == pytest.approx(30.0)


def test_an_idle_entity_gives_its_lease_back_and_then_holds_nothing() -> None:
    shared = SharedBucket(RATE, BURST, tokens=BURST)
    bucket = LeasedBucket.local(RATE, BURST, 1.0, now=0.0)
    now = 0.0
    for _ in range(20):  # busy for 2 s at 400/s
        bucket.charge(40, now)
        sync_if_wanted(bucket, shared, now)
        now += 0.1
    assert bucket.held > 0
    for _ in range(50):  # then idle
        sync_if_wanted(bucket, shared, now)
        now += 0.1
    assert bucket.held == 0
    assert not bucket.wants_sync(now, LEASE_SECONDS)
    assert shared.lease(LeaseRequest(0, 0, 0, 0), now)[1] == BURST  # every token went back


def test_going_local_keeps_the_debt_and_joining_again_charges_only_what_is_not_earned_back() -> None:
    bucket = LeasedBucket.local(RATE, BURST, 1 / 2, now=0.0)
    bucket.apply_grant(bucket.lease_request(0.0, LEASE_SECONDS), 0.0, -200.0, now=0.0, credit_seconds=0.0)
    assert bucket.throttle_ms(0.0) == 200
    bucket.go_local(1 / 2, now=0.0)
    assert bucket.throttle_ms(0.0) == 200 * 2  # the same debt, paid off at half the rate
    bucket.charge(100, 1.0)
    request = bucket.lease_request(1.0, LEASE_SECONDS)
    # The shared bucket already holds the debt; it is told only what was spent since going local.
    assert (request.held, request.spent) == (0, 100)
    bucket.charge(250, 1.0)  # now below its full share by 500 - (300 - 100 - 250) = 550, spent 350
    assert bucket.lease_request(1.0, LEASE_SECONDS).spent == 350


def simulate(processes: int, seconds: float, demand_per_step: float, shared: SharedBucket) -> float:
    """`processes` buckets, each charged demand_per_step every ms while not throttled, each syncing
    when it wants to with a 1 ms round trip. Returns everything admitted."""
    buckets = [LeasedBucket.shared(RATE, BURST, 1 / processes, LEASE_SECONDS, now=0.0) for _ in range(processes)]
    blocked_until = [0.0] * processes
    in_flight: list[tuple[float, int, LeaseRequest]] = []
    admitted = 0.0
    step = 0.001
    for tick in range(int(seconds / step)):
        now = tick * step
        for arrival, index, request in [f for f in in_flight if f[0] <= now]:
            in_flight.remove((arrival, index, request))
            buckets[index].apply_grant(request, *shared.lease(request, now), now=now, credit_seconds=LEASE_SECONDS)
        for index, bucket in enumerate(buckets):
            if now >= blocked_until[index]:
                admitted += demand_per_step
                blocked_until[index] = now + bucket.charge(demand_per_step, now) / 1000
            if not any(f[1] == index for f in in_flight) and bucket.wants_sync(now, LEASE_SECONDS):
                in_flight.append((now + step, index, bucket.lease_request(now, LEASE_SECONDS)))
    return admitted


def test_three_processes_together_admit_the_quota_and_not_three_times_it() -> None:
    shared = SharedBucket(RATE, BURST, tokens=BURST)
    seconds = 20.0
    admitted = simulate(3, seconds, demand_per_step=5.0, shared=shared)  # each asks 5x the quota
    expected = RATE * seconds + BURST
    assert admitted == pytest.approx(expected, rel=0.05), f"admitted {admitted:.0f}, quota allows {expected:.0f}"
    # A busy entity renews about every lease period: some tens of calls per second per process.
    assert shared.calls / seconds / 3 < 40, f"{shared.calls / seconds / 3:.1f} Redis calls/s per process"


def test_a_scrape_reads_a_leased_balance_without_changing_it() -> None:
    from quotagate.quotas import QuotaEngine, QuotaKey
    from quotagate.quotas.entities import QuotaEntity, QuotaTable

    table = QuotaTable({QuotaEntity(None, "spread"): {QuotaKey.PRODUCER_BYTE_RATE: RATE}})
    engine = QuotaEngine(table, bucket_factory=lambda _id, rate, burst, now: LeasedBucket.local(rate, burst, 0.5, now))
    engine.charge("u", "spread", QuotaKey.PRODUCER_BYTE_RATE, 6000, 0.0)  # half of the 11 s burst is 5500
    resolution = engine.resolve("u", "spread", QuotaKey.PRODUCER_BYTE_RATE)
    assert resolution is not None
    bucket = engine.buckets[resolution.bucket_id]
    before = (bucket.tokens, bucket.updated)
    assert engine.tokens(resolution, 0.1) == pytest.approx(5500 - 6000 + 0.1 * RATE * 0.5)
    assert engine.throttle_ms("u", "spread", QuotaKey.PRODUCER_BYTE_RATE, 0.1) == 900  # 450 at half the rate
    assert (bucket.tokens, bucket.updated) == before


def test_an_idle_bucket_that_gave_its_lease_back_is_full_and_a_busy_or_indebted_one_is_not() -> None:
    shared = SharedBucket(RATE, BURST, tokens=BURST)
    bucket = LeasedBucket.shared(RATE, BURST, 1.0, credit_seconds=0.0, now=0.0)
    now = 0.0
    for _ in range(10):  # busy for 1 s at 400/s
        bucket.charge(40, now)
        sync_if_wanted(bucket, shared, now)
        now += 0.1
    assert not bucket.is_full(now)  # holds a lease
    last_used = bucket.updated
    for _ in range(30):  # idle: the lease goes back
        sync_if_wanted(bucket, shared, now)
        now += 0.1
    assert bucket.is_full(now)
    checks = bucket.updated
    assert not bucket.wants_sync(now + 100, LEASE_SECONDS)
    assert bucket.updated == checks >= last_used  # idle checks do not make it look used
    bucket.charge(BURST * 3, now)
    assert not bucket.is_full(now + 1)  # in debt
    assert LeasedBucket.local(RATE, BURST, 1 / 3, now=0.0).is_full(0.0)
