# C types for token_bucket.py, compiled as token_bucket_c (quotagate/compiled.py): the charges the
# exchange core makes per request then stay in C. A throttle is a Python int: a debt at a tiny rate
# asks for more milliseconds than a C long holds (the engine's callers cap it).

cimport cython

cdef class TokenBucket:
    cdef public double rate
    cdef public double burst
    cdef public double tokens
    cdef public double updated
    cpdef void refill(self, double now) noexcept
    cpdef void record(self, double amount, double now) except *
    @cython.locals(tokens=double)
    cpdef object charge(self, double amount, double now)
    cpdef double tokens_at(self, double now) noexcept
    @cython.locals(tokens=double)
    cpdef object throttle_ms(self, double now)


cdef class ShadowTokenBucket(TokenBucket):
    cdef public double held_ms
    cpdef void record(self, double amount, double now) except *
    cpdef object charge(self, double amount, double now)
    cpdef object throttle_ms(self, double now)


# A tenant member's pair: its own bucket and its tenant's (TokenBuckets, or Redis-leased ones).
cdef class MemberBucket:
    cdef public object own
    cdef public object tenant
    cpdef object charge(self, double amount, double now)
    cpdef void record(self, double amount, double now) except *
    cpdef void refill(self, double now) except *
    cpdef object throttle_ms(self, double now)
    cpdef void give_back(self, double amount, double now) except *
    @cython.locals(own=double, tenant=double)
    cpdef double tokens_at(self, double now) except? -1.0


@cython.locals(token=TokenBucket, member=MemberBucket)
cpdef object bucket_charge(object bucket, double amount, double now)
@cython.locals(token=TokenBucket, member=MemberBucket)
cpdef object bucket_throttle_ms(object bucket, double now)
