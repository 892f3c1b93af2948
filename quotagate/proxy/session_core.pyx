# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The session's hot state and its fast lane, compiled: plain requests and their responses in C.

`Session` (session.py) subclasses `SessionCore` and holds every decision; this module holds the state
those decisions share with the lane, and the lane itself: the same decisions for the exchanges that
make up nearly all of a proxy's traffic, made without a Python call per request. A read takes the
lane when the session is in its plain state (connected, authenticated, not muted, holding nothing,
no partial frame on either side, no refusal pending, usage records off) and consists of whole frames;
each frame in it takes the lane when its API needs no decision beyond the lane's:

- a request: header peek, the advertised version cap, the request counter, a Produce's acks and its
  charge to producer_byte_rate (muting if that put the client in debt), a Fetch's max wait, then the
  frame goes to the broker and an `InFlight` into the FIFO;
- a response: matched to the FIFO's head by correlation id, rewritten if it names brokers (the
  Python rewriters; a Produce response only when it carries top-level tags), then the upstream
  latency, the request time and the fetch bytes charged, the entity's counters added to, and the
  throttle patched and the client muted when one is due.

Anything else (a frame the lane does not know, a partial frame, SASL, topic thresholds, mutations,
proxy-made answers, shadow quotas, a charge the lane would have to refuse) goes to the session's
general path (`Session._client_data`, `_requests`, `_broker_data`) from that frame on, so order is
never changed: the lane handles a prefix of a read and the general path the rest. The two must agree
byte for byte and counter for counter: tests/unit/test_session_lane.py runs the same streams through
both and compares everything a client or an operator could see.

Charges go through the quota engine's own buckets (`TokenBucket.charge`): one definition of a bucket.
It stays Python: the pipeline ships quotagate's sources to Spark executors as a zip (no compiled
module can be imported from one), and its what-if replay charges the same buckets there.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcmp

from quotagate.protocol.produce_walk cimport usual_throttle_offset

from collections import deque

from quotagate.protocol.apis import MAX_VERSIONS, ApiKey, is_flexible
from quotagate.protocol.fetch import REPLICA_ID_IN_BODY_UNTIL
from quotagate.protocol.throttle import THROTTLE_EXEMPT_APIS, patch_throttle_time
from quotagate.protocol.mutations import MUTATION_APIS
from quotagate.proxy.metrics import LATENCY_BUCKETS
from quotagate.proxy.quota_admin import CLIENT_QUOTA_APIS

# API keys and versions the lane's tables cover (others go to the general path).
cdef enum:
    KEYS = 128
    VERSIONS = 128

# Per API key: what the lane does with its requests.
cdef enum Kind:
    GENERAL = 0  # the general path: the API needs a decision the lane does not make
    PLAIN = 1  # forwarded as it is
    PRODUCE = 2
    FETCH = 3

cdef enum:
    API_PRODUCE = 0
    API_FETCH = 1
    API_SASL_HANDSHAKE = 17
    API_API_VERSIONS = 18
    API_SASL_AUTHENTICATE = 36
    API_SHARE_FETCH = 78
    PRODUCE_FLEXIBLE_FROM = 9

# Requests that go to the general path whatever their version: authentication, topic mutations
# (controller mutation quota), client quota APIs (answered by the proxy), ShareFetch (its max wait).
GENERAL_APIS = (
    {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE, ApiKey.SHARE_FETCH} | MUTATION_APIS | CLIENT_QUOTA_APIS
)

cdef Kind KIND[KEYS]
cdef int MAX_VERSION[KEYS]  # -1: no cap
cdef int FLEXIBLE_FROM[KEYS]  # first flexible version; VERSIONS: none below VERSIONS
cdef bint EXEMPT[KEYS]  # never charged request time
cdef double BOUNDS[16]
cdef int NBOUNDS = 0


