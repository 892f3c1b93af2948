"""A bucket that spends tokens leased from a budget shared by several proxy processes.

Pure arithmetic, fed `now` and the grants; the Redis I/O that fetches the grants lives in
quotagate.proxy.cluster and never runs on the request path.

The shared budget is one token bucket (in Redis) per entity. A process holds a *lease*: tokens
taken out of that bucket in advance, spent locally with no round trip. Two modes:

- leased: `ceiling` is what is left of the lease plus a small credit (`credit_seconds` of the
  rate); `tokens` is that minus the shared debt seen at the last grant. The debt is paid off at
  the entity's full rate (every process sees the same debt shrink at the same speed, so throttle
  times agree), but the local balance never rises above the ceiling: the tokens the shared
  bucket earns belong to it, not to this process. The credit lets an entity that holds no lease
  (new, or idle) be served at once; what it spends is charged to the shared bucket at the next
  tick, so at most one credit (or, in strict mode, one item) per process gets past a shared
  bucket that is already empty.
- local: no lease (Redis unreachable, or not yet asked): a plain token bucket with `share` of the
  rate and burst, 1/N for N live processes, so N processes together stay within the quota.

At each sync the process reports the lease it held and what it spent since; the shared bucket
takes the lease back, charges the spending (which may drive it into debt) and grants the next
lease, sized from the recent rate so that a busy entity renews about every `lease_seconds` and an
idle one holds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

# Weight of the newest interval in the recent-rate estimate (an EWMA over syncs).
RATE_SMOOTHING = 0.5


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """What one sync asks of the shared bucket: give back `held`, charge `spent`, grant up to `want`."""

    held: float
    spent: float
    want: float
    spent_mark: float  # the bucket's `spent` when asked: what is spent after it counts against the new lease


@dataclass(slots=True, weakref_slot=True)  # SharedQuotas syncs it only while the engine holds it
class LeasedBucket:
    rate: float  # the entity's quota, tokens per second
    burst: float  # the entity's burst (the shared bucket's size)
    share: float  # this process's part of rate and burst while local (1/N)
    tokens: float
    ceiling: float  # leased: lease left + credit; local: the local burst
    updated: float  # time of the last refill
    leased: bool = False
    held: float = 0.0  # the last grant (0 while local)
    spent: float = 0.0  # spent since the last grant (or since going local)
    recent_rate: float = 0.0  # tokens per second spent lately (sizes the leases)
    synced: float = 0.0  # time of the last grant or of going local
    credit_seconds: float = 0.0  # leased: what may be spent beyond the lease before a throttle, in seconds of rate
    shared_debt: float = 0.0  # the shared bucket's debt at the last grant

    @classmethod
    def local(cls, rate: float, burst: float, share: float, now: float) -> LeasedBucket:
        """A new bucket while the shared bucket is unreachable: its share of the quota, full."""
        return cls(rate, burst, share, burst * share, burst * share, now, synced=now)

    @classmethod
    def shared(cls, rate: float, burst: float, share: float, credit_seconds: float, now: float) -> LeasedBucket:
        """A new bucket while the shared bucket is reachable: no lease yet, only the credit."""
        credit = rate * credit_seconds
        return cls(rate, burst, share, credit, credit, now, True, synced=now, credit_seconds=credit_seconds)

    @property
    def credit(self) -> float:
        return self.rate * self.credit_seconds

    # the TokenBucket interface the engine, the charging and the topic guard use --------------------
    @property
    def refill_rate(self) -> float:
        return self.rate if self.leased else self.rate * self.share

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.ceiling, self.tokens + (now - self.updated) * self.refill_rate)
            self.updated = now

    def record(self, amount: float, now: float) -> None:
        self.refill(now)
        self.tokens -= amount
        self.spent += amount
        if self.leased:
            self.ceiling -= amount

    def charge(self, amount: float, now: float) -> int:
        self.record(amount, now)
        return 0 if self.tokens >= 0 else round(-self.tokens / self.refill_rate * 1000)

    def tokens_at(self, now: float) -> float:
        """The balance at `now`, without changing the bucket (scrapes read it from another thread)."""
        if now > self.updated:
            return min(self.ceiling, self.tokens + (now - self.updated) * self.refill_rate)
        return self.tokens

    def throttle_ms(self, now: float) -> int:
        """Reads only, as TokenBucket.throttle_ms: refilling now or at the next record is the same."""
        tokens = self.tokens_at(now)
        return 0 if tokens >= 0 else round(-tokens / self.refill_rate * 1000)

    def is_full(self, now: float) -> bool:
        """Whether the bucket is back where a new one starts: holding no lease, nothing spent since
        the last sync, refilled to its ceiling (the credit when shared, its share of the burst when
        local). Dropping it then changes no decision: a new one starts the same, and any shared debt
        stays in the shared bucket, which the new one's first sync reads."""
        if self.held or self.spent:
            return False
        return self.tokens_at(now) >= (self.credit if self.leased else self.burst * self.share)

    def give_back(self, amount: float, now: float) -> None:
        """Returns tokens charged for work that did not happen."""
        self.record(-amount, now)
        if not self.leased:
            self.tokens = min(self.ceiling, self.tokens)

    def reconfigure(self, rate: float, burst: float, now: float) -> None:
        self.refill(now)
        old_credit = self.credit
        self.rate = rate
        self.burst = burst
        if self.leased:
            self.ceiling += self.credit - old_credit
            self.tokens = min(self.tokens, self.ceiling)
        else:
            self.ceiling = burst * self.share
            self.tokens = min(self.tokens, self.ceiling)

    # syncing with the shared bucket ----------------------------------------------------------------
    def wants_sync(self, now: float, lease_seconds: float) -> bool:
        """Whether this bucket has something to tell or ask the shared bucket now."""
        if not self.leased:
            return True  # join (first use, or Redis is back)
        # Reads only: `updated` must keep saying when the bucket was last used, so that an idle one
        # can be dropped (QuotaEngine.expire_idle).
        if self.held == 0 and self.spent == 0 and self.tokens_at(now) >= 0:
            return False  # idle, holding nothing and out of debt
        if now - self.synced >= lease_seconds:
            return True  # renew a busy lease, or give back an idle one
        if self.shared_debt > 0:
            return False  # in debt: asking again before the period ends would only cost Redis calls
        return self.ceiling - self.credit < self.held / 2  # more than half of the lease used already

    def lease_request(self, now: float, lease_seconds: float) -> LeaseRequest:
        """What to report and ask for at a sync now."""
        self.refill(now)
        elapsed = now - self.synced
        if elapsed > 0:
            latest = self.spent / elapsed
            self.recent_rate = (
                latest if self.recent_rate == 0 else (RATE_SMOOTHING * latest + (1 - RATE_SMOOTHING) * self.recent_rate)
            )
        # Enough for one lease period at the recent rate, with room for the request in flight;
        # never more than half the burst, so one busy process cannot hold the others' share.
        want = min(self.recent_rate * lease_seconds * 1.5, self.burst / 2)
        if want < 1.0:
            want = 0.0  # idle: hold nothing
        if self.leased:
            return LeaseRequest(self.held, self.spent, want, self.spent)
        # Joining: charge what the local bucket is below its full share (what was used and not
        # yet earned back locally), not everything spent while local, which its share paid for.
        depletion = max(0.0, min(self.spent, self.burst * self.share - self.tokens))
        return LeaseRequest(0.0, depletion, want, self.spent)

    def apply_grant(
        self, request: LeaseRequest, grant: float, shared_tokens: float, now: float, credit_seconds: float
    ) -> None:
        """Takes the shared bucket's answer: `grant` tokens, and its balance after the grant
        (negative: the shared debt, which this process's throttles then include)."""
        in_flight = self.spent - request.spent_mark  # spent while the sync was on its way
        self.leased = True
        self.credit_seconds = credit_seconds
        self.held = grant
        self.spent = in_flight
        self.ceiling = grant - in_flight + self.credit
        self.shared_debt = max(0.0, -shared_tokens)
        self.tokens = self.ceiling - self.shared_debt
        self.updated = self.synced = now

    def go_local(self, share: float, now: float) -> None:
        """The shared bucket is unreachable: enforce `share` of the quota alone, keeping any debt."""
        self.refill(now)
        self.leased = False
        self.share = share
        self.held = 0.0
        self.spent = 0.0
        self.ceiling = self.burst * share
        self.tokens = min(self.tokens, self.ceiling)
        self.synced = now
