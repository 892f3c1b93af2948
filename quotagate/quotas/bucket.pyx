# cython: language_level=3
"""A token bucket whose tokens may go negative (KIP-599's TokenBucket).

Tokens accrue at `rate` per second up to `burst`. Recording an amount always succeeds and may drive
the tokens below zero; a negative balance K means the caller is in debt and must wait −K / rate
seconds before it is back at zero. That wait is the throttle time.

Compiled (Cython): it is charged per request on the proxy's hot path (the fast lane in
proxy/session_core.pyx calls it without a Python call) and per recorded request in the pipeline's
what-if replay. The arithmetic is Python's, operation for operation, in IEEE doubles, and the
milliseconds are rounded as Python's round() rounds (half to even), so a replay and the proxy agree.
"""

from libc.math cimport fabs, isfinite, nearbyint

# Throttles beyond this many ms (3 × 10^8 years) are rounded by Python's round(), as before.
cdef double _LARGEST_MS = 9.0e18


cdef inline long long _debt_ms(double tokens, double rate) except? -1:
    """round(-tokens / rate * 1000), for tokens < 0."""
    cdef double ms = -tokens / rate * 1000
    if not isfinite(ms) or fabs(ms) >= _LARGEST_MS:
        return round(ms)  # Python's: raises on inf and nan, as the pure-Python bucket did
    return <long long>nearbyint(ms)  # the default rounding mode: to nearest, ties to even


cdef class TokenBucket:
    """rate: tokens per second, > 0; burst: most tokens the bucket holds; updated: time of the last
    refill, seconds."""

    def __init__(self, double rate, double burst, double tokens, double updated):
        self.rate = rate
        self.burst = burst
        self.tokens = tokens
        self.updated = updated

    @classmethod
    def full(cls, double rate, double burst, double now):
        return cls(rate, burst, burst, now)

    cpdef void refill(self, double now):
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    cpdef void record(self, double amount, double now):
        self.refill(now)
        self.tokens -= amount

    cpdef long long charge(self, double amount, double now) except? -1:
        """Records `amount` and returns the throttle in ms that leaves (record, then throttle_ms)."""
        cdef double tokens = self.tokens
        if now > self.updated:
            tokens += (now - self.updated) * self.rate
            if tokens > self.burst:
                tokens = self.burst
            self.updated = now
        tokens = tokens - amount
        self.tokens = tokens
        if tokens >= 0:
            return 0
        return _debt_ms(tokens, self.rate)

    cpdef double tokens_at(self, double now):
        """The balance at `now`, without changing the bucket (safe to read from another thread)."""
        if now > self.updated:
            return min(self.burst, self.tokens + (now - self.updated) * self.rate)
        return self.tokens

    cpdef long long throttle_ms(self, double now) except? -1:
        """How long, in ms, until the balance is back at zero (0 when not in debt). Reads only:
        refilling now or at the next record gives the same balance."""
        cdef double tokens = self.tokens
        if now > self.updated:
            tokens += (now - self.updated) * self.rate
            if tokens > self.burst:
                tokens = self.burst
        if tokens >= 0:
            return 0
        return _debt_ms(tokens, self.rate)

    def would_throttle_ms(self, double now):
        """The throttle the balance calls for, applied or not (a shadow quota's is never applied)."""
        return TokenBucket.throttle_ms(self, now)

    def is_full(self, double now):
        """Whether the bucket is back where a new one starts: dropping it then changes no decision."""
        return self.tokens_at(now) >= self.burst

    def give_back(self, double amount, double now):
        """Returns tokens charged for work that did not happen (never above the burst)."""
        self.refill(now)
        self.tokens = min(self.burst, self.tokens + amount)

    def reconfigure(self, double rate, double burst, double now):
        """Applies a new quota from `now` on. Tokens earned so far count at the old rate and any
        debt is kept: a quota change never forgives what was already used."""
        self.refill(now)
        self.rate = rate
        self.burst = burst
        self.tokens = min(self.tokens, burst)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return (self.rate, self.burst, self.tokens, self.updated) == (other.rate, other.burst, other.tokens, other.updated)

    __hash__ = None  # mutable, as the dataclass it replaces

    def __repr__(self):
        return (
            f"{type(self).__name__}(rate={self.rate!r}, burst={self.burst!r}, "
            f"tokens={self.tokens!r}, updated={self.updated!r})"
        )

    def __reduce__(self):
        return type(self), (self.rate, self.burst, self.tokens, self.updated)


cdef class ShadowTokenBucket(TokenBucket):
    """A shadow quota's bucket: charged as any other, but it never asks for a throttle. What it would
    have asked for is `would_throttle_ms` (its debt in time), reported in metrics and usage records."""

    cpdef long long charge(self, double amount, double now) except? -1:
        self.record(amount, now)
        return 0

    cpdef long long throttle_ms(self, double now) except? -1:
        self.refill(now)
        return 0
