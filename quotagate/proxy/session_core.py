"""The exchange core: every request and every response of a session goes through here, once.

One source, two builds (quotagate/compiled.py): this typed Python runs as it is, and is compiled by
Cython as session_core_c (C types in session_core_c.pxd). Nothing here is stated a second time
elsewhere. `SessionCore` is the session (session.py names it `Session`) and the one owner of its
state; what only some APIs need (SASL, topic mutations, per-topic thresholds, producer IDs, the
proxy's own quota answers) are policy handlers (session.py), each chosen per API once, that see the
session through a narrow context and return their decision (`_admit`, `_respond`).

A request (`_request`): the header peeked, the advertised version cap enforced, the request counted,
then what its API's policy (`POLICY`, below) asks: a Produce is charged its size to
producer_byte_rate when read (and the client muted if that put it in debt), a Fetch's max wait is
read; an API with policy handlers goes to them first (`_admit`: forward, forward less, answer
locally, refuse, or hold what follows until an answer is made). Then it goes to the broker (or is
answered by the proxy in its turn) and an `InFlight` into the FIFO, naming the handler whose
response side its response needs (`responder`).

A response (`_respond`): matched to the FIFO's head, rewritten if it names brokers (a broker named
for the first time is reported in `brokers_seen`, for the caller to open its listener), given to
its request's responder if it has one (refusals merged, a mutation settled, SASL's outcome), then the
upstream latency, the request time and the response bytes charged (quotas/charging.py), the
entity's counters and the usage record written, and the throttle patched and the client muted when
one is due.

One loop per direction. A read from the client (`feed_client`) is counted, and its frames, found by
the client's FrameSplitter (protocol/frames.py: a read of whole frames is walked where it lies, a
frame split across reads is joined once), are taken one by one by `_take_requests` while the client
may be read (`_may_forward`: the broker connected, no mute, no answer awaited), the rest held in
order; a read from the broker (`feed_broker`) is counted and its frames taken one by one by
`_whole_response`, a large one that has not fully arrived cut through when its head is enough.
"""

from collections import deque

from quotagate.protocol import fetch
from quotagate.protocol.api_keys import ApiKey
from quotagate.protocol.apis import api_name, is_flexible
from quotagate.protocol.fetch import max_wait_offset, throttled_fetch_replacement, throttled_fetch_response
from quotagate.protocol.frames import frame_end, splitter
from quotagate.protocol.framing import FRAME_SIZE_BYTES, FrameError, frame_body_size, frame_size_problem
from quotagate.protocol.headers import RequestHeader
from quotagate.protocol.limits import MAX_TAGGED_FIELDS, tagged_fields_problem

# Compiled, these are cimported (session_core_c.pxd): C calls, not the Python names imported here.
from quotagate.protocol.produce_walk import (
    _skip_tags,
    _uvarint,
    i32,
    produce_acks,
    produce_topics,
    usual_throttle_offset,
)
from quotagate.protocol.share import share_fetch_max_wait_ms
from quotagate.protocol.throttle import patch_throttle_time, throttle_time_offset
from quotagate.protocol.version_caps import MAX_VERSIONS, unsupported_api_versions
from quotagate.proxy.flow_control import new_flow_control
from quotagate.proxy.metrics import (
    BEFORE_AUTHENTICATION,
    LATENCY_BUCKETS,
    PARTIAL_FRAME_SHARE,
    PARTIAL_FRAMES_LIMIT,
    SASL_RECEIVE_LIMIT,
)
from quotagate.quotas.apis import (
    BYTES_IN,
    DEFAULT_POLICY,
    LONG_POLL,
    REQUEST_TIME,
    SASL,
    TOPIC_NAMES,
)
from quotagate.quotas.apis import policy as api_policy
from quotagate.quotas.charging import (
    charge_request,
    charge_response,
    count_exchange,
    fetch_throttle_ms,
    request_time_ms,
    shadow_throttle_ms,
)
from quotagate.quotas.entities import ANONYMOUS

# API keys and versions the tables cover; a request outside them is parsed by the general functions.
KEYS = 128
VERSIONS = 128

# POLICY[api_key]: what the proxy does with each API, from the one table of them (quotas/apis.py:
# the quota keys it is charged to, and its policies). The core charges BYTES_IN and reads LONG_POLL
# itself; the other policies are handlers (session.py's SessionPolicies), and the ones an API runs
# are chosen from POLICY once per session (`quotas_changed`). A policy added to an API there reaches
# it on every path: there is no other list.

# The APIs the core tells apart by number (C ints compiled; protocol/api_keys.py numbers them).
API_PRODUCE = int(ApiKey.PRODUCE)
API_FETCH = int(ApiKey.FETCH)
API_SASL_HANDSHAKE = int(ApiKey.SASL_HANDSHAKE)
API_API_VERSIONS = int(ApiKey.API_VERSIONS)
API_SASL_AUTHENTICATE = int(ApiKey.SASL_AUTHENTICATE)
API_SHARE_FETCH = int(ApiKey.SHARE_FETCH)

POLICY = [api_policy(key) for key in range(KEYS)]
# MAX_VERSION[api_key]: the version cap ApiVersions advertises (-1: none); ApiVersions above its
# cap is answered by the proxy, never refused (version_caps.unsupported_api_versions, KIP-511).
MAX_VERSION = [MAX_VERSIONS.get(key, -1) for key in range(KEYS)]


def _flexible_from() -> list:
    """FLEXIBLE_FROM[api_key]: its first flexible request header version (VERSIONS: none, or not
    monotonic: then every version asks is_flexible)."""
    first_versions = []
    for key in range(KEYS):
        first = VERSIONS
        monotonic = True
        for version in range(VERSIONS):
            flexible = is_flexible.__wrapped__(key, version)  # past its lru_cache: 16 k pairs no client sends
            if flexible and first == VERSIONS:
                first = version
            elif not flexible and first != VERSIONS:
                monotonic = False
        first_versions.append(first if monotonic else -1)
    return first_versions


FLEXIBLE_FROM = _flexible_from()

# Responses are not bounded by the client's max frame size; the broker's fetch.max.bytes is.
MAX_RESPONSE_FRAME = 2**31 - 1
# Responses from this size on (prefix included) may be cut through once RESPONSE_HEAD_BYTES of them
# are here (enough for the header and throttle_time_ms); smaller ones are always handled whole.
STREAM_RESPONSES_FROM = 16 * 1024
RESPONSE_HEAD_BYTES = 64

# LATENCY_BUCKETS as the C array ExchangeCounters.observe_latency scans (compiled: double[16]).
N_BOUNDS = len(LATENCY_BUCKETS)
if N_BOUNDS > 16:
    raise ValueError("LATENCY_BUCKETS has more bounds than observe_latency keeps")
BOUNDS = [float(bound) for bound in LATENCY_BUCKETS] + [0.0] * (16 - N_BOUNDS)
# ExchangeCounters' slots: one per API key the tables cover, and one (KEYS) for every key outside
# them, reported as key -1 (an "unknown" label either way: apis.api_key_label). A slot's latency
# buckets are LATENCY_STRIDE apart: N_BOUNDS + 1 of them used (the last is above every bound).
SLOTS = KEYS + 1
LATENCY_STRIDE = 17
# session_core_c.pxd sizes the compiled arrays for these (129 slots, 129 * 17 buckets), and a C array
# has no bounds check: the two change together, or the module refuses to load.
if (SLOTS, LATENCY_STRIDE) != (129, 17):
    raise ValueError("ExchangeCounters' arrays in session_core_c.pxd are sized for 129 slots of 17 buckets")

