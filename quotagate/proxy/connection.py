"""One client connection and the upstream broker connection it is paired with.

Data path: client bytes -> frames -> header peek -> (remember what response to expect) -> upstream;
upstream bytes -> frames -> match the oldest request -> rewrite if the API names brokers ->
charge the client's quotas -> patch throttle_time_ms -> client -> mute the client if throttled.
Kafka answers the requests of one connection in order, so a FIFO of in-flight requests is enough
to know which API each response belongs to, and pipelined requests keep their order.

Large responses that need nothing but their first bytes (a Fetch: charged by the size its prefix
announces, throttle_time_ms near the start) are cut through: their head is charged and patched and
the rest is passed on as it arrives, so the client reads while the broker still sends, and the
proxy holds at most one read of them. Responses the proxy must rewrite are buffered whole.

Muting (KIP-219): a throttled client gets its response at once, with throttle_time_ms set, and
then the proxy stops reading from it until the shared delay queue says the time is over. Frames
already read while muted are held, in order, and forwarded when the mute ends: nothing is dropped
or reordered, and a client that ignores throttle_time_ms is held to its quota all the same.

Flow control: when one side's write buffer fills, reading from the other side pauses, so a slow
reader never makes the proxy buffer without bound. When either side closes, the other is closed
(after flushing what was already queued for it).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

from quotagate.protocol.apis import ApiKey, api_name, exceeds_advertised_cap
from quotagate.protocol.fetch import fetch_max_wait_ms
from quotagate.protocol.framing import FrameError, FrameSplitter, Piece, StreamingFrameSplitter, frame_body_size
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
from quotagate.protocol.sasl import authenticate_user, handshake_mechanism
from quotagate.protocol.throttle import THROTTLE_EXEMPT_APIS, patch_throttle_time, throttle_time_offset
from quotagate.proxy.flow_control import ReadGate
from quotagate.proxy.usage import UsageRecord
from quotagate.quotas import ANONYMOUS, QuotaKey
from quotagate.quotas.charging import charge_request, charge_response, request_time_ms

if TYPE_CHECKING:
    from quotagate.proxy.server import Proxy

log = logging.getLogger("quotagate.proxy")

WRITE_BUFFER_HIGH = 1024 * 1024
WRITE_BUFFER_LOW = 256 * 1024
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
# Requests that are never charged request time: authentication, and the cluster APIs Kafka exempts.
_AUTH_APIS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
_REQUEST_TIME_EXEMPT = THROTTLE_EXEMPT_APIS | _AUTH_APIS


@dataclass(slots=True)
class MutationInFlight:
    """A topic mutation under the controller mutation quota, between request and response."""

    request: MutationRequest
    forwarded: list[int]  # indexes of the topics sent to the broker
    refused: list[int]  # indexes answered THROTTLING_QUOTA_EXCEEDED by the proxy
    charged: dict[int, int]  # index -> partitions charged for it


class InFlight(NamedTuple):
    correlation_id: int
    api_key: int
    api_version: int
    client_id: str
    request_size: int  # header + body, without the size prefix
    sent_at: float  # loop time when forwarded
    fetch_max_wait_ms: int
    exempt: bool  # never charged request time
    sasl_user: str | None  # the user a SaslAuthenticate request claims to be
    # A response the proxy makes itself (the request was not forwarded); sent in its turn.
    local_response: bytes | None = None
    # Topics the proxy refused from a forwarded produce, merged back into the broker's answer.
    refused: dict[str, tuple[int, ...]] | None = None
    topic_order: tuple[str, ...] = ()
    # Least throttle the response must carry (a refusal says when to come back).
    min_throttle_ms: int = 0
    mutation: MutationInFlight | None = None


class ClientConnection(asyncio.Protocol):
    """The client side of a pair; owns the pairing, the in-flight FIFO, identity and muting."""

    def __init__(self, proxy: Proxy, listener: str, upstreams: Sequence[tuple[str, int]]) -> None:
        self.proxy = proxy
        self.listener = listener
        self.upstreams = upstreams
        self.transport: asyncio.Transport | None = None
        self.reading: ReadGate | None = None
        self.upstream: UpstreamConnection | None = None
        self.splitter = FrameSplitter(proxy.config.proxy.max_frame_size)
        self.in_flight: deque[InFlight] = deque()
        # Frames read but not forwarded yet: while the upstream connects, and while muted.
        self.held: deque[memoryview] = deque()
        self.user = ANONYMOUS
        self.sasl_mechanism: str | None = None
        # Until the first request that is not ApiVersions or SASL, the client is authenticating:
        # Kafka does not charge that exchange to request-time quotas.
        self.authenticating = True
        self.muted_until = 0.0
        self.peer = "?"
        self.closed = False
        self.last_activity = proxy.loop.time()  # last byte either way (connections_max_idle_ms)

    # asyncio callbacks -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.reading = ReadGate(transport)
        self.reading.pause("upstream-connecting")
        if self.proxy.connection_opened(self):  # False: closed by a connection limit
            asyncio.get_running_loop().create_task(self._connect_upstream())

    def data_received(self, data: bytes) -> None:
        self.proxy.metrics.bytes_in += len(data)
        self.last_activity = self.proxy.loop.time()  # connections_max_idle_ms
        try:
            frames = self.splitter.feed(data)
        except FrameError as exc:
            self.protocol_error("client", exc)
            return
        if self.held or self.upstream is None or self.muted:
            # uvloop starts reading before connection_made's pause takes effect, and one read may
            # land after a mute: hold those frames, in order, and make sure reading is paused.
            self.held.extend(frames)
            if self.transport is not None:
                self.transport.pause_reading()
            return
        self._forward(frames)

    def pause_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.reading.pause("client-backpressure")

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.reading.resume("client-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.proxy.connection_closed(self)
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.close()

    # requests ------------------------------------------------------------------------------------
    @property
    def muted(self) -> bool:
        return self.muted_until > self.proxy.loop.time()

    def _forward(self, frames: Sequence[memoryview]) -> None:
        """Peeks at each request and sends it upstream; stops (holding the rest) if one mutes us."""
        assert self.upstream is not None
        metrics = self.proxy.metrics
        engine = self.proxy.engine
        now = self.proxy.loop.time()
        out: list[memoryview] = []
        stop_after: int | None = None  # index of the request after which reading stops (muted)
        for index, frame in enumerate(frames):
            try:
                header = peek_request_header(frame)
                api_key, version, body = header.api_key, header.api_version, header.body_offset
                if exceeds_advertised_cap(api_key, version):  # the broker closes on a version it lacks
                    raise FrameError(f"{api_name(api_key)} v{version} is above what ApiVersions offered")
                client_id = header.client_id or ""
                metrics.count_request(api_key)
                max_wait = 0
                sasl_user = None
                forwarded: memoryview | bytes | None = frame
                refused: dict[str, tuple[int, ...]] | None = None
                order: tuple[str, ...] = ()
                refusal_wait = 0
                mutation: MutationInFlight | None = None
                if api_key == ApiKey.PRODUCE:
                    forwarded, refused, order, refusal_wait, throttle = self._admit_produce(
                        frame, body, version, client_id, now
                    )
                    if throttle > 0:
                        # In debt: this request goes on (Kafka appends, then throttles), but reading
                        # stops here; what was read after it waits for the mute to end.
                        self.mute(throttle, now)
                        stop_after = index
                    if produce_request_acks(frame, body, version) == 0:  # no response will come
                        self.proxy.entity_metrics.record_response(
                            self.user, client_id, api_key, len(frame) - 4, 0, None, throttle, now
                        )
                        if forwarded is not None:
                            out.append(forwarded)
                        if stop_after is not None:
                            break
                        continue
                elif api_key in MUTATION_APIS and engine.enforces(QuotaKey.CONTROLLER_MUTATION_RATE):
                    forwarded, mutation = self._admit_mutation(frame, body, api_key, version, client_id, now)
                elif api_key == ApiKey.FETCH:
                    max_wait = fetch_max_wait_ms(frame, body, version)
                elif api_key == ApiKey.SASL_HANDSHAKE:
                    if version == 0:
                        raise FrameError("SaslHandshake v0 (raw SASL tokens) is unsupported; clients since 1.0 use v1")
                    self.sasl_mechanism = handshake_mechanism(frame, body, version)
                elif api_key == ApiKey.SASL_AUTHENTICATE:
                    sasl_user = authenticate_user(self.sasl_mechanism, frame, body, version)
                if self.authenticating and api_key not in _AUTH_APIS and api_key != ApiKey.API_VERSIONS:
                    self.authenticating = False
            except FrameError as exc:
                self.protocol_error("client", exc)
                return
            local = None
            if forwarded is None and mutation is not None:  # nothing admitted: answered by the proxy
                local = refusal_response(
                    mutation.request,
                    header.correlation_id,
                    mutation.refused,
                    engine.throttle_ms(self.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now),
                )
            elif forwarded is None:  # every topic refused: the proxy answers, in this request's turn
                assert refused is not None
                local = produce_refusal_response(
                    header.correlation_id, version, refused, TOPIC_THRESHOLD_ERROR, self._refusal_message(refused)
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
                    api_key in _REQUEST_TIME_EXEMPT or (api_key == ApiKey.API_VERSIONS and self.authenticating),
                    sasl_user,
                    local,
                    refused if forwarded is not None else None,
                    order,
                    refusal_wait,
                    mutation,
                )
            )
            if forwarded is not None:
                out.append(forwarded)
            if stop_after is not None:
                break
        if stop_after is not None:
            self.held.extend(frames[stop_after + 1 :])
        if out:
            self.upstream.transport.writelines(out)
        if (
            self.in_flight
            and self.in_flight[0].local_response is not None
            and self.transport is not None
            and not self.upstream.splitter.streaming  # else it goes after the response being cut through
        ):
            replies: list[bytes | memoryview] = []
            self.take_local_responses(replies, now)
            self.transport.writelines(replies)

    def _admit_produce(
        self, frame: memoryview, body: int, version: int, client_id: str, now: float
    ) -> tuple[memoryview | bytes | None, dict[str, tuple[int, ...]] | None, tuple[str, ...], int, int]:
        """Applies per-topic thresholds to a produce request and charges it its size when read.

        Returns the frame to forward (None when every topic is refused), the refused topics, the
        request's topic order, the least throttle its refusals need, and the throttle due now."""
        forwarded: memoryview | bytes | None = frame
        refused: dict[str, tuple[int, ...]] | None = None
        order: tuple[str, ...] = ()
        if self.proxy.topic_guard:
            forwarded, refused, order = self._apply_topic_thresholds(frame, body, version, now)
        elif self.proxy.usage is not None:  # usage records name the topics: a cheap walk
            order = tuple(t.name for t in produce_request_layout(frame, body, version).topics)
        engine = self.proxy.engine
        size = len(frame) - 4
        throttle = charge_request(engine, self.user, client_id, ApiKey.PRODUCE, size, now) if engine.table else 0
        refusal_wait = 0
        if refused:
            refusal_wait = self.proxy.topic_guard.retry_after_ms(refused, now)
            throttle = max(throttle, refusal_wait)
        return forwarded, refused, order, refusal_wait, throttle

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
        admitted = self.proxy.engine.admit(
            self.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, costs, request.strict, now
        )
        forwarded = [i for i, ok in enumerate(admitted) if ok]
        refused = [i for i, ok in enumerate(admitted) if not ok]
        mutation = MutationInFlight(request, forwarded, refused, {i: costs[i] for i in forwarded})
        self.proxy.entity_metrics.record_mutations(self.user, client_id, sum(costs[i] for i in forwarded), now)
        if not refused:
            return frame, mutation
        self.proxy.metrics.mutation_refusals_total.inc(len(refused))
        if not forwarded:
            return None, mutation
        return request.encode_keeping(forwarded), mutation

    def _mutation_cost(self, request: MutationRequest, topic: MutationTopic) -> int:
        """Partitions a topic mutation is charged before the broker answers (spec §4)."""
        topics = self.proxy.topics
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

    def _settle_mutation(self, request: InFlight, frame: memoryview | bytes, now: float) -> memoryview | bytes:
        """Refunds topics the broker rejected (Kafka charges only topics that pass validation),
        charges a CreateTopics the partitions it really made, updates the topic catalog, and
        merges the proxy's refusals back into the response in the client's order."""
        mutation = request.mutation
        assert mutation is not None
        if request.local_response is not None:
            return frame
        engine, topics, key = self.proxy.engine, self.proxy.topics, QuotaKey.CONTROLLER_MUTATION_RATE
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

    def _apply_topic_thresholds(
        self, frame: memoryview, body: int, version: int, now: float
    ) -> tuple[memoryview | bytes | None, dict[str, tuple[int, ...]] | None, tuple[str, ...]]:
        """Drops the topics that are over their threshold while the total is too; returns the frame to
        forward (None when nothing is left), the refused topics and the request's topic order."""
        guard = self.proxy.topic_guard
        layout = produce_request_layout(frame, body, version)
        refused_names = guard.refused([topic.name for topic in layout.topics], now)
        guard.record({t.name: t.record_bytes for t in layout.topics if t.name not in refused_names}, now)
        order = tuple(topic.name for topic in layout.topics)
        if not refused_names:
            return frame, None, order
        self.proxy.metrics.topic_refusals_total.inc(len(refused_names))
        refused = {t.name: t.partitions for t in layout.topics if t.name in refused_names}
        if len(refused) == len(layout.topics):
            return None, refused, order
        kept = {topic.name for topic in layout.topics} - refused_names
        return produce_request_keeping(frame, version, layout, kept), refused, order

    def _refusal_message(self, refused: dict[str, tuple[int, ...]]) -> str:
        guard = self.proxy.topic_guard
        assert guard.thresholds is not None
        now = self.proxy.loop.time()
        topics = ", ".join(f"{name} ({guard.threshold(name, now):.0f} B/s)" for name in refused)
        return (
            f"quotagate: produce refused: bytes in over the total threshold "
            f"({guard.thresholds.total_bytes_in_per_sec} B/s) and over the topic's own: {topics}"
        )

    def take_local_responses(self, out: list[bytes | memoryview], now: float) -> None:
        """Moves the proxy-made responses now at the head of the in-flight FIFO to `out`."""
        while self.in_flight and self.in_flight[0].local_response is not None:
            request = self.in_flight.popleft()
            assert request.local_response is not None
            out.append(self.on_response(request, request.local_response, now))

    # responses -----------------------------------------------------------------------------------
    def on_response(self, request: InFlight, frame: memoryview | bytes, now: float) -> memoryview | bytes:
        """Charges the exchange, notes authentication, patches throttle_time_ms and mutes if due.

        `frame` may be only the head of a cut-through response: its size is the one its prefix
        announces, and only what `UpstreamConnection.streamable` allows happens to it."""
        if request.api_key == ApiKey.SASL_AUTHENTICATE:
            self._note_authentication(request, frame)
        elif request.refused:
            frame = produce_response_with_refusals(
                frame,
                request.api_version,
                request.topic_order,
                request.refused,
                TOPIC_THRESHOLD_ERROR,
                self._refusal_message(request.refused),
            )
        engine = self.proxy.engine
        latency_ms = (now - request.sent_at) * 1000
        if request.local_response is None:
            self.proxy.metrics.observe_latency(request.api_key, latency_ms / 1000)
        if request.exempt:
            request_ms = None
            self.proxy.entity_metrics.record_exempt(latency_ms)
        else:
            request_ms = request_time_ms(request.api_key, latency_ms, request.fetch_max_wait_ms)
        throttle = request.min_throttle_ms
        if request.mutation is not None:
            frame = self._settle_mutation(request, frame, now)
            throttle = max(
                throttle, engine.throttle_ms(self.user, request.client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now)
            )
        response_size = frame_body_size(frame)
        if engine.table:
            throttle = max(
                throttle,
                charge_response(engine, self.user, request.client_id, request.api_key, response_size, request_ms, now),
            )
        self.proxy.entity_metrics.record_response(
            self.user,
            request.client_id,
            request.api_key,
            request.request_size,
            response_size,
            request_ms,
            throttle,
            now,
        )
        if self.proxy.usage is not None:
            self.proxy.record_usage(self._usage_record(request, response_size, latency_ms, throttle, now))
        if throttle <= 0:
            return frame
        patched, _upstream_ms = patch_throttle_time(memoryview(frame), request.api_key, request.api_version, throttle)
        self.mute(throttle, now)
        return patched

    def _usage_record(
        self, request: InFlight, response_size: int, latency_ms: float, throttle: int, now: float
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
            self.proxy.wall_ms(now),
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
        )

    def _note_authentication(self, request: InFlight, frame: memoryview | bytes) -> None:
        view = memoryview(frame)
        body = response_body_offset(view, request.api_key, request.api_version)
        if len(view) >= body + 2 and view[body] == 0 and view[body + 1] == 0:  # error_code == NONE
            if request.sasl_user is not None:
                self.user = request.sasl_user

    # muting --------------------------------------------------------------------------------------
    def mute(self, throttle_ms: int, now: float) -> None:
        assert self.reading is not None
        self.proxy.delay_queue.mute(self, now + throttle_ms / 1000)
        self.reading.pause("quota")
        self.proxy.metrics.mutes_total.inc()

    def unmute(self) -> None:
        """Called by the delay queue when the throttle time is over."""
        if self.closed or self.reading is None:
            return
        self._release_held()

    def _release_held(self) -> None:
        assert self.reading is not None and self.transport is not None
        if self.held and self.upstream is not None:
            frames = list(self.held)
            self.held.clear()
            self._forward(frames)
        if not self.held and not self.muted:
            self.reading.resume("quota")
            if not self.reading.paused:
                self.transport.resume_reading()  # the hold-pause in data_received bypasses the gate

    # pairing -----------------------------------------------------------------------------------
    async def _connect_upstream(self) -> None:
        loop = asyncio.get_running_loop()
        timeout = self.proxy.config.proxy.connect_timeout_seconds
        for host, port in self.upstreams:
            if self.closed:
                return
            try:
                _, upstream = await asyncio.wait_for(
                    loop.create_connection(lambda: UpstreamConnection(self), host, port), timeout
                )
            except (OSError, TimeoutError) as exc:
                self.proxy.metrics.upstream_connect_failures_total.inc()
                log.debug("%s: cannot connect to broker %s:%s: %s", self.listener, host, port, exc or "timeout")
                continue
            if self.closed:
                upstream.transport.close()
                return
            self.upstream = upstream
            assert self.reading is not None
            self.reading.resume("upstream-connecting")
            self._release_held()
            return
        log.debug("%s: no broker reachable for client %s; closing it", self.listener, self.peer)
        self.proxy.upstream_unreachable(self.listener)  # logs once, stops accepting until one is
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def protocol_error(self, side: str, exc: Exception) -> None:
        """Bad bytes from one peer close this pair only; every other connection goes on."""
        self.proxy.metrics.protocol_errors_total.labels(side).inc()
        log.warning("%s: closing client %s: bad bytes from the %s: %s", self.listener, self.peer, side, exc)
        if self.transport is not None:
            self.transport.abort()
        if self.upstream is not None and self.upstream.transport is not None:
            self.upstream.transport.abort()


