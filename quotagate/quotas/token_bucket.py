"""A token bucket whose tokens may go negative (KIP-599's TokenBucket).

Tokens accrue at `rate` per second up to `burst`. Recording an amount always succeeds and may drive
the tokens below zero; a negative balance K means the caller is in debt and must wait −K / rate
seconds before it is back at zero. That wait is the throttle time.

Compiled as token_bucket_c with the exchange core (quotagate/compiled.py), so a charge on the hot
path is a C call; quotas.bucket gives the build that runs.
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


def bucket_charge(bucket: Any, amount: float, now: float) -> int:
    """`bucket.charge(amount, now)` for any of the engine's buckets. Compiled, a TokenBucket's (or a
    ShadowTokenBucket's) is a C call; a tenant member's or a Redis-leased bucket's stays a Python one."""
    if isinstance(bucket, TokenBucket):
        token = bucket  # typed TokenBucket when compiled (token_bucket_c.pxd)
        return token.charge(amount, now)
    return bucket.charge(amount, now)


def bucket_throttle_ms(bucket: Any, now: float) -> int:
    """`bucket.throttle_ms(now)` for any of the engine's buckets, a C call as `bucket_charge`'s."""
    if isinstance(bucket, TokenBucket):
        token = bucket
        return token.throttle_ms(now)
    return bucket.throttle_ms(now)