# The session's phases, and every move between them: `_enter` moves only as TRANSITIONS says and
# raises PhaseError on any other move (h11's _state.py). Nothing else sets the phase.
AUTHENTICATING = 0  # before SASL authentication completes: frames within sasl_server_max_receive_size,
#                     nothing but ApiVersions and SASL read (the broker's SaslServerAuthenticator)
EXCHANGING = 1  # the same, after a SaslHandshake went to the broker: nothing but SaslAuthenticate is
#                 read; anything else the broker answers ILLEGAL_SASL_STATE, and closes the connection
AUTHENTICATING_END_UNSEEN = 2  # the same, but the proxy cannot see the exchange end (GSSAPI after a
#                     successful round; client_sasl "auto" before the brokers answered): the first
#                     other request ends it
AWAITING_AUTHENTICATION = 3  # a SaslAuthenticate is at the broker: what follows waits for its answer
AUTHENTICATION_FAILED = 4  # the broker refused the authentication and closes the connection: nothing more is read
OPEN = 5  # requests flow (a mute, or the broker connecting, may still hold them for a while)
AWAITING_LOCAL_ANSWER = 6  # the proxy is making an answer (an alter being persisted): what follows waits for it
REFUSED = 7  # the client sent what the broker closes a connection for: nothing more is read
PHASES = ("AUTHENTICATING", "EXCHANGING", "AUTHENTICATING_END_UNSEEN", "AWAITING_AUTHENTICATION",
          "AUTHENTICATION_FAILED", "OPEN", "AWAITING_LOCAL_ANSWER", "REFUSED")  # fmt: skip

# What moves the phase.
HANDSHAKE = 0  # a SaslHandshake is read where the listener requires SASL: an exchange (re)starts
AUTHENTICATE = 1  # a SaslAuthenticate is read: what follows waits for its answer
AUTHENTICATED = 2  # its answer ends the exchange with a success (or the listener requires no SASL)
ROUND_ANSWERED = 3  # its answer asks for another round
ROUND_ANSWERED_END_UNSEEN = 4  # the same, where the proxy will not see the exchange's end
AUTHENTICATION_REFUSED = 5  # its answer is a failure
OTHER_REQUEST = 6  # a request that is not SASL where the exchange's end was unseen: it ended
ANSWER_PENDING = 7  # the proxy is making a request's answer: what follows waits for it
ANSWER_READY = 8  # that answer is made
REFUSE = 9  # the client sent what the broker closes a connection for
EVENTS = ("HANDSHAKE", "AUTHENTICATE", "AUTHENTICATED", "ROUND_ANSWERED", "ROUND_ANSWERED_END_UNSEEN",
          "AUTHENTICATION_REFUSED", "OTHER_REQUEST", "ANSWER_PENDING", "ANSWER_READY", "REFUSE")  # fmt: skip

# (phase, event) -> the phase it moves to; any other pair is a defect.
TRANSITIONS = {
    (AUTHENTICATING, HANDSHAKE): EXCHANGING,
    (AUTHENTICATING_END_UNSEEN, HANDSHAKE): EXCHANGING,
    (OPEN, HANDSHAKE): EXCHANGING,  # KIP-368 re-authentication
    (AUTHENTICATING, AUTHENTICATE): AWAITING_AUTHENTICATION,
    (EXCHANGING, AUTHENTICATE): AWAITING_AUTHENTICATION,
    (AUTHENTICATING_END_UNSEEN, AUTHENTICATE): AWAITING_AUTHENTICATION,
    (AWAITING_AUTHENTICATION, AUTHENTICATED): OPEN,
    (AWAITING_AUTHENTICATION, ROUND_ANSWERED): EXCHANGING,
    (AWAITING_AUTHENTICATION, ROUND_ANSWERED_END_UNSEEN): AUTHENTICATING_END_UNSEEN,
    (AWAITING_AUTHENTICATION, AUTHENTICATION_REFUSED): AUTHENTICATION_FAILED,
    (AUTHENTICATING_END_UNSEEN, OTHER_REQUEST): OPEN,
    (OPEN, ANSWER_PENDING): AWAITING_LOCAL_ANSWER,
    (AWAITING_LOCAL_ANSWER, ANSWER_READY): OPEN,
    **{(phase, REFUSE): REFUSED for phase in range(REFUSED)},
}
# What each phase means for reads: frames within sasl_server_max_receive_size only (RECEIVE_LIMITED),
# and what is read waits, held in order, until the phase changes (WAITS).
RECEIVE_LIMITED = [phase in (AUTHENTICATING, EXCHANGING, AUTHENTICATING_END_UNSEEN, AWAITING_AUTHENTICATION,
                             AUTHENTICATION_FAILED) for phase in range(8)]  # fmt: skip
WAITS = [phase in (AWAITING_AUTHENTICATION, AUTHENTICATION_FAILED, AWAITING_LOCAL_ANSWER) for phase in range(8)]
if len(PHASES) > 8:
    raise ValueError("RECEIVE_LIMITED and WAITS in session_core_c.pxd hold 8 phases")

# The reason of a refusal for a request the broker cannot parse (counted as a protocol error).
PROTOCOL_ERROR = FrameError.reason

# What the broker's SASL authenticator does with a request before authentication completes
# (`_before_authentication`): reads it as any other (or no exchange is in progress), takes it as the
# end of an exchange whose end the proxy cannot read, or, after a SaslHandshake, answers anything but
# SaslAuthenticate with the API's error response (ILLEGAL_SASL_STATE) and closes the connection.
READS_IT = 0
ENDS_EXCHANGE = 1
STRAY_IN_EXCHANGE = 2


# What a partial frame's first bytes tell before the rest is read: its size, API key and version.
PARTIAL_HEAD_BYTES = 8


# A request header's tagged fields beyond this many are refused, not walked (protocol/limits.py).
MAX_TAGS = MAX_TAGGED_FIELDS
# A fetch request's fields after max_wait_ms, and the versions that have them (protocol/fetch.py):
# C ints here, read for every fetch.
MIN_BYTES_AFTER = fetch.MIN_BYTES_AFTER
MAX_BYTES_AFTER = fetch.MAX_BYTES_AFTER
SESSION_EPOCH_AFTER = fetch.SESSION_EPOCH_AFTER
MAX_BYTES_FROM = fetch.MAX_BYTES_FROM
SESSIONS_FROM = fetch.SESSIONS_FROM
REPLICA_ID_IN_BODY_UNTIL = fetch.REPLICA_ID_IN_BODY_UNTIL


class BeforeAuthentication(FrameError):
    """A request other than ApiVersions or SASL before SASL authentication completed."""

    reason = BEFORE_AUTHENTICATION


class PhaseError(RuntimeError):
    """A move of the session's phase that TRANSITIONS does not allow: a defect, never a client's doing."""


def _i16(buf: bytes, pos: int) -> int:
    value = (buf[pos] << 8) | buf[pos + 1]
    return value - 0x10000 if value >= 0x8000 else value