class UpstreamConnection(asyncio.Protocol):
    """The broker side of a pair: responses come back here and go out to the client."""

    def __init__(self, client: ClientConnection) -> None:
        self.client = client
        self.transport: asyncio.Transport = None  # type: ignore[assignment]  # set in connection_made
        self.reading: ReadGate = None  # type: ignore[assignment]  # set in connection_made
        self.splitter = StreamingFrameSplitter(MAX_RESPONSE_FRAME, STREAM_RESPONSES_FROM, RESPONSE_HEAD_BYTES)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's transports do not subclass it
        self.transport = transport
        transport.set_write_buffer_limits(WRITE_BUFFER_HIGH, WRITE_BUFFER_LOW)
        self.reading = ReadGate(transport)

    def data_received(self, data: bytes) -> None:
        client = self.client
        now = client.last_activity = client.proxy.loop.time()
        out: list[bytes | memoryview] = []
        try:
            for kind, piece in self.splitter.pieces(data, self.streamable):
                if kind == Piece.WHOLE:
                    expected = self._expected(piece)
                    response: bytes | memoryview = piece
                    rewrite = client.proxy.rewriters.get(expected.api_key)
                    if rewrite is not None:
                        response = rewrite(piece, expected.api_version, client.proxy) or piece
                    out.append(client.on_response(expected, response, now))
                    client.take_local_responses(out, now)
                elif kind == Piece.HEAD:
                    out.append(client.on_response(self._expected(piece), piece, now))
                else:
                    out.append(piece)
                    if kind == Piece.LAST:  # what the proxy answered itself goes after it, in turn
                        client.take_local_responses(out, now)
        except FrameError as exc:
            client.protocol_error("broker", exc)
            return
        if out and client.transport is not None:
            client.proxy.metrics.bytes_out += sum(map(len, out))
            client.transport.writelines(out)

    def _expected(self, frame: memoryview) -> InFlight:
        """The request a response answers: the oldest in flight, checked by correlation id."""
        expected = self._oldest_in_flight(frame)
        self.client.in_flight.popleft()
        correlation_id = peek_correlation_id(frame)
        if correlation_id != expected.correlation_id:
            raise FrameError(f"response {correlation_id} arrived where {expected.correlation_id} was due")
        return expected

    def _oldest_in_flight(self, frame: memoryview) -> InFlight:
        """The oldest request in flight; a response (beginning with `frame`) when there is none is bad."""
        if not self.client.in_flight:
            raise FrameError(f"response {peek_correlation_id(frame)} to no request")
        return self.client.in_flight[0]

    def streamable(self, head: memoryview) -> bool:
        """Whether the response that begins with `head` can be cut through: `on_response` needs no
        more of it than its head (no rewrite, refusal merge, mutation results or SASL outcome) and
        its throttle_time_ms, if it has one, lies within the head."""
        request = self._oldest_in_flight(head)  # a stray is refused now, not after its announced size
        if (
            request.refused
            or request.mutation is not None
            or request.api_key == ApiKey.SASL_AUTHENTICATE
            or request.api_key in self.client.proxy.rewriters
        ):
            return False
        try:
            throttle_time_offset(head, request.api_key, request.api_version)
        except FrameError:
            return False  # the field lies further in (or the head is bad): handle it whole
        return True

    def pause_writing(self) -> None:
        if self.client.reading is not None:
            self.client.reading.pause("upstream-backpressure")

    def resume_writing(self) -> None:
        if self.client.reading is not None:
            self.client.reading.resume("upstream-backpressure")

    def connection_lost(self, exc: Exception | None) -> None:
        # A broken upstream gives the client a closed connection (after what was queued), never a hang.
        self.client.close()
