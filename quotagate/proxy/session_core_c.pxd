# C types for session_core.py, compiled as session_core_c (quotagate/compiled.py). What each field
# means is said where session_core.py sets it; connection_core_c cimports SessionCore to feed it.

cimport cython

from quotagate.protocol.frames_c cimport FrameSplitter, frame_end, splitter
from quotagate.proxy.flow_control_c cimport FlowControl, new_flow_control
from quotagate.protocol.produce_walk_c cimport _skip_tags, _uvarint, i32, produce_acks, produce_topics, usual_throttle_offset
from quotagate.proxy.usage_collectors_c cimport AggregateCollector, RequestCollector
from quotagate.protocol.rewrite_memo_c cimport RewriteMemo
from quotagate.quotas.charging_c cimport EntityStats, charge_request, charge_response, count_exchange, fetch_throttle_ms, request_time_ms, shadow_throttle_ms

# Constants (their values and meaning: session_core.py, quotas/apis.py).
cdef int KEYS, VERSIONS
cdef int BYTES_IN, LONG_POLL, SASL, REQUEST_TIME, TOPIC_NAMES, DEFAULT_POLICY
cdef int API_PRODUCE, API_FETCH, API_SASL_HANDSHAKE, API_API_VERSIONS, API_SASL_AUTHENTICATE, API_SHARE_FETCH
cdef int AUTHENTICATING, EXCHANGING, AUTHENTICATING_END_UNSEEN, AWAITING_AUTHENTICATION, AUTHENTICATION_FAILED, OPEN
cdef int AWAITING_LOCAL_ANSWER, REFUSED
# The events moving the phase stay Python objects, for session.py to read.
cdef dict TRANSITIONS
cdef bint RECEIVE_LIMITED[8]
cdef bint WAITS[8]
cdef Py_ssize_t FRAME_SIZE_BYTES, PARTIAL_HEAD_BYTES, MAX_RESPONSE_FRAME, STREAM_RESPONSES_FROM, RESPONSE_HEAD_BYTES
cdef int READS_IT, ENDS_EXCHANGE, STRAY_IN_EXCHANGE
cdef long MAX_TAGS
cdef int MIN_BYTES_AFTER, MAX_BYTES_AFTER, SESSION_EPOCH_AFTER, MAX_BYTES_FROM, SESSIONS_FROM, REPLICA_ID_IN_BODY_UNTIL

cdef int POLICY[128]
cdef int MAX_VERSION[128]
cdef int FLEXIBLE_FROM[128]
cdef double BOUNDS[16]
cdef Py_ssize_t N_BOUNDS

@cython.locals(value=int)
cdef inline int _i16(const unsigned char* buf, Py_ssize_t pos) noexcept


cdef int SLOTS, LATENCY_STRIDE
@cython.locals(written=Py_ssize_t, index=Py_ssize_t)
cdef Py_ssize_t _bytes_from(list out, Py_ssize_t start) except -1
cdef inline int _slot(int api_key) noexcept
cdef inline int _slot_key(int slot) noexcept


cdef class ExchangeCounters:
    cdef public long long bytes_in
    cdef public long long bytes_out
    cdef long long requests[129]  # SLOTS
    cdef long long latency_counts[2193]  # SLOTS * LATENCY_STRIDE
    cdef double latency_seconds[129]

    cpdef void count_request(self, int api_key) noexcept
    @cython.locals(slot=int, index=int)
    cpdef void observe_latency(self, int api_key, double seconds) noexcept
    @cython.locals(counted=dict, slot=int)
    cpdef dict requests_by_key(self)
    @cython.locals(observed=dict, slot=int, start=Py_ssize_t, counts=list, index=int)
    cpdef dict latency_by_key(self)


cdef class InFlight:
    cdef readonly int correlation_id
    cdef readonly int api_key
    cdef readonly int api_version
    cdef readonly object client_id
    cdef readonly Py_ssize_t request_size
    cdef readonly double sent_at
    cdef readonly int fetch_max_wait_ms
    cdef readonly int policy
    cdef readonly object local_response
    cdef readonly object refused
    cdef readonly object topic_order
    cdef readonly int min_throttle_ms
    cdef readonly object mutation
    cdef readonly object answer_after
    cdef readonly object responder
    cdef readonly double handling_ms
    cdef readonly bint over_quota
    cdef readonly bint empty_fetch