class ExchangeCounters:
    """What every session's core counts per read and per exchange, for ProxyMetrics (which holds it
    as `counters` and exports it when scraped): the bytes forwarded, requests and upstream latency by
    API key. Compiled, these are C fields and arrays: as dicts and attributes of ProxyMetrics each
    count cost look-ups, an int made and a store."""

    def __init__(self):
        self.bytes_in = 0  # client to broker
        self.bytes_out = 0  # broker to client
        # Compiled, C arrays (session_core_c.pxd) filled from these lists.
        self.requests = [0 for _ in range(SLOTS)]
        self.latency_counts = [0 for _ in range(SLOTS * LATENCY_STRIDE)]  # per slot: counts per LATENCY_BUCKETS bucket
        self.latency_seconds = [0.0 for _ in range(SLOTS)]

    def count_request(self, api_key):
        self.requests[_slot(api_key)] += 1

    def observe_latency(self, api_key, seconds):
        """Counts an upstream latency in its API's histogram."""
        slot = _slot(api_key)
        index = 0
        while index < N_BOUNDS and BOUNDS[index] < seconds:  # bisect_left: the first bucket whose bound is >= seconds
            index += 1
        self.latency_counts[slot * LATENCY_STRIDE + index] += 1
        self.latency_seconds[slot] += seconds

    def requests_by_key(self):
        """{api key: requests} of the keys counted (-1: every key outside the tables)."""
        counted = {}
        for slot in range(SLOTS):
            if self.requests[slot]:
                counted[_slot_key(slot)] = self.requests[slot]
        return counted

    def latency_by_key(self):
        """{api key: (counts per LATENCY_BUCKETS bucket, not cumulative, the last above them all;
        seconds in all)} of the keys observed (-1: every key outside the tables)."""
        observed = {}
        for slot in range(SLOTS):
            start = slot * LATENCY_STRIDE
            counts = [self.latency_counts[start + index] for index in range(N_BOUNDS + 1)]
            if any(counts):
                observed[_slot_key(slot)] = (counts, self.latency_seconds[slot])
        return observed


def _bytes_from(out, start):
    """Bytes in out[start:], without the slice copy of the list."""
    written = 0
    for index in range(start, len(out)):
        written += len(out[index])
    return written


def _slot(api_key):
    return api_key if 0 <= api_key < KEYS else KEYS


def _slot_key(slot):
    return slot if slot < KEYS else -1


class InFlight:
    """A request between the proxy and its response: what the response will be matched and charged by.
    Made by `_in_flight` (its one constructor). Fields: correlation_id, api_key, api_version,
    client_id; request_size (header + body, without the size prefix); sent_at (when forwarded);
    fetch_max_wait_ms; policy (its API's, quotas/apis.py: what it is charged); local_response (a response the proxy
    makes itself, sent in its turn); refused (topics the proxy refused from a forwarded produce,
    merged back into the broker's answer) and topic_order; min_throttle_ms (the least throttle the
    response must carry: a refusal says when to come back); mutation; answer_after (Admission's);
    handling_ms (the proxy's own time on the exchange where it decodes or rewrites: its hooks, its
    rewrites; charged as request time with the broker's); responder (the policy handler whose response
    side runs on the response, chosen when the request was read); over_quota (a produce whose charge when read
    left its entity over quota: usage records); empty_fetch (a throttled incremental fetch whose
    answer goes to the client emptied)."""

    def __repr__(self):
        return (
            f"InFlight(correlation_id={self.correlation_id}, api_key={self.api_key}, "
            f"api_version={self.api_version}, client_id={self.client_id!r})"
        )


