#!/usr/bin/env python3
"""Many concurrent Kafka connections: active for a while, then idle.

Opens N connections to one address (default 200), then each connection runs a closed loop for
--seconds: send a request, wait for its response, send the next, alternating ApiVersions v3 (what
every client sends first on every connection) and Metadata v4 for no topics (what clients send to
learn the brokers; the proxy decodes and rewrites both). Then every connection stays open, idle,
for --idle-seconds, while the process named by --watch-pid (the proxy) is sampled for RSS and CPU.
Prints one JSON object on stdout: requests, requests/s, latency percentiles (all and per API),
and the watched process's figures. Bounded: it stops by itself after --seconds + --idle-seconds
(plus at most --connect-timeout for connecting), whatever the peer does.

Latency here is per request on a loaded, closed-loop connection: with N requests always
outstanding, it is mostly queueing (about N / throughput), so it compares paths under the same
load; it is not an unloaded round-trip time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import struct
import sys
import time
from array import array

from bench.harness import cpu_seconds, rss_mb  # /proc readings, as the orchestrator takes them

API_VERSIONS, METADATA = 18, 3


def _request(api_key: int, version: int, flexible_header: bool, body: bytes) -> bytes:
    """A whole request frame with correlation id 0; the id is patched per send (bytes 8..12)."""
    client_id = b"bench-conns"
    header = struct.pack(">hhih", api_key, version, 0, len(client_id)) + client_id
    if flexible_header:
        header += b"\x00"  # request header v2: no tagged fields
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


# ApiVersions v3 body: client_software_name and _version as compact strings, then no tagged fields.
_NAME, _VERSION = b"quotagate-bench", b"1.0"
API_VERSIONS_V3 = _request(
    API_VERSIONS,
    3,
    True,
    bytes([len(_NAME) + 1]) + _NAME + bytes([len(_VERSION) + 1]) + _VERSION + b"\x00",
)
# Metadata v4 body: an empty topic array (brokers only, no topics), allow_auto_topic_creation false.
METADATA_V4 = _request(METADATA, 4, False, struct.pack(">ib", 0, 0))
REQUESTS = (API_VERSIONS_V3, METADATA_V4)


class LoadConnection(asyncio.Protocol):
    """One closed-loop connection. Latencies go to shared arrays, one per API (index into REQUESTS)."""

    def __init__(self, latencies: tuple[array[float], array[float]], active: asyncio.Event) -> None:
        self.latencies = latencies
        self.active = active  # cleared when the active phase ends: responses then start nothing new
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.correlation_id = 0
        self.kind = 0  # which of REQUESTS is outstanding
        self.sent_at = 0.0
        self.outstanding = False
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def send_next(self) -> None:
        assert self.transport is not None
        self.correlation_id += 1
        frame = bytearray(REQUESTS[self.kind])
        struct.pack_into(">i", frame, 8, self.correlation_id)
        self.sent_at = time.perf_counter()
        self.outstanding = True
        self.transport.write(frame)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while len(self.buffer) >= 4:
            size = struct.unpack_from(">i", self.buffer, 0)[0]
            if len(self.buffer) < 4 + size:
                return
            (correlation_id,) = struct.unpack_from(">i", self.buffer, 4)
            del self.buffer[: 4 + size]
            if correlation_id != self.correlation_id or not self.outstanding:
                raise RuntimeError(f"response {correlation_id} where {self.correlation_id} was due")
            self.latencies[self.kind].append(time.perf_counter() - self.sent_at)
            self.outstanding = False
            self.kind ^= 1
            if self.active.is_set():
                self.send_next()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * len(sorted_values)) - 1))
    return sorted_values[index]


def _summary(values: array[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "count": len(ordered),
        "p50_ms": round(_percentile(ordered, 0.50) * 1000, 3),
        "p99_ms": round(_percentile(ordered, 0.99) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3) if ordered else float("nan"),
    }


async def run(args: argparse.Namespace) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    latencies: tuple[array[float], array[float]] = (array("d"), array("d"))
    active = asyncio.Event()
    active.set()
    watch = args.watch_pid
    rss_before = rss_mb(watch) if watch else None

    async def connect() -> LoadConnection:
        _, protocol = await loop.create_connection(lambda: LoadConnection(latencies, active), args.host, args.port)
        return protocol

    connections = await asyncio.wait_for(
        asyncio.gather(*(connect() for _ in range(args.connections))), args.connect_timeout
    )
    # Everyone starts together, so the measured window has all N connections busy.
    started = time.perf_counter()
    cpu_start = cpu_seconds(watch) if watch else None
    own_cpu_start = time.process_time()
    for connection in connections:
        connection.send_next()
    await asyncio.sleep(args.seconds)
    active.clear()
    elapsed = time.perf_counter() - started
    done = len(latencies[0]) + len(latencies[1])
    cpu_active = cpu_seconds(watch) - cpu_start if watch and cpu_start is not None else None
    own_cpu = time.process_time() - own_cpu_start
    # Drain the last outstanding responses (bounded), then idle with every connection open.
    drain_deadline = loop.time() + 5
    while any(c.outstanding for c in connections) and loop.time() < drain_deadline:
        await asyncio.sleep(0.05)
    idle_cpu_start = cpu_seconds(watch) if watch else None
    await asyncio.sleep(args.idle_seconds)
    still_open = sum(1 for c in connections if not c.lost.done())
    result: dict[str, object] = {
        "connections": args.connections,
        "connections_open_after_idle": still_open,
        "seconds": round(elapsed, 3),
        "requests": done,
        "requests_per_s": round(done / elapsed, 1),
        "latency": _summary(latencies[0] + latencies[1]),
        "latency_api_versions": _summary(latencies[0]),
        "latency_metadata": _summary(latencies[1]),
        "client_cpu_s": round(own_cpu, 2),
    }
    if watch:
        assert idle_cpu_start is not None
        result.update(
            {
                "watched_rss_before_mb": rss_before,
                "watched_rss_idle_mb": round(rss_mb(watch), 1),
                "watched_cpu_s_active": round(cpu_active or 0.0, 3),
                "watched_cpu_s_idle": round(cpu_seconds(watch) - idle_cpu_start, 3),
                "idle_seconds": args.idle_seconds,
            }
        )
    for connection in connections:
        if connection.transport is not None:
            connection.transport.close()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0, help="active phase")
    parser.add_argument("--idle-seconds", type=float, default=2.0, help="idle phase, connections open")
    parser.add_argument("--connect-timeout", type=float, default=20.0)
    parser.add_argument("--watch-pid", type=int, default=0, help="process to sample (the proxy); 0: none")
    args = parser.parse_args()
    try:
        import uvloop

        result = uvloop.run(run(args))
    except ImportError:  # same figures, a slower client: only when run outside the project venv
        result = asyncio.run(run(args))
    json.dump(result, sys.stdout)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
