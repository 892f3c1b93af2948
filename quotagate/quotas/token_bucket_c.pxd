# C types for token_bucket.py, compiled as token_bucket_c (quotagate/compiled.py): the charges the
# exchange core makes per request then stay in C. charging_c cimports TokenBucket.

cimport cython

cdef class TokenBucket:
    cdef public double rate
    cdef public double burst
    cdef public double tokens
    cdef public double updated
    cpdef void refill(self, double now) noexcept
    cpdef void record(self, double amount, double now) except *
    @cython.locals(tokens=double)
    cpdef long charge(self, double amount, double now) except? -1
    cpdef double tokens_at(self, double now) noexcept
    @cython.locals(tokens=double)
    cpdef long throttle_ms(self, double now) except? -1


cdef class ShadowTokenBucket(TokenBucket):
    cdef public double held_ms
    cpdef void record(self, double amount, double now) except *
    cpdef long charge(self, double amount, double now) except? -1
    cpdef long throttle_ms(self, double now) except? -1
