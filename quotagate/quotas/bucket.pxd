# The token bucket's C declarations: session_core (the proxy's fast lane) calls it without a Python call.

cdef class TokenBucket:
    cdef public double rate
    cdef public double burst
    cdef public double tokens
    cdef public double updated

    cpdef void refill(self, double now)
    cpdef void record(self, double amount, double now)
    cpdef long long charge(self, double amount, double now) except? -1
    cpdef double tokens_at(self, double now)
    cpdef long long throttle_ms(self, double now) except? -1


cdef class ShadowTokenBucket(TokenBucket):
    pass
