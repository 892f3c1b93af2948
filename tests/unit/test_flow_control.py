"""FlowControl (proxy/flow_control.py), the one owner of whether a connection is read: its order of
reasons, the transport's pauses, and the session and the glue asking it. On each build."""

from __future__ import annotations

import itertools

import pytest

from quotagate.proxy.flow_control import HOLDING, MUTED, READING, REFUSED
from tests.support.builds import Build
from tests.support.session_double import produce, produce_answer, services_for


class Transport:
    """The reads a FlowControl pauses and resumes: each call recorded."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.closing = False

    def pause_reading(self) -> None:
        self.calls.append("pause")

    def resume_reading(self) -> None:
        self.calls.append("resume")

    def is_closing(self) -> bool:
        return self.closing


def flow_of(build: Build):  # the build's own FlowControl
    return build.session(services_for()).flow


@pytest.mark.parametrize(("refused", "muted", "holding"), list(itertools.product((False, True), repeat=3)))
def test_the_first_reason_that_holds_is_the_state_refused_then_muted_then_holding(
    build: Build, refused: bool, muted: bool, holding: bool
) -> None:
    flow = flow_of(build)
    transport = Transport()
    flow.attach(transport)
    if refused:
        flow.refuse()
    if muted:
        flow.mute(10.0)
    state = flow.settle(holding, 5.0)
    expected = REFUSED if refused else MUTED if muted else HOLDING if holding else READING
    assert state == expected, f"refused={refused} muted={muted} holding={holding}: state {state}, not {expected}"
    assert flow.paused == (expected != READING)
    assert transport.calls == (["pause"] if expected != READING else [])


def test_a_mute_ends_at_its_time_and_a_shorter_one_never_shortens_it(build: Build) -> None:
    flow = flow_of(build)
    flow.mute(10.0)
    flow.mute(4.0)
    assert flow.muted_until == 10.0
    assert flow.muted(9.99) and not flow.muted(10.0)
    assert flow.settle(False, 9.99) == MUTED and flow.paused
    assert flow.settle(False, 10.0) == READING and not flow.paused


def test_the_transport_is_read_again_only_when_no_reason_holds(build: Build) -> None:
    flow = flow_of(build)
    transport = Transport()
    flow.attach(transport)
    flow.pause("upstream-backpressure")
    flow.pause("upstream-backpressure")  # twice: harmless
    flow.mute(1.0)
    flow.settle(False, 0.5)
    flow.resume("upstream-backpressure")
    assert flow.paused, "still muted"
    flow.resume("connection-rate")  # a reason that does not hold: harmless
    assert flow.settle(False, 1.0) == READING and not flow.paused
    assert transport.calls == ["pause", "resume"]


def test_what_held_before_the_transport_came_applies_to_it(build: Build) -> None:
    flow = flow_of(build)
    flow.pause("upstream-connecting")
    transport = Transport()
    flow.attach(transport)
    assert transport.calls == ["pause"]
    flow.resume("upstream-connecting")
    assert transport.calls == ["pause", "resume"]


def test_a_closing_transport_is_neither_paused_nor_resumed(build: Build) -> None:
    flow = flow_of(build)
    transport = Transport()
    flow.attach(transport)
    transport.closing = True
    flow.pause("shutdown")
    flow.resume("shutdown")
    assert transport.calls == [] and not flow.paused


def test_a_produce_in_debt_mutes_the_sessions_flow_control_and_reads_nothing_until_it_ends(build: Build) -> None:
    session, _ = build.session_with('[[quotas]]\nclient_id = "app"\nproducer_byte_rate = 1000\n')
    session.broker_connected(0.0)
    session.client_data(produce(1, {"t": b"x" * 20_000}), now=0.0)
    flow = session.flow
    assert flow.muted_until == session.muted_until > 1.0, "20 kB over an 11 kB burst at 1000 B/s"
    session.client_data(produce(2, {"t": b"y"}), now=0.1)
    assert flow.settle(session.holding, 0.1) == MUTED, "muted comes before holding"
    session.broker_data(produce_answer(1, ["t"]), now=0.2)
    session.unmute(flow.muted_until)
    assert flow.settle(session.holding, flow.muted_until) == READING


def test_a_refused_client_is_refused_by_its_flow_control(build: Build) -> None:
    session = build.session(services_for())
    session.broker_connected(0.0)
    session.client_data(b"\x00\x00\x00\x04" + b"\xff\xff\x00\x00", now=0.0)
    assert session.refusal is not None
    assert session.flow.refused and session.flow.settle(session.holding, 0.0) == REFUSED
