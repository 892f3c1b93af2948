"""Memory and throughput per distinct client id (issue 26, item 4).

Starts quotagate (a subprocess) under a `<default>` client-id quota that never binds, in front of a
broker double that answers every request at once (an empty Produce v3 response: the proxy's memory
is what is measured, not the broker's). CONNECTIONS clients send IDS produce requests (acks=1), each
with a client id of its own, ID_BYTES long, one at a time per connection. Prints the proxy's RSS
before, after every BLOCK ids (with the requests per second of that block), at the end, and while
the idle entities expire (buckets idle for 60 s are dropped every 30 s). Loopback only; figures
only, no assertion.

    .venv/bin/python bench/client_id_memory.py [--ids 30000] [--id-bytes 32000] [--idle-seconds 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import tempfile
import time
from pathlib import Path

from bench.harness import rss_mb
from tests.support.proxy_fixtures import free_port_block, start_proxy

CONNECTIONS = 8
BLOCK = 5000
QUOTA_TOML = '[[quotas]]\nclient_id = "<default>"\nproducer_byte_rate = 1000000000000\n'


async def answering_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers each request with its correlation id and eight zero bytes: an empty Produce v3
    response (no topics, throttle_time_ms 0). Other requests (the proxy's own) get the same."""
    try:
        while True:
            size = struct.unpack(">i", await reader.readexactly(4))[0]
            request = await reader.readexactly(size)
            writer.write(struct.pack(">ii", 12, struct.unpack_from(">i", request, 4)[0]) + bytes(8))
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()


def produce_request(correlation_id: int, client_id: bytes) -> bytes:
    """Produce v3, acks=1, no topics: the proxy charges its size and forwards it."""
    header = struct.pack(">hhih", 0, 3, correlation_id, len(client_id)) + client_id
    body = struct.pack(">hhii", -1, 1, 30_000, 0)  # transactional_id null, acks, timeout, no topics
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


async def client(port: int, ids: range, id_bytes: int, done: list[float]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for i in ids:
        client_id = f"{i:08d}-".encode().ljust(id_bytes, b"x")
        writer.write(produce_request(i, client_id))
        size = struct.unpack(">i", await reader.readexactly(4))[0]
        await reader.readexactly(size)
        done.append(time.monotonic())
    writer.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ids", type=int, default=30_000)
    parser.add_argument("--id-bytes", type=int, default=32_000)
    parser.add_argument("--idle-seconds", type=float, default=100.0, help="how long to watch the idle expiry")
    args = parser.parse_args()
    broker_port = free_port_block(1)
    server = await asyncio.start_server(answering_broker, "127.0.0.1", broker_port)
    with tempfile.TemporaryDirectory() as workdir:
        proxy = await asyncio.to_thread(start_proxy, f"127.0.0.1:{broker_port}", Path(workdir), QUOTA_TOML)
        proxy_log = ""
        try:
            await asyncio.sleep(2.0)
            before = rss_mb(proxy.pid)
            done: list[float] = []
            started = time.monotonic()
            share = args.ids // CONNECTIONS
            clients = [
                asyncio.create_task(client(proxy.port, range(c * share, (c + 1) * share), args.id_bytes, done))
                for c in range(CONNECTIONS)
            ]
            blocks = []
            block_start, counted = started, 0
            while not all(task.done() for task in clients):
                await asyncio.sleep(0.2)
                while len(done) - counted >= BLOCK:
                    counted += BLOCK
                    end = done[counted - 1]
                    rate = round(BLOCK / (end - block_start))
                    blocks.append({"ids": counted, "requests_per_s": rate, "rss_mb": rss_mb(proxy.pid)})
                    block_start = end
            await asyncio.gather(*clients)
            after = rss_mb(proxy.pid)
            idle = []
            idle_started = time.monotonic()
            while time.monotonic() - idle_started < args.idle_seconds:
                await asyncio.sleep(10)
                idle.append({"idle_s": round(time.monotonic() - idle_started), "rss_mb": rss_mb(proxy.pid)})
            result = {
                "ids": len(done),
                "id_bytes": args.id_bytes,
                "rss_before_mb": round(before, 1),
                "rss_after_mb": round(after, 1),
                "growth_mb": round(after - before, 1),
                "seconds": round(done[-1] - started, 1),
                "blocks": blocks,
                "idle": idle,
                "rss_after_idle_mb": idle[-1]["rss_mb"] if idle else None,
            }
        finally:
            proxy.stop()
            proxy_log = proxy.log_text()
            server.close()
    if "Traceback" in proxy_log:
        print(proxy_log[-3000:], file=sys.stderr)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
