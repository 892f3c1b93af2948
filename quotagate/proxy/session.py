"""One client's Kafka exchange with its broker, as a plain object: bytes and `now` in, bytes and mutes out.

It never touches a socket, a loop or a clock (h11's Connection is the model). The caller feeds it:

    session.client_data(data, now)     bytes the client sent
    session.broker_data(data, now)     bytes the broker sent
    session.broker_connected(now)      the broker connection is up: held requests may go
    session.unmute(now)                the mute is over: held requests may go

and after each call writes `session.to_broker` and `session.to_client` (then clears them), and stops
reading from the client until `session.muted_until` (a time on the caller's clock). Once
`session.refusal` is set (the client sent what the broker closes a connection for: a request it
cannot parse, a frame over max_frame_size or, before SASL authentication, over
sasl_server_max_receive_size, or bytes over the partial_frames_max_bytes shared by all clients), the
caller stops reading and closes the pair when `awaiting_answers` turns false: the requests the
client pipelined before the offender are answered first, as the broker answers them.

A produce request, start to end:
- admitted in `_requests` -> `_admit_produce`: per-topic thresholds drop topics over theirs, and the
  request's size is charged to producer_byte_rate the moment it is read (`charge_request`);
- muted there too if that left the client in debt: the request still goes to the broker (Kafka
  appends, then throttles), but the frames read after it are held until `muted_until`;
- answered in `_respond`, when the broker's response comes back (or in its turn, by the session
  itself, when every topic was refused): refusals merged in, request time charged
  (`charge_response`), throttle_time_ms patched, metrics and the usage record written, and the
  client muted again if the response carries a throttle.

`client_data` and `broker_data` come from `SessionCore` (session_core.pyx, compiled): its fast lane
makes those same decisions, in C, for a plain exchange (no topic thresholds, no usage records, no
refusal to merge, acks != 0, whole frames, the session authenticated and not muted): a produce is
admitted and charged in `SessionCore._request`, answered and muted in `SessionCore._response`.
Everything else comes here: `_client_data`, `_requests`, `_broker_data`. The lane's tests
(tests/unit/test_session_lane.py) hold the two to the same bytes, counters and buckets.

Authentication: a SaslAuthenticate goes to the broker and what the client sent after it is held until
the broker answers; the user it claimed is adopted only if that answer ends the exchange with a
success, so the held requests are charged to the user the broker accepted, never to one it refused.

Kafka answers one connection's requests in order, so a FIFO of requests in flight says which API
each response answers. Responses the session makes itself wait in that FIFO for their turn, behind
any response still being streamed. Large responses that need nothing but their head (a Fetch) are
cut through: their head is charged and patched and the rest is passed on as it arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from quotagate.protocol.apis import ApiKey, api_name, exceeds_advertised_cap
from quotagate.protocol.fetch import fetch_max_wait_ms
from quotagate.protocol.framing import (
    FrameError,
    FrameSizeError,
    FrameSplitter,
    Piece,
    StreamingFrameSplitter,
    frame_body_size,
)
from quotagate.protocol.headers import peek_correlation_id, peek_request_header, response_body_offset
from quotagate.protocol.mutations import (
    MUTATION_APIS,
    MutationRequest,
    MutationTopic,
    decode_mutation,
    decode_results,
    merge_refusals,
    refusal_response,
)
from quotagate.protocol.produce import (
    produce_refusal_response,
    produce_request_acks,
    produce_request_keeping,
    produce_request_layout,
    produce_response_with_refusals,
)
from quotagate.protocol.rewrite import ClusterView, Rewriter
from quotagate.protocol.sasl import (
    DEFAULT_PRINCIPAL_CLAIM,
    authenticate_user,
    authentication_outcome,
    handshake_mechanism,
)
from quotagate.protocol.share import share_fetch_max_wait_ms
from quotagate.protocol.throttle import THROTTLE_EXEMPT_APIS, patch_throttle_time, throttle_time_offset
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.metrics import PARTIAL_FRAMES_LIMIT, SASL_RECEIVE_LIMIT, ProxyMetrics
from quotagate.proxy.quota_admin import CLIENT_QUOTA_APIS, QuotaAdmin
from quotagate.proxy.session_core import InFlight, SessionCore
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.usage import UsageRecord, UsageRecorder
from quotagate.quotas import ANONYMOUS, QuotaEngine, QuotaKey
from quotagate.quotas.charging import charge_request, charge_response, request_time_ms, shadow_throttle_ms
from quotagate.quotas.engine import EntityBuckets
from quotagate.quotas.topic_thresholds import TopicThresholdGuard

# Responses are not bounded by the client's max frame size; the broker's fetch.max.bytes is.
MAX_RESPONSE_FRAME = 2**31 - 1
# Responses from this size on (prefix included) may be cut through once RESPONSE_HEAD_BYTES of them
# are here (enough for the header and throttle_time_ms); smaller ones are always handled whole.
STREAM_RESPONSES_FROM = 16 * 1024
RESPONSE_HEAD_BYTES = 64
# Error for partitions refused by per-topic bytes-in thresholds: THROTTLING_QUOTA_EXCEEDED. Clients
# treat it as retriable (the Java producer retries it after retry.backoff.ms), and it says a quota
# was hit rather than that the request was wrong.
TOPIC_THRESHOLD_ERROR = 89
# A refused client is closed once the answers to its requests before the offender are written, or
# after this long without them: the Java client's default request.timeout.ms, after which it has
# given up on them anyway.
REFUSAL_ANSWERS_TIMEOUT_SECONDS = 30.0
# The reason of a refusal for a request the broker cannot parse (counted as a protocol error).
PROTOCOL_ERROR = "protocol_error"
WHOLE, HEAD, LAST = Piece.WHOLE, Piece.HEAD, Piece.LAST
# The API keys the hot path compares with, as plain ints: an IntEnum member look-up costs ~0.1 µs.
_PRODUCE, _FETCH, _API_VERSIONS = int(ApiKey.PRODUCE), int(ApiKey.FETCH), int(ApiKey.API_VERSIONS)
_SHARE_FETCH = int(ApiKey.SHARE_FETCH)
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)
# Requests that are never charged request time: authentication, and the cluster APIs Kafka exempts.
_AUTH_APIS = frozenset({_SASL_HANDSHAKE, _SASL_AUTHENTICATE})
_REQUEST_TIME_EXEMPT = THROTTLE_EXEMPT_APIS | _AUTH_APIS


@dataclass(frozen=True, slots=True)
class SessionServices:
    """What a session decides with, shared by every session of one proxy; handed in, never looked up."""

    engine: QuotaEngine
    topic_guard: TopicThresholdGuard
    topics: TopicCatalog
    metrics: ProxyMetrics
    entity_metrics: EntityMetrics
    rewriters: dict[int, Rewriter]
    cluster: ClusterView  # what the rewriters tell about the brokers and topics they see
    usage: UsageRecorder | None
    wall_ms: Callable[[float], int]  # the caller's clock -> epoch milliseconds, for usage records
    max_frame_size: int
    # Answers DescribeClientQuotas/AlterClientQuotas from the proxy's quotas; None: they are forwarded.
    quota_admin: QuotaAdmin | None = None
    # The OAUTHBEARER token claim that names the user (the broker's sasl.oauthbearer.sub.claim.name).
    principal_claim: str = DEFAULT_PRINCIPAL_CLAIM
    # The largest frame before SASL authentication completes (sasl.server.max.receive.size) on
    # brokers that require SASL; None: the listener does not, and max_frame_size alone applies.
    sasl_max_receive_size: int | None = None
    # What every client's partial frames may hold together (proxy.partial_frames_max_bytes).
    partial_frames: ByteBudget | None = None
    # The compiled fast lane (session_core) takes the plain exchanges; False: every byte goes
    # through the general path here (the lane's tests compare the two).
    fast_lane: bool = True


@dataclass(slots=True)
class MutationInFlight:
    """A topic mutation under the controller mutation quota, between request and response."""

    request: MutationRequest
    forwarded: list[int]  # indexes of the topics sent to the broker
    refused: list[int]  # indexes answered THROTTLING_QUOTA_EXCEEDED by the proxy
    charged: dict[int, int]  # index -> partitions charged for it


class Session(SessionCore):
    """The proxy's decisions for one client connection; the caller moves the bytes.

    `client_data` and `broker_data` are SessionCore's: its compiled lane takes the plain exchanges
    and hands everything else to `_client_data`, `_requests` and `_broker_data` here."""

    def __init__(self, services: SessionServices, principal: str | None = None) -> None:
        """`principal`: the user the connection is before any SASL exchange (the mapped subject of a
        verified client certificate), ANONYMOUS if None."""
        super().__init__(services, services.fast_lane)
        self.to_broker: list[bytes | memoryview] = []
        self.to_client: list[bytes | memoryview] = []
        self.muted_until = 0.0
        self.user = principal or ANONYMOUS
        self.sasl_mechanism: str | None = None
        # The user the current SASL exchange claims: adopted only when the broker says it succeeded.
        self.claimed_user: str | None = None
        # A SaslAuthenticate is in flight: what the client sent after it waits for the broker's
        # answer, to be charged to the user that answer establishes (never to the one before).
        self.awaiting_authentication = False
        # Until the first request that is not ApiVersions or SASL, the client is authenticating:
        # Kafka does not charge that exchange to request-time quotas.
        self.authenticating = True
        self.connected = False
        # The buckets of (user, client id) of the last request: one look-up per entity, not per charge.
        self.entity_buckets: EntityBuckets | None = None
        self.entity_client_id = ""
        # SessionCore made `in_flight` (deque[InFlight]) and `held` (deque[memoryview]: frames read but
        # not forwarded yet, while the broker connects, and while muted).
        self.client_frames = FrameSplitter(services.max_frame_size)
        # The limit on frames before SASL authentication completes, None once it has (or if the
        # listener needs none): the broker's SaslServerAuthenticator reads them with this limit.
        self.receive_limit = services.sasl_max_receive_size
        self.partial_counted = 0  # bytes of the partial frame counted in services.partial_frames
        # A refusal waiting for the frames held before the offender: (reason, message).
        self.pending_refusal: tuple[str, str] | None = None
        # Set when the client sent what the broker would close the connection for. Nothing more is
        # read or forwarded; the connection closes once the answers to what went before are written.
        self.refusal: str | None = None
        self.refusal_reason = ""
        self.broker_frames = StreamingFrameSplitter(MAX_RESPONSE_FRAME, STREAM_RESPONSES_FROM, RESPONSE_HEAD_BYTES)

    # the general path (client_data and broker_data, SessionCore's, come here for what their lane
    # does not take) --------------------------------------------------------------------------------
    def _client_data(self, data: bytes, now: float) -> None:
        """Bytes from the client. What the broker would close the connection for (bytes that are not
        Kafka requests, a request it cannot parse, a frame over a limit) sets `refusal`; the requests
        before it are forwarded and answered first, as the broker answers them before it reads on."""
        self.services.metrics.bytes_in += len(data)
        if self.refusal is not None or self.pending_refusal is not None:
            return  # the broker would never read past the offender
        splitter = self.client_frames
        try:
            frames = splitter.feed(data)
        except FrameSizeError as exc:
            frames = exc.frames
            splitter.clear()
            self.pending_refusal = (PROTOCOL_ERROR, str(exc))
        if self.partial_counted or splitter.buffered:
            self._count_partial()
        self.client_partial = splitter.buffered > 0
        if self.held or not self.connected or self.muted_until > now or self.awaiting_authentication:
            # A read may land after a mute (or before the broker is connected): hold it, in order.
            self.held.extend(frames)
        else:
            self._requests(frames, now)
        if self.receive_limit is not None or self.pending_refusal is not None:
            self._check_partial()

    def close(self) -> None:
        """The connection is gone: gives back what its partial frame held of the shared budget."""
        self._drop_partial()

    def _broker_data(self, data: bytes, now: float) -> None:
        """Bytes from the broker. Raises FrameError if they are not responses to what is in flight."""
        out = self.to_client
        start = len(out)
        frame = self.broker_frames.whole_frame(data)
        if frame is not None:  # one whole response, the usual read: no splitting
            self._whole_response(frame, now)
        else:
            for kind, piece in self.broker_frames.pieces(data, self._streamable):
                if kind is WHOLE:
                    self._whole_response(piece, now)
                elif kind is HEAD:
                    out.append(self._respond(self._expected(piece), piece, now))
                else:
                    out.append(piece)
                    if kind is LAST:  # what the proxy answered itself goes after it, in turn
                        self._local_responses(now)
        self.services.metrics.bytes_out += sum(map(len, out[start:] if start else out))
        self.broker_partial = self.broker_frames.streaming or self.broker_frames.buffered > 0
        if not self.awaiting_authentication and (
            self.held or self.receive_limit is not None or self.pending_refusal is not None
        ):
            self._release_held(now)  # what waited for a SaslAuthenticate answer

    def broker_connected(self, now: float) -> None:
        self.connected = True
        self._release_held(now)

    def unmute(self, now: float) -> None:
        """The mute is over (`now` >= muted_until): forwards what was held while it lasted."""
        self._release_held(now)

    @property
    def awaiting_answers(self) -> bool:
        """Requests are in flight, or a response is still being cut through to the client."""
        return bool(self.in_flight) or self.broker_frames.streaming

    # limits on what a client makes the proxy hold -------------------------------------------------
    def _count_partial(self) -> None:
        """Counts the partial frame's growth in the budget shared by every client; over it, the
        frame is dropped and the client will be refused."""
        budget = self.services.partial_frames
        if budget is None:
            return
        buffered = self.client_frames.buffered
        grown = buffered - self.partial_counted
        if grown > 0 and not budget.take(grown):
            self._drop_partial()
            if self.pending_refusal is None:
                self.pending_refusal = (
                    PARTIAL_FRAMES_LIMIT,
                    f"a frame would take the partial frames of all clients over {budget.limit} bytes "
                    "(proxy.partial_frames_max_bytes)",
                )
            return
        if grown < 0:
            budget.give(-grown)
        self.partial_counted = buffered

    def _drop_partial(self) -> None:
        if self.partial_counted and self.services.partial_frames is not None:
            self.services.partial_frames.give(self.partial_counted)
        self.partial_counted = 0
        self.client_frames.clear()
        self.client_partial = False

    def _check_partial(self) -> None:
        """Refuses what follows the whole frames once none of them waits any more: a refusal held
        back behind them, or a partial frame over the limit before authentication."""
        if self.refusal is not None or self.held or self.awaiting_authentication:
            return  # checked again when they have gone (the partial grows by one read at most meanwhile)
        if self.pending_refusal is None:
            size = self.client_frames.partial_size
            if self.receive_limit is not None and size > self.receive_limit:
                self.pending_refusal = (SASL_RECEIVE_LIMIT, self._receive_limit_message(size))
            else:
                return
        self._refuse(*self.pending_refusal)

    def _receive_limit_message(self, size: int) -> str:
        return (
            f"frame size {size} before SASL authentication completed is over "
            f"sasl_server_max_receive_size ({self.receive_limit})"
        )

    def _refuse(self, reason: str, message: str) -> None:
        """What the client sent next the broker would close the connection for: nothing more is
        read or forwarded, and the connection closes once what went before is answered."""
        self.refusal = message
        self.refusal_reason = reason
        self.pending_refusal = None
        self.held.clear()
        self._drop_partial()
        if reason != PROTOCOL_ERROR:
            self.services.metrics.frames_refused_total.labels(reason).inc()

    # requests ------------------------------------------------------------------------------------
    def _release_held(self, now: float) -> None:
        if self.held and self.connected and self.muted_until <= now and not self.awaiting_authentication:
            frames = list(self.held)
            self.held.clear()
            self._requests(frames, now)
        self._check_partial()

    def _requests(self, frames: list[memoryview], now: float) -> None:
        """Peeks at each request and forwards it; stops (holding the rest) after one that mutes."""
        services = self.services
        metrics = services.metrics
        engine = services.engine
        out = self.to_broker
        stop_after: int | None = None  # index of the request after which reading stops (muted)
        for index, frame in enumerate(frames):
            if self.receive_limit is not None and len(frame) - 4 > self.receive_limit:
                self._refuse(SASL_RECEIVE_LIMIT, self._receive_limit_message(len(frame) - 4))
                break
            try:
                header = peek_request_header(frame)
                api_key, version, body = header.api_key, header.api_version, header.body_offset
                if exceeds_advertised_cap(api_key, version):  # the broker closes on a version it lacks
                    raise FrameError(f"{api_name(api_key)} v{version} is above what ApiVersions offered")
                client_id = header.client_id or ""
                metrics.count_request(api_key)
                max_wait = 0
                forwarded: memoryview | bytes | None = frame
                refused: dict[str, tuple[int, ...]] | None = None
                order: tuple[str, ...] = ()
                refusal_wait = 0
                mutation: MutationInFlight | None = None
                local: bytes | None = None  # a response the proxy makes itself, sent in this request's turn
                over_quota = False
                if api_key == _PRODUCE:
                    forwarded, refused, order, refusal_wait, charged_throttle = self._admit_produce(
                        frame, body, version, client_id, now
                    )
                    over_quota = charged_throttle > 0
                    throttle = max(charged_throttle, refusal_wait)
                    if throttle > 0:
                        # In debt: this request goes on (Kafka appends, then throttles), but reading
                        # stops here; what was read after it waits for the mute to end.
                        self._mute(throttle, now)
                        stop_after = index
                    if produce_request_acks(frame, body, version) == 0:  # no response will come
                        services.entity_metrics.record_response(
                            self.user, client_id, api_key, len(frame) - 4, 0, None, throttle, now
                        )
                        if forwarded is not None:
                            out.append(forwarded)
                        if stop_after is not None:
                            break
                        continue
                elif api_key in CLIENT_QUOTA_APIS and services.quota_admin is not None:
                    forwarded = None  # the proxy's quotas, not the brokers', are described and altered
                    local = services.quota_admin.answer(frame, header, self.user, now)
                elif api_key in MUTATION_APIS and engine.enforces(QuotaKey.CONTROLLER_MUTATION_RATE):
                    forwarded, mutation = self._admit_mutation(frame, body, api_key, version, client_id, now)
                elif api_key == _FETCH:
                    max_wait = fetch_max_wait_ms(frame, body, version)
                elif api_key == _SHARE_FETCH:
                    max_wait = share_fetch_max_wait_ms(frame, body, version)
                elif api_key == _SASL_HANDSHAKE:
                    if version == 0:
                        raise FrameError("SaslHandshake v0 (raw SASL tokens) is unsupported; clients since 1.0 use v1")
                    self.sasl_mechanism = handshake_mechanism(frame, body, version)
                    self.claimed_user = None  # a new exchange (KIP-368 re-authentication too)
                    # A re-authentication's frames are read by the broker's authenticator again.
                    self.receive_limit = services.sasl_max_receive_size
                elif api_key == _SASL_AUTHENTICATE:
                    claimed = authenticate_user(self.sasl_mechanism, frame, body, version, services.principal_claim)
                    if claimed is not None:
                        self.claimed_user = claimed
                    self.awaiting_authentication = True
                    stop_after = index  # what follows waits for the broker's answer
                if self.authenticating and api_key not in _AUTH_APIS and api_key != _API_VERSIONS:
                    # Past authentication (a SASL listener closes a connection that asks anything
                    # else first): the broker reads with socket.request.max.bytes from here on.
                    self.authenticating = False
                    self.receive_limit = None
                if local is None and forwarded is None and mutation is not None:  # nothing admitted: the proxy answers
                    local = refusal_response(
                        mutation.request,
                        header.correlation_id,
                        mutation.refused,
                        engine.throttle_ms(self.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now),
                    )
                elif local is None and forwarded is None:  # every topic refused: the proxy answers, in turn
                    assert refused is not None
                    local = produce_refusal_response(
                        header.correlation_id,
                        version,
                        refused,
                        TOPIC_THRESHOLD_ERROR,
                        self._refusal_message(refused, now),
                    )
                self.in_flight.append(
                    InFlight(
                        header.correlation_id,
                        api_key,
                        version,
                        client_id,
                        len(frame) - 4,
                        now,
                        max_wait,
                        api_key in _REQUEST_TIME_EXEMPT or (api_key == _API_VERSIONS and self.authenticating),
                        local,
                        refused if forwarded is not None else None,
                        order,
                        refusal_wait,
                        mutation,
                        over_quota,
                    )
                )
                if forwarded is not None:
                    out.append(forwarded)
                if stop_after is not None:
                    break
            except FrameError as exc:  # the broker closes on a request it cannot parse, after those before
                self._refuse(PROTOCOL_ERROR, str(exc))
                break
        if stop_after is not None and self.refusal is None:
            self.held.extend(frames[stop_after + 1 :])
        in_flight = self.in_flight
        if in_flight and in_flight[0].local_response is not None and not self.broker_frames.streaming:
            self._local_responses(now)  # else they go after the response being cut through

    def _buckets(self, client_id: str, now: float) -> EntityBuckets:
        """The client-quota buckets of (user, client_id), looked up again only when either or the
        engine's configuration changed."""
        buckets = self.entity_buckets
        engine = self.services.engine
        if buckets is None or client_id != self.entity_client_id or buckets.generation != engine.generation:
            buckets = self.entity_buckets = engine.entity_buckets(self.user, client_id, now)
            self.entity_client_id = client_id
        return buckets

    def _admit_produce(
        self, frame: memoryview, body: int, version: int, client_id: str, now: float
    ) -> tuple[memoryview | bytes | None, dict[str, tuple[int, ...]] | None, tuple[str, ...], int, int]:
        """Applies per-topic thresholds to a produce request and charges it its size when read.

        Returns the frame to forward (None when every topic is refused), the refused topics, the
        request's topic order, the least throttle its refusals need, and the throttle its charge
        calls for now."""
        services = self.services
        forwarded: memoryview | bytes | None = frame
        refused: dict[str, tuple[int, ...]] | None = None
        order: tuple[str, ...] = ()
        if services.topic_guard:
            forwarded, refused, order = self._apply_topic_thresholds(frame, body, version, now)
        elif services.usage is not None:  # usage records name the topics: a cheap walk
            order = tuple(t.name for t in produce_request_layout(frame, body, version).topics)
        engine = services.engine
        size = len(frame) - 4
        throttle = charge_request(self._buckets(client_id, now), _PRODUCE, size, now) if engine.limits_anyone else 0
        refusal_wait = services.topic_guard.retry_after_ms(refused, now) if refused else 0
        return forwarded, refused, order, refusal_wait, throttle

    def _apply_topic_thresholds(
        self, frame: memoryview, body: int, version: int, now: float
    ) -> tuple[memoryview | bytes | None, dict[str, tuple[int, ...]] | None, tuple[str, ...]]:
        """Drops the topics that are over their threshold while the total is too; returns the frame to
        forward (None when nothing is left), the refused topics and the request's topic order."""
        guard = self.services.topic_guard
        layout = produce_request_layout(frame, body, version)
        refused_names = guard.refused([topic.name for topic in layout.topics], now)
        guard.record({t.name: t.record_bytes for t in layout.topics if t.name not in refused_names}, now)
        order = tuple(topic.name for topic in layout.topics)
        if not refused_names:
            return frame, None, order
        self.services.metrics.topic_refusals_total.inc(len(refused_names))
        refused = {t.name: t.partitions for t in layout.topics if t.name in refused_names}
        if len(refused) == len(layout.topics):
            return None, refused, order
        kept = {topic.name for topic in layout.topics} - refused_names
        return produce_request_keeping(frame, version, layout, kept), refused, order

    def _refusal_message(self, refused: dict[str, tuple[int, ...]], now: float) -> str:
        guard = self.services.topic_guard
        assert guard.thresholds is not None
        topics = ", ".join(f"{name} ({guard.threshold(name, now):.0f} B/s)" for name in refused)
        return (
            f"quotagate: produce refused: bytes in over the total threshold "
            f"({guard.thresholds.total_bytes_in_per_sec} B/s) and over the topic's own: {topics}"
        )

    def _admit_mutation(
        self, frame: memoryview, body: int, api_key: int, version: int, client_id: str, now: float
    ) -> tuple[memoryview | bytes | None, MutationInFlight | None]:
        """Admits a topic mutation's topics in order under the controller mutation quota (KIP-599).

        Returns the frame to forward (the original, one re-encoded with the admitted topics only,
        or None when nothing was admitted) and what the response will need. validate_only
        requests are never charged (KIP-599)."""
        request = decode_mutation(frame, body, api_key, version)
        if request.validate_only:
            return frame, None
        costs = [self._mutation_cost(request, topic) for topic in request.topics]
        services = self.services
        admitted = services.engine.admit(
            self.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, costs, request.strict, now
        )
        forwarded = [i for i, ok in enumerate(admitted) if ok]
        refused = [i for i, ok in enumerate(admitted) if not ok]
        mutation = MutationInFlight(request, forwarded, refused, {i: costs[i] for i in forwarded})
        services.entity_metrics.record_mutations(self.user, client_id, sum(costs[i] for i in forwarded), now)
        if not refused:
            return frame, mutation
        services.metrics.mutation_refusals_total.inc(len(refused))
        if not forwarded:
            return None, mutation
        return request.encode_keeping(forwarded), mutation

    def _mutation_cost(self, request: MutationRequest, topic: MutationTopic) -> int:
        """Partitions a topic mutation is charged before the broker answers (spec §4)."""
        topics = self.services.topics
        if request.api_key == ApiKey.CREATE_TOPICS:
            # −1 asks for the broker's default count, unknown here: charge 1 now, the rest when the
            # response (v5+) says how many partitions were made.
            return max(topic.requested, 1)
        current = topics.partition_count(topics.name_of(topic.name, topic.topic_id))
        if current is None:
            return 0  # a topic the proxy has not seen described: nothing, as for an unknown topic
        if request.api_key == ApiKey.CREATE_PARTITIONS:
            return max(topic.requested - current, 0)
        return current  # DeleteTopics: the partitions it removes

    # responses -----------------------------------------------------------------------------------
    def _expected(self, frame: memoryview) -> InFlight:
        """The request a response answers: the oldest in flight, checked by correlation id."""
        if not self.in_flight:
            raise FrameError(f"response {peek_correlation_id(frame)} to no request")
        expected = self.in_flight.popleft()
        correlation_id = peek_correlation_id(frame)
        if correlation_id != expected.correlation_id:
            raise FrameError(f"response {correlation_id} arrived where {expected.correlation_id} was due")
        return expected

    def _whole_response(self, frame: memoryview, now: float) -> None:
        """A response that arrived whole: rewritten if it names brokers, answered, and followed by
        the proxy-made responses whose turn comes after it."""
        request = self._expected(frame)
        response: bytes | memoryview = frame
        rewrite = self.services.rewriters.get(request.api_key)
        if rewrite is not None:
            response = rewrite(frame, request.api_version, self.services.cluster) or frame
        self.to_client.append(self._respond(request, response, now))
        in_flight = self.in_flight
        if in_flight and in_flight[0].local_response is not None:
            self._local_responses(now)

    def _oldest_in_flight(self, frame: memoryview) -> InFlight:
        """The oldest request in flight; a response (beginning with `frame`) when there is none is bad."""
        if not self.in_flight:
            raise FrameError(f"response {peek_correlation_id(frame)} to no request")
        return self.in_flight[0]

    def _streamable(self, head: memoryview) -> bool:
        """Whether the response that begins with `head` can be cut through: `_respond` needs no
        more of it than its head (no rewrite, refusal merge, mutation results or SASL outcome) and
        its throttle_time_ms, if it has one, lies within the head."""
        request = self._oldest_in_flight(head)  # a stray is refused now, not after its announced size
        if (
            request.refused
            or request.mutation is not None
            or request.api_key == _SASL_AUTHENTICATE
            or request.api_key in self.services.rewriters
        ):
            return False
        try:
            throttle_time_offset(head, request.api_key, request.api_version)
        except FrameError:
            return False  # the field lies further in (or the head is bad): handle it whole
        return True

    def _local_responses(self, now: float) -> None:
        """Sends the proxy-made responses now at the head of the in-flight FIFO, in their turn."""
        in_flight = self.in_flight
        while in_flight and in_flight[0].local_response is not None:
            request = in_flight.popleft()
            assert request.local_response is not None
            self.to_client.append(self._respond(request, request.local_response, now))

    def _respond(self, request: InFlight, frame: memoryview | bytes, now: float) -> memoryview | bytes:
        """Charges the exchange, notes authentication, patches throttle_time_ms and mutes if due.

        `frame` may be only the head of a cut-through response: its size is the one its prefix
        announces, and only what `_streamable` allows happens to it."""
        services = self.services
        if request.api_key == _SASL_AUTHENTICATE:
            self._note_authentication(request, frame)
        elif request.refused:
            frame = produce_response_with_refusals(
                frame,
                request.api_version,
                request.topic_order,
                request.refused,
                TOPIC_THRESHOLD_ERROR,
                self._refusal_message(request.refused, now),
            )
        engine = services.engine
        latency_ms = (now - request.sent_at) * 1000
        if request.local_response is None:
            services.metrics.observe_latency(request.api_key, latency_ms / 1000)
        if request.exempt:
            request_ms = None
            services.entity_metrics.record_exempt(latency_ms)
        else:
            request_ms = request_time_ms(request.api_key, latency_ms, request.fetch_max_wait_ms)
        throttle = request.min_throttle_ms
        mutation = request.mutation
        if mutation is not None:
            frame = self._settle_mutation(request, frame, now)
            # Strict mode throttles with a refusal only: a response whose topics were all admitted
            # carries no mutation throttle and mutes nothing, even if it drove the bucket into debt
            # (spec §4; Kafka's StrictControllerMutationQuota). Permissive mode always does.
            if mutation.refused or not mutation.request.strict:
                throttle = max(
                    throttle, engine.throttle_ms(self.user, request.client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now)
                )
        response_size = frame_body_size(frame)
        shadow_ms = 0
        if engine.limits_anyone:
            buckets = self._buckets(request.client_id, now)
            throttle = max(throttle, charge_response(buckets, request.api_key, response_size, request_ms, now))
            if buckets.shadow:  # a quota being tried: what it would have done, never applied
                shadow_ms = shadow_throttle_ms(buckets, request.api_key, request_ms is not None, now)
                services.entity_metrics.record_shadow(self.user, request.client_id, shadow_ms, now)
        services.entity_metrics.record_response(
            self.user,
            request.client_id,
            request.api_key,
            request.request_size,
            response_size,
            request_ms,
            throttle,
            now,
        )
        if services.usage is not None:
            services.usage.add(self._usage_record(request, response_size, latency_ms, throttle, shadow_ms, now))
        if throttle <= 0:
            return frame
        patched, _upstream_ms = patch_throttle_time(memoryview(frame), request.api_key, request.api_version, throttle)
        self._mute(throttle, now)
        return patched

    def _settle_mutation(self, request: InFlight, frame: memoryview | bytes, now: float) -> memoryview | bytes:
        """Refunds topics the broker rejected (Kafka charges only topics that pass validation),
        charges a CreateTopics the partitions it really made, updates the topic catalog, and
        merges the proxy's refusals back into the response in the client's order."""
        mutation = request.mutation
        assert mutation is not None
        if request.local_response is not None:
            return frame
        engine, topics, key = self.services.engine, self.services.topics, QuotaKey.CONTROLLER_MUTATION_RATE
        response, results = decode_results(frame, request.api_key, request.api_version)
        for index, result in zip(mutation.forwarded, results, strict=False):
            charged = mutation.charged[index]
            topic = mutation.request.topics[index]
            name = topics.name_of(result.name or topic.name, topic.topic_id)
            if result.error_code != 0:
                engine.refund(self.user, request.client_id, key, charged, now)
            elif request.api_key == ApiKey.CREATE_TOPICS:
                made = result.num_partitions if result.num_partitions > 0 else charged
                if made > charged:
                    engine.charge(self.user, request.client_id, key, made - charged, now)
                elif made < charged:
                    engine.refund(self.user, request.client_id, key, charged - made, now)
                if name:
                    topics.observe([(name, None, made)])
            elif request.api_key == ApiKey.CREATE_PARTITIONS and name:
                topics.observe([(name, None, topic.requested)])
            elif request.api_key == ApiKey.DELETE_TOPICS and name:
                topics.forget(name)
        if mutation.refused:
            return merge_refusals(frame, mutation.request, mutation.forwarded, mutation.refused, response)
        return frame

    def _usage_record(
        self, request: InFlight, response_size: int, latency_ms: float, throttle: int, shadow_ms: int, now: float
    ) -> UsageRecord:
        mutation = request.mutation
        if request.local_response is not None:
            decision = "refused"
        elif request.refused or (mutation is not None and mutation.refused):
            decision = "partially_refused"
        else:
            decision = "throttled" if throttle > 0 else "ok"
        topics = tuple(t.name or "" for t in mutation.request.topics) if mutation is not None else request.topic_order
        return UsageRecord(
            self.services.wall_ms(now),
            self.user,
            request.client_id,
            request.api_key,
            request.api_version,
            topics,
            request.request_size,
            response_size,
            sum(mutation.charged.values()) if mutation is not None else 0,
            latency_ms if request.local_response is None else -1.0,
            throttle,
            decision,
            shadow_ms,
            request.over_quota,
        )

    def _note_authentication(self, request: InFlight, frame: memoryview | bytes) -> None:
        """Adopts the claimed user once the broker says the exchange is over and succeeded; a refusal
        leaves the principal as it was (the broker closes the connection after it)."""
        view = memoryview(frame)
        body = response_body_offset(view, request.api_key, request.api_version)
        outcome = authentication_outcome(self.sasl_mechanism, view, body, request.api_version)
        if outcome is False:
            # The broker closes the connection after a refusal and reads nothing more (Kafka's
            # SaslServerAuthenticator): neither does the proxy, so nothing is charged to anyone.
            self.held.clear()
            self.claimed_user = None
            return
        self.awaiting_authentication = False
        if outcome is None:
            return  # more rounds to come
        self.receive_limit = None  # authenticated: the broker reads with socket.request.max.bytes
        claimed, self.claimed_user = self.claimed_user, None
        if outcome and claimed is not None and claimed != self.user:
            # A (re-)authentication as someone else moves the connection to their buckets.
            self.user = claimed
            self.entity_buckets = None

    # muting --------------------------------------------------------------------------------------
    def _mute(self, throttle_ms: int, now: float) -> None:
        """Stops reading from the client until the throttle is over (KIP-219), or longer if already."""
        self.muted_until = max(self.muted_until, now + throttle_ms / 1000)
        self.services.metrics.mutes_total.inc()