cdef void _tables() except *:
    global NBOUNDS
    cdef int key, version, first
    exempt = set(THROTTLE_EXEMPT_APIS) | {API_SASL_HANDSHAKE, API_SASL_AUTHENTICATE}
    for key in range(KEYS):
        MAX_VERSION[key] = MAX_VERSIONS.get(key, -1)
        EXEMPT[key] = key in exempt
        first = VERSIONS
        monotonic = True
        for version in range(VERSIONS):
            flexible = is_flexible.__wrapped__(key, version)  # past its lru_cache: 16 k pairs no client sends
            if flexible and first == VERSIONS:
                first = version
            elif not flexible and first != VERSIONS:
                monotonic = False
        FLEXIBLE_FROM[key] = first
        if not monotonic or key in GENERAL_APIS:
            KIND[key] = GENERAL
        elif key == API_PRODUCE:
            KIND[key] = PRODUCE
        elif key == API_FETCH:
            KIND[key] = FETCH
        else:
            KIND[key] = PLAIN
    if len(LATENCY_BUCKETS) > 16:
        raise ValueError("LATENCY_BUCKETS has more bounds than the lane keeps")
    NBOUNDS = len(LATENCY_BUCKETS)
    for key in range(NBOUNDS):
        BOUNDS[key] = LATENCY_BUCKETS[key]


_tables()


cdef inline int _i16(const unsigned char* p) noexcept nogil:
    return <short>((p[0] << 8) | p[1])


cdef inline long _i32(const unsigned char* p) noexcept nogil:
    return <int>((<unsigned int>p[0] << 24) | (<unsigned int>p[1] << 16) | (<unsigned int>p[2] << 8) | p[3])


cdef class InFlight:
    """A request between the proxy and its response: what the response will be matched and charged by."""

    def __init__(
        self,
        int correlation_id,
        int api_key,
        int api_version,
        object client_id,
        Py_ssize_t request_size,
        double sent_at,
        int fetch_max_wait_ms,
        bint exempt,
        object local_response=None,
        object refused=None,
        object topic_order=(),
        int min_throttle_ms=0,
        object mutation=None,
        bint over_quota=False,
    ):
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.client_id = client_id
        self.request_size = request_size
        self.sent_at = sent_at
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.exempt = exempt
        self.local_response = local_response
        self.refused = refused
        self.topic_order = topic_order
        self.min_throttle_ms = min_throttle_ms
        self.mutation = mutation
        self.over_quota = over_quota

    def __repr__(self):
        return (
            f"InFlight(correlation_id={self.correlation_id}, api_key={self.api_key}, "
            f"api_version={self.api_version}, client_id={self.client_id!r})"
        )


cdef inline InFlight _in_flight(int correlation_id, int api_key, int api_version, object client_id,
                                Py_ssize_t request_size, double sent_at, int max_wait, bint over_quota):
    cdef InFlight entry = InFlight.__new__(InFlight)
    entry.correlation_id = correlation_id
    entry.api_key = api_key
    entry.api_version = api_version
    entry.client_id = client_id
    entry.request_size = request_size
    entry.sent_at = sent_at
    entry.fetch_max_wait_ms = max_wait
    entry.exempt = EXEMPT[api_key]
    entry.topic_order = ()
    entry.over_quota = over_quota
    return entry


# What a frame does in the lane.
cdef enum Step:
    TAKEN = 0  # handled; go on with the next frame
    TAKEN_MUTED = 1  # handled, and the client is muted: the frames after it are held
    NOT_TAKEN = 2  # the general path takes it and what follows


