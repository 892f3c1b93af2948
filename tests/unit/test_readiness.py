"""/readyz follows the brokers: a broker that accepts connections but answers nothing (a frozen JVM:
the kernel still completes the TCP handshake) makes the proxy not ready within a few probes."""

from __future__ import annotations

import asyncio
from struct import pack, unpack_from

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from tests.proxy_fixtures import free_port_block
from tests.unit.test_connection import BrokerDouble


class FreezableBrokerDouble(BrokerDouble):
    """Answers every request in order, except while frozen: then it reads and answers nothing."""

    def __init__(self) -> None:
        super().__init__()
        self.frozen = False

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        try:
            while True:
                while self.frozen:
                    await asyncio.sleep(0.05)
                size = int.from_bytes(await reader.readexactly(4), "big")
                request = await reader.readexactly(size)
                while self.frozen:
                    await asyncio.sleep(0.05)
                payload = pack(">i", unpack_from(">i", request, 4)[0]) + self.response_body
                writer.write(pack(">i", len(payload)) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()


async def ready_within(proxy: Proxy, ready: bool, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if (not proxy.readiness_problems()) is ready:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_frozen_broker_makes_the_proxy_not_ready_and_a_thawed_one_ready_again() -> None:
    first = free_port_block(12)
    broker = FreezableBrokerDouble()
    await broker.start(first)
    config = parse_config(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\nconnect_timeout_seconds = 2\n'
        "metadata_refresh_seconds = 3600\nreadiness_probe_seconds = 0.2\nreadiness_timeout_seconds = 0.3\n"
    )
    proxy = Proxy(config)
    await proxy.start()
    try:
        assert await ready_within(proxy, True, 10), proxy.readiness_problems()
        broker.frozen = True
        assert await ready_within(proxy, False, 10), "still ready with the only broker frozen"
        assert "readiness probe" in proxy.readiness_problems()[0]
        broker.frozen = False
        assert await ready_within(proxy, True, 10), proxy.readiness_problems()
    finally:
        broker.frozen = False
        await proxy.stop()
        await broker.stop()
