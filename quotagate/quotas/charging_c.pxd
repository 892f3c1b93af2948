# C types for charging.py, compiled as charging_c (quotagate/compiled.py); session_core_c cimports it.

cimport cython

from quotagate.quotas.token_bucket_c cimport bucket_charge, bucket_throttle_ms

cdef int BYTES_IN, BYTES_OUT, LONG_POLL, PARTITIONS_MUTATED

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
cpdef void count_exchange(object stats, int policy, Py_ssize_t request_size, Py_ssize_t response_size, object request_ms, long throttle_ms) except *