cdef class SessionCore:
    """The state the session's decisions share with the fast lane, and the lane (`client_data`,
    `broker_data`). Subclassed by `Session`, which supplies the general path."""

    def __init__(self, services, bint fast_lane=True):
        self.services = services
        self._engine = services.engine
        self._metrics = services.metrics
        self._entity_metrics = services.entity_metrics
        self._topic_guard = services.topic_guard
        self._rewriters = services.rewriters
        self._cluster = services.cluster
        self._usage = services.usage
        self._max_frame_size = services.max_frame_size
        self.fast_lane = fast_lane
        self._requests_by_key = services.metrics.requests_by_key
        self._latency_by_key = services.metrics.latency_by_key
        self.in_flight = deque()
        self.held = deque()
        self._in_flight_append = self.in_flight.append
        self._in_flight_popleft = self.in_flight.popleft
        self._client_id_raw = b""
        self._client_id = ""
        self._entity_key = None

    @property
    def holding(self):
        """Frames are held (or a frame is arriving while a SaslAuthenticate is answered, as the
        broker reads nothing meanwhile): reading from the client should stay stopped."""
        return self.is_holding()

    cdef bint is_holding(self) except -1:
        return bool(self.held) or (self.awaiting_authentication and self.client_partial)

    # the interface: the lane first, the general path for the rest ------------------------------
    def client_data(self, data, double now):
        """Bytes from the client (see Session)."""
        self.feed_client(data, now)

    def broker_data(self, data, double now):
        """Bytes from the broker (see Session). Raises FrameError if they are not responses to what is in flight."""
        self.feed_broker(data, now)

    cdef void feed_client(self, object data, double now) except *:
        """client_data, for the compiled glue (connection_core) to call without a Python call."""
        if not (self.fast_lane and PyBytes_CheckExact(data) and self._client_lane(<bytes>data, now)):
            self._client_data(data, now)

    cdef void feed_broker(self, object data, double now) except *:
        if not (self.fast_lane and PyBytes_CheckExact(data) and self._broker_lane(<bytes>data, now)):
            self._broker_data(data, now)

    # requests ----------------------------------------------------------------------------------
    cdef bint _client_lane(self, bytes data, double now) except -1:
        if (
            not self.connected
            or self.authenticating
            or self.awaiting_authentication
            or self.client_partial
            or self.muted_until > now
            or self.refusal is not None
            or self.pending_refusal is not None
            or self.receive_limit is not None
            or self.held
        ):
            return False
        cdef const unsigned char* buf = <const unsigned char*>PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef Py_ssize_t pos = 0, size
        while pos < n:  # whole frames within the limit only; the splitter handles the rest
            if n - pos < 4:
                return False
            size = _i32(buf + pos)
            if size < 0 or size > self._max_frame_size or size > n - pos - 4:
                return False
            pos += 4 + size
        self._metrics.bytes_in += n
        cdef int step = TAKEN
        pos = 0
        while pos < n:
            size = _i32(buf + pos)
            step = self._request(data, buf, pos, pos + 4 + size, now)
            if step == NOT_TAKEN:
                break
            pos += 4 + size
            if step == TAKEN_MUTED:
                break
        if pos > 0:
            self.to_broker.append(data if pos == n else memoryview(data)[:pos])
        if pos < n:
            rest = _frames(data, buf, pos, n)
            if step == TAKEN_MUTED:
                self.held.extend(rest)  # what was read after a request that muted waits for the mute's end
            else:
                self._requests(rest, now)
        return True

    cdef int _request(self, bytes data, const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, double now) except -1:
        """One request frame (buf[pos:end], prefix included) in the lane, or NOT_TAKEN before any effect."""
        if end - pos < 14:
            return NOT_TAKEN
        cdef int api_key = _i16(buf + pos + 4)
        cdef int version = _i16(buf + pos + 6)
        if api_key < 0 or api_key >= KEYS or version < 0 or version >= VERSIONS:
            return NOT_TAKEN
        cdef Kind kind = KIND[api_key]
        if kind == GENERAL or (MAX_VERSION[api_key] >= 0 and version > MAX_VERSION[api_key]):
            return NOT_TAKEN
        cdef int correlation_id = _i32(buf + pos + 8)
        cdef int client_id_len = _i16(buf + pos + 12)
        cdef Py_ssize_t body = pos + 14
        if client_id_len >= 0:
            if body + client_id_len > end:
                return NOT_TAKEN
            client_id = self._decode_client_id(buf + body, client_id_len)
            body += client_id_len
        else:
            client_id = ""
        if version >= FLEXIBLE_FROM[api_key]:
            if body >= end or buf[body] != 0:  # tagged fields in a request header: the general path
                return NOT_TAKEN
            body += 1
        cdef int max_wait = 0
        cdef Py_ssize_t at
        cdef int length
        if kind == PRODUCE:
            if self._topic_guard.thresholds is not None or self._usage is not None:
                return NOT_TAKEN
            at = body
            if version >= 3:  # transactional_id before acks
                if version >= PRODUCE_FLEXIBLE_FROM:
                    if at >= end or buf[at] >= 0x80:
                        return NOT_TAKEN
                    length = buf[at] - 1
                    at += 1 + (length if length > 0 else 0)
                else:
                    if at + 2 > end:
                        return NOT_TAKEN
                    length = _i16(buf + at)
                    at += 2 + (length if length > 0 else 0)
            if at + 2 > end or _i16(buf + at) == 0:  # acks=0: no response, the general path
                return NOT_TAKEN
        elif kind == FETCH:
            at = body + (4 if version <= REPLICA_ID_IN_BODY_UNTIL else 0)
            if at + 4 > end:
                return NOT_TAKEN
            max_wait = _i32(buf + at)
            if max_wait < 0:
                max_wait = 0
        cdef dict counts = self._requests_by_key
        counts[api_key] = counts.get(api_key, 0) + 1
        cdef Py_ssize_t request_size = end - pos - 4
        cdef long throttle = 0
        if kind == PRODUCE and self._engine.limits_anyone:
            bucket = self._lane_buckets(client_id, now).produce
            if bucket is not None:
                throttle = bucket.charge(request_size, now)
        self._in_flight_append(
            _in_flight(correlation_id, api_key, version, client_id, request_size, now, max_wait, throttle > 0)
        )
        if throttle > 0:
            # In debt: this request goes on (Kafka appends, then throttles), but reading stops here.
            self._mute(throttle, now)
            return TAKEN_MUTED
        return TAKEN

    cdef object _decode_client_id(self, const unsigned char* at, int length):
        cdef bytes raw = self._client_id_raw
        if PyBytes_GET_SIZE(raw) == length and memcmp(PyBytes_AS_STRING(raw), at, length) == 0:
            return self._client_id
        client_id = PyUnicode_DecodeUTF8(<const char*>at, length, "replace")
        self._client_id_raw = (<const char*>at)[:length]
        self._client_id = client_id
        return client_id

    cdef object _lane_buckets(self, object client_id, double now):
        """Session._buckets without the call, while the cached buckets hold."""
        buckets = self.entity_buckets
        if (
            buckets is None
            or not (client_id is self.entity_client_id or client_id == self.entity_client_id)
            or buckets.generation != self._engine.generation
        ):
            return self._buckets(client_id, now)
        return buckets

    # responses ---------------------------------------------------------------------------------
    cdef bint _broker_lane(self, bytes data, double now) except -1:
        if self.broker_partial or self._usage is not None or not self.in_flight:
            return False
        cdef const unsigned char* buf = <const unsigned char*>PyBytes_AS_STRING(data)
        cdef Py_ssize_t n = PyBytes_GET_SIZE(data)
        cdef Py_ssize_t pos = 0, size
        out = self.to_client
        cdef Py_ssize_t start = len(out)
        view = None
        while n - pos >= 4:
            size = _i32(buf + pos)
            if size < 0 or size > n - pos - 4:
                break  # partial (or bad): the general path's splitter
            if pos == 0 and size == n - 4:
                frame = data
            else:
                if view is None:
                    view = memoryview(data)
                frame = view[pos : pos + 4 + size]
            if not self._response(frame, buf + pos, 4 + size, now):
                break
            pos += 4 + size
        if pos == 0:
            return False
        cdef Py_ssize_t written = 0
        for piece in out[start:]:
            written += len(piece)
        if pos < n:
            self._broker_data(data[pos:], now)  # counted after it, as the general path counts: not if it raises
        elif not self.awaiting_authentication and (
            self.held or self.receive_limit is not None or self.pending_refusal is not None
        ):
            self._release_held(now)
        self._metrics.bytes_out += written
        return True

    cdef bint _response(self, object frame, const unsigned char* buf, Py_ssize_t length, double now) except -1:
        """One whole response in the lane; False (before any effect) for the general path."""
        in_flight = self.in_flight
        if not in_flight or length < 8:
            return False
        cdef InFlight request = <InFlight?>in_flight[0]
        if (
            request.local_response is not None
            or request.refused
            or request.mutation is not None
            or request.api_key == API_SASL_AUTHENTICATE
            or _i32(buf + 4) != request.correlation_id
        ):
            return False
        limits = self._engine.limits_anyone
        buckets = None
        if limits:
            buckets = self._lane_buckets(request.client_id, now)
            if buckets.shadow:
                return False
        self._in_flight_popleft()
        cdef int api_key = request.api_key
        response = frame
        rewrite = self._rewriters.get(api_key)
        if rewrite is not None and not (api_key == API_PRODUCE and _plain_produce_response(buf, length, request.api_version)):
            view = frame if isinstance(frame, memoryview) else memoryview(frame)
            response = rewrite(view, request.api_version, self._cluster) or frame
        cdef double latency_ms = (now - request.sent_at) * 1000
        self._observe_latency(api_key, latency_ms / 1000)
        cdef double request_ms = 0.0
        cdef bint charged_time = not request.exempt
        if charged_time:
            request_ms = latency_ms
            if api_key == API_FETCH or api_key == API_SHARE_FETCH:
                request_ms = latency_ms - request.fetch_max_wait_ms
                if request_ms < 0:
                    request_ms = 0.0
        else:
            self._entity_metrics.record_exempt(latency_ms)  # the cluster APIs Kafka exempts: rare here
        cdef Py_ssize_t response_size = length - 4 if response is frame else _frame_body_size(response)
        cdef long throttle = request.min_throttle_ms, charged
        if limits:
            charged = 0
            if api_key == API_PRODUCE:
                bucket = buckets.produce
                if bucket is not None:
                    charged = bucket.throttle_ms(now)
            elif api_key == API_FETCH or api_key == API_SHARE_FETCH:
                bucket = buckets.fetch
                if bucket is not None:
                    charged = bucket.charge(response_size, now)
            bucket = buckets.request
            if charged_time and bucket is not None:
                time_throttle = min(bucket.charge(request_ms, now), buckets.request_cap_ms)
                if time_throttle > charged:
                    charged = time_throttle
            if charged > throttle:
                throttle = charged
        self._record_response(request, response_size, charged_time, request_ms, throttle, now)
        if throttle > 0:
            response, _upstream_ms = patch_throttle_time(memoryview(response), api_key, request.api_version, throttle)
            self._mute(throttle, now)
        self.to_client.append(response)
        if in_flight:
            head = in_flight[0]
            if (<InFlight?>head).local_response is not None:
                self._local_responses(now)
        return True

    cdef void _observe_latency(self, int api_key, double seconds) except *:
        """ProxyMetrics.observe_latency without the call, once the key has its entry."""
        cdef dict by_key = self._latency_by_key
        entry = by_key.get(api_key)
        if entry is None:
            self._metrics.observe_latency(api_key, seconds)
            return
        cdef int index = 0
        while index < NBOUNDS and BOUNDS[index] < seconds:  # bisect_left: the first bound >= seconds
            index += 1
        counts = <list>entry[0]
        counts[index] = counts[index] + 1
        total = <list>entry[1]
        total[0] = total[0] + seconds

    cdef void _record_response(self, InFlight request, Py_ssize_t response_size, bint charged_time,
                               double request_ms, long throttle, double now) except *:
        """EntityMetrics.record_response without the call, for an entity already counted and no throttle."""
        entity_metrics = self._entity_metrics
        user, client_id = self.user, request.client_id
        key = self._entity_key
        if key is None or (<tuple>key)[0] is not user or (<tuple>key)[1] is not client_id:
            key = self._entity_key = (user, client_id)
        cdef dict by_entity = entity_metrics.stats
        stats = None if throttle > 0 else by_entity.get(key)
        if stats is None:
            entity_metrics.record_response(
                user, client_id, request.api_key, request.request_size, response_size,
                request_ms if charged_time else None, throttle, now,
            )
            return
        stats.last_seen = now
        if request.api_key == API_PRODUCE:
            stats.produce_bytes += request.request_size
        elif request.api_key == API_FETCH or request.api_key == API_SHARE_FETCH:
            stats.fetch_bytes += response_size
        if charged_time:
            stats.request_seconds += request_ms / 1000


