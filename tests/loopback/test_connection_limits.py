"""Kafka's connection limits: per-address maximum (with overrides), creation rate, idle timeout,
and the listen backlog, against a real listening proxy and a broker double."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import subprocess
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
import uvloop

from quotagate.config import parse_config
from quotagate.config.settings import ConfigError
from quotagate.proxy.connection_limits import REFUSED, ConnectionLimits, LimitSettings
from quotagate.proxy.server import Proxy
from tests.support.broker_double import BrokerDouble, assert_closed, heartbeat, proxy_in_front_of, read_response


def limits(max_per_ip: int = 10, overrides: dict[str, int] | None = None, rate: float = 1e9, burst: float = 1e9):
    return ConnectionLimits(LimitSettings(max_per_ip, overrides or {}, rate, burst, 600.0), now=0.0)


def test_an_address_at_its_maximum_is_refused_until_one_of_its_connections_closes() -> None:
    table = limits(max_per_ip=2, overrides={"10.0.0.9": 3})
    assert [table.admit("10.0.0.1", 0.0) for _ in range(3)] == [0.0, 0.0, REFUSED]
    assert [table.admit("10.0.0.9", 0.0) for _ in range(4)] == [0.0, 0.0, 0.0, REFUSED]
    table.release("10.0.0.1")
    assert table.admit("10.0.0.1", 0.0) == 0.0
    assert table.per_ip == {"10.0.0.1": 2, "10.0.0.9": 3}


def test_connections_over_the_creation_rate_wait_their_turn() -> None:
    table = limits(rate=10.0, burst=2.0)
    waits = [table.admit(f"10.0.0.{i}", 0.0) for i in range(5)]
    assert waits == pytest.approx([0.0, 0.0, 0.1, 0.2, 0.3])


def test_connection_limit_settings_are_parsed_with_kafkas_override_syntax() -> None:
    config = parse_config(
        '[proxy]\nbootstrap_servers = ["k:1"]\nmax_connections_per_ip = 5\n'
        'max_connections_per_ip_overrides = "localhost:100, 127.0.0.2:7"\nconnections_max_idle_ms = 1000\n'
        "max_connection_creation_rate = 50\n"
    )
    assert config.proxy.max_connections_per_ip_overrides == (("localhost", 100), ("127.0.0.2", 7))
    assert (config.proxy.max_connections_per_ip, config.proxy.connections_max_idle_ms) == (5, 1000)
    assert config.proxy.socket_listen_backlog_size == 1024
    with pytest.raises(ConfigError, match=r"proxy\.max_connections_per_ip_overrides"):
        parse_config('[proxy]\nbootstrap_servers = ["k:1"]\nmax_connections_per_ip_overrides = "host"\n')


def limited_proxy(proxy_toml: str) -> contextlib.AbstractAsyncContextManager:
    return proxy_in_front_of(BrokerDouble(), proxy_toml, top_toml="quota_window_num = 1")


async def answered(port: int, correlation_id: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(heartbeat(correlation_id))
    assert (await read_response(reader))[0] == correlation_id
    return reader, writer


def metric(proxy: Proxy, name: str, **labels: str) -> float:
    value = proxy.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_a_connection_beyond_max_connections_per_ip_is_closed_at_accept() -> None:
    async with limited_proxy("max_connections_per_ip = 2") as (proxy, broker, port):
        kept = [await answered(port, i) for i in range(2)]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(heartbeat(99))
        await assert_closed(reader)
        assert 99 not in broker.received
        assert metric(proxy, "quotagate_connections_refused_total", reason="max_connections_per_ip") == 1
        kept[0][1].close()
        await assert_closed(kept[0][0])
        for _ in range(50):  # the proxy sees the close on its next loop turn
            if proxy.admission.limits.per_ip.get("127.0.0.1") == 1:
                break
            await asyncio.sleep(0.02)
        _, writer = await answered(port, 7)  # a slot is free again
        writer.close()
        kept[1][1].close()


async def test_an_override_raises_one_addresss_maximum() -> None:
    async with limited_proxy('max_connections_per_ip = 1\nmax_connections_per_ip_overrides = "127.0.0.1:3"') as (
        _proxy,
        _broker,
        port,
    ):
        writers = [(await answered(port, i))[1] for i in range(3)]
        reader, _ = await asyncio.open_connection("127.0.0.1", port)
        await assert_closed(reader)
        for writer in writers:
            writer.close()


async def test_a_half_sent_frame_does_not_keep_a_connection_open_past_the_idle_limit() -> None:
    async with limited_proxy("connections_max_idle_ms = 300") as (proxy, _broker, port):
        half_reader, half_writer = await asyncio.open_connection("127.0.0.1", port)
        half_writer.write(heartbeat(1)[:7])
        busy_reader, busy_writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(12):  # 1.2 s of traffic, each gap well under the limit
            busy_writer.write(heartbeat(i))
            assert (await read_response(busy_reader))[0] == i
            await asyncio.sleep(0.1)
        await assert_closed(half_reader)
        assert metric(proxy, "quotagate_connections_idle_closed_total") >= 1
        assert not busy_writer.is_closing()
        busy_writer.close()


async def test_connections_over_the_creation_rate_are_read_later_not_refused() -> None:
    # 5 connections per second with a burst of 5 (quota_window_num = 1): of 10 at once, 5 wait.
    async with limited_proxy("max_connection_creation_rate = 5") as (proxy, _broker, port):
        pairs = [await asyncio.open_connection("127.0.0.1", port) for _ in range(10)]
        for i, (_, writer) in enumerate(pairs):
            writer.write(heartbeat(i))
        answers = [(await asyncio.wait_for(read_response(reader), 10))[0] for reader, _ in pairs]
        assert answers == list(range(10))
        assert metric(proxy, "quotagate_connections_delayed_total") >= 4
        assert metric(proxy, "quotagate_connections_refused_total", reason="max_connections_per_ip") == 0
        for _, writer in pairs:
            writer.close()


RESET_ON_CLOSE = struct.pack("ii", 1, 0)  # SO_LINGER 0: close with a reset, leave no TIME_WAIT


class ResettingBrokerDouble(BrokerDouble):
    """Answers the proxy's close with a reset, so 1 000 closed pairs leave no 1 000 sockets in
    TIME_WAIT crowding the machine's free ports for a minute."""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
        await super()._serve(reader, writer)