class SessionCore:
    """One client connection's session: the exchange itself (`client_data`, `broker_data`) and the
    one owner of its state. The policy handlers (session.py) see it as their PolicyContext and
    change it only through the decisions they return."""

    def __init__(self, services, principal=None, flow=None):
        """`principal`: the user the connection is before any SASL exchange (the mapped subject of a
        verified client certificate), ANONYMOUS if None; `flow`: the connection's FlowControl, which
        the session mutes and refuses through and asks (a new one if None: a session without a socket)."""
        self.services = services
        self.user = principal or ANONYMOUS
        # Whether the client is read now: mutes are written there, and asked there (`_may_forward`).
        self.flow = flow if flow is not None else new_flow_control()
        self._clock = services.clock  # the proxy's own time per exchange (request time: _respond)
        self._engine = services.engine
        self._metrics = services.metrics
        self._counters = services.metrics.counters
        self._entity_metrics = services.entity_metrics
        self._stats_by_entity = services.entity_metrics.stats  # its one dict, looked into per exchange
        self._rewriters = services.rewriters
        # The APIs whose rewriter memoizes its answers (protocol/rewrite_memo.py): called as a C method.
        self._memoized = [hasattr(services.rewriters.get(key), "rewritten") for key in range(KEYS)]
        self._cluster = services.cluster
        self._usage = services.usage
        # The usage records' collector (usage_collectors.py): aggregates, or one record per request.
        self._aggregates = None
        self._records = None
        if services.usage is not None:
            if services.usage.config.records == "request":
                self._records = services.usage.collector
            else:
                self._aggregates = services.usage.collector
        self._wall_offset = services.wall_offset
        self._topic_names = {}  # a produce's topic names as sent -> decoded (usage records)
        self._last_sent = None  # the last produce's topic names as sent, and decoded
        self._last_order = ()
        self._max_frame_size = services.max_frame_size
        # The policy handlers of this session, and which run for each API (`quotas_changed`).
        self.policies = services.policies(services)
        self.hooked = 0
        self._chains = None
        self.quotas_changed()
        # An answer the proxy is making (an alter being persisted), and what the glue has called
        # when it is ready (it then calls `local_answered` and writes what that queued).
        self.pending_answer = None
        self.answer_ready = None
        self.in_flight = deque()
        self._in_flight_append = self.in_flight.append  # bound once: these run per exchange
        self._in_flight_popleft = self.in_flight.popleft
        # Frames read but not forwarded yet, in order (reads, or their whole frames, each as bytes;
        # the first one from `_held_from` on): while the broker connects, while muted, while an
        # answer is awaited.
        self.held = deque()
        self._held_from = 0
        self.client_frames = splitter(services.max_frame_size)
        self.partial_counted = 0  # bytes of the partial frame counted in services.partial_frames
        self._client_id_raw = b""
        self._client_id = ""
        self._entity_key = None  # (user, client_id) of the entity counters last written
        # Where the listener requires SASL, nothing but SASL is read until it completes; where the
        # proxy does not know yet (client_sasl "auto"), the first other request ends it.
        self._receive_limit = services.sasl_max_receive_size
        if services.sasl_max_receive_size is None:
            self.phase = OPEN
        elif services.sasl_required is None:
            self.phase = AUTHENTICATING_END_UNSEEN
        else:
            self.phase = AUTHENTICATING
        self.connected = False
        # The in-flight entry of the answer the proxy is making (AWAITING_LOCAL_ANSWER).
        self._answer_later = None
        # Until the first request that is not ApiVersions or SASL, the client is authenticating:
        # Kafka does not charge that exchange to request-time quotas.
        self.authenticating = True
        # A refusal queued behind the frames held before the offender: (reason, message). Nothing
        # after the offender is read.
        self.pending_refusal = None
        # Set when the client sent what the broker would close the connection for (phase REFUSED).
        # Nothing more is read or forwarded; the connection closes once the answers to what went
        # before are written.
        self.refusal = None
        self.refusal_reason = ""
        self.broker_frames = splitter(MAX_RESPONSE_FRAME, STREAM_RESPONSES_FROM, RESPONSE_HEAD_BYTES)
        self.to_broker = []
        self.to_client = []
        # Node ids a rewrite named for the first time: the caller has their listeners opened before
        # it writes `to_client` (a client is never told an address nobody listens on), then empties it.
        self.brokers_seen = []
        # The buckets of (user, client id) of the last request: one look-up per entity, not per charge.
        self.entity_buckets = None
        self.entity_client_id = ""

    # the phase ---------------------------------------------------------------------------------
    def _enter(self, event):
        """Moves the phase as TRANSITIONS says for `event`; PhaseError for a move it does not list."""
        phase = TRANSITIONS.get((self.phase, event), -1)
        if phase < 0:
            raise PhaseError(f"{EVENTS[event]} in phase {PHASES[self.phase]}")
        self.phase = phase

    @property
    def receive_limit(self):
        """The largest frame read now: sasl_server_max_receive_size before SASL authentication
        completes (None where the listener requires none, and once it has)."""
        return self._receive_limit if RECEIVE_LIMITED[self.phase] else None

    @property
    def awaiting_authentication(self):
        """A SaslAuthenticate of an exchange is at the broker: its answer moves the phase."""
        return self.phase == AWAITING_AUTHENTICATION

    @property
    def awaiting_answer(self):
        """What is read waits for an answer: the broker's to a SaslAuthenticate, or one the proxy makes."""
        return WAITS[self.phase]

    @property
    def holding(self):
        """Frames are held (or a frame is arriving while a SaslAuthenticate is answered, as the
        broker reads nothing meanwhile): reading from the client should stay stopped."""
        return self.is_holding()

    def is_holding(self):
        """`holding`, for the glue to hand to `flow.settle` (FlowControl's HOLDING)."""
        return bool(self.held) or (WAITS[self.phase] and self.client_frames.buffered > 0)

    @property
    def muted_until(self):
        """Until when the client is not read for a quota (its FlowControl's; the caller's clock)."""
        return self.flow.muted_until

    # the interface -----------------------------------------------------------------------------
    def client_data(self, data, now):
        """Bytes from the client (see Session)."""
        self.feed_client(data, now)

    def broker_data(self, data, now):
        """Bytes from the broker (see Session). Raises FrameError if they are not responses to what is in flight."""
        self.feed_broker(data, now)

    def feed_client(self, data, now):
        """client_data, for the compiled glue (connection_core) to call without a Python call. What
        the broker would close the connection for (bytes that are not Kafka requests, a request it
        cannot parse, a frame over a limit) sets `refusal`; the requests before it are forwarded and
        answered first, as the broker answers them before it reads on."""
        if type(data) is not bytes:
            data = bytes(data)
        self._counters.bytes_in += len(data)  # every byte the client sent, here and nowhere else
        if self.phase == REFUSED or self.pending_refusal is not None:
            return  # the broker would never read past the offender
        frames = self.client_frames
        buf = frames.feed(data)
        if buf is None:  # the held frame's size, completed by this read, is over the limit
            self._queue_refusal(PROTOCOL_ERROR, frame_size_problem(frames.bad_size, frames.max_frame_size))
            buf = b""
        n = len(buf)
        if n:
            pos = 0
            if not self.held:
                pos = self._take_requests(buf, 0, n, now)
            if pos < n and self.phase != REFUSED:
                self._hold_rest(buf, pos, n)
        self._after_reads()

    def feed_broker(self, data, now):
        """broker_data, for the compiled glue. Raises FrameError if the bytes are not responses to
        what is in flight."""
        if type(data) is not bytes:
            data = bytes(data)
        out = self.to_client
        start = len(out)
        frames = self.broker_frames
        pos = 0
        if frames.stream_left:  # the rest of a response being cut through
            pos = frames.streamed(len(data))
            out.append(_slice(data, 0, pos))
            if not frames.stream_left:  # its last bytes: what the proxy answered itself goes after it, in turn
                self._local_responses(now)
        buf = frames.feed(data)
        if buf is None:
            raise FrameError("response " + frame_size_problem(frames.bad_size, MAX_RESPONSE_FRAME))
        if buf is not data:
            pos = 0
        n = len(buf)
        view = None
        end = 0
        while pos < n:
            end = frame_end(buf, pos, n, MAX_RESPONSE_FRAME)
            if end < 0:
                break
            if pos == 0 and end == n:
                self._whole_response(buf, now)
            else:
                if view is None:
                    view = memoryview(buf)
                self._whole_response(view[pos:end], now)
            pos = end
        if end == -2:
            raise FrameError("response " + frame_size_problem(i32(buf, pos), MAX_RESPONSE_FRAME))
        if pos < n:
            self._response_arriving(buf, pos, now)
        elif n == 0 and frames.may_offer_held():
            head = memoryview(frames.held())
            if self._streamable(head):
                frames.stream(frames.needed, len(head))
                out.append(self._respond(self._expected(head), head, now))
            else:
                frames.refused_offer()
        self._counters.bytes_out += _bytes_from(out, start)  # every byte the client gets for the broker's, here
        self._release_held_if_answered(now)

    def _response_arriving(self, buf, pos, now):
        """A response at buf[pos:] that has not fully arrived: cut through when its head is enough
        (`_streamable`), else held until it is whole."""
        frames = self.broker_frames
        if frames.may_offer(buf, pos):
            head = memoryview(buf)[pos:]
            if self._streamable(head):
                frames.stream(FRAME_SIZE_BYTES + i32(buf, pos), len(buf) - pos)
                self.to_client.append(self._respond(self._expected(head), head, now))
                return
            frames.refused_offer()
        frames.keep(buf, pos)

    def broker_connected(self, now):
        """The broker connection is up: what was held may go."""
        self.connected = True
        self._release_held(now)

    def unmute(self, now):
        """The mute is over (`now` >= muted_until): forwards what was held while it lasted."""
        self._release_held(now)

    def _answer_ready(self, response, now):
        """The answer the proxy was making is `response`: it goes in its turn, then what waited for it."""
        entry = self._answer_later
        self._answer_later = None
        entry.local_response = response
        self._enter(ANSWER_READY)
        self._local_turn(now)
        self._release_held(now)

    def quotas_changed(self):
        """The quotas changed live (a reload, AlterClientQuotas): the handlers each API runs chosen
        again, as for a session opened now (Produce runs producer_ids_rate's iff some entry sets it)."""
        hooked = self.policies.in_use()
        if hooked != self.hooked or self._chains is None:
            self.hooked = hooked
            self._chains = self.policies.chains(hooked, POLICY)

    def local_answered(self, now):
        """The answer the proxy was making is ready (`answer_ready` said so): it goes in its turn,
        then what the client sent after it."""
        answer = self.pending_answer
        if answer is None or not answer.done():
            return
        self.pending_answer = None
        self._answer_ready(answer.result(), now)

    def _pending_answer_done(self, _answer):
        if self.answer_ready is not None:
            self.answer_ready()

    @property
    def awaiting_answers(self):
        """Requests are in flight, or a response is still being cut through to the client."""
        return bool(self.in_flight) or self.broker_frames.stream_left > 0

    # requests ----------------------------------------------------------------------------------
    def _may_forward(self, now):
        """Whether a request read now may go: the broker is connected, no mute, no answer awaited."""
        return self.connected and not self.flow.muted(now) and not WAITS[self.phase]

    def _take_requests(self, buf, pos, stop, now):
        """Takes the requests of buf[pos:stop] one by one while they may go, forwarding each as it is
        (a run of them in one slice) or as its policy changed it; returns where it stopped: `stop`,
        a frame not whole yet or over the limit (the caller's), or the first frame that must wait."""
        out = self.to_broker
        run = pos  # the frames from here on go to the broker as they are: one slice for them all
        while pos < stop and self._may_forward(now):
            end = frame_end(buf, pos, stop, self._max_frame_size)
            if end < 0:
                break
            forwarded = self._request(buf, pos, end, now)
            if forwarded is not buf:  # not as it is: what came before it goes first
                if run < pos:
                    out.append(_slice(buf, run, pos))
                if forwarded is not None:
                    out.append(forwarded)
                run = end
            pos = end
            if self.phase == REFUSED:  # the rest is dropped; what went before (and this, if forwarded) goes
                if run < end:
                    out.append(_slice(buf, run, end))
                return stop
        if run < pos:
            out.append(_slice(buf, run, pos))
        self._local_turn(now)
        return pos

    def _hold_rest(self, buf, pos, stop):
        """What a read holds from `pos` on that is not taken now: its whole frames, held in order, and
        the start of a frame not whole yet, kept by the splitter (a size over the limit: refused
        after what came before)."""
        whole = pos
        end = frame_end(buf, whole, stop, self._max_frame_size)
        while end >= 0:
            whole = end
            end = frame_end(buf, whole, stop, self._max_frame_size)
        if whole > pos:
            self.held.append(buf if pos == 0 and whole == len(buf) else buf[pos:whole])
        if end == -2:
            size = i32(buf, whole)
            self._queue_refusal(PROTOCOL_ERROR, frame_size_problem(size, self._max_frame_size))
        elif whole < stop:
            self.client_frames.keep(buf, whole)

    def _release_held(self, now):
        """Forwards what was held while it may go, then refuses what was refused behind it."""
        held = self.held
        while held and self._may_forward(now):
            data = held[0]
            pos = self._take_requests(data, self._held_from, len(data), now)
            if self.phase == REFUSED:
                break
            if pos < len(data):
                self._held_from = pos
                break
            held.popleft()
            self._held_from = 0
        self._check_partial()

    def _request(self, buf, pos, end, now):
        """One request, buf[pos:end] (size prefix included). Returns what to forward: `buf` itself
        for the frame as it is, None for nothing. A request the broker would close the connection for
        refuses the client (phase REFUSED)."""
        size = end - pos - 4
        if RECEIVE_LIMITED[self.phase] and self._receive_limit is not None and size > self._receive_limit:
            self._refuse(SASL_RECEIVE_LIMIT, self._receive_limit_message(size))
            return None
        try:
            return self._peeked_request(buf, pos, end, size, now)
        except FrameError as exc:  # the broker closes on a request it cannot parse, after those before
            self._refuse(exc.reason, str(exc))
            return None

    def _peeked_request(self, data, pos, end, size, now):
        buf = data
        if end - pos < 14:
            raise FrameError(f"request of {size} bytes is shorter than a header")
        # Refuse first, parse after: the API and its version decide whether anything further is read.
        api_key = _i16(buf, pos + 4)
        version = _i16(buf, pos + 6)
        known = 0 <= api_key < KEYS and 0 <= version < VERSIONS
        policy = POLICY[api_key] if known else DEFAULT_POLICY
        authentication = self._refuse_first(api_key, version, policy, known)
        if authentication == STRAY_IN_EXCHANGE:
            policy = 0  # the broker's authenticator answers it: nothing is hooked or charged
        correlation_id = i32(buf, pos + 8)
        client_id_len = _i16(buf, pos + 12)
        body = pos + 14
        if client_id_len >= 0:
            if body + client_id_len > end:
                raise FrameError("client_id runs past the end of the request")
            client_id = self._decode_client_id(data, body, client_id_len)
            body += client_id_len
        else:
            client_id = ""
        flexible_from = FLEXIBLE_FROM[api_key] if known else -1
        if (version >= flexible_from) if flexible_from >= 0 else is_flexible(api_key, version):
            if body < end and buf[body] == 0:  # no tagged fields: the usual case
                body += 1
            else:
                body = _header_tags_end(buf, body, end)
        if authentication == ENDS_EXCHANGE:
            # The first request past an exchange whose end the proxy cannot read (GSSAPI, or SASL not
            # known to be required yet): the broker would have closed the connection before it.
            self._enter(OTHER_REQUEST)
        # What lies further in, read before anything happens.
        acks = 1
        max_wait = 0
        if policy & BYTES_IN:
            acks = produce_acks(buf, body, end, version)
            if acks < -0x8000:
                raise FrameError("produce request too short to hold acks")
        elif policy & LONG_POLL and api_key == API_FETCH:
            at = max_wait_offset(body, version)
            if at + 4 > end:
                raise FrameError("fetch request too short to hold max_wait_ms")
            max_wait = i32(buf, at)
            if max_wait < 0:
                max_wait = 0
        self._counters.count_request(api_key)
        forwarded = data  # as it is (the caller slices it)
        local_response = None
        refused = None
        topic_order = ()
        min_throttle_ms = 0
        mutation = None
        answer_after = None
        handling_ms = 0.0
        if api_key == API_API_VERSIONS and version > MAX_VERSION[API_API_VERSIONS]:
            # Above what the proxy reads: answered as the broker answers one above what it speaks.
            forwarded = None
            local_response = unsupported_api_versions(correlation_id)
        replace_answer = False
        if policy & LONG_POLL and api_key == API_FETCH and self._engine.limits_anyone:
            # A consumer's fetch under a quota, as the broker takes it: answered with no data at once
            # while the client would be throttled (KIP-219), else its max_bytes capped (KAFKA-9677).
            # A follower's (replica_id 0 or more: never a client of the proxy) is the broker's alone.
            if version > REPLICA_ID_IN_BODY_UNTIL or i32(buf, body) < 0:
                buckets = self._buckets(client_id, now)
                min_throttle_ms = fetch_throttle_ms(buckets, now)
                if min_throttle_ms > 0:
                    epoch = -1
                    if version >= SESSIONS_FROM and at + SESSION_EPOCH_AFTER + 4 <= end:
                        epoch = i32(buf, at + SESSION_EPOCH_AFTER)
                    if epoch <= 0:
                        # Full or sessionless: nothing at the broker depends on it; the proxy answers.
                        local_response = throttled_fetch_response(correlation_id, version)
                        forwarded = None
                        self._metrics.throttled_fetches_total.labels(session="full").inc()
                    else:
                        # Incremental: the broker's session must take it (its changes, its next epoch),
                        # as the client's will when it reads the answer; asked to answer at once with
                        # next to nothing, and that answer emptied (`_respond`).
                        replace_answer = True
                        view = _slice(data, pos, end)
                        forwarded = _patched_fetch(view, at - pos, 0, True)
                        self._metrics.throttled_fetches_total.labels(session="incremental").inc()
                    self._mute(min_throttle_ms, now)
                elif (
                    version >= MAX_BYTES_FROM
                    and at + MAX_BYTES_AFTER + 4 <= end
                    and i32(buf, at + MAX_BYTES_AFTER) > buckets.fetch_max_bytes
                ):
                    view = _slice(data, pos, end)
                    forwarded = _patched_fetch(view, at - pos, buckets.fetch_max_bytes, False)
        responder = None
        if known and policy & self.hooked:  # its API's policy handlers decide (session.py)
            view = _slice(data, pos, end)
            header = RequestHeader(
                api_key, version, correlation_id, client_id if client_id_len >= 0 else None, body - pos
            )
            started = self._clock()
            admission = self._admit(self._chains[api_key], view, header, now)
            handling_ms = (self._clock() - started) * 1000
            if admission is not None:
                forwarded = admission.forwarded
                if forwarded is view:
                    forwarded = data
                local_response = admission.local_response
                refused = admission.refused
                topic_order = admission.topic_order
                min_throttle_ms = admission.min_throttle_ms
                mutation = admission.mutation
                answer_after = admission.answer_after
                responder = admission.responder
                if admission.event >= 0:
                    self._enter(admission.event)
                if admission.pending is not None:
                    self._await_answer(admission.pending)
        if policy & TOPIC_NAMES and self._usage is not None and not topic_order:  # usage records name its topics
            topic_order = self._topic_order(buf, body, end, version)
        throttle = 0
        if policy & BYTES_IN:
            if self._engine.limits_anyone:
                throttle = charge_request(self._buckets(client_id, now), policy, size, now)
            over_quota = throttle > 0
            if min_throttle_ms > throttle:
                throttle = min_throttle_ms
            if throttle > 0:
                # In debt: this request goes on (Kafka appends, then throttles), but reading stops
                # here; what was read after it waits for the mute to end.
                self._mute(throttle, now)
            if acks == 0:  # no response will come
                count_exchange(self._entity_stats(client_id, now), policy, size, 0, None, throttle)
                return forwarded
        else:
            over_quota = False
            if policy & LONG_POLL and api_key == API_SHARE_FETCH:
                view = _slice(data, pos, end)
                max_wait = share_fetch_max_wait_ms(view, body - pos, version)
        if self.authenticating and not (policy & SASL) and api_key != API_API_VERSIONS:
            # Past the authentication exchange, which Kafka does not charge to request-time quotas.
            self.authenticating = False
        if api_key == API_API_VERSIONS and self.authenticating:
            policy &= ~REQUEST_TIME  # Kafka does not charge the authentication exchange
        if local_response is None and forwarded is None and self.phase != AWAITING_LOCAL_ANSWER:
            raise AssertionError("a hook refused everything and made no answer")
        entry = _in_flight(correlation_id, api_key, version, client_id, size, now, max_wait, policy, over_quota)
        entry.handling_ms = handling_ms
        if (
            local_response is not None
            or refused is not None
            or topic_order
            or min_throttle_ms
            or mutation is not None
            or answer_after is not None
            or responder is not None
        ):
            entry.local_response = local_response
            entry.responder = responder
            entry.refused = refused if forwarded is not None else None
            entry.topic_order = topic_order
            entry.min_throttle_ms = min_throttle_ms
            entry.mutation = mutation
            entry.answer_after = answer_after
            entry.empty_fetch = replace_answer
        self._in_flight_append(entry)
        if local_response is None and forwarded is None:  # answered when ready (`_answer_ready`), in its turn
            self._answer_later = entry
        if authentication == STRAY_IN_EXCHANGE:
            self._refuse_after_stray(api_key)
        return forwarded

    def _admit(self, chain, frame, header, now):
        """What the request's policy handlers decide: the first decision (a handler that returns None
        leaves it to the next), or None when none decides (forwarded as it is)."""
        for handler in chain:
            admission = handler.request(self, frame, header, now)
            if admission is not None:
                return admission
        return None

    def _await_answer(self, pending):
        """The proxy answers the request once `pending` (a future of the answer) is done: what
        follows waits for it (AWAITING_LOCAL_ANSWER), then `answer_ready` tells the glue."""
        self._enter(ANSWER_PENDING)
        self.pending_answer = pending
        pending.add_done_callback(self._pending_answer_done)

    def _refuse_after_stray(self, api_key):
        """A request other than SaslAuthenticate after a SaslHandshake went to the broker as it came:
        the broker's authenticator parses it, answers it with that API's error response carrying
        ILLEGAL_SASL_STATE, and closes the connection (SaslServerAuthenticator.handleSaslToken).
        The client gets that answer, the broker's own, and nothing after it is read."""
        self._refuse(
            BEFORE_AUTHENTICATION,
            f"{api_name(api_key)} after SaslHandshake, before SASL authentication completed "
            "(the broker answers it ILLEGAL_SASL_STATE and closes the connection)",
        )

    def _refuse_first(self, api_key, version, policy, known):
        """What a request's API and version alone decide, before any more of it is read: a version
        above what ApiVersions offered, or a request the broker's authenticator would close the
        connection for, raises FrameError. Returns `_before_authentication`'s answer."""
        if known:
            cap = MAX_VERSION[api_key]
        else:
            cap = MAX_VERSIONS.get(api_key, -1)
        # The broker closes on a version it lacks (version_caps.exceeds_advertised_cap); ApiVersions is answered.
        if cap >= 0 and version > cap and api_key != API_API_VERSIONS:
            raise FrameError(f"{api_name(api_key)} v{version} is above what ApiVersions offered")
        return self._before_authentication(api_key, policy)

    def check_partial_head(self, head):
        """`_refuse_first` for a frame of which only `head` (its size prefix, API key and version:
        8 bytes) has arrived: a frame it refuses is refused before the rest is read and held."""
        api_key = _i16(head, 4)
        version = _i16(head, 6)
        known = 0 <= api_key < KEYS and 0 <= version < VERSIONS
        self._refuse_first(api_key, version, POLICY[api_key] if known else 0, known)

    def _before_authentication(self, api_key, policy):
        """Before SASL authentication completes (RECEIVE_LIMITED phases), the broker's authenticator
        reads ApiVersions, SaslHandshake and then SaslAuthenticate only. Anything else before a
        SaslHandshake closes the connection unanswered (IllegalSaslStateException): so does the
        proxy, having answered and forwarded nothing of it. After a SaslHandshake (EXCHANGING),
        anything but SaslAuthenticate is STRAY_IN_EXCHANGE (`_refuse_after_stray`). ENDS_EXCHANGE:
        the request ends an exchange whose end the proxy cannot read (AUTHENTICATING_END_UNSEEN),
        and the limit lifts once it is parsed."""
        phase = self.phase
        if not RECEIVE_LIMITED[phase] or api_key == API_SASL_AUTHENTICATE:
            return READS_IT
        if phase == EXCHANGING:
            return STRAY_IN_EXCHANGE
        if policy & SASL or api_key == API_API_VERSIONS:
            return READS_IT
        if phase != AUTHENTICATING_END_UNSEEN:
            raise BeforeAuthentication(
                f"{api_name(api_key)} before SASL authentication completed (the broker closes such a connection)"
            )
        return ENDS_EXCHANGE

    def _decode_client_id(self, data, at, length):
        """The client id at data[at:at+length], decoded once per connection (it sends the same one)."""
        raw = self._client_id_raw
        if len(raw) == length and data.startswith(raw, at):  # compiled: a memcmp, no copy
            return self._client_id
        raw = data[at : at + length]
        client_id = raw.decode("utf-8", "replace")
        self._client_id_raw = raw
        self._client_id = client_id
        return client_id

    def _topic_order(self, buf, body, end, version):
        """A produce request's topic names, in order (produce_walk's walk, names decoded once); the
        request ends at buf[end]."""
        sent = produce_topics(buf, body, end, version, True)
        if sent is None:
            raise FrameError("truncated produce request")
        if sent == self._last_sent:  # a producer names the same topics request after request
            return self._last_order
        names = self._topic_names
        order = []
        for raw in sent:
            name = names.get(raw)
            if name is None:
                if len(names) >= 64:  # bounded: a client may name any number of topics
                    names.clear()
                name = names[raw] = raw.decode("utf-8", "replace")
            order.append(name)
        self._last_sent = sent
        self._last_order = tuple(order)
        return self._last_order

    def _buckets(self, client_id, now):
        """The client-quota buckets of (user, client_id), looked up again only when either or the
        engine's configuration changed."""
        buckets = self.entity_buckets
        engine = self._engine
        if buckets is None or client_id != self.entity_client_id or buckets.generation != engine.generation:
            buckets = self.entity_buckets = engine.entity_buckets(self.user, client_id, now)
            self.entity_client_id = client_id
        return buckets

    def _entity_stats(self, client_id, now):
        """EntityMetrics.entity(user, client_id): its counters, found without the call while they are kept."""
        key = self._entity_key
        if key is None or key[0] is not self.user or key[1] is not client_id:
            key = self._entity_key = (self.user, client_id)
        stats = self._stats_by_entity.get(key)
        if stats is None:
            return self._entity_metrics.entity(self.user, client_id, now)
        stats.last_seen = now
        return stats

    def _local_turn(self, now):
        """Sends the proxy-made responses at the head of the FIFO, unless a response is being cut through."""
        if _local_first(self.in_flight) and not self.broker_frames.stream_left:
            self._local_responses(now)

    def _local_responses(self, now):
        """Sends the proxy-made responses now at the head of the in-flight FIFO, in their turn."""
        in_flight = self.in_flight
        while _local_first(in_flight):
            request = in_flight.popleft()
            self.to_client.append(self._respond(request, request.local_response, now))

    # responses ---------------------------------------------------------------------------------
    def _release_held_if_answered(self, now):
        """After a read of responses: what waited for a SaslAuthenticate answer goes on, once none
        is awaited."""
        if not WAITS[self.phase] and (self.held or RECEIVE_LIMITED[self.phase] or self.pending_refusal is not None):
            self._release_held(now)

    # what a client makes the proxy hold, and refusals ------------------------------------------
    def _after_reads(self):
        """After a read: the partial frame's growth counted, and what follows the whole frames refused
        once none of them waits (`_check_partial`)."""
        frames = self.client_frames
        if self.partial_counted or frames.buffered:
            self._count_partial()
        if frames.buffered or self.pending_refusal is not None:
            self._check_partial()

    def _queue_refusal(self, reason, message):
        """The client sent what the broker closes the connection for, behind what is held: refused
        once that has gone; nothing after it is read."""
        self.client_frames.clear()
        if self.pending_refusal is None:
            self.pending_refusal = (reason, message)

    def _count_partial(self):
        """Counts the partial frame's growth in the budget shared by every client; over it, the
        frame is dropped and the client will be refused."""
        budget = self.services.partial_frames
        if budget is None:
            return
        buffered = self.client_frames.buffered
        grown = buffered - self.partial_counted
        if grown > 0 and not budget.take(grown):
            self._drop_partial()
            self._queue_refusal(
                PARTIAL_FRAMES_LIMIT,
                f"a frame would take the partial frames of all clients over {budget.limit} bytes "
                "(proxy.partial_frames_max_bytes)",
            )
            return
        if grown < 0:
            budget.give(-grown)
        self.partial_counted = buffered

    def _drop_partial(self):
        if self.partial_counted and self.services.partial_frames is not None:
            self.services.partial_frames.give(self.partial_counted)
        self.partial_counted = 0
        self.client_frames.clear()

    def close(self):
        """The connection is gone: gives back what its partial frame held of the shared budget."""
        self._drop_partial()

    def _check_partial(self):
        """Refuses what follows the whole frames once none of them waits any more: a refusal held
        back behind them, or a partial frame over the limit before authentication."""
        if self.phase == REFUSED or self.held or WAITS[self.phase]:
            return  # checked again when they have gone (the partial grows by one read at most meanwhile)
        if self.pending_refusal is None:
            self.pending_refusal = self._partial_refusal()
            if self.pending_refusal is None:
                return
        reason, message = self.pending_refusal
        self._refuse(reason, message)

    def _partial_refusal(self):
        """Why the frame arriving now is refused before the rest of it is read, or None: its size
        prefix (over sasl_server_max_receive_size before authentication, over this connection's
        share of partial_frames_max_bytes), then its API and version (`check_partial_head`: a
        version above what ApiVersions offered, anything but SASL before authentication)."""
        frames = self.client_frames
        size = frames.partial_size
        limit = self.receive_limit
        if limit is not None and size > limit:
            return SASL_RECEIVE_LIMIT, self._receive_limit_message(size)
        share = self.services.partial_frame_share
        if share is not None and size > share:
            return (
                PARTIAL_FRAME_SHARE,
                f"a frame of {size} bytes is over one connection's share of partial_frames_max_bytes "
                f"({share} bytes: proxy.partial_frames_max_bytes_per_connection)",
            )
        head = frames.new_partial_head(PARTIAL_HEAD_BYTES)
        if head is None:
            return None
        try:
            self.check_partial_head(head)
        except FrameError as exc:
            return exc.reason, str(exc)
        return None

    def _receive_limit_message(self, size):
        return (
            f"frame size {size} before SASL authentication completed is over "
            f"sasl_server_max_receive_size ({self._receive_limit})"
        )

    def _refuse(self, reason, message):
        """What the client sent next the broker would close the connection for: nothing more is
        read or forwarded, and the connection closes once what went before is answered."""
        self._enter(REFUSE)
        self.flow.refuse()
        self.refusal = message
        self.refusal_reason = reason
        self.pending_refusal = None
        self.held.clear()
        self._drop_partial()
        if reason != PROTOCOL_ERROR:
            self._metrics.frames_refused_total.labels(reason).inc()

    def _streamable(self, head):
        """Whether the response that begins with `head` can be cut through: `_respond` needs no
        more of it than its head (no rewrite, refusal merge, mutation results or SASL outcome) and
        its throttle_time_ms, if it has one, lies within the head."""
        if not self.in_flight:  # a stray is refused now, not after its announced size
            raise FrameError(f"response {_correlation_id(head)} to no request")
        request = self.in_flight[0]
        if request.responder is not None or request.empty_fetch or request.api_key in self._rewriters:
            return False
        try:
            throttle_time_offset(head, request.api_key, request.api_version)
        except FrameError:
            return False  # the field lies further in (or the head is bad): handle it whole
        return True

    def _expected(self, frame):
        """The request a response answers: the oldest in flight, checked by correlation id."""
        if not self.in_flight:
            raise FrameError(f"response {_correlation_id(frame)} to no request")
        expected = self._in_flight_popleft()
        correlation_id = _correlation_id(frame)
        if correlation_id != expected.correlation_id:
            raise FrameError(f"response {correlation_id} arrived where {expected.correlation_id} was due")
        return expected

    def _whole_response(self, frame, now):
        """A response that arrived whole: rewritten if it names brokers, answered, and followed by
        the proxy-made responses whose turn comes after it."""
        request = self._expected(frame)
        response = frame
        rewrite = self._rewriters.get(request.api_key)
        if rewrite is None:
            pass
        elif self._memoized[request.api_key]:  # its hits are nearly every ApiVersions, Metadata, FindCoordinator
            memo = rewrite
            started = self._clock()
            response = memo.rewritten(frame, request.api_version, self._cluster) or frame
            request.handling_ms += (self._clock() - started) * 1000
        elif not (request.api_key == API_PRODUCE and _plain_produce_response(frame, request.api_version)):
            started = self._clock()
            response = (
                rewrite(frame if type(frame) is memoryview else memoryview(frame), request.api_version, self._cluster)
                or frame
            )
            request.handling_ms += (self._clock() - started) * 1000
        if response is not frame:
            seen = self._cluster.seen
            if seen:  # the rewrite named a broker for the first time: reported, never acted on here
                self.brokers_seen.extend(seen)
                del seen[:]
        self.to_client.append(self._respond(request, response, now))
        if _local_first(self.in_flight):
            self._local_responses(now)

    def _respond(self, request, frame, now):
        """Charges the exchange, patches throttle_time_ms and mutes if due.

        `frame` may be only the head of a cut-through response: its size is the one its prefix
        announces, and only what the session's `_streamable` allows happens to it."""
        api_key = request.api_key
        throttle = request.min_throttle_ms
        if request.empty_fetch:  # a throttled incremental fetch: the broker's answer, emptied
            frame = throttled_fetch_replacement(frame, request.api_version)
        if request.responder is not None:  # recorded when the request was read
            started = self._clock()
            answered = request.responder.answered(self, request, frame, now)
            request.handling_ms += (self._clock() - started) * 1000
            frame = answered.frame
            throttle = answered.throttle
            if answered.event >= 0:
                self._authentication_answered(answered.event, answered.user)
        latency_ms = (now - request.sent_at) * 1000
        if request.local_response is None:
            self._counters.observe_latency(api_key, latency_ms / 1000)
        if not request.policy & REQUEST_TIME:
            request_ms = None
            self._entity_metrics.record_exempt(latency_ms)
        elif request.local_response is not None:  # the proxy's answer: its own time is the request's
            request_ms = request.handling_ms
        else:  # the broker's time, as the proxy sees it, and the proxy's own for the exchange
            request_ms = request_time_ms(request.policy, latency_ms, request.fetch_max_wait_ms) + request.handling_ms
        response_size = i32(frame, 0) if type(frame) is bytes else frame_body_size(frame)
        shadow_ms = 0
        if self._engine.limits_anyone:
            buckets = self._buckets(request.client_id, now)
            charged = charge_response(buckets, request.policy, response_size, request_ms, now)
            if charged > throttle:
                throttle = charged
            if buckets.shadow:  # a quota being tried: what it would have done, never applied
                shadow_ms = shadow_throttle_ms(buckets, request.policy, request_ms is not None, now)
                self._entity_metrics.record_shadow(self.user, request.client_id, shadow_ms, now)
        count_exchange(
            self._entity_stats(request.client_id, now),
            request.policy,
            request.request_size,
            response_size,
            request_ms,
            throttle,
        )
        if self._usage is not None:
            self._account_usage(request, response_size, latency_ms, throttle, shadow_ms, now)
        if throttle <= 0:
            return frame
        patched, _upstream_ms = patch_throttle_time(
            frame if type(frame) is memoryview else memoryview(frame), api_key, request.api_version, throttle
        )
        self._mute(throttle, now)
        return patched

    def _authentication_answered(self, event, user):
        """The broker answered a SaslAuthenticate (SaslPolicy's decision): the phase moves, and the
        user the exchange claimed is adopted if it succeeded."""
        if event == AUTHENTICATION_REFUSED:
            # The broker closes the connection after a refusal and reads nothing more (Kafka's
            # SaslServerAuthenticator): neither does the proxy, so nothing is charged to anyone.
            self.held.clear()
        self._enter(event)
        if user is not None and user != self.user:
            self.user = user
            self.entity_buckets = None  # the new user's buckets from the next charge

    def _account_usage(self, request, response_size, latency_ms, throttle, shadow_ms, now):
        """The exchange's usage record, into the recorder's collector (docs/usage-records.md)."""
        mutation = request.mutation
        if request.local_response is not None:
            decision = "refused"
            latency_ms = -1.0
        elif request.refused or (mutation is not None and mutation.refused):
            decision = "partially_refused"
        elif throttle > 0:
            decision = "throttled"
        else:
            decision = "ok"
        if mutation is not None:
            topics = tuple([topic.name or "" for topic in mutation.request.topics])
            partitions = sum(mutation.charged.values())
        else:
            topics = request.topic_order
            partitions = 0
        ts_ms = int((now + self._wall_offset) * 1000)
        aggregates = self._aggregates
        if aggregates is not None:
            added = aggregates.add_exchange(
                ts_ms, self.user, request.client_id, request.api_key, request.api_version, topics,
                request.request_size, response_size, partitions, latency_ms, throttle, decision, shadow_ms,
                request.over_quota,
            )  # fmt: skip
        else:
            records = self._records
            added = records.add_exchange(
                ts_ms, self.user, request.client_id, request.api_key, request.api_version, topics,
                request.request_size, response_size, partitions, latency_ms, throttle, decision, shadow_ms,
                request.over_quota,
            )  # fmt: skip
        if not added:
            self._usage.dropped()

    # muting ------------------------------------------------------------------------------------
    def _mute(self, throttle_ms, now):
        """Stops reading from the client until the throttle is over (KIP-219), or longer if already."""
        self.flow.mute(now + throttle_ms / 1000)
        self._metrics.mutes_total.inc()


