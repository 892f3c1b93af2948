"""The delay queue that unmutes throttled connections, and hot reload of the config file."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from quotagate.config import Config
from quotagate.config.reload import ConfigWatcher
from quotagate.proxy.connection import FlowControl
from quotagate.proxy.delay_queue import DelayQueue
from quotagate.quotas import QuotaKey


class Connection:
    """A connection as the delay queue sees it: its FlowControl, muted by the session, and the
    glue's unmute."""

    def __init__(self, loop: asyncio.AbstractEventLoop, name: str, unmuted: list[tuple[str, float]]) -> None:
        self.loop, self.name, self.unmuted = loop, name, unmuted
        self.flow = FlowControl()

    def mute(self, queue: DelayQueue, until: float) -> None:
        """What the session and the glue do: the mute in the flow control, the queue asked to wake it."""
        self.flow.mute(until)
        queue.wake(self.flow, self.unmute)

    def unmute(self) -> None:
        self.unmuted.append((self.name, self.loop.time()))


async def test_connections_are_unmuted_in_deadline_order_by_one_queue() -> None:
    loop = asyncio.get_running_loop()
    queue = DelayQueue(loop)
    unmuted: list[tuple[str, float]] = []
    start = loop.time()
    for name, delay in (("slow", 0.3), ("fast", 0.1), ("mid", 0.2)):
        Connection(loop, name, unmuted).mute(queue, start + delay)
    assert len(queue) == 3
    await asyncio.sleep(0.45)
    assert [name for name, _ in unmuted] == ["fast", "mid", "slow"]
    assert all(at >= start + delay for (_, at), delay in zip(unmuted, (0.1, 0.2, 0.3), strict=True))
    assert len(queue) == 0


async def test_muting_again_extends_the_mute_without_a_second_entry() -> None:
    loop = asyncio.get_running_loop()
    queue = DelayQueue(loop)
    unmuted: list[tuple[str, float]] = []
    connection = Connection(loop, "c", unmuted)
    start = loop.time()
    connection.mute(queue, start + 0.1)
    connection.mute(queue, start + 0.25)
    connection.mute(queue, start + 0.05)  # shorter than the current mute: no effect
    assert len(queue) == 1
    await asyncio.sleep(0.15)
    assert unmuted == []
    await asyncio.sleep(0.2)
    assert [name for name, _ in unmuted] == ["c"] and unmuted[0][1] >= start + 0.25


async def test_a_closed_connection_is_never_unmuted() -> None:
    loop = asyncio.get_running_loop()
    queue = DelayQueue(loop)
    unmuted: list[tuple[str, float]] = []
    connection = Connection(loop, "gone", unmuted)
    connection.mute(queue, loop.time() + 0.05)
    connection.flow.closed = True
    await asyncio.sleep(0.1)
    assert unmuted == [] and len(queue) == 0


BASE = '[proxy]\nbootstrap_servers = ["k:1"]\n'


def test_reload_applies_a_good_file_and_keeps_the_running_config_on_a_bad_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 100\n')
    applied: list[Config] = []
    results: list[bool] = []
    watcher = ConfigWatcher(path, applied.append, results.append)

    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 500\n')
    assert watcher.reload()
    assert applied[-1].quotas.resolve("a", "x", QuotaKey.PRODUCER_BYTE_RATE).value == 500

    path.write_text(BASE + '[[quotas]]\nuser = "a"\nproducer_byte_rate = -1\n')
    with caplog.at_level(logging.ERROR, logger="quotagate.config"):
        assert not watcher.reload()
    assert len(applied) == 1
    assert results == [True, False]
    assert "quotas[0].producer_byte_rate: must be greater than 0" in caplog.text


async def test_the_watcher_notices_a_changed_file(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text(BASE)
    applied: list[Config] = []
    watcher = ConfigWatcher(path, applied.append, poll_seconds=0.05)
    task = asyncio.create_task(watcher.watch())
    try:
        path.write_text(BASE + '[[quotas]]\nclient_id = "c"\nconsumer_byte_rate = 7\n')
        await asyncio.sleep(0.3)
    finally:
        task.cancel()
    assert len(applied) == 1
    assert applied[0].quotas.resolve("u", "c", QuotaKey.CONSUMER_BYTE_RATE).value == 7


def test_sighup_reloads_the_config_of_a_running_proxy(tmp_path: Path) -> None:
    """The real CLI: a changed quota is applied on SIGHUP (the file watcher is slowed down so the
    signal, not the poll, is what applies it)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from tests.support.proxy_fixtures import free_port_block

    # The broker, the bootstrap port, brokers 0..9 (proxy.broker_node_ids) from first + 2, metrics.
    first = free_port_block(13)
    path = tmp_path / "q.toml"
    base = f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\n[metrics]\nport = {first + 12}\n'
    path.write_text(base)
    log = tmp_path / "log"
    env = {**os.environ, "QUOTAGATE_CONFIG_POLL_SECONDS": "3600"}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "quotagate", "run", "--config", str(path)], stdout=out, stderr=out, env=env
        )
    try:
        deadline = time.monotonic() + 20
        while "quotagate ready" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        path.write_text(base + '[[quotas]]\nuser = "a"\nproducer_byte_rate = 10\n')
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "config reloaded" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "config reloaded" in log.read_text(), log.read_text()
    finally:
        process.terminate()
        process.wait(10)
