"""A token bucket whose tokens may go negative (KIP-599's TokenBucket), and a tenant member's pair.

Tokens accrue at `rate` per second up to `burst`. Recording an amount always succeeds and may drive
the tokens below zero; a negative balance K means the caller is in debt and must wait −K / rate
seconds before it is back at zero. That wait is the throttle time. A tenant member draws on two
buckets for a key, its own entity's and its tenant's: `MemberBucket` charges both.

Compiled as token_bucket_c with the exchange core (quotagate/compiled.py), so a charge on the hot
path is a C call, a member's too; quotas.bucket gives the build that runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class TokenBucket:
    rate: float  # tokens per second, > 0
    burst: float  # most tokens the bucket holds
    tokens: float
    updated: float  # time of the last refill, seconds

    @classmethod
    def full(cls, rate: float, burst: float, now: float) -> TokenBucket:
        return cls(rate, burst, burst, now)

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def record(self, amount: float, now: float) -> None:
        self.refill(now)
        self.tokens -= amount

    def charge(self, amount: float, now: float) -> int:
        """Records `amount` and returns the throttle in ms that leaves (record, then throttle_ms)."""
        # refill() inlined, and min() spelled out: this runs per request on the proxy's hot path and
        # per recorded request in the what-if replay
        tokens = self.tokens
        if now > self.updated:
            tokens += (now - self.updated) * self.rate
            if tokens > self.burst:
                tokens = self.burst
            self.updated = now
        tokens = self.tokens = tokens - amount
        if tokens >= 0:
            return 0
        return round(-tokens / self.rate * 1000)

    def tokens_at(self, now: float) -> float:
        """The balance at `now`, without changing the bucket (safe to read from another thread)."""
        if now > self.updated:
            return min(self.burst, self.tokens + (now - self.updated) * self.rate)
        return self.tokens

    def throttle_ms(self, now: float) -> int:
        """How long, in ms, until the balance is back at zero (0 when not in debt). Reads only:
        refilling now or at the next record gives the same balance."""
        tokens = self.tokens  # tokens_at(now), inlined for the same reason as in charge()
        if now > self.updated:
            tokens += (now - self.updated) * self.rate
            if tokens > self.burst:
                tokens = self.burst
        if tokens >= 0:
            return 0
        return round(-tokens / self.rate * 1000)

    def would_throttle_ms(self, now: float) -> int:
        """The throttle the balance calls for, applied or not (a shadow quota's is never applied)."""
        return TokenBucket.throttle_ms(self, now)

    def is_full(self, now: float) -> bool:
        """Whether the bucket is back where a new one starts: dropping it then changes no decision."""
        return self.tokens_at(now) >= self.burst

    def give_back(self, amount: float, now: float) -> None:
        """Returns tokens charged for work that did not happen (never above the burst)."""
        self.refill(now)
        self.tokens = min(self.burst, self.tokens + amount)

    def reconfigure(self, rate: float, burst: float, now: float) -> None:
        """Applies a new quota from `now` on. Tokens earned so far count at the old rate and any
        debt is kept: a quota change never forgives what was already used."""
        self.refill(now)
        self.rate = rate
        self.burst = burst
        self.tokens = min(self.tokens, burst)


@dataclass
class ShadowTokenBucket(TokenBucket):
    """A shadow quota's bucket: charged as any other, but it never asks for a throttle.

    What it reports is the time it would have held the entity at its rate: what each charge puts
    below zero, divided by the rate (the usage pipeline's "time held at the quota": a client held at
    a quota moves those bytes at its rate). Summing each response's would-be throttle instead counts
    the same debt again at every response (32 286 s over a 20 s run). `would_throttle_ms` is the
    throttle the balance calls for now, as /quotas shows it."""

    held_ms: float = 0.0  # time held by charges not yet reported (take_held_ms)

    def record(self, amount: float, now: float) -> None:
        TokenBucket.record(self, amount, now)
        if self.tokens < 0 and amount > 0:
            self.held_ms += min(amount, -self.tokens) / self.rate * 1000

    def charge(self, amount: float, now: float) -> int:
        self.record(amount, now)
        return 0

    def throttle_ms(self, now: float) -> int:
        return 0

    def take_held_ms(self) -> int:
        """The time held since the last call, in whole ms; the fraction stays for the next call,
        so the reported times add up to the time held."""
        whole = int(self.held_ms)
        self.held_ms -= whole
        return whole


class MemberBucket:
    """A tenant member's charges for one key: its own entity's bucket and its tenant's, both charged
    every time, the throttle the larger of the two (a member is held by whichever binds first).
    Answers what the session's charging reads of a bucket (charge, throttle_ms, tokens, ...). Either
    may be a TokenBucket (C calls, compiled) or a Redis-leased bucket (Python calls)."""

    __slots__ = ("own", "tenant")

    def __init__(self, own: Any, tenant: Any) -> None:
        self.own = own
        self.tenant = tenant

    @property
    def tokens(self) -> float:
        """The lower balance as last refilled: below zero when either is in debt (the tenant's may
        have gone there through another member's charge since; charging reads it, not a copy)."""
        own, tenant = self.own.tokens, self.tenant.tokens
        return own if own < tenant else tenant

    def charge(self, amount: float, now: float) -> int:
        own = bucket_charge(self.own, amount, now)
        tenant = bucket_charge(self.tenant, amount, now)
        return own if own > tenant else tenant

    def record(self, amount: float, now: float) -> None:
        self.own.record(amount, now)
        self.tenant.record(amount, now)

    def refill(self, now: float) -> None:
        self.own.refill(now)
        self.tenant.refill(now)

    def throttle_ms(self, now: float) -> int:
        own = bucket_throttle_ms(self.own, now)
        tenant = bucket_throttle_ms(self.tenant, now)
        return own if own > tenant else tenant

    def give_back(self, amount: float, now: float) -> None:
        self.own.give_back(amount, now)
        self.tenant.give_back(amount, now)

    def tokens_at(self, now: float) -> float:
        own = self.own.tokens_at(now)  # C doubles, compiled (token_bucket_c.pxd)
        tenant = self.tenant.tokens_at(now)
        return own if own < tenant else tenant

    def take_held_ms(self) -> int:
        """What the shadow one of the two would have held the member (charging.shadow_throttle_ms)."""
        held = 0
        for bucket in (self.own, self.tenant):
            if isinstance(bucket, ShadowTokenBucket):
                held = max(held, bucket.take_held_ms())
        return held

    @property
    def shadow(self) -> bool:
        return isinstance(self.own, ShadowTokenBucket) or isinstance(self.tenant, ShadowTokenBucket)


def bucket_charge(bucket: Any, amount: float, now: float) -> int:
    """`bucket.charge(amount, now)` for any of the engine's buckets. Compiled, a TokenBucket's (or a
    ShadowTokenBucket's) and a tenant member's are C calls; a Redis-leased bucket's stays a Python one."""
    if isinstance(bucket, TokenBucket):
        token = bucket  # typed TokenBucket when compiled (token_bucket_c.pxd)
        return token.charge(amount, now)
    if isinstance(bucket, MemberBucket):
        member = bucket  # typed MemberBucket when compiled
        return member.charge(amount, now)
    return bucket.charge(amount, now)


def bucket_throttle_ms(bucket: Any, now: float) -> int:
    """`bucket.throttle_ms(now)` for any of the engine's buckets, a C call as `bucket_charge`'s."""
    if isinstance(bucket, TokenBucket):
        token = bucket
        return token.throttle_ms(now)
    if isinstance(bucket, MemberBucket):
        member = bucket
        return member.throttle_ms(now)
    return bucket.throttle_ms(now)