def _in_flight(correlation_id, api_key, api_version, client_id, request_size, sent_at, max_wait, policy, over_quota):
    entry = InFlight.__new__(InFlight)
    entry.correlation_id = correlation_id
    entry.api_key = api_key
    entry.api_version = api_version
    entry.client_id = client_id
    entry.request_size = request_size
    entry.sent_at = sent_at
    entry.fetch_max_wait_ms = max_wait
    entry.policy = policy
    entry.local_response = None
    entry.refused = None
    entry.topic_order = ()
    entry.min_throttle_ms = 0
    entry.mutation = None
    entry.answer_after = None
    entry.responder = None
    entry.empty_fetch = False
    entry.handling_ms = 0.0
    entry.over_quota = over_quota
    return entry


def _local_first(in_flight):
    """Whether the FIFO's head is a response the proxy made itself (sent in its turn)."""
    if not in_flight:
        return False
    head = in_flight[0]
    return head.local_response is not None


def _slice(data, start, end):
    """data[start:end] as it is when that is all of it, else a view: never a copy."""
    return data if start == 0 and end == len(data) else memoryview(data)[start:end]


def _correlation_id(frame):
    if len(frame) < 8:
        raise FrameError("response shorter than a correlation id")
    head = frame if type(frame) is bytes else bytes(frame[:8])
    return i32(head, 4)


