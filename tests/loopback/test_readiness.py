"""/readyz follows the brokers: a broker that accepts connections but answers nothing (a frozen JVM:
the kernel still completes the TCP handshake) makes the proxy not ready within a few probes."""

from __future__ import annotations

import asyncio

from quotagate.proxy.server import Proxy
from tests.support.broker_double import BrokerDouble, proxy_in_front_of


class FreezableBrokerDouble(BrokerDouble):
    """Answers every request in order, except while frozen: then it reads and answers nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False

    async def _thaw(self) -> None:
        while self.frozen:
            await asyncio.sleep(0.05)

    async def before_read(self) -> None:
        await self._thaw()

    async def before_answer(self, correlation_id: int) -> None:
        await self._thaw()


async def ready_within(proxy: Proxy, ready: bool, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if (not proxy.readiness_problems()) is ready:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_frozen_broker_makes_the_proxy_not_ready_and_a_thawed_one_ready_again() -> None:
    broker = FreezableBrokerDouble()
    probes = "readiness_probe_seconds = 0.2\nreadiness_timeout_seconds = 0.3"
    async with proxy_in_front_of(broker, probes) as (proxy, _broker, _port):
        assert await ready_within(proxy, True, 10), proxy.readiness_problems()
        broker.frozen = True
        assert await ready_within(proxy, False, 10), "still ready with the only broker frozen"
        assert "readiness probe" in proxy.readiness_problems()[0]
        broker.frozen = False
        assert await ready_within(proxy, True, 10), proxy.readiness_problems()
