#!/usr/bin/env python3
"""What one lease call costs Redis, on one server and on a Redis Cluster of 3 primaries.

The proxies' Redis work is one Lua script call (quotagate.proxy.cluster.LEASE_SCRIPT) per busy
(entity, process, quota key) triple and lease period: about 10 calls/s per triple at the default
lease_seconds = 0.1 (docs/scaling.md). This drives that script straight at Redis, with the proxy's
own key format (hash-tagged per bucket) over BUCKETS distinct buckets, in pipelines as the sync
task sends them, and reads each redis-server's CPU from /proc:

- Redis CPU microseconds per call, on one server and on each primary of the cluster;
- how evenly the buckets spread over the primaries (calls per primary, max over mean);
- from these, the busy triples one primary core carries, and N primaries.

The client here is Python and is the bottleneck on a shared 2-core machine: calls/s achieved are
the driver's, not Redis's limit; the CPU per call is Redis's own. Writes
bench/results/redis-cost.json and prints a table. Figures only.

    python bench/redis_cost.py [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench import harness, shared
from bench.harness import HOST, Child
from quotagate.config.settings import ClusterConfig
from quotagate.proxy.cluster import LEASE_SCRIPT, SharedQuotas
from quotagate.proxy.metrics import ProxyMetrics

RESULTS = harness.REPO_ROOT / "bench" / "results"
# Clear of bench/shared.py (16379, 16400-16479) and the other benches (16092-16399), below the ephemeral range.
STANDALONE_PORT = 16490
CLUSTER_PORTS = (16491, 16492, 16493)  # cluster bus: + 10
BUCKETS = 3000
PIPELINE = 100  # calls per round trip, as one tick's pipeline of a busy process
CONCURRENCY = 4
CALLS_PER_TRIPLE_PER_S = 10.0  # one renewal per lease period of 0.1 s (docs/scaling.md)


def log(message: str) -> None:
    print(f"[bench-redis-cost {time.strftime('%H:%M:%S')}] {message}", flush=True)


def start_redis(workdir: Path, port: int, cluster: bool) -> Child:
    extra = (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        f"nodes-{port}.conf",
        "--cluster-port",
        str(port + 10),
    )
    return shared.start_redis(workdir, port, extra if cluster else ())


def bucket_keys() -> list[str]:
    """The proxy's own keys for BUCKETS buckets (SharedQuotas._key: hash-tagged per bucket)."""
    shared = SharedQuotas(ClusterConfig(), 1, ProxyMetrics(), time.monotonic)
    return [shared._key(("producer_byte_rate", "client", None, f"client-{i}")) for i in range(BUCKETS)]


async def drive(client: Any, keys: list[str], seconds: float) -> int:
    """Lease calls over `keys`, PIPELINE per round trip from CONCURRENCY tasks, for `seconds`."""
    sha = await client.script_load(LEASE_SCRIPT)
    calls = 0
    deadline = time.monotonic() + seconds

    async def worker(offset: int) -> None:
        nonlocal calls
        index = offset
        while time.monotonic() < deadline:
            pipe = client.pipeline(transaction=False)
            for _ in range(PIPELINE):
                key = keys[index % len(keys)]
                index += CONCURRENCY
                # rate 100 kB/s, burst 100 kB; give back a lease of 10 kB, charge 9 kB, ask 10 kB.
                pipe.execute_command("EVALSHA", sha, 1, key, "100000.0", "100000.0", "10000.0", "9000.0", "10000.0")
            await pipe.execute()
            calls += PIPELINE

    await asyncio.gather(*(worker(i) for i in range(CONCURRENCY)))
    return calls