cdef list _frames(bytes data, const unsigned char* buf, Py_ssize_t pos, Py_ssize_t n):
    """The whole frames of data[pos:n] as memoryviews (the lane checked that they are whole)."""
    frames = []
    view = memoryview(data)
    cdef Py_ssize_t size
    while pos < n:
        size = _i32(buf + pos)
        frames.append(view[pos : pos + 4 + size])
        pos += 4 + size
    return frames


cdef Py_ssize_t _frame_body_size(object frame) except -1:
    cdef const unsigned char[:] view = frame
    if view.shape[0] < 4:
        return 0
    return _i32(&view[0])


cdef bint _plain_produce_response(const unsigned char* buf, Py_ssize_t length, int version) noexcept:
    """Whether a Produce response (prefix included) ends with no top-level tagged fields, in the usual
    shape (produce_walk): then it names no broker and needs no rewrite. False means "walk it in
    Python", never "it has tags"."""
    if version < PRODUCE_FLEXIBLE_FROM:
        return True  # no tagged fields at all before v9
    if length < 10 or buf[8] != 0:  # prefix, correlation id, the response header's tags: none
        return False
    cdef Py_ssize_t throttle_at = usual_throttle_offset(buf, length, 9, version)
    # throttle_time_ms, then the top-level tagged fields: none, and nothing after them
    return throttle_at >= 0 and throttle_at + 5 == length and buf[throttle_at + 4] == 0
