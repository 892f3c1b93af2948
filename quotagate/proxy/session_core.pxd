# The session core's C declarations: connection_core (the compiled glue) reads its queues and feeds it
# without a Python call. What each field means is said where it is set (session.py's Session.__init__).

cdef class InFlight:
    cdef readonly int correlation_id
    cdef readonly int api_key
    cdef readonly int api_version
    cdef readonly object client_id
    cdef readonly Py_ssize_t request_size  # header + body, without the size prefix
    cdef readonly double sent_at  # when forwarded
    cdef readonly int fetch_max_wait_ms
    cdef readonly bint exempt  # never charged request time
    # A response the proxy makes itself (the request was not forwarded); sent in its turn.
    cdef readonly object local_response
    # Topics the proxy refused from a forwarded produce, merged back into the broker's answer.
    cdef readonly object refused
    cdef readonly object topic_order
    # Least throttle the response must carry (a refusal says when to come back).
    cdef readonly int min_throttle_ms
    cdef readonly object mutation
    cdef readonly bint over_quota  # a produce whose charge when read left its entity over quota (usage records)


cdef class SessionCore:
    cdef public object services
    cdef public list to_broker
    cdef public list to_client
    cdef public double muted_until
    cdef public object user
    cdef public bint connected
    cdef public bint authenticating
    cdef public bint awaiting_authentication
    cdef public object receive_limit
    cdef public object pending_refusal
    cdef public object refusal
    cdef public object in_flight
    cdef public object held
    cdef public object entity_buckets
    cdef public object entity_client_id
    # Kept by the general path: a partial frame is buffered on that side (or a response is being
    # cut through), so the next read must go through its splitter.
    cdef public bint client_partial
    cdef public bint broker_partial
    cdef public bint fast_lane
    # services' parts and the queues' methods, read per exchange
    cdef object _engine, _metrics, _entity_metrics, _topic_guard, _rewriters, _cluster, _usage
    cdef dict _requests_by_key, _latency_by_key
    cdef object _in_flight_append, _in_flight_popleft
    cdef Py_ssize_t _max_frame_size
    # The last client id's bytes and its decoded str: a connection sends the same one every time.
    cdef bytes _client_id_raw
    cdef object _client_id
    cdef object _entity_key  # (user, client_id) of the entity counters last written

    cdef bint is_holding(self) except -1
    cdef void feed_client(self, object data, double now) except *
    cdef void feed_broker(self, object data, double now) except *
    cdef bint _client_lane(self, bytes data, double now) except -1
    cdef int _request(self, bytes data, const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, double now) except -1
    cdef object _decode_client_id(self, const unsigned char* at, int length)
    cdef object _lane_buckets(self, object client_id, double now)
    cdef bint _broker_lane(self, bytes data, double now) except -1
    cdef bint _response(self, object frame, const unsigned char* buf, Py_ssize_t length, double now) except -1
    cdef void _observe_latency(self, int api_key, double seconds) except *
    cdef void _record_response(self, InFlight request, Py_ssize_t response_size, bint charged_time,
                               double request_ms, long throttle, double now) except *
