"""The session's phase: stored, moved only as session_core.TRANSITIONS says, and any other move is
refused (h11's state machine). Each test runs on both builds (the `build` fixture)."""

from __future__ import annotations

import pytest

from quotagate.proxy import session_core as core
from tests.support.broker_double import heartbeat as heartbeat_request
from tests.support.builds import Build
from tests.support.sasl_messages import answer, authenticate, handshake, handshake_answer
from tests.support.session_double import taken

SASL_REQUIRED = 'client_sasl = "required"\n'
SASL_AUTO = 'client_sasl = "auto"\n'
SASL_NONE = 'client_sasl = "none"\n'


def test_every_move_not_in_the_table_is_refused_and_leaves_the_phase_as_it_was(build: Build) -> None:
    session, _ = build.session_with()
    for phase in range(len(core.PHASES)):
        for event in range(len(core.EVENTS)):
            session.phase = phase
            if (phase, event) in core.TRANSITIONS:
                session._enter(event)
                assert session.phase == core.TRANSITIONS[(phase, event)]
                continue
            with pytest.raises(RuntimeError, match=f"{core.EVENTS[event]} in phase {core.PHASES[phase]}") as raised:
                session._enter(event)
            assert type(raised.value).__name__ == "PhaseError"  # the build's own class
            assert session.phase == phase


def test_a_refused_session_never_leaves_the_refused_phase() -> None:
    assert not [pair for pair in core.TRANSITIONS if pair[0] == core.REFUSED]


@pytest.mark.parametrize(
    ("proxy", "first"),
    [(SASL_NONE, "OPEN"), (SASL_REQUIRED, "AUTHENTICATING"), (SASL_AUTO, "AUTHENTICATING_END_UNSEEN")],
)
def test_the_first_phase_is_the_listeners(build: Build, proxy: str, first: str) -> None:
    session, _ = build.session_with(proxy)
    assert core.PHASES[session.phase] == first


def test_an_authentication_moves_through_its_phases_and_opens_at_the_brokers_success(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    phases = [core.PHASES[session.phase]]
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    phases.append(core.PHASES[session.phase])
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"\0alice\0secret") + heartbeat_request(3), now=0.0)
    phases.append(core.PHASES[session.phase])
    assert session.holding, "the heartbeat waits for the authentication's answer"
    session.broker_data(answer(2), now=0.0)
    phases.append(core.PHASES[session.phase])
    assert phases == ["AUTHENTICATING", "EXCHANGING", "AWAITING_AUTHENTICATION", "OPEN"]
    assert session.user == "alice" and not session.holding
    assert taken(session.to_broker).endswith(heartbeat_request(3))


def test_a_refused_authentication_reads_nothing_more(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    session.client_data(handshake(1, "PLAIN"), now=0.0)
    session.broker_data(handshake_answer(1), now=0.0)
    session.client_data(authenticate(2, b"\0alice\0wrong"), now=0.0)
    session.broker_data(answer(2, error_code=58), now=0.0)
    assert core.PHASES[session.phase] == "AUTHENTICATION_FAILED"
    taken(session.to_broker)
    session.client_data(heartbeat_request(3), now=1.0)
    assert not session.to_broker


def test_a_request_before_authentication_refuses_the_client_for_good(build: Build) -> None:
    session, _ = build.session_with(SASL_REQUIRED)
    session.client_data(heartbeat_request(1), now=0.0)
    assert core.PHASES[session.phase] == "REFUSED" and session.refusal is not None
    session.client_data(handshake(2, "PLAIN"), now=0.0)
    assert core.PHASES[session.phase] == "REFUSED" and not session.to_broker
