"""Policies as handlers (session.py): which handlers each API runs, chosen once from quotas/apis.py's
POLICY and the configuration; each handler decided through a narrow context and returning its
decision; the response side a request needs recorded on its in-flight entry when it is read."""

from __future__ import annotations

from dataclasses import dataclass
from struct import unpack_from

from quotagate.protocol.api_keys import ApiKey
from quotagate.protocol.apis import is_flexible
from quotagate.protocol.headers import RequestHeader
from quotagate.proxy import session_core
from quotagate.proxy.session import (
    AUTHENTICATE,
    MutationPolicy,
    ProducerIdPolicy,
    SaslPolicy,
    ThresholdPolicy,
)
from tests.support.builds import Build
from tests.support.sasl_messages import answer, authenticate, handshake, handshake_answer
from tests.support.session_double import create_topics, produce, services_for, taken

THRESHOLDS = "[topic_thresholds]\ntotal_bytes_in_per_sec = 1\n[topic_thresholds.topics]\nhot = 1\n"
PRODUCER_IDS = '[[quotas]]\nuser = "<default>"\nproducer_ids_rate = 0.5\n'
SASL_REQUIRED = 'client_sasl = "required"\n'


def kinds(session, api_key: int) -> list[type]:
    chain = session.policies.chains(session.hooked, session_core.POLICY)[api_key]
    return [type(handler) for handler in chain or ()]


def test_a_produce_runs_no_handler_unless_the_configuration_uses_one(build: Build) -> None:
    plain, _ = build.session_with()
    assert kinds(plain, ApiKey.PRODUCE) == [], "the produce fast path: no handler"
    assert kinds(plain, ApiKey.FETCH) == []
    assert kinds(plain, ApiKey.SASL_AUTHENTICATE) == [SaslPolicy]
    assert kinds(plain, ApiKey.CREATE_TOPICS) == [MutationPolicy]
    assert kinds(plain, ApiKey.ALTER_CLIENT_QUOTAS) == [], "forwarded to the brokers without [admin]"
    both, _ = build.session_with(THRESHOLDS + PRODUCER_IDS)
    assert kinds(both, ApiKey.PRODUCE) == [ProducerIdPolicy, ThresholdPolicy], "producer IDs first, then thresholds"


def test_a_session_keeps_its_handlers_when_the_chains_are_chosen_again(build: Build) -> None:
    session, _ = build.session_with(THRESHOLDS)
    policies = session.policies
    first = policies.chains(session.hooked, session_core.POLICY)[ApiKey.SASL_HANDSHAKE]
    session.quotas_changed()
    again = policies.chains(session.hooked, session_core.POLICY)[ApiKey.SASL_HANDSHAKE]
    assert first is not None and again is not None and first[0] is again[0], "its SASL state goes on"


@dataclass
class Context:
    """A PolicyContext double: what a handler may read of its session."""

    user: str = "alice"
    receive_limit: int | None = 512
    awaiting_authentication: bool = False


def header_of(frame: bytes) -> RequestHeader:
    """The header the core hands a handler (its body offset counted from the size prefix on)."""
    api_key, version, correlation_id, length = unpack_from(">hhih", frame, 4)
    body = 14 + max(length, 0) + (1 if is_flexible(api_key, version) else 0)  # no header tags
    return RequestHeader(api_key, version, correlation_id, frame[14 : 14 + length].decode(), body)


def test_the_sasl_handler_returns_the_phase_event_and_the_user_to_adopt_and_writes_nothing_else() -> None:
    services = services_for()
    sasl = SaslPolicy(services)
    context = Context()
    sasl.request(context, memoryview(handshake(1, "PLAIN")), header_of(handshake(1, "PLAIN")), 0.0)
    request = authenticate(2, b"\0bob\0secret")
    frame = memoryview(request)
    decided = sasl.request(context, frame, header_of(request), 0.0)
    assert decided.event == AUTHENTICATE and decided.responder is sasl and decided.forwarded is frame
    assert context == Context(), "the context is read, never written"
    assert sasl.claimed_user == "bob"


def test_each_in_flight_entry_names_the_response_side_its_request_chose(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    assert session.in_flight[-1].responder is None, "a SaslHandshake's answer needs no handler"
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"\0alice\0secret"), now=0.0)
    (entry,) = session.in_flight
    assert type(entry.responder) is SaslPolicy
    session.broker_data(answer(2), now=0.0)
    assert session.user == "alice" and session.phase == session_core.OPEN
    taken(session.to_broker), taken(session.to_client)
    session.client_data(produce(3, {"t": b"r"}), now=1.0)
    assert session.in_flight[-1].responder is None, "a plain produce: no response side"


def test_a_produce_with_topics_refused_names_the_threshold_handler_to_merge_them_back(build: Build) -> None:
    session, _ = build.session_with(THRESHOLDS)
    session.client_data(produce(1, {"hot": b"h" * 5000, "cold": b"c"}), now=0.0)
    session.client_data(produce(2, {"hot": b"h" * 5000, "cold": b"c"}), now=0.5)
    refused = [entry for entry in session.in_flight if entry.refused]
    assert refused and all(type(entry.responder) is ThresholdPolicy for entry in refused)


def test_a_mutation_under_the_controller_quota_names_the_mutation_handler(build: Build) -> None:
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\ncontroller_mutation_rate = 100\n')
    session.client_data(create_topics(1), now=0.0)
    (entry,) = session.in_flight
    assert type(entry.responder) is MutationPolicy and entry.mutation is not None