def _patched_fetch(frame, max_wait_at, max_bytes, answer_replaced):
    """A copy of the fetch request `frame` (size prefix included, max_wait_ms at `max_wait_at`, v3+)
    asking for at most `max_bytes`, its other bytes the client's; with `answer_replaced`, also asking
    the broker to answer at once with as little as it can (max_wait_ms and min_bytes 0: at most the
    first record batch it finds, KIP-74), because the proxy answers the client without it."""
    patched = bytearray(frame)
    _put_i32(patched, max_wait_at + MAX_BYTES_AFTER, max_bytes)
    if answer_replaced:
        _put_i32(patched, max_wait_at, 0)
        _put_i32(patched, max_wait_at + MIN_BYTES_AFTER, 0)
    return patched


def _put_i32(buf, pos, value):
    buf[pos] = (value >> 24) & 0xFF
    buf[pos + 1] = (value >> 16) & 0xFF
    buf[pos + 2] = (value >> 8) & 0xFF
    buf[pos + 3] = value & 0xFF


def _header_tags_end(buf, pos, end):
    """Where a request header's tagged fields (buf[pos:end]) end: each skipped by its length, and more
    than MAX_TAGS refused before any is walked (no client sends one: request headers define none)."""
    count, after = _uvarint(buf, pos, end)
    if count > MAX_TAGS:
        raise FrameError(tagged_fields_problem("the request header", count))
    after = _skip_tags(buf, pos, end)
    if after > end:
        raise FrameError("malformed tagged fields in the request header")
    return after


def _plain_produce_response(frame, version):
    """Whether a Produce response (prefix included) ends with no top-level tagged fields, in the usual
    shape (produce_walk): then it names no broker and needs no rewrite. False means "walk it", never
    "it has tags"."""
    if version < 9:
        return True  # no tagged fields at all before v9
    data = frame if type(frame) is bytes else bytes(frame)
    length = len(data)
    if length < 10 or data[8] != 0:  # prefix, correlation id, the response header's tags: none
        return False
    throttle_at = usual_throttle_offset(data, length, 9, version)
    # throttle_time_ms, then the top-level tagged fields: none, and nothing after them
    return throttle_at >= 0 and throttle_at + 5 == length and data[throttle_at + 4] == 0
