"""One client's Kafka exchange with its broker, as a plain object: bytes and `now` in, bytes and mutes out.

It never touches a socket, a loop or a clock (h11's Connection is the model). The caller feeds it:

    session.client_data(data, now)     bytes the client sent
    session.broker_data(data, now)     bytes the broker sent
    session.broker_connected(now)      the broker connection is up: held requests may go
    session.unmute(now)                the mute is over: held requests may go

and after each call writes `session.to_broker` and `session.to_client` (then clears them), and asks
the connection's FlowControl (`session.flow`, which the session mutes and refuses through) whether
to read on: not until `session.muted_until` (a time on the caller's clock), not while it holds frames. Before it writes
`to_client`, it has a listener opened for each node id in `session.brokers_seen` (brokers a rewritten
response names for the first time), then clears it: the session reports them, it binds nothing. Once
`session.refusal` is set (the client sent what the broker closes a connection for: a request it
cannot parse, a version above the advertised cap, a frame over max_frame_size or, before SASL
authentication, over sasl_server_max_receive_size or of an API other than ApiVersions and SASL; or
bytes over the partial_frames_max_bytes shared by all clients or over one connection's share of it),
the caller stops reading and closes the pair when `awaiting_answers` turns false: the requests the
client pipelined before the offender are answered first, as the broker answers them. What a frame's
size, API and version decide is decided at its first read, before the rest of it is held.

A produce request, start to end:
- admitted in `SessionCore._request` (-> `_admit` when thresholds apply: topics over theirs are
  dropped), its size charged to producer_byte_rate the moment it is read (`charge_request`);
- muted there too if that left the client in debt: the request still goes to the broker (Kafka
  appends, then throttles), but the frames read after it are held until `muted_until`;
- answered in `SessionCore._respond`, when the broker's response comes back (or in its turn, by the
  session itself, when every topic was refused): refusals merged in (`_answered`), request time
  charged (`charge_response`), throttle_time_ms patched, metrics and the usage record written, and
  the client muted again if the response carries a throttle.

The exchange itself (every request's peek, cap, charge and forwarding; every response's match,
rewrite, charge, patch and mute) is `SessionCore`'s (session_core.py, compiled when it can be:
quotagate/compiled.py); this class adds what only some APIs and states need, as the hooks the core
calls: `_admit` for the APIs whose policy needs it (SASL, mutations, thresholds, the proxy's own
quota answers, usage records' topic names), `_answered` for their responses, and the splitters,
holds and refusals of `_client_data` and `_broker_data`.

Authentication: a SaslAuthenticate goes to the broker and what the client sent after it is held until
the broker answers; the user it claimed is adopted only if that answer ends the exchange with a
success, so the held requests are charged to the user the broker accepted, never to one it refused.

Kafka answers one connection's requests in order, so a FIFO of requests in flight says which API
each response answers. Responses the session makes itself wait in that FIFO for their turn, behind
any response still being streamed. Large responses that need nothing but their head (a Fetch) are
cut through: their head is charged and patched and the rest is passed on as it arrives.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from quotagate import compiled
from quotagate.protocol.apis import ApiKey
from quotagate.protocol.framing import FrameError
from quotagate.protocol.headers import RequestHeader, response_body_offset
from quotagate.protocol.limits import NO_LIMIT
from quotagate.protocol.mutations import (
    MutationRequest,
    MutationTopic,
    decode_mutation,
    decode_results,
    merge_refusals,
    refusal_response,
)
from quotagate.protocol.produce import (
    produce_producer_id,
    produce_refusal_response,
    produce_request_keeping,
    produce_request_layout,
    produce_response_with_refusals,
    refused_topic_entry,
)
from quotagate.protocol.rewrite import ClusterView, Rewriter
from quotagate.protocol.sasl import (
    DEFAULT_PRINCIPAL_CLAIM,
    authenticate_user,
    authentication_outcome,
    end_readable,
    handshake_mechanism,
)
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.flow_control import ByteBudget, FlowControl
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import PendingDescribe, QuotaAdmin
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.usage import UsageRecorder
from quotagate.quotas import ANONYMOUS, QuotaEngine, QuotaKey
from quotagate.quotas.apis import LOCAL_ANSWER, NEW_PRODUCER_IDS, PARTITIONS_MUTATED, THRESHOLDS
from quotagate.quotas.topic_thresholds import TopicThresholdGuard

_core = compiled.load("quotagate.proxy.session_core")
SessionCore = _core.SessionCore
InFlight = _core.InFlight
Admission = _core.Admission
PROTOCOL_ERROR = _core.PROTOCOL_ERROR
HANDSHAKE, AUTHENTICATE, AUTHENTICATED = _core.HANDSHAKE, _core.AUTHENTICATE, _core.AUTHENTICATED
ROUND_ANSWERED, ROUND_ANSWERED_END_UNSEEN = _core.ROUND_ANSWERED, _core.ROUND_ANSWERED_END_UNSEEN
AUTHENTICATION_REFUSED, ANSWER_PENDING = _core.AUTHENTICATION_REFUSED, _core.ANSWER_PENDING

# Error for partitions refused by per-topic bytes-in thresholds: THROTTLING_QUOTA_EXCEEDED. Clients
# treat it as retriable (the Java producer retries it after retry.backoff.ms), and it says a quota
# was hit rather than that the request was wrong.
TOPIC_THRESHOLD_ERROR = 89
# Error for a produce whose new producer ID is over producer_ids_rate: the same, as KIP-936 proposes.
PRODUCER_IDS_ERROR = 89
# A refused client is closed once the answers to its requests before the offender are written, or
# after this long without them: the Java client's default request.timeout.ms, after which it has
# given up on them anyway.
REFUSAL_ANSWERS_TIMEOUT_SECONDS = 30.0
_SASL_HANDSHAKE, _SASL_AUTHENTICATE = int(ApiKey.SASL_HANDSHAKE), int(ApiKey.SASL_AUTHENTICATE)
_DESCRIBE_CLIENT_QUOTAS = int(ApiKey.DESCRIBE_CLIENT_QUOTAS)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionServices:
    """What a session decides with, shared by every session of one proxy; handed in, never looked up
    (by keyword: proxy/server.py makes it, tests/support/session_double.py its doubles)."""

    engine: QuotaEngine
    topic_guard: TopicThresholdGuard
    topics: TopicCatalog
    metrics: ProxyMetrics
    entity_metrics: EntityMetrics
    rewriters: dict[int, Rewriter]
    cluster: ClusterView  # what the rewriters tell about the brokers and topics they see
    usage: UsageRecorder | None
    wall_offset: float  # the caller's clock + this = epoch seconds (usage records' times)
    max_frame_size: int
    # Answers DescribeClientQuotas/AlterClientQuotas from the proxy's quotas; None: they are forwarded.
    quota_admin: QuotaAdmin | None = None
    # The OAUTHBEARER token claim that names the user (the broker's sasl.oauthbearer.sub.claim.name).
    principal_claim: str = DEFAULT_PRINCIPAL_CLAIM
    # The largest frame before SASL authentication completes (sasl.server.max.receive.size) on
    # brokers that require SASL; None: the listener does not, and max_frame_size alone applies.
    sasl_max_receive_size: int | None = None
    # Whether they do: True, nothing but ApiVersions and SASL is read before authentication completes;
    # None, not known yet (client_sasl "auto" before the brokers answered): the first request that is
    # not SASL ends it.
    sasl_required: bool | None = None
    # What every client's partial frames may hold together (proxy.partial_frames_max_bytes), and
    # one connection's share of it (proxy.partial_frames_max_bytes_per_connection).
    partial_frames: ByteBudget | None = None
    partial_frame_share: int | None = None
    # The most array elements of one request the proxy decodes to change it (proxy.max_decoded_elements).
    max_decoded_elements: int = NO_LIMIT
    # The proxy's own time on an exchange it decodes or rewrites is charged as request time, read
    # from this clock (seconds): Kafka's request time is its threads' wall time.
    clock: Callable[[], float] = time.perf_counter


@dataclass(slots=True)
class MutationInFlight:
    """A topic mutation under the controller mutation quota, between request and response."""

    request: MutationRequest
    forwarded: list[int]  # indexes of the topics sent to the broker
    refused: list[int]  # indexes answered THROTTLING_QUOTA_EXCEEDED by the proxy
    charged: dict[int, int]  # index -> partitions charged for it


class SessionPolicy:
    """What only some APIs and states need, as the hooks SessionCore calls; `Session` puts the two
    together. Kept apart so that the same hooks run over either build of the core (the tests
    compare them)."""

    def __init__(
        self, services: SessionServices, principal: str | None = None, flow: FlowControl | None = None
    ) -> None:
        """`principal`: the user the connection is before any SASL exchange (the mapped subject of a
        verified client certificate), ANONYMOUS if None; `flow`: the connection's FlowControl, which
        the session mutes and asks (a new one if None: a session without a socket)."""
        super().__init__(services, flow)
        self.user = principal or ANONYMOUS
        self.sasl_mechanism: str | None = None
        # The user the current SASL exchange claims: adopted only when the broker says it succeeded.
        self.claimed_user: str | None = None
        # SessionCore made the state the exchange shares (in_flight, held, the phase, the splitters).
        # The last producer ID admitted under producer_ids_rate, as (ID, user, client id, engine
        # generation), and until when it is surely still seen (half a window: the filter it was
        # put in lives that long): a producer sends its one ID request after request.
        self._producer_seen: tuple[int, str, str, int] | None = None
        self._producer_seen_until = 0.0
        # An answer the proxy is making (an alter being persisted), and what the glue has called
        # when it is ready (it then calls `local_answered` and writes what that queued).
        self.pending_answer: asyncio.Future[bytes] | None = None
        self.answer_ready: Callable[[], None] | None = None

    def _admit(self, frame: memoryview, header: RequestHeader, policies: int, now: float) -> Admission:
        """The hooked policies of one request (SessionCore._request has peeked, capped and counted
        it, and charges and forwards it after): what to forward, and what the response will need."""
        api_key, version, body = header.api_key, header.api_version, header.body_offset
        services = self.services
        if policies & NEW_PRODUCER_IDS:  # a produce, from a session a producer_ids_rate may apply to
            refusal = self._admit_producer_id(frame, header, now)
            if refusal is not None:
                return refusal
            if not policies & THRESHOLDS:
                return Admission(frame)
        if policies & THRESHOLDS:  # a produce
            forwarded, refused, order = self._apply_topic_thresholds(frame, body, version, now)
            if not refused:
                return Admission(forwarded, None, None, order)
            local = None
            if forwarded is None:  # every topic refused: the proxy answers, in turn
                local = produce_refusal_response(header.correlation_id, version, list(refused.values()))
            return Admission(forwarded, local, refused, order, services.topic_guard.retry_after_ms(refused, now))
        if policies & LOCAL_ANSWER:  # the proxy's quotas, not the brokers', are described and altered
            return self._admit_quota_admin(frame, header, now)
        if policies & PARTITIONS_MUTATED:
            engine = services.engine
            if not engine.enforces(QuotaKey.CONTROLLER_MUTATION_RATE):
                return Admission(frame)
            client_id = header.client_id or ""
            forwarded, mutation = self._admit_mutation(frame, body, api_key, version, client_id, now)
            local = None
            if forwarded is None and mutation is not None:  # nothing admitted: the proxy answers
                local = refusal_response(
                    mutation.request,
                    header.correlation_id,
                    mutation.refused,
                    engine.throttle_ms(self.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now),
                )
            return Admission(forwarded, local, mutation=mutation)
        if api_key == _SASL_HANDSHAKE:
            if version == 0:
                raise FrameError("SaslHandshake v0 (raw SASL tokens) is unsupported; clients since 1.0 use v1")
            self.sasl_mechanism = handshake_mechanism(frame, body, version)
            self.claimed_user = None  # a new exchange (KIP-368 re-authentication too)
            if services.sasl_max_receive_size is not None:
                # A re-authentication's frames are read by the broker's authenticator again.
                self._enter(HANDSHAKE)
            return Admission(frame)
        if api_key == _SASL_AUTHENTICATE:
            if self.receive_limit is None:
                # No exchange in progress (authenticated, or a listener without SASL): the broker
                # answers it ILLEGAL_SASL_STATE, and nothing of it (its size is the client's) is read.
                return Admission(frame)
            claimed = authenticate_user(self.sasl_mechanism, frame, body, version, services.principal_claim)
            if claimed is not None:
                self.claimed_user = claimed
            self._enter(AUTHENTICATE)
            return Admission(frame)  # what follows waits for the broker's answer (AWAITING_AUTHENTICATION)
        return Admission(frame)

    def _pending_answer_done(self, _answer: asyncio.Future[bytes]) -> None:
        if self.answer_ready is not None:
            self.answer_ready()

    def local_answered(self, now: float) -> None:
        """The answer the proxy was making is ready (`answer_ready` said so): it goes in its turn,
        then what the client sent after it."""
        answer = self.pending_answer
        if answer is None or not answer.done():
            return
        self.pending_answer = None
        self._answer_ready(answer.result(), now)

    def _admit_quota_admin(self, frame: memoryview, header: RequestHeader, now: float) -> Admission:
        """DescribeClientQuotas: the proxy's answer, or the broker asked first (its verdict on the
        principal decides: `_answered`); AlterClientQuotas: the proxy's answer, now or once its state is
        durable."""
        admin = self.services.quota_admin
        assert admin is not None
        if header.api_key == _DESCRIBE_CLIENT_QUOTAS:
            answer = admin.describe(frame, header, self.user, now)
            if isinstance(answer, PendingDescribe):
                return Admission(frame, answer_after=answer)
            return Admission(None, answer)
        answer = admin.alter(frame, header, self.user, now)
        if isinstance(answer, bytes):
            return Admission(None, answer)
        # Answered once the state file holds it (QuotaAdmin's StateWriter): what follows waits.
        self._enter(ANSWER_PENDING)
        self.pending_answer = answer
        answer.add_done_callback(self._pending_answer_done)
        return Admission(None)

    def quotas_changed(self) -> None:
        """The quotas changed live (a reload, AlterClientQuotas): Produce is given to the
        producer_ids_rate policy iff some entry sets it now, as for a session opened now."""
        if self.services.engine.enforces(QuotaKey.PRODUCER_IDS_RATE):
            self.hooked |= NEW_PRODUCER_IDS
        else:
            self.hooked &= ~NEW_PRODUCER_IDS

    def _admit_producer_id(self, frame: memoryview, header: RequestHeader, now: float) -> Admission | None:
        """None when the produce's producer ID is admitted (seen, or new within producer_ids_rate);
        else the proxy's answer: every partition refused, nothing forwarded, and the throttle."""
        version, body = header.api_version, header.body_offset
        client_id = header.client_id or ""
        engine = self.services.engine
        producer_id = produce_producer_id(frame, body, version)
        seen = (producer_id, self.user, client_id, engine.generation)
        if seen == self._producer_seen and now < self._producer_seen_until:
            return None
        throttle_ms = engine.admit_producer_id(self.user, client_id, producer_id, now)
        if throttle_ms <= 0:
            self._producer_seen = seen
            self._producer_seen_until = now + engine.producer_ids.window_seconds / 2
            return None
        layout = produce_request_layout(frame, body, version, self.services.max_decoded_elements)
        message = "quotagate: produce refused: a new producer ID over producer_ids_rate (KIP-936)"
        refused = {t.name: refused_topic_entry(frame, version, t, PRODUCER_IDS_ERROR, message) for t in layout.topics}
        self.services.metrics.producer_id_refusals_total.inc()
        local = produce_refusal_response(header.correlation_id, version, list(refused.values()))
        order = tuple(topic.name for topic in layout.topics)
        return Admission(None, local, refused, order, throttle_ms)

    def _apply_topic_thresholds(
        self, frame: memoryview, body: int, version: int, now: float
    ) -> tuple[memoryview | bytes | None, dict[str, bytes] | None, tuple[str, ...]]:
        """Drops the topics that are over their threshold while the total is too; returns the frame to
        forward (None when nothing is left), the refused topics' answers (by name) and the request's
        topic order. A request of more topics than max_decoded_elements is refused (ElementsOverLimit)."""
        guard = self.services.topic_guard
        layout = produce_request_layout(frame, body, version, self.services.max_decoded_elements)
        refused_names = guard.refused([topic.name for topic in layout.topics], now)
        guard.record({t.name: t.record_bytes for t in layout.topics if t.name not in refused_names}, now)
        order = tuple(topic.name for topic in layout.topics)
        if not refused_names:
            return frame, None, order
        self.services.metrics.topic_refusals_total.inc(len(refused_names))
        refused = {
            t.name: refused_topic_entry(frame, version, t, TOPIC_THRESHOLD_ERROR, self._refusal_message(t.name, now))
            for t in layout.topics
            if t.name in refused_names
        }
        if len(refused) == len(layout.topics):
            return None, refused, order
        kept = {topic.name for topic in layout.topics} - refused_names
        return produce_request_keeping(frame, version, layout, kept), refused, order

    def _refusal_message(self, topic: str, now: float) -> str:
        """What each partition of a topic refused by thresholds says: that topic's threshold alone (a
        message naming every refused topic, in every partition, grew with their product)."""
        guard = self.services.topic_guard
        assert guard.thresholds is not None
        return (
            f"quotagate: produce refused: bytes in over the total threshold "
            f"({guard.thresholds.total_bytes_in_per_sec} B/s) and over the topic's own: "
            f"{topic} ({guard.threshold(topic, now):.0f} B/s)"
        )

    def _admit_mutation(
        self, frame: memoryview, body: int, api_key: int, version: int, client_id: str, now: float
    ) -> tuple[memoryview | bytes | None, MutationInFlight | None]:
        """Admits a topic mutation's topics in order under the controller mutation quota (KIP-599).

        Returns the frame to forward (the original, one re-encoded with the admitted topics only,
        or None when nothing was admitted) and what the response will need. validate_only
        requests are never charged (KIP-599)."""
        request = decode_mutation(frame, body, api_key, version, self.services.max_decoded_elements)
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
    def _answered(self, request: InFlight, frame: memoryview | bytes, now: float) -> tuple[memoryview | bytes, int]:
        """What a hooked request's response needs before SessionCore._respond charges it: the SASL
        outcome noted, the proxy's refusals merged in, a mutation settled. Returns the response to
        send on and the least throttle it carries."""
        throttle = request.min_throttle_ms
        if request.answer_after is not None:
            assert self.services.quota_admin is not None
            frame = self.services.quota_admin.answer_after(request.answer_after, frame)
        elif request.api_key == _SASL_AUTHENTICATE:
            self._note_authentication(request, frame)
        elif request.refused:
            frame = produce_response_with_refusals(frame, request.api_version, request.topic_order, request.refused)
        mutation = request.mutation
        if mutation is not None:
            frame = self._settle_mutation(request, frame, now)
            # Strict mode throttles with a refusal only: a response whose topics were all admitted
            # carries no mutation throttle and mutes nothing, even if it drove the bucket into debt
            # (spec §4; Kafka's StrictControllerMutationQuota). Permissive mode always does.
            if mutation.refused or not mutation.request.strict:
                throttle = max(
                    throttle,
                    self.services.engine.throttle_ms(
                        self.user, request.client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now
                    ),
                )
        return frame, throttle

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

    def _note_authentication(self, request: InFlight, frame: memoryview | bytes) -> None:
        """Adopts the claimed user once the broker says the exchange is over and succeeded; a refusal
        leaves the principal as it was (the broker closes the connection after it). A SaslAuthenticate
        outside an exchange (the broker refuses it and goes on) changes nothing."""
        if not self.awaiting_authentication:
            return
        view = memoryview(frame)
        body = response_body_offset(view, request.api_key, request.api_version)
        outcome = authentication_outcome(self.sasl_mechanism, view, body, request.api_version)
        if outcome is False:
            # The broker closes the connection after a refusal and reads nothing more (Kafka's
            # SaslServerAuthenticator): neither does the proxy, so nothing is charged to anyone.
            self.held.clear()
            self.claimed_user = None
            self._enter(AUTHENTICATION_REFUSED)
            return
        if outcome is None and self.services.sasl_max_receive_size is not None:
            # More rounds to come; or, for a mechanism whose end the proxy cannot read, perhaps none:
            # the next request that is not SASL then ends the exchange (SessionCore._before_authentication).
            self._enter(ROUND_ANSWERED if end_readable(self.sasl_mechanism) else ROUND_ANSWERED_END_UNSEEN)
            return
        self._enter(AUTHENTICATED)  # the broker reads with socket.request.max.bytes from here
        if outcome is None:
            return  # a listener that requires no SASL: nothing is adopted
        claimed, self.claimed_user = self.claimed_user, None
        if outcome and claimed is not None and claimed != self.user:
            # The first authentication moves the connection from ANONYMOUS (or its certificate's
            # user) to the user's buckets; a re-authentication as another principal never gets here,
            # the broker refuses it (error 58) and closes the connection.
            self.user = claimed
            self.entity_buckets = None


class Session(SessionPolicy, SessionCore):
    """The proxy's decisions for one client connection; the caller moves the bytes.

    `client_data` and `broker_data` are SessionCore's; it calls SessionPolicy's hooks for what only
    some APIs and states need."""
