"""Graceful shutdown: no new connections, requests already forwarded are answered before the close,
within shutdown_timeout_seconds."""

from __future__ import annotations

import asyncio
import contextlib

from tests.support.broker_double import BrokerDouble, assert_closed, heartbeat, proxy_in_front_of, read_response


class SlowBrokerDouble(BrokerDouble):
    """Answers each client request `delay` seconds after reading it, in order."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    async def before_answer(self, correlation_id: int) -> None:
        if correlation_id < 1000:  # the proxy's own requests are answered at once
            await asyncio.sleep(self.delay)


def slow_proxy(delay: float, timeout: float) -> contextlib.AbstractAsyncContextManager:
    return proxy_in_front_of(SlowBrokerDouble(delay), f"shutdown_timeout_seconds = {timeout}")


async def test_requests_in_flight_at_shutdown_are_answered_then_the_connection_closes() -> None:
    async with slow_proxy(delay=0.2, timeout=10) as (proxy, _broker, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(heartbeat(i) for i in range(5)))
        await asyncio.sleep(0.1)  # forwarded; the broker answers one every 0.2 s
        stopping = asyncio.get_running_loop().create_task(proxy.stop())
        await asyncio.sleep(0.05)
        try:
            await asyncio.open_connection("127.0.0.1", port)
            refused = False
        except OSError:
            refused = True
        assert refused, "no new connection is accepted once shutdown began"
        answers = [(await asyncio.wait_for(read_response(reader), 5))[0] for _ in range(5)]
        assert answers == list(range(5))
        await assert_closed(reader)
        await stopping


async def test_shutdown_closes_after_its_deadline_when_the_broker_does_not_answer() -> None:
    async with slow_proxy(delay=30, timeout=0.3) as (proxy, _broker, port):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(heartbeat(1))
        await asyncio.sleep(0.1)
        started = asyncio.get_running_loop().time()
        await proxy.stop()
        assert asyncio.get_running_loop().time() - started < 5, "bounded by shutdown_timeout_seconds"
        await assert_closed(reader)