def measure(
    name: str, servers: dict[int, Child], client_factory: Any, keys: list[str], seconds: float
) -> dict[str, Any]:
    cpu_before = {port: harness.cpu_seconds(child.pid) for port, child in servers.items()}
    started = time.monotonic()

    async def run() -> int:
        client = client_factory()
        try:
            return await drive(client, keys, seconds)
        finally:
            await client.aclose()

    calls = asyncio.run(run())
    wall = time.monotonic() - started
    cpu = {port: harness.cpu_seconds(child.pid) - cpu_before[port] for port, child in servers.items()}
    total_cpu = sum(cpu.values())
    us_per_call = total_cpu / calls * 1e6
    result = {
        "calls": calls,
        "calls_per_s": round(calls / wall),
        "redis_cpu_s": {str(port): round(value, 2) for port, value in cpu.items()},
        "redis_cpu_us_per_call": round(us_per_call, 2),
        # One core's worth of calls/s at this CPU per call, and the busy triples that is.
        "calls_per_s_per_core": round(1e6 / us_per_call),
        "triples_per_core": round(1e6 / us_per_call / CALLS_PER_TRIPLE_PER_S),
    }
    log(f"{name}: {calls / wall:.0f} calls/s, Redis {us_per_call:.1f} us CPU per call, CPU per server {cpu}")
    return result


def key_spread(ports: tuple[int, ...], keys: list[str]) -> dict[str, Any]:
    """How many of the buckets each primary holds (CLUSTER KEYSLOT and the slot map)."""
    import redis

    with redis.RedisCluster(host=HOST, port=ports[0]) as client:
        per_node: dict[str, int] = {}
        for key in keys:
            node = client.get_node_from_key(key)
            per_node[node.name] = per_node.get(node.name, 0) + 1
    mean = len(keys) / len(per_node)
    return {"buckets_per_primary": per_node, "max_over_mean": round(max(per_node.values()) / mean, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="per measurement")
    parser.add_argument("--out", type=Path, default=RESULTS / "redis-cost.json")
    args = parser.parse_args()
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        raise SystemExit("redis-server is not installed: run `make redis-tools`")
    import redis.asyncio as aioredis
    from redis.asyncio.cluster import RedisCluster

    keys = bucket_keys()
    workdir = Path(tempfile_dir())
    results: dict[str, Any] = {"buckets": BUCKETS, "pipeline": PIPELINE, "seconds": args.seconds}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)
        single = start_redis(workdir, STANDALONE_PORT, cluster=False)
        stack.callback(single.stop)
        nodes = {port: start_redis(workdir, port, cluster=True) for port in CLUSTER_PORTS}
        for node in nodes.values():
            stack.callback(node.stop)
        subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"{HOST}:{port}" for port in CLUSTER_PORTS), "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        deadline = time.monotonic() + 20
        while (
            subprocess.run(
                ["redis-cli", "-h", HOST, "-p", str(CLUSTER_PORTS[0]), "cluster", "info"],
                capture_output=True,
                text=True,
            ).stdout.find("cluster_state:ok")
            < 0
        ):
            if time.monotonic() > deadline:
                raise harness.BenchError("the bench Redis Cluster did not reach cluster_state:ok")
            time.sleep(0.2)
        results["single"] = measure(
            "one Redis",
            {STANDALONE_PORT: single},
            lambda: aioredis.Redis(host=HOST, port=STANDALONE_PORT),
            keys,
            args.seconds,
        )
        results["cluster_3_primaries"] = measure(
            "Redis Cluster, 3 primaries",
            nodes,
            lambda: RedisCluster(host=HOST, port=CLUSTER_PORTS[0]),
            keys,
            args.seconds,
        )
        results["cluster_3_primaries"].update(key_spread(CLUSTER_PORTS, keys))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    for name in ("single", "cluster_3_primaries"):
        r = results[name]
        print(
            f"{name:<20} {r['calls_per_s']:>8} calls/s (driver-bound)  "
            f"{r['redis_cpu_us_per_call']:>6.1f} us Redis CPU/call  -> {r['calls_per_s_per_core']:>7} calls/s = "
            f"{r['triples_per_core']:>6} busy triples per primary core"
        )
    print(f"buckets per primary: {results['cluster_3_primaries']['buckets_per_primary']}")
    print(f"\nwritten to {args.out}")
    return 0


def tempfile_dir() -> str:
    return subprocess.check_output(["mktemp", "-d", "/tmp/quotagate-bench-redis-cost-XXXX"], text=True).strip()


if __name__ == "__main__":
    sys.exit(main())
