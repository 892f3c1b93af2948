"""One client's Kafka exchange with its broker, as a plain object: bytes and `now` in, bytes and mutes out.

It never touches a socket, a loop or a clock (h11's Connection is the model). The caller feeds it:

    session.client_data(data, now)     bytes the client sent
    session.broker_data(data, now)     bytes the broker sent
    session.broker_connected(now)      the broker connection is up: held requests may go
    session.unmute(now)                the mute is over: held requests may go

and after each call writes `session.to_broker` and `session.to_client` (then clears them), and asks
the connection's FlowControl (`session.flow`, which the session mutes and refuses through) whether
to read on: not until `session.muted_until` (a time on the caller's clock), not while it holds
frames. Before it writes `to_client`, it has a listener opened for each node id in
`session.brokers_seen` (brokers a rewritten response names for the first time), then clears it: the
session reports them, it binds nothing. Once `session.refusal` is set (the client sent what the
broker closes a connection for: a request it cannot parse, a version above the advertised cap, a
frame over max_frame_size or, before SASL authentication, over sasl_server_max_receive_size or of
an API other than ApiVersions and SASL; or bytes over the partial_frames_max_bytes shared by all
clients or over one connection's share of it), the flow control reads nothing more and the caller
closes the pair when `awaiting_answers` turns false: the requests the
client pipelined before the offender are answered first, as the broker answers them. What a frame's
size, API and version decide is decided at its first read, before the rest of it is held.

A produce request, start to end:
- admitted in `SessionCore._request` (-> `_admit`, its handlers, when producer_ids_rate or
  thresholds apply: topics over theirs are dropped), its size charged to producer_byte_rate the
  moment it is read (`charge_request`);
- muted there too if that left the client in debt: the request still goes to the broker (Kafka
  appends, then throttles), but the frames read after it are held until `muted_until`;
- answered in `SessionCore._respond`, when the broker's response comes back (or in its turn, by the
  session itself, when every topic was refused): refusals merged in (ThresholdPolicy.answered, the
  in-flight entry's `responder`), request time
  charged (`charge_response`), throttle_time_ms patched, metrics and the usage record written, and
  the client muted again if the response carries a throttle.

The session is `SessionCore` (session_core.py, compiled when it can be: quotagate/compiled.py): the
exchange itself (every request's peek, cap, charge and forwarding; every response's match, rewrite,
charge, patch and mute) and the one owner of its state. This module holds what only some APIs
need, as policy handlers, one per policy (Kroxylicious' filters are the model): `ProducerIdPolicy`,
`ThresholdPolicy`, `QuotaAdminPolicy`, `MutationPolicy`, `SaslPolicy`. `SessionPolicies` chooses,
once per session and again when the quotas change, which handlers each API runs, from
quotas/apis.py's POLICY and the configuration. A handler sees the session through `PolicyContext`
(read only) and returns its decision, an `Admission` for a request (forward, forward less, answer
locally, refuse, hold what follows until an answer is made; the handler whose response side must
run, recorded on the in-flight entry) and an `Answered` for a response; the core applies them.

Authentication (SaslPolicy): a SaslAuthenticate goes to the broker and what the client sent after it
is held until the broker answers; the user it claimed is adopted only if that answer ends the
exchange with a success, so the held requests are charged to the user the broker accepted, never to
one it refused.

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
from typing import Protocol

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
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.quota_admin import PendingDescribe, QuotaAdmin
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.usage import UsageRecorder
from quotagate.quotas import QuotaEngine, QuotaKey
from quotagate.quotas.apis import LOCAL_ANSWER, NEW_PRODUCER_IDS, PARTITIONS_MUTATED, SASL, THRESHOLDS
from quotagate.quotas.topic_thresholds import TopicThresholdGuard

_core = compiled.load("quotagate.proxy.session_core")
SessionCore = _core.SessionCore
InFlight = _core.InFlight
PROTOCOL_ERROR = _core.PROTOCOL_ERROR
HANDSHAKE, AUTHENTICATE, AUTHENTICATED = _core.HANDSHAKE, _core.AUTHENTICATE, _core.AUTHENTICATED
ROUND_ANSWERED, ROUND_ANSWERED_END_UNSEEN = _core.ROUND_ANSWERED, _core.ROUND_ANSWERED_END_UNSEEN
AUTHENTICATION_REFUSED = _core.AUTHENTICATION_REFUSED

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


class PolicyContext(Protocol):
    """What a policy handler may see of its session (the session's core is one): read, never
    written. A handler changes the session only through what it returns."""

    @property
    def user(self) -> str: ...  # the principal the exchange is charged to

    @property
    def receive_limit(self) -> int | None: ...  # set while a SASL exchange may be in progress

    @property
    def awaiting_authentication(self) -> bool: ...  # a SaslAuthenticate's answer will move the phase


class Admission:
    """What a policy handler decided for one request (its request side); the core does the rest.

    Forward `forwarded` (the frame as it came, one with fewer topics, or None: nothing); answer
    `local_response` in the request's turn; or, with `pending`, hold what follows until that answer is made.
    `responder` is the handler whose response side runs on the response (recorded on the in-flight
    entry), with what it needs: `refused`/`topic_order` (produce topics refused, merged back),
    `mutation`, `answer_after`; `min_throttle_ms` is the least throttle the response carries (the
    fields are named as the InFlight fields they become); `event` a phase event
    (session_core.EVENTS) the request moves the session by, -1 none."""

    __slots__ = ("answer_after", "event", "forwarded", "local_response", "min_throttle_ms", "mutation", "pending",
                 "refused", "responder", "topic_order")  # fmt: skip

    def __init__(
        self,
        forwarded: memoryview | bytes | bytearray | None,
        local_response: bytes | None = None,
        *,
        refused: dict[str, bytes] | None = None,
        topic_order: tuple[str, ...] = (),
        min_throttle_ms: int = 0,
        mutation: MutationInFlight | None = None,
        answer_after: PendingDescribe | None = None,
        responder: PolicyHandler | None = None,
        event: int = -1,
        pending: asyncio.Future[bytes] | None = None,
    ) -> None:
        self.forwarded = forwarded
        self.local_response = local_response
        self.refused = refused
        self.topic_order = topic_order
        self.min_throttle_ms = min_throttle_ms
        self.mutation = mutation
        self.answer_after = answer_after
        self.responder = responder
        self.event = event
        self.pending = pending


class Answered:
    """What a handler's response side decided: the response to send on, the least throttle it
    carries, a phase event (-1: none) and the principal to adopt (None: as it is)."""

    __slots__ = ("event", "frame", "throttle", "user")

    def __init__(self, frame: memoryview | bytes, throttle: int, event: int = -1, user: str | None = None) -> None:
        self.frame = frame
        self.throttle = throttle
        self.event = event
        self.user = user


class PolicyHandler:
    """One policy, as a handler: `request` decides for a request of an API the policy covers (None:
    it has no say, the next handler decides), `answered` for the response when the request's
    Admission named it `responder`."""

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission | None:
        raise NotImplementedError

    def answered(self, session: PolicyContext, request: InFlight, frame: memoryview | bytes, now: float) -> Answered:
        raise NotImplementedError  # only a handler that names itself `responder` has a response side


class ProducerIdPolicy(PolicyHandler):
    """producer_ids_rate (KIP-936): a produce whose producer ID is new to its entity, over the rate,
    is refused whole (every partition THROTTLING_QUOTA_EXCEEDED), answered by the proxy."""

    def __init__(self, services: SessionServices) -> None:
        self.services = services
        # The last producer ID admitted, as (ID, user, client id, engine generation), and until when
        # it is surely still seen (half a window: the filter it was put in lives that long): a
        # producer sends its one ID request after request.
        self._seen: tuple[int, str, str, int] | None = None
        self._seen_until = 0.0

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission | None:
        version, body = header.api_version, header.body_offset
        client_id = header.client_id or ""
        engine = self.services.engine
        producer_id = produce_producer_id(frame, body, version)
        seen = (producer_id, session.user, client_id, engine.generation)
        if seen == self._seen and now < self._seen_until:
            return None
        throttle_ms = engine.admit_producer_id(session.user, client_id, producer_id, now)
        if throttle_ms <= 0:
            self._seen = seen
            self._seen_until = now + engine.producer_ids.window_seconds / 2
            return None
        layout = produce_request_layout(frame, body, version, self.services.max_decoded_elements)
        message = "quotagate: produce refused: a new producer ID over producer_ids_rate (KIP-936)"
        refused = {t.name: refused_topic_entry(frame, version, t, PRODUCER_IDS_ERROR, message) for t in layout.topics}
        self.services.metrics.producer_id_refusals_total.inc()
        local = produce_refusal_response(header.correlation_id, version, list(refused.values()))
        order = tuple(topic.name for topic in layout.topics)
        return Admission(None, local, refused=refused, topic_order=order, min_throttle_ms=throttle_ms)


class ThresholdPolicy(PolicyHandler):
    """Per-topic bytes-in thresholds: a produce's topics over theirs, while the total is too, are
    dropped and answered THROTTLING_QUOTA_EXCEEDED, merged back into the broker's answer."""

    def __init__(self, services: SessionServices) -> None:
        self.services = services

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission:
        version = header.api_version
        guard = self.services.topic_guard
        layout = produce_request_layout(frame, header.body_offset, version, self.services.max_decoded_elements)
        refused_names = guard.refused([topic.name for topic in layout.topics], now)
        guard.record({t.name: t.record_bytes for t in layout.topics if t.name not in refused_names}, now)
        order = tuple(topic.name for topic in layout.topics)
        if not refused_names:
            return Admission(frame, topic_order=order)
        self.services.metrics.topic_refusals_total.inc(len(refused_names))
        refused = {
            t.name: refused_topic_entry(frame, version, t, TOPIC_THRESHOLD_ERROR, self._refusal_message(t.name, now))
            for t in layout.topics
            if t.name in refused_names
        }
        wait = guard.retry_after_ms(refused, now)
        if len(refused) == len(layout.topics):  # every topic refused: the proxy answers, in turn
            local = produce_refusal_response(header.correlation_id, version, list(refused.values()))
            return Admission(None, local, refused=refused, topic_order=order, min_throttle_ms=wait)
        kept = {topic.name for topic in layout.topics} - refused_names
        forwarded = produce_request_keeping(frame, version, layout, kept)
        return Admission(forwarded, refused=refused, topic_order=order, min_throttle_ms=wait, responder=self)

    def answered(self, session: PolicyContext, request: InFlight, frame: memoryview | bytes, now: float) -> Answered:
        """The refused topics merged back into the broker's answer, in the client's order."""
        frame = produce_response_with_refusals(frame, request.api_version, request.topic_order, request.refused)
        return Answered(frame, request.min_throttle_ms)

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


class QuotaAdminPolicy(PolicyHandler):
    """DescribeClientQuotas and AlterClientQuotas answered from the proxy's quotas ([admin]), not the
    brokers'."""

    def __init__(self, services: SessionServices) -> None:
        assert services.quota_admin is not None
        self.admin = services.quota_admin

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission:
        """DescribeClientQuotas: the proxy's answer, or the broker asked first (its verdict on the
        principal decides: `answered`); AlterClientQuotas: the proxy's answer, now or once its state
        is durable (what follows is held until then)."""
        if header.api_key == _DESCRIBE_CLIENT_QUOTAS:
            answer = self.admin.describe(frame, header, session.user, now)
            if isinstance(answer, PendingDescribe):
                return Admission(frame, answer_after=answer, responder=self)
            return Admission(None, answer)
        alter = self.admin.alter(frame, header, session.user, now)
        if isinstance(alter, bytes):
            return Admission(None, alter)
        return Admission(None, pending=alter)  # answered once the state file holds it (StateWriter)

    def answered(self, session: PolicyContext, request: InFlight, frame: memoryview | bytes, now: float) -> Answered:
        return Answered(self.admin.answer_after(request.answer_after, frame), request.min_throttle_ms)


class MutationPolicy(PolicyHandler):
    """controller_mutation_rate (KIP-599): a topic mutation's topics admitted in order, the rest
    answered THROTTLING_QUOTA_EXCEEDED; settled when the broker answers."""

    def __init__(self, services: SessionServices) -> None:
        self.services = services

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission:
        engine = self.services.engine
        if not engine.enforces(QuotaKey.CONTROLLER_MUTATION_RATE):
            return Admission(frame)
        client_id = header.client_id or ""
        forwarded, mutation = self._admit(session.user, frame, header, client_id, now)
        if mutation is None:
            return Admission(forwarded)
        local = None
        if forwarded is None:  # nothing admitted: the proxy answers
            throttle = engine.throttle_ms(session.user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, now)
            local = refusal_response(mutation.request, header.correlation_id, mutation.refused, throttle)
        return Admission(forwarded, local, mutation=mutation, responder=self)

    def _admit(
        self, user: str, frame: memoryview, header: RequestHeader, client_id: str, now: float
    ) -> tuple[memoryview | bytes | None, MutationInFlight | None]:
        """Admits a topic mutation's topics in order under the controller mutation quota (KIP-599).

        Returns the frame to forward (the original, one re-encoded with the admitted topics only,
        or None when nothing was admitted) and what the response will need. validate_only
        requests are never charged (KIP-599)."""
        services = self.services
        request = decode_mutation(
            frame, header.body_offset, header.api_key, header.api_version, services.max_decoded_elements
        )
        if request.validate_only:
            return frame, None
        costs = [self._cost(request, topic) for topic in request.topics]
        admitted = services.engine.admit(user, client_id, QuotaKey.CONTROLLER_MUTATION_RATE, costs, request.strict, now)
        forwarded = [i for i, ok in enumerate(admitted) if ok]
        refused = [i for i, ok in enumerate(admitted) if not ok]
        mutation = MutationInFlight(request, forwarded, refused, {i: costs[i] for i in forwarded})
        services.entity_metrics.record_mutations(user, client_id, sum(costs[i] for i in forwarded), now)
        if not refused:
            return frame, mutation
        services.metrics.mutation_refusals_total.inc(len(refused))
        if not forwarded:
            return None, mutation
        return request.encode_keeping(forwarded), mutation

    def _cost(self, request: MutationRequest, topic: MutationTopic) -> int:
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

    def answered(self, session: PolicyContext, request: InFlight, frame: memoryview | bytes, now: float) -> Answered:
        """The mutation settled (`_settle`), and its throttle. Strict mode throttles with a refusal
        only: a response whose topics were all admitted carries no mutation throttle and mutes
        nothing, even if it drove the bucket into debt (spec §4; Kafka's
        StrictControllerMutationQuota). Permissive mode always does."""
        mutation = request.mutation
        throttle = request.min_throttle_ms
        frame = self._settle(session.user, request, frame, now)
        if mutation.refused or not mutation.request.strict:
            key = QuotaKey.CONTROLLER_MUTATION_RATE
            throttle = max(throttle, self.services.engine.throttle_ms(session.user, request.client_id, key, now))
        return Answered(frame, throttle)

    def _settle(self, user: str, request: InFlight, frame: memoryview | bytes, now: float) -> memoryview | bytes:
        """Refunds topics the broker rejected (Kafka charges only topics that pass validation),
        charges a CreateTopics the partitions it really made, updates the topic catalog, and
        merges the proxy's refusals back into the response in the client's order."""
        mutation = request.mutation
        if request.local_response is not None:
            return frame
        engine, topics, key = self.services.engine, self.services.topics, QuotaKey.CONTROLLER_MUTATION_RATE
        response, results = decode_results(frame, request.api_key, request.api_version)
        for index, result in zip(mutation.forwarded, results, strict=False):
            charged = mutation.charged[index]
            topic = mutation.request.topics[index]
            name = topics.name_of(result.name or topic.name, topic.topic_id)
            if result.error_code != 0:
                engine.refund(user, request.client_id, key, charged, now)
            elif request.api_key == ApiKey.CREATE_TOPICS:
                made = result.num_partitions if result.num_partitions > 0 else charged
                if made > charged:
                    engine.charge(user, request.client_id, key, made - charged, now)
                elif made < charged:
                    engine.refund(user, request.client_id, key, charged - made, now)
                if name:
                    topics.observe([(name, None, made)])
            elif request.api_key == ApiKey.CREATE_PARTITIONS and name:
                topics.observe([(name, None, topic.requested)])
            elif request.api_key == ApiKey.DELETE_TOPICS and name:
                topics.forget(name)
        if mutation.refused:
            return merge_refusals(frame, mutation.request, mutation.forwarded, mutation.refused, response)
        return frame


class SaslPolicy(PolicyHandler):
    """The SASL exchange: the mechanism a SaslHandshake names, the user a SaslAuthenticate claims,
    and the broker's answer, which says whether that user is adopted.

    A SaslAuthenticate goes to the broker and what the client sent after it is held until the
    broker answers (the core's phase AWAITING_AUTHENTICATION); the claimed user is adopted only if
    that answer ends the exchange with a success, so the held requests are charged to the user the
    broker accepted, never to one it refused."""

    def __init__(self, services: SessionServices) -> None:
        self.services = services
        self.mechanism: str | None = None
        self.claimed_user: str | None = None  # adopted only when the broker says the exchange succeeded

    def request(self, session: PolicyContext, frame: memoryview, header: RequestHeader, now: float) -> Admission:
        version, body = header.api_version, header.body_offset
        services = self.services
        if header.api_key == _SASL_HANDSHAKE:
            if version == 0:
                raise FrameError("SaslHandshake v0 (raw SASL tokens) is unsupported; clients since 1.0 use v1")
            self.mechanism = handshake_mechanism(frame, body, version)
            self.claimed_user = None  # a new exchange (KIP-368 re-authentication too)
            # A re-authentication's frames are read by the broker's authenticator again.
            return Admission(frame, event=HANDSHAKE if services.sasl_max_receive_size is not None else -1)
        if session.receive_limit is None:
            # No exchange in progress (authenticated, or a listener without SASL): the broker
            # answers it ILLEGAL_SASL_STATE, and nothing of it (its size is the client's) is read.
            return Admission(frame)
        claimed = authenticate_user(self.mechanism, frame, body, version, services.principal_claim)
        if claimed is not None:
            self.claimed_user = claimed
        # What follows waits for the broker's answer (AWAITING_AUTHENTICATION).
        return Admission(frame, event=AUTHENTICATE, responder=self)

    def answered(self, session: PolicyContext, request: InFlight, frame: memoryview | bytes, now: float) -> Answered:
        """The claimed user adopted once the broker says the exchange is over and succeeded; a
        refusal leaves the principal as it was (the broker closes the connection after it, and the
        core reads nothing more)."""
        throttle = request.min_throttle_ms
        if not session.awaiting_authentication:
            return Answered(frame, throttle)
        view = memoryview(frame)
        body = response_body_offset(view, request.api_key, request.api_version)
        outcome = authentication_outcome(self.mechanism, view, body, request.api_version)
        if outcome is False:
            self.claimed_user = None
            return Answered(frame, throttle, AUTHENTICATION_REFUSED)
        if outcome is None and self.services.sasl_max_receive_size is not None:
            # More rounds to come; or, for a mechanism whose end the proxy cannot read, perhaps none:
            # the next request that is not SASL then ends the exchange (SessionCore._before_authentication).
            event = ROUND_ANSWERED if end_readable(self.mechanism) else ROUND_ANSWERED_END_UNSEEN
            return Answered(frame, throttle, event)
        if outcome is None:
            return Answered(frame, throttle, AUTHENTICATED)  # a listener that requires no SASL: nothing adopted
        claimed, self.claimed_user = self.claimed_user, None
        # The first authentication moves the connection from ANONYMOUS (or its certificate's user)
        # to the user's buckets; a re-authentication as another principal never gets here, the
        # broker refuses it (error 58) and closes the connection.
        return Answered(frame, throttle, AUTHENTICATED, claimed)


class SessionPolicies:
    """One session's policy handlers, one per policy, and which of them each API runs: chosen once
    from quotas/apis.py's POLICY and the configuration (`chains`), again when the quotas change.

    HANDLERS is the order they run in for an API that has several (a Produce: producer IDs, then
    thresholds): the first that decides, decides."""

    HANDLERS: tuple[tuple[int, type[PolicyHandler]], ...] = (
        (NEW_PRODUCER_IDS, ProducerIdPolicy),
        (THRESHOLDS, ThresholdPolicy),
        (LOCAL_ANSWER, QuotaAdminPolicy),
        (PARTITIONS_MUTATED, MutationPolicy),
        (SASL, SaslPolicy),
    )

    def __init__(self, services: SessionServices) -> None:
        self.services = services
        self._handlers: dict[int, PolicyHandler] = {}  # made when first used: a session keeps its own

    def in_use(self) -> int:
        """The policies whose handlers this session runs: those its services use, now."""
        services = self.services
        used = SASL | PARTITIONS_MUTATED
        if services.quota_admin is not None:
            used |= LOCAL_ANSWER
        if services.topic_guard:
            used |= THRESHOLDS
        if services.engine.enforces(QuotaKey.PRODUCER_IDS_RATE):  # produce keeps the fast path without one
            used |= NEW_PRODUCER_IDS
        return used

    def chains(self, used: int, policy: list[int]) -> list[tuple[PolicyHandler, ...] | None]:
        """[api_key] -> the handlers a request of that API runs, in order (None: none), for
        `policy` (POLICY, per API key) and the policies `used`."""
        chains: list[tuple[PolicyHandler, ...] | None] = []
        for bits in policy:
            chain = tuple(self._handler(bit, kind) for bit, kind in self.HANDLERS if bits & used & bit)
            chains.append(chain or None)
        return chains

    def _handler(self, bit: int, kind: type[PolicyHandler]) -> PolicyHandler:
        handler = self._handlers.get(bit)
        if handler is None:
            handler = self._handlers[bit] = kind(self.services)
        return handler


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
    # Makes one session's policy handlers (each session keeps its own: SASL and producer-ID state).
    policies: Callable[[SessionServices], SessionPolicies] = SessionPolicies


@dataclass(slots=True)
class MutationInFlight:
    """A topic mutation under the controller mutation quota, between request and response."""

    request: MutationRequest
    forwarded: list[int]  # indexes of the topics sent to the broker
    refused: list[int]  # indexes answered THROTTLING_QUOTA_EXCEEDED by the proxy
    charged: dict[int, int]  # index -> partitions charged for it


# A session is its core (session_core.py, compiled when it can be) over these handlers.
Session = SessionCore
