# C types for usage_collectors.py, compiled as usage_collectors_c (quotagate/compiled.py); the session
# core cimports the collectors to add its exchanges without a Python call.

cimport cython

cdef int PRODUCE
cdef Py_ssize_t TOPIC_NAME_MAX


cdef class RequestCollector:
    cdef public Py_ssize_t limit
    cdef list _ts_ms, _user, _client_id, _api_key, _api_version, _topics, _bytes_in, _bytes_out
    cdef list _partitions_mutated, _latency_ms, _throttle_ms, _decision, _shadow_ms, _over_quota

    cpdef bint add_exchange(self, long long ts_ms, object user, object client_id, int api_key, int api_version,
                            tuple topics, Py_ssize_t bytes_in, Py_ssize_t bytes_out, long partitions_mutated,
                            double latency_ms, long throttle_ms, str decision, long shadow_ms, bint over_quota) except -1


cdef class Counters:
    cdef public long long requests
    cdef public double bytes_in
    cdef public long long bytes_out
    cdef public double request_time_ms
    cdef public long long throttle_ms
    cdef public long long throttle_ms_max
    cdef public long long throttled_requests
    cdef public long long refusals
    cdef public long long partitions_mutated
    cdef public long long shadow_throttle_ms
    cdef public double throttled_bytes
    cdef public double first_ms
    cdef public double last_ms
    cdef public double charge_offset_ms


cdef class AggregateCollector:
    cdef public Py_ssize_t limit
    cdef public long interval_ms
    cdef public Py_ssize_t topics_per_entity
    cdef public dict aggregates
    cdef public Py_ssize_t requests
    cdef dict _topics_named
    cdef public long long topics_folded
    cdef Counters _last
    cdef long _last_interval
    cdef object _last_user, _last_client_id, _last_topic
    cdef int _last_api_key

    @cython.locals(charged_ms=double, interval=long, share=Py_ssize_t, bytes_in_share=double, throttled_bytes=double,
                   first=bint, counters=Counters, folded=bint, named=Py_ssize_t)
    cpdef bint add_exchange(self, long long ts_ms, object user, object client_id, int api_key, int api_version,
                            tuple topics, Py_ssize_t bytes_in, Py_ssize_t bytes_out, long partitions_mutated,
                            double latency_ms, long throttle_ms, str decision, long shadow_ms, bint over_quota) except -1


@cython.locals(seq="long long", row=dict, out=list, counters=Counters)
cpdef list aggregate_rows(list items, str proxy_id, str writer, long long first_seq, long interval_ms)

@cython.locals(ts=list, users=list, client_ids=list, api_keys=list, topics=list, counters=Counters, requests=list,
               bytes_in=list, bytes_out=list, request_time_ms=list, throttle_ms=list, throttle_ms_max=list,
               throttled_requests=list, refusals=list, partitions_mutated=list, shadow_throttle_ms=list,
               throttled_bytes=list, first_ms=list, last_ms=list, charge_offset_ms=list)
cpdef tuple aggregate_columns(list items, long interval_ms)

@cython.locals(states=Py_ssize_t, state=Py_ssize_t, i=Py_ssize_t, groups=dict, keys=list, group_of_row=list, at=double)
cpdef tuple quota_groups(list at_ms, list users, list client_ids, list api_keys, list quota_since)


@cython.locals(states=Py_ssize_t, state=Py_ssize_t, last_state=Py_ssize_t, i=Py_ssize_t, finite=double, lines=list, heads=dict,
               topics_texts=dict, decision_texts=dict, ts_col=list, user_col=list, client_col=list, api_key_col=list,
               version_col=list, topics_col=list, bytes_in_col=list, bytes_out_col=list, partitions_col=list,
               latency_col=list, throttle_col=list, decision_col=list, shadow_col=list, over_quota_col=list,
               ts="long long", bytes_in=Py_ssize_t, bytes_out=Py_ssize_t, partitions=long, throttle=long, shadow=long,
               throttled_bytes=Py_ssize_t)
cpdef list request_lines(tuple columns, str proxy_id, str writer, long long first_seq, list quota_since,
                         object quota_suffix)

cdef tuple FRACTION_TEXTS

@cython.locals(ms=double, scaled=double, whole=double, fraction=double, us="long long", finite=double)
cpdef str milliseconds_text(object value)

cdef tuple SMALL_INT_TEXTS

cdef str int_text(long long value)
