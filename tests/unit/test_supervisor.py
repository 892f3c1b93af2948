"""No background task dies silently (issue 26): a failure is logged with its traceback, counted in
quotagate_background_task_failures_total{task} and the task started again; one the proxy cannot go
on without stops it with exit code 1. Backoffs are set to 0 so nothing here waits on a clock."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from quotagate.config.reload import ConfigWatcher
from quotagate.config.settings import Config, parse_config
from quotagate.proxy import supervisor
from quotagate.proxy.server import Proxy
from quotagate.quotas import QuotaKey

BASE = '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\n'


@pytest.fixture(autouse=True)
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor, "RESTART_MIN_SECONDS", 0.0)
    monkeypatch.setattr(supervisor, "RESTART_MAX_SECONDS", 0.0)


async def turns(count: int = 50) -> None:
    for _ in range(count):
        await asyncio.sleep(0)


def failures(proxy: Proxy, task: str) -> float:
    return proxy.metrics.registry.get_sample_value("quotagate_background_task_failures_total", {"task": task}) or 0.0


async def test_a_failing_background_task_is_logged_counted_and_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = Proxy(parse_config(BASE))
    runs: list[int] = []

    async def flaky() -> None:
        runs.append(len(runs))
        if len(runs) <= 2:
            raise RuntimeError(f"boom {len(runs)}")
        await asyncio.Event().wait()  # the third run keeps going

    with caplog.at_level(logging.WARNING, logger="quotagate.supervisor"):
        task = proxy.supervisor.start("flaky", flaky)
        await turns()
    assert runs == [0, 1, 2]
    assert failures(proxy, "flaky") == 2
    assert "background task flaky failed" in caplog.text and "RuntimeError: boom 1" in caplog.text  # the traceback
    assert not task.done()
    await proxy.supervisor.cancel_all()
    assert task.cancelled() and failures(proxy, "flaky") == 2  # cancelling is not a failure


async def test_a_task_that_cannot_be_started_again_stops_the_proxy_with_exit_code_1() -> None:
    proxy = Proxy(parse_config(BASE))

    async def stop_that_fails() -> None:
        raise OSError("cannot close")

    proxy.supervisor.start("shutdown", stop_that_fails, restart=False)
    await asyncio.wait_for(proxy.wait_stopped(), 5)
    assert proxy.exit_code == 1 and failures(proxy, "shutdown") == 1


async def test_the_config_watcher_outlives_a_reload_that_raises_and_applies_the_next_edit(tmp_path: Path) -> None:
    """Before, an exception in a reload ended the watcher's task ("Task exception was never
    retrieved") and no later edit was applied."""
    path = tmp_path / "q.toml"
    path.write_text(BASE)
    proxy = Proxy(parse_config(BASE))
    applied: list[Config] = []

    def apply(config: Config) -> None:
        if not applied:
            applied.append(config)
            raise RuntimeError("a defect while applying")
        applied.append(config)

    watcher = ConfigWatcher(path, apply, poll_seconds=0)
    proxy.supervisor.start("config-watch", watcher.watch)
    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 100\n')
    await turns()
    assert failures(proxy, "config-watch") == 1
    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 200\n')
    await turns()
    await proxy.supervisor.cancel_all()
    assert len(applied) == 2
    assert applied[-1].quotas.resolve("a", "c", QuotaKey.PRODUCER_BYTE_RATE).value == 200  # type: ignore[union-attr]


async def test_a_loop_stops_on_a_cancel_that_an_await_swallowed() -> None:
    """Python 3.11's asyncio.wait_for drops a CancelledError that lands as its inner call completes
    (gh-86296), leaving the cancel counted on the task: the loop's next pass stops it."""
    swallowed = []

    async def loop_losing_one_cancel() -> None:
        while True:
            supervisor.stop_if_cancel_was_swallowed()
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                if swallowed:
                    raise
                swallowed.append(True)  # as wait_for does: no uncancel()

    task = asyncio.get_running_loop().create_task(loop_losing_one_cancel())
    await turns(2)
    task.cancel()
    await turns()
    assert swallowed and task.cancelled()


async def test_a_shutdown_cancels_again_a_task_that_lost_its_cancel_and_never_hangs_on_one(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(supervisor, "CANCEL_WAIT_SECONDS", 0.0)
    lost = {"few": 0, "all": 0}
    let_go = asyncio.Event()

    async def losing(name: str, how_many: int) -> None:
        while not let_go.is_set():
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                lost[name] += 1
                if lost[name] > how_many:
                    raise

    tasks = supervisor.Supervisor(lambda _name: None, lambda _name: None)
    few = tasks.start("loses-three-cancels", lambda: losing("few", 3))
    endless = tasks.start("loses-every-cancel", lambda: losing("all", 10**6))
    await turns(2)
    with caplog.at_level(logging.WARNING, logger="quotagate.supervisor"):
        await tasks.cancel_all()
    assert few.cancelled() and lost["few"] == 4
    assert not endless.done() and lost["all"] >= supervisor.CANCEL_ROUNDS - 1
    assert "still running after a cancel, cancelling again: loses-every-cancel, loses-three-cancels" in caplog.text
    assert "did not stop after 10 cancels, going on: loses-every-cancel" in caplog.text
    let_go.set()
    await turns()
    assert endless.done()