T = TypeVar("T")


async def bounded(work: Coroutine[Any, Any, T], seconds: float) -> T:
    """`work`, failing after `seconds` (start and stop of the rig included) rather than at pytest's 300 s."""
    return await asyncio.wait_for(work, seconds)


async def answer_times(count: int, rate: int) -> tuple[list[float], float, float]:
    """Opens `count` connections at once to a proxy limited to `rate` new connections per second
    (burst: one second's worth), each sending one request; returns when each was answered (seconds
    from the start, in the order opened), when the last was connected, and the delayed-connections
    counter."""
    # The proxy, the double and the thousand clients share this one event loop: on a loaded machine it
    # was seen to take over 2 s to complete the proxy's connect to the double, which the proxy then
    # took for unreachable (and stopped accepting). 30 s keeps that out of what this test measures.
    rig = proxy_in_front_of(
        ResettingBrokerDouble(), f"max_connection_creation_rate = {rate}", "quota_window_num = 1", connect_timeout=30
    )
    async with rig as (proxy, _broker, port):
        loop = asyncio.get_running_loop()
        started = loop.time()

        connected: list[float] = []

        async def one(i: int) -> float:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            connected.append(loop.time() - started)
            writer.write(heartbeat(i))
            assert (await asyncio.wait_for(read_response(reader), 60))[0] == i
            answered_at = loop.time() - started
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, RESET_ON_CLOSE)
            writer.close()
            return answered_at

        # Bounded: a stalled run fails here, naming itself, not at pytest's 300-s timeout.
        times = await asyncio.wait_for(asyncio.gather(*(one(i) for i in range(count))), 120)
        return list(times), max(connected), metric(proxy, "quotagate_connections_delayed_total")


@pytest.mark.parametrize("loop_kind", ["uvloop", "asyncio"])
def test_the_1000th_connection_waits_as_max_connection_creation_rate_says(loop_kind: str) -> None:
    """Issue 26: under uvloop, pausing an accepted connection in connection_made had no effect:
    1 000 connections at 50/s were all answered within 0.58 s. At 250/s with a burst of 250,
    connection k is read no sooner than (k - 250) / 250 s: the last about 3 s after the first."""
    count, rate = 1000, 250
    run = uvloop.run if loop_kind == "uvloop" else asyncio.run
    times, last_connected, delayed = run(bounded(answer_times(count, rate), 200))
    times.sort()
    expected_last = (count - rate) / rate
    print(f"{loop_kind}: first answer {times[0]:.2f} s, 500th {times[499]:.2f} s, last {times[-1]:.2f} s "
          f"(rate: >= {expected_last:.2f} s), delayed {delayed:.0f}, connected by {last_connected:.2f} s")  # fmt: skip
    # How many wait depends on how fast the loop takes the accepts in, the rate refilling meanwhile (~700 of
    # the 750 over the burst on a quiet machine, 394 in a make test at load 6, none in one at load 10 whose
    # loop took the accepts in no faster than the rate): the answer times below are what the rate promises;
    # the counter is checked where the test sets the pace
    # (test_connections_over_the_creation_rate_are_read_later_not_refused).
    assert times[-1] >= 0.9 * expected_last, f"the last connection was answered after {times[-1]:.2f} s"
    # Never more answered by time t than the burst plus t seconds of the rate.
    for k, at in enumerate(times):
        assert k + 1 <= rate + rate * at + 20, f"{k + 1} answered by {at:.2f} s"


def listen_backlog(port: int) -> int:
    """The backlog a listening socket was given: the Send-Q column of `ss -ltn` for listeners."""
    out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout
    return int(out.split()[2])


@pytest.mark.skipif(
    int(Path("/proc/sys/net/core/somaxconn").read_text()) < 1024, reason="the kernel caps backlogs below 1024"
)
async def test_every_listener_gets_the_configured_backlog_not_asyncios_default() -> None:
    async with limited_proxy("socket_listen_backlog_size = 1024") as (proxy, _broker, port):
        proxy.discovery.advertise(1, "127.0.0.1", 1)  # opens the listener for broker 1, in a task
        await asyncio.sleep(0.2)
        assert listen_backlog(port) == 1024
        assert listen_backlog(proxy.config.proxy.broker_port(1)) == 1024
