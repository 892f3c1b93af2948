"""A client of a broker that is down sees what it would see without the proxy: a refused connect
(so its reconnect backoff applies), until the broker is back."""

from __future__ import annotations

import asyncio

from quotagate.config import parse_config
from quotagate.proxy.server import Proxy
from tests.support.broker_double import BrokerDouble, assert_closed, heartbeat, read_response
from tests.support.proxy_fixtures import free_port_block


async def refused(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return True
    writer.close()
    return False


async def test_a_listener_refuses_connections_while_its_broker_is_down_and_accepts_when_it_is_back() -> None:
    first = free_port_block(12)  # nothing listens on `first` yet
    config = parse_config(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{first}"]\nport = {first + 1}\nmetadata_refresh_seconds = 3600\n'
    )
    proxy = Proxy(config)
    await proxy.start()
    broker = BrokerDouble()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", first + 1)
        writer.write(heartbeat(1))
        await assert_closed(reader)  # the connection already accepted: closed, as before
        attempts = [await refused(first + 1) for _ in range(20)]
        assert all(attempts), "later connects are refused, as by the broker itself"
        assert proxy.metrics.upstream_connect_failures_total._value.get() == 1, "one broker connect, not 21"
        await broker.start(first)
        for _ in range(100):
            if not await refused(first + 1):
                break
            await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", first + 1)
        writer.write(heartbeat(2))
        assert (await read_response(reader))[0] == 2
        writer.close()
    finally:
        await proxy.stop()
        await broker.stop()