cdef class SessionCore:
    cdef public object services
    cdef public list to_broker
    cdef public list to_client
    cdef public list brokers_seen
    cdef public FlowControl flow
    cdef public object user
    cdef public int phase
    cdef public bint connected
    cdef public bint authenticating
    cdef InFlight _answer_later
    cdef object _receive_limit
    cdef public object pending_refusal
    cdef public object refusal
    cdef public object refusal_reason
    cdef public object in_flight
    cdef public object held
    cdef Py_ssize_t _held_from
    cdef public FrameSplitter client_frames
    cdef public FrameSplitter broker_frames
    cdef public Py_ssize_t partial_counted
    cdef public object entity_buckets
    cdef public object entity_client_id
    cdef public int hooked
    cdef readonly object policies
    cdef list _chains
    cdef public object pending_answer
    cdef public object answer_ready
    cdef ExchangeCounters _counters
    cdef object _clock, _engine, _metrics, _entity_metrics, _cluster, _usage
    cdef AggregateCollector _aggregates
    cdef RequestCollector _records
    cdef dict _rewriters, _stats_by_entity
    cdef bint _memoized[128]
    cdef double _wall_offset
    cdef dict _topic_names
    cdef list _last_sent
    cdef tuple _last_order
    cdef Py_ssize_t _max_frame_size
    cdef bytes _client_id_raw
    cdef object _client_id
    cdef object _in_flight_append, _in_flight_popleft
    cdef tuple _entity_key

    @cython.locals(phase=int)
    cpdef void _enter(self, int event) except *
    cdef bint is_holding(self) except -1
    @cython.locals(frames=FrameSplitter, buf=bytes, n=Py_ssize_t, pos=Py_ssize_t)
    cdef void feed_client(self, object data, double now) except *
    @cython.locals(out=list, start=Py_ssize_t, frames=FrameSplitter, pos=Py_ssize_t, buf=bytes, n=Py_ssize_t, end=Py_ssize_t)
    cdef void feed_broker(self, object data, double now) except *
    @cython.locals(frames=FrameSplitter)
    cdef void _response_arriving(self, bytes buf, Py_ssize_t pos, double now) except *

    cdef bint _may_forward(self, double now) noexcept
    @cython.locals(out=list, run=Py_ssize_t, end=Py_ssize_t)
    cdef Py_ssize_t _take_requests(self, bytes buf, Py_ssize_t pos, Py_ssize_t stop, double now) except -1
    @cython.locals(whole=Py_ssize_t, end=Py_ssize_t, size=long)
    cdef void _hold_rest(self, bytes buf, Py_ssize_t pos, Py_ssize_t stop) except *
    @cython.locals(data=bytes, pos=Py_ssize_t)
    cdef void _release_held(self, double now) except *
    @cython.locals(size=Py_ssize_t)
    cdef object _request(self, bytes buf, Py_ssize_t pos, Py_ssize_t end, double now)
    @cython.locals(
        buf="const unsigned char*", api_key=int, version=int, correlation_id=int,
        client_id_len=int, body=Py_ssize_t, known=bint, authentication=int, flexible_from=int, policy=int, acks=int,
        max_wait=int, at=Py_ssize_t, min_throttle_ms=int, replace_answer=bint, epoch=int, handling_ms=double, started=double, throttle=long, over_quota=bint,
        entry=InFlight, admission=object, responder=object,
    )
    cdef object _peeked_request(self, bytes data, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t size, double now)
    cdef object _admit(self, tuple chain, object frame, object header, double now)
    cdef void _await_answer(self, object pending) except *
    cdef int _refuse_after_stray(self, int api_key) except -1
    @cython.locals(cap=int)
    cdef int _refuse_first(self, int api_key, int version, int policy, bint known) except -1
    @cython.locals(api_key=int, version=int, known=bint)
    cdef void check_partial_head(self, bytes head) except *
    @cython.locals(phase=int)
    cdef int _before_authentication(self, int api_key, int policy) except -1
    @cython.locals(raw=bytes)
    cdef object _decode_client_id(self, bytes data, Py_ssize_t at, Py_ssize_t length)
    @cython.locals(sent=list, names=dict, order=list, raw=bytes)
    cdef tuple _topic_order(self, const unsigned char* buf, Py_ssize_t body, Py_ssize_t end, int version)
    cdef object _buckets(self, object client_id, double now)
    @cython.locals(key=tuple, stats=EntityStats)
    cdef EntityStats _entity_stats(self, object client_id, double now)
    cdef void _local_turn(self, double now) except *
    cdef void _local_responses(self, double now) except *

    cdef void _release_held_if_answered(self, double now) except *
    @cython.locals(frames=FrameSplitter)
    cdef void _after_reads(self) except *
    cdef void _queue_refusal(self, object reason, object message) except *
    @cython.locals(buffered=Py_ssize_t, grown=Py_ssize_t)
    cdef void _count_partial(self) except *
    cdef void _drop_partial(self) except *
    cdef void _check_partial(self) except *
    @cython.locals(request=InFlight)
    cdef bint _streamable(self, object head) except -1
    @cython.locals(expected=InFlight)
    cdef InFlight _expected(self, object frame)
    @cython.locals(request=InFlight, memo=RewriteMemo, started=double)
    cdef void _whole_response(self, object frame, double now) except *
    @cython.locals(api_key=int, throttle=long, charged=long, latency_ms=double, response_size=Py_ssize_t, shadow_ms=long, started=double, answered=object)
    cdef object _respond(self, InFlight request, object frame, double now)
    cdef void _authentication_answered(self, int event, object user) except *
    @cython.locals(aggregates=AggregateCollector, records=RequestCollector, added=bint, partitions=long, ts_ms="long long")
    cdef void _account_usage(self, InFlight request, Py_ssize_t response_size, double latency_ms, long throttle,
                             long shadow_ms, double now) except *
    cdef void _mute(self, long throttle_ms, double now) except *


@cython.locals(entry=InFlight)
cdef InFlight _in_flight(int correlation_id, int api_key, int api_version, object client_id, Py_ssize_t request_size, double sent_at, int max_wait, int policy, bint over_quota)
@cython.locals(head=InFlight)
cdef bint _local_first(object in_flight) except -1
cdef object _slice(bytes data, Py_ssize_t start, Py_ssize_t end)
@cython.locals(head=bytes)
cdef int _correlation_id(object frame) except? -1
cdef bytearray _patched_fetch(object frame, Py_ssize_t max_wait_at, long max_bytes, bint answer_replaced)
cdef void _put_i32(bytearray buf, Py_ssize_t pos, long value) except *
@cython.locals(count=long, after=Py_ssize_t)
cdef Py_ssize_t _header_tags_end(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end) except -1
@cython.locals(data=bytes, length=Py_ssize_t, throttle_at=Py_ssize_t)
cdef bint _plain_produce_response(object frame, int version) except -1
