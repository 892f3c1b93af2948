"""AlterClientQuotas' state written off the loop (issue 34 item 5): the state file was rewritten and
fsync'd on the event loop for every alter, and a canary's median went from 1.2 to 11.8 ms during a
stream of them. QuotaAdmin's StateWriter writes it in a worker thread, the alters that arrive
meanwhile together; each alter is answered once its state is durable, and what its client sent after
it waits for that answer. Real time (the write's thread), sessions of both builds, no sockets."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from kafka.protocol.admin import AlterClientQuotasResponse, DescribeClientQuotasResponse

from quotagate.config.quota_state import load_state, save_state
from quotagate.config.settings import DESCRIBE_ACCESS_ANYONE
from quotagate.protocol.headers import response_body_offset
from quotagate.proxy.quota_admin import QuotaAdmin, StateWriter
from quotagate.proxy.session import Session
from quotagate.quotas import QuotaEntity, QuotaKey
from tests.support.builds import BUILDS, Build, build_or_skip
from tests.support.session_double import services_for
from tests.unit.test_quota_admin import ALTER, DESCRIBE, FILE_QUOTAS, alter_request, describe_request, described


@pytest.fixture(params=BUILDS)
def build(request: pytest.FixtureRequest) -> Build:
    return build_or_skip(request.param)


class HeldWrites:
    """save_state made to wait until the test lets each write go (in the worker thread it runs in)."""

    def __init__(self) -> None:
        self.started: list[dict] = []
        self.go = threading.Semaphore(0)
        self.fail_next = False

    def __call__(self, path: Path, quotas: dict) -> None:
        self.started.append(dict(quotas))
        assert self.go.acquire(timeout=10), "the test never let the write go"
        if self.fail_next:
            self.fail_next = False
            raise OSError(28, "No space left on device")
        save_state(path, quotas)


async def until(condition, what: str) -> None:  # type: ignore[no-untyped-def]
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def alter_admin_sessions(tmp_path: Path, build: Build, count: int) -> tuple[list[Session], QuotaAdmin]:
    """`count` sessions of one proxy whose QuotaAdmin writes its state off the loop (StateWriter),
    each writing its answers as the glue would: `local_answered` when its answer is ready."""
    services = services_for(FILE_QUOTAS)
    engine = services.engine
    state = tmp_path / "quotas.json"
    admin = QuotaAdmin(
        engine.table,
        {},
        ("admin",),
        state,
        lambda quotas, now: engine.update(quotas, engine.windows, now),
        DESCRIBE_ACCESS_ANYONE,  # answered by the proxy alone: the describe after an alter sees it
        writer=StateWriter(state, asyncio.get_running_loop()),
    )
    sessions = []
    for _ in range(count):
        session = build.session(replace(services, quota_admin=admin))
        session.user = "admin"
        session.broker_connected(0.0)
        session.answer_ready = lambda session=session: session.local_answered(2.0)
        sessions.append(session)
    return sessions, admin


def bob_rate(rate: float) -> bytes:
    return alter_request([([("user", "bob")], [("producer_byte_rate", rate, False)])])


async def test_an_alter_is_answered_once_its_state_is_written_off_the_loop_and_what_follows_waits(
    tmp_path: Path, build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 34 item 5: the state file was rewritten and fsync'd on the loop for every alter. Now the
    write runs in a worker thread; the alter's answer, and every request the client sent after it,
    wait for it (the broker answers one request at a time), in order."""
    writes = HeldWrites()
    monkeypatch.setattr("quotagate.proxy.quota_admin.save_state", writes)
    (session,), admin = alter_admin_sessions(tmp_path, build, 1)
    session.client_data(bob_rate(100.0) + describe_request([("user", 0, "bob")]), 1.0)
    await until(lambda: writes.started, "the state write to start")
    assert session.to_client == [] and session.to_broker == [], "answered before the state file held it"
    assert admin.api_quotas == {}, "in force before it is durable"
    writes.go.release()
    await until(lambda: session.to_client, "the alter's answer")
    frames = b"".join(session.to_client)
    altered = AlterClientQuotasResponse.decode(
        memoryview(frames)[response_body_offset(memoryview(frames), ALTER, 1) :], version=1
    )
    assert [entry.error_code for entry in altered.entries] == [0]
    assert load_state(tmp_path / "quotas.json") == {QuotaEntity("bob"): {QuotaKey.PRODUCER_BYTE_RATE: 100.0}}
    # The describe sent after it was answered after it, and sees it.
    second = memoryview(frames)[4 + int.from_bytes(frames[:4], "big") :]
    described_bob = described(
        DescribeClientQuotasResponse.decode(second[response_body_offset(second, DESCRIBE, 1) :], version=1)
    )
    assert described_bob == {(("user", "bob"),): {"producer_byte_rate": 100.0}}
    assert not session.awaiting_answer and not session.held


async def test_alters_arriving_while_the_state_is_written_are_written_together(
    tmp_path: Path, build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = HeldWrites()
    monkeypatch.setattr("quotagate.proxy.quota_admin.save_state", writes)
    sessions, admin = alter_admin_sessions(tmp_path, build, 4)
    sessions[0].client_data(bob_rate(1.0), 1.0)
    await until(lambda: len(writes.started) == 1, "the first write")
    for i, session in enumerate(sessions[1:], start=2):  # while the first write is under way
        session.client_data(bob_rate(float(i)), 1.0)
    writes.go.release()
    await until(lambda: sessions[0].to_client, "the first alter's answer")
    assert all(not session.to_client for session in sessions[1:])
    await until(lambda: len(writes.started) == 2, "the second write")
    writes.go.release()
    await until(lambda: all(session.to_client for session in sessions), "every answer")
    assert admin.writer is not None and admin.writer.writes == 2, "three alters that came together: one write"
    assert writes.started[1] == {QuotaEntity("bob"): {QuotaKey.PRODUCER_BYTE_RATE: 4.0}}
    assert admin.api_quotas == writes.started[1]


async def test_an_alter_whose_state_cannot_be_written_changes_nothing_nor_the_alters_built_on_it(
    tmp_path: Path, build: Build, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = HeldWrites()
    monkeypatch.setattr("quotagate.proxy.quota_admin.save_state", writes)
    sessions, admin = alter_admin_sessions(tmp_path, build, 3)
    sessions[0].client_data(bob_rate(1.0), 1.0)
    await until(lambda: len(writes.started) == 1, "the first write")
    sessions[1].client_data(bob_rate(2.0), 1.0)  # queued behind the one that will fail
    writes.fail_next = True
    writes.go.release()
    await until(lambda: sessions[0].to_client and sessions[1].to_client, "both answers")
    for session in sessions[:2]:
        frame = memoryview(b"".join(session.to_client))
        response = AlterClientQuotasResponse.decode(frame[response_body_offset(frame, ALTER, 1) :], version=1)
        assert response.entries[0].error_code == -1 and "could not persist" in response.entries[0].error_message
    assert admin.api_quotas == {} and len(writes.started) == 1
    sessions[2].client_data(bob_rate(3.0), 1.0)  # builds on what is durable, not on the failed ones
    await until(lambda: len(writes.started) == 2, "the next write")
    writes.go.release()
    await until(lambda: sessions[2].to_client, "the third answer")
    assert admin.api_quotas == {QuotaEntity("bob"): {QuotaKey.PRODUCER_BYTE_RATE: 3.0}}
