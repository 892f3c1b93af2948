#!/usr/bin/env python3
"""Workers and shared quotas: quotagate with 1 and 2 workers, local and shared through Redis.

Four quotagates in front of one broker, each with the non-binding quotas of bench/run.py (every
request resolved and charged, nothing throttled):

- local_1w: one process, local buckets (today's default);
- local_2w: `workers = 2`, no Redis (each worker enforces 1/2 alone);
- shared_1w: one process, buckets leased from Redis;
- shared_2w: `workers = 2`, buckets leased from Redis.

Workloads on each: produce (Java perf test, 1 KiB records, MB/s) and small requests (4 producers,
one 100 B record per request, requests/s). From the proxies' own counters: Redis commands per
second and per 10 000 requests. Writes bench/results/shared.json and prints a table. Figures only.

    python -m bench.shared [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import harness, workloads
from bench.harness import HOST, KAFKA_PORT, NON_BINDING_QUOTAS, BenchPath, Child

RESULTS = harness.REPO_ROOT / "bench" / "results"
REDIS_PORT = 16379
# Bootstrap on base, broker 1 on base + 1, metrics on base + 9 (+ worker).
SETUPS = {
    "local_1w": (16400, 1, False),
    "local_2w": (16420, 2, False),
    "shared_1w": (16440, 1, True),
    "shared_2w": (16460, 2, True),
}


def log(message: str) -> None:
    print(f"[bench-shared {time.strftime('%H:%M:%S')}] {message}", flush=True)


def start_redis(workdir: Path, port: int = REDIS_PORT, extra_args: tuple[str, ...] = ()) -> Child:
    """A redis-server on HOST:port, no persistence, accepting connections (also bench/redis_cost.py's)."""
    redis = Child(
        f"redis-{port}",
        ["redis-server", "--port", str(port), "--bind", HOST, "--save", "", "--appendonly", "no", *extra_args],
        workdir / f"redis-{port}.log",
        cwd=workdir,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        redis.check_alive()
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
            return redis
        time.sleep(0.1)
    raise harness.BenchError(f"redis-server on {port} did not start")


def start_quotagate(workdir: Path, name: str) -> Child:
    base, workers, shared = SETUPS[name]
    config = workdir / f"{name}.toml"
    config.write_text(
        f'[proxy]\nbootstrap_servers = ["{HOST}:{KAFKA_PORT}"]\nlisten_host = "{HOST}"\nport = {base}\n'
        f"broker_port_base = {base}\nbroker_node_ids = [1, 8]\nworkers = {workers}\n"
        f'[metrics]\nhost = "{HOST}"\nport = {base + 9}\n'
        + (f'[cluster]\nredis_url = "redis://{HOST}:{REDIS_PORT}/0"\n' if shared else "")
        + NON_BINDING_QUOTAS
    )
    cmd = [sys.executable, "-m", "quotagate", "--log-level", "WARNING", "run", "--config", str(config)]
    child = Child(name, cmd, workdir / f"{name}.log", cwd=workdir)
    deadline = time.monotonic() + 30
    for worker in range(workers):
        while True:
            child.check_alive()
            with contextlib.suppress(OSError):
                url = f"http://{HOST}:{base + 9 + worker}/readyz"
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        break
            if time.monotonic() > deadline:
                raise harness.BenchError(f"{name} worker {worker} not ready after 30s; log: {child.log_path}")
            time.sleep(0.2)
    return child


def counters(name: str) -> dict[str, float]:
    """The proxy's counters summed over its workers (one /metrics per worker)."""
    base, workers, _ = SETUPS[name]
    total: dict[str, float] = {"requests": 0.0, "redis_calls": 0.0}
    for worker in range(workers):
        metrics = harness.scrape(base + 9 + worker)
        total["requests"] += harness.all_requests(metrics)
        total["redis_calls"] += metrics.get("quotagate_cluster_redis_calls_total", 0.0)
    return total


def measure(name: str, run: Any) -> dict[str, Any]:
    before, started = counters(name), time.monotonic()
    result = run()
    after, wall = counters(name), time.monotonic() - started
    requests = after["requests"] - before["requests"]
    calls = after["redis_calls"] - before["redis_calls"]
    return {
        **result,
        "wall_s": round(wall, 2),
        "proxy_requests": requests,
        "redis_calls": calls,
        "redis_calls_per_s": round(calls / wall, 1),
        "redis_calls_per_10k_requests": round(calls / requests * 10_000, 1) if requests else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer records (about 2 minutes with the Kafka start)")
    parser.add_argument("--out", type=Path, default=RESULTS / "shared.json")
    args = parser.parse_args()
    if shutil.which("redis-server") is None:
        raise SystemExit("redis-server is not installed: run `make redis-tools`")
    produce_records = 150_000 if args.quick else 600_000
    small_each = 3_000 if args.quick else 12_000
    workdir = Path(subprocess.check_output(["mktemp", "-d", "/tmp/quotagate-bench-shared-XXXX"], text=True).strip())
    results: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, harness.TMPFS_WORKDIR, True)
        cluster = harness.start_broker(harness.TMPFS_WORKDIR)
        stack.callback(cluster.stop)
        redis = start_redis(workdir)
        stack.callback(redis.stop)
        proxies = {}
        for name in SETUPS:
            proxies[name] = start_quotagate(workdir, name)
            stack.callback(proxies[name].stop)
        harness.create_topics({"bench-1k": 4_000_000_000, "bench-small": 500_000_000})
        direct = BenchPath("direct", f"{HOST}:{KAFKA_PORT}", KAFKA_PORT)
        workloads.produce(direct, "bench-1k", 100_000)  # warms the broker
        for name in SETUPS:
            base = SETUPS[name][0]
            path = BenchPath(name, f"{HOST}:{base}", base)
            workloads.produce(path, "bench-1k", 20_000)  # warms the path
            produce = measure(name, lambda p=path: workloads.produce(p, "bench-1k", produce_records))
            small = measure(name, lambda p=path: workloads.small_requests(p, 4, small_each))
            steady = produce["steady"]
            results[name] = {"produce": produce, "small_requests": small}
            log(
                f"{name}: produce {steady['mb_per_s']:.1f} MB/s, small {small['requests_per_s']:.0f} req/s, "
                f"Redis {small['redis_calls_per_s']:.0f} calls/s = {small['redis_calls_per_10k_requests']} "
                "per 10k requests"
            )
        for child in proxies.values():
            child.check_alive()
    summary = {
        name: {
            "produce_mb_per_s": r["produce"]["steady"]["mb_per_s"],
            "small_requests_per_s": r["small_requests"]["requests_per_s"],
            "redis_calls_per_s_small": r["small_requests"]["redis_calls_per_s"],
            "redis_calls_per_10k_requests_small": r["small_requests"]["redis_calls_per_10k_requests"],
            "redis_calls_per_10k_requests_produce": r["produce"]["redis_calls_per_10k_requests"],
        }
        for name, r in results.items()
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"summary": summary, "raw": results, "quick": args.quick}, indent=2) + "\n")
    print(f"\n{'setup':<10} {'produce MB/s':>13} {'small req/s':>12} {'Redis calls/s':>14} {'per 10k req':>12}")
    for name, s in summary.items():
        print(
            f"{name:<10} {s['produce_mb_per_s']:>13.1f} {s['small_requests_per_s']:>12.0f} "
            f"{s['redis_calls_per_s_small']:>14.0f} {s['redis_calls_per_10k_requests_small'] or 0:>12.1f}"
        )
    print(f"\nwritten to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
