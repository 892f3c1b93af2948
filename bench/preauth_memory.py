"""Memory a client can make the proxy hold before it authenticates (issue 12, item 3).

Starts quotagate (a subprocess) in front of a broker double that behaves as a SASL listener does
towards the proxy's own Metadata request (it closes the connection unanswered), opens CONNECTIONS
client connections, and has each send a frame announcing FRAME_BYTES slowly (SEND_BYTES of it, in
1 MiB steps), as a client that never authenticates would. Prints the proxy's RSS before, at its
peak, and what became of each connection. Loopback only, bounded in time (~15 s). Figures only.
`--first-describe` sends a DescribeClientQuotas first and the big frame as a Produce (issue 34: the
proxy answered it itself, which lifted the limit; now it closes the connection, as the broker does).

    .venv/bin/python -m bench.preauth_memory [--connections 2] [--proxy-toml 'client_sasl = "none"']
        [--first-describe]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import tempfile
import time
from pathlib import Path

from bench.harness import peak_rss_mb, rss_mb
from tests.support.proxy_fixtures import free_port_block, start_proxy

REPO_ROOT = Path(__file__).resolve().parents[1]


FRAME_BYTES = 100 * 1024 * 1024  # just under max_frame_size's default (socket.request.max.bytes)
SEND_BYTES = 90 * 1024 * 1024
STEP = 1024 * 1024
STEP_PAUSE_SECONDS = 0.1


async def sasl_like_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Reads what comes and answers nothing; a SASL listener closes a Metadata request unanswered."""
    try:
        if await reader.read(65536):
            writer.close()
    except (ConnectionError, asyncio.CancelledError):
        pass


# DescribeClientQuotas v1 (flexible header), no filter component, strict false.
DESCRIBE_EVERYTHING = struct.pack(">ihhih", 15, 48, 1, 2, 3) + b"app" + b"\x00" + b"\x01\x00\x00"


async def slow_frame(port: int, first_describe: bool) -> str:
    """Sends one big frame slowly (a SaslHandshake's, or after a DescribeClientQuotas a Produce's);
    returns how far it got."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header = struct.pack(">ihhih", FRAME_BYTES, 0 if first_describe else 17, 9 if first_describe else 1, 1, 3) + b"app"
    sent = 0
    try:
        if first_describe:
            writer.write(DESCRIBE_EVERYTHING)
            await writer.drain()
            await asyncio.sleep(0.5)
            if reader.at_eof():
                return "closed by the proxy at the DescribeClientQuotas, before the big frame"
        writer.write(header)
        while sent < SEND_BYTES:
            writer.write(b"\0" * STEP)
            await asyncio.wait_for(writer.drain(), 5)
            sent += STEP
            await asyncio.sleep(STEP_PAUSE_SECONDS)
            if reader.at_eof():
                return f"closed by the proxy after {sent // STEP} MiB sent"
    except (ConnectionError, TimeoutError) as exc:
        return f"closed by the proxy after {sent // STEP} MiB sent ({type(exc).__name__})"
    finally:
        writer.close()
    return f"all {sent // STEP} MiB sent, connection still open"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--proxy-toml", default="", help="more [proxy] keys")
    parser.add_argument("--first-describe", action="store_true", help="a DescribeClientQuotas first")
    args = parser.parse_args()
    broker_port = free_port_block(1)
    server = await asyncio.start_server(sasl_like_broker, "127.0.0.1", broker_port)
    with tempfile.TemporaryDirectory() as workdir:
        proxy = await asyncio.to_thread(
            start_proxy, f"127.0.0.1:{broker_port}", Path(workdir), proxy_toml=args.proxy_toml
        )
        try:
            await asyncio.sleep(1.0)
            before = rss_mb(proxy.pid)
            started = time.monotonic()
            outcomes = await asyncio.gather(
                *(slow_frame(proxy.port, args.first_describe) for _ in range(args.connections))
            )
            result = {
                "connections": args.connections,
                "proxy_toml": args.proxy_toml,
                "first_describe": args.first_describe,
                "rss_before_mb": round(before, 1),
                "rss_peak_mb": round(peak_rss_mb(proxy.pid), 1),
                "seconds": round(time.monotonic() - started, 1),
                "outcomes": outcomes,
            }
        finally:
            proxy.stop()
            server.close()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
