# C types for charging.py, compiled as charging_c (quotagate/compiled.py); session_core_c cimports it.

cimport cython

from quotagate.quotas.token_bucket_c cimport bucket_charge, bucket_throttle_ms

cdef int BYTES_IN, BYTES_OUT, LONG_POLL, PARTITIONS_MUTATED

# An entity's counters as C fields: count_exchange (and the session core) add to them in C.
cdef class EntityStats:
    cdef public double produce_bytes, fetch_bytes, request_seconds, mutations
    cdef public double produce_throttle_seconds, fetch_throttle_seconds, request_throttle_seconds, mutation_throttle_seconds
    cdef public long throttled_produce, throttled_fetch, throttled_request, throttled_controller_mutation
    cdef public long shadow_throttled
    cdef public double shadow_throttle_seconds
    cdef public double last_seen
    cdef public object tenants, tenant

@cython.locals(waited=double)
cpdef double request_time_ms(int policy, double latency_ms, int fetch_max_wait_ms) except? -1
cpdef long charge_request(object buckets, int policy, Py_ssize_t request_size, double now) except? -1
@cython.locals(throttle=long)
cpdef long fetch_throttle_ms(object buckets, double now) except? -1
cdef inline long _with_request_time(long throttle, long time_throttle, long cap) noexcept
cpdef long shadow_throttle_ms(object buckets, int policy, bint charged_request_time, double now) except? -1
@cython.locals(throttle=long)
cpdef long charge_response(object buckets, int policy, Py_ssize_t response_size, object request_ms, double now) except? -1
@cython.locals(seconds=double)
cpdef void count_exchange(EntityStats stats, int policy, Py_ssize_t request_size, Py_ssize_t response_size, object request_ms, long throttle_ms) except *
