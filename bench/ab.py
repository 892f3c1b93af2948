#!/usr/bin/env python3
"""Two versions of quotagate in the same rounds, beside haproxy and the uvloop floor: CPU per request.

Comparing two versions by alternating whole `make bench` runs compares them across minutes of
machine drift; here both run in every round, in a rotated order with haproxy and
bench/floor_forwarder.py (the least a Python proxy on uvloop does per request), on one broker:

- haproxy: TCP mode, the L4 hop the targets are stated against;
- floor: forward each read, nothing else: what the asyncio glue costs before any Kafka logic;
- A and B: quotagate from two package directories (default: this checkout for both, which measures
  the noise), each with quotas that never bind (every request resolved and charged), set through the Admin
  API (kafka-configs.sh against the proxy, as operators set them), and with
  `--usage` usage records on as operators run them (v2 aggregates to Parquet).

Workloads: the small produce requests of `make bench` (4 producers, one 100 B record per request),
and with `--workloads small_requests,connections` also its 200 connections of ApiVersions/Metadata.
Per path and round: CPU µs per request, user and system, from /proc; per round, each path's CPU
per request over haproxy's and B's over A's. Writes bench/results/ab.json. Uses the bench's ports:
not at the same time as bench/run.py.

    python -m bench.ab --b ../other-checkout          # A: this checkout, B: the other one
    python -m bench.ab --rounds 5 --records 10000
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import harness, report, workloads
from bench.harness import HOST, BenchPath, Child
from bench.run import measured

RESULTS = harness.REPO_ROOT / "bench" / "results"
HAPROXY, FLOOR, A, B = "haproxy", "floor", "A", "B"
BASES = {A: 16320, B: 16310}  # bootstrap on base, broker 1 on base + 1, metrics on base + 9
WORKLOADS = ("small_requests", "connections")


def start_floor(workdir: Path) -> Child:
    script = harness.REPO_ROOT / "bench" / "floor_forwarder.py"
    child = Child(FLOOR, [sys.executable, str(script), str(harness.FLOOR_PORT), str(harness.KAFKA_FLOOR_LISTENER_PORT)],
                  workdir / "floor.log")  # fmt: skip
    deadline = time.monotonic() + 20
    while not harness.listening(harness.FLOOR_PORT):
        child.check_alive()
        if time.monotonic() > deadline:
            raise harness.BenchError(f"the floor forwarder did not listen; log: {child.log_path}")
        time.sleep(0.1)
    return child


def run_workload(path: BenchPath, workload: str, args: argparse.Namespace) -> dict[str, Any]:
    """One workload on one path: its result, the requests it made and, for the connections, the
    proxy's CPU while they were active (sampled by conn_load itself; None: the whole run's)."""
    if workload == "small_requests":
        out = workloads.small_requests(path, args.producers, args.records)
        return {"result": out, "requests": out["requests"], "active_cpu_s": None}
    out = workloads.connections(path, 200, args.connection_seconds, 1)
    return {"result": out, "requests": out["requests"], "active_cpu_s": out["watched_cpu_s_active"]}


def per_request_us(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "cpu": report.summarize([r["cpu_us"] for r in runs], 2),
        "user": report.summarize([r["user_us"] for r in runs], 2),
        "system": report.summarize([r["system_us"] for r in runs], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", type=Path, default=harness.REPO_ROOT, help="package directory of version A")
    parser.add_argument("--b", type=Path, default=harness.REPO_ROOT, help="package directory of version B")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=5000, help="records per producer per round (small requests)")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--connection-seconds", type=float, default=5.0)
    parser.add_argument("--workloads", default="small_requests", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    parser.add_argument("--usage", action="store_true", help="A and B with usage records on (v2 aggregates to Parquet)")
    parser.add_argument("--out", type=Path, default=RESULTS / "ab.json")
    args = parser.parse_args()
    selected = [w for w in args.workloads.split(",") if w]
    if unknown := set(selected) - set(WORKLOADS):
        parser.error(f"unknown workloads: {', '.join(sorted(unknown))}")

    workdir = Path(tempfile.mkdtemp(prefix="quotagate-ab-"))
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {w: {} for w in selected}
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, harness.TMPFS_WORKDIR, True)
        cluster = harness.start_broker(harness.TMPFS_WORKDIR)
        stack.callback(cluster.stop)
        children = {HAPROXY: harness.start_haproxy(workdir)}
        stack.callback(children[HAPROXY].stop)
        children[FLOOR] = start_floor(workdir)
        stack.callback(children[FLOOR].stop)
        for name, package in ((A, args.a), (B, args.b)):
            base = BASES[name]
            usage = workdir / f"{name}-usage" if args.usage else None
            config = harness.quotagate_config(base, quotas=True, usage_directory=usage)
            if "broker_node_ids" not in (package / "quotagate" / "config" / "settings.py").read_text():
                # A version from before the key: its broker ports did not have to be declared.
                config = config.replace("broker_node_ids = [1, 8]\n", "")
            children[name] = harness.launch_quotagate(workdir, name, config, base + 9, base + 1, package)
            stack.callback(children[name].stop)  # at once: a later start that fails must not leave it running
            harness.set_non_binding_quotas(f"{HOST}:{base}")
        harness.create_topics({"bench-small": 1 << 30})
        paths = [
            BenchPath(HAPROXY, f"{HOST}:{harness.HAPROXY_PORT}", harness.HAPROXY_PORT, children[HAPROXY].pid),
            BenchPath(FLOOR, f"{HOST}:{harness.FLOOR_PORT}", harness.FLOOR_PORT, children[FLOOR].pid),
            *(BenchPath(n, f"{HOST}:{BASES[n]}", BASES[n], children[n].pid, BASES[n] + 9) for n in (A, B)),
        ]
        known_pids = [p for p in (*(n.pid for n in cluster.nodes), *(c.pid for c in children.values())) if p]
        for path in paths:  # every path's first connections and the broker's JIT: not measured
            workloads.small_requests(path, 2, 1000)
        for workload in selected:
            for round_no in range(args.rounds):
                shift = round_no % len(paths)
                for path in paths[shift:] + paths[:shift]:
                    out = measured(path, functools.partial(run_workload, path, workload, args), known_pids)
                    requests = float(out["requests"])
                    cpu_s = out["active_cpu_s"] or out["path_cpu_s"]
                    user_share = out["path_user_cpu_s"] / out["path_cpu_s"] if out["path_cpu_s"] else 0.0
                    run = {
                        "round": round_no,
                        "requests": requests,
                        "cpu_us": 1e6 * cpu_s / requests,
                        "user_us": 1e6 * cpu_s * user_share / requests,
                        "system_us": 1e6 * cpu_s * (1 - user_share) / requests,
                        "foreign_cpu_s": out["foreign_cpu_s"],
                        "result": out["result"],
                    }
                    raw[workload].setdefault(path.name, []).append(run)
                    print(f"{workload} r{round_no} {path.name}: {run['cpu_us']:.1f} µs/request "
                          f"(user {run['user_us']:.1f}, system {run['system_us']:.1f}), "
                          f"foreign CPU {out['foreign_cpu_s']} s", flush=True)  # fmt: skip
    results: dict[str, Any] = {"a": str(args.a), "b": str(args.b), "rounds": args.rounds, "workloads": {}}
    for workload, by_path in raw.items():
        cpu = {name: [{"cpu": r["cpu_us"]} for r in runs] for name, runs in by_path.items()}
        results["workloads"][workload] = {
            "per_request_us": {name: per_request_us(runs) for name, runs in by_path.items()},
            "vs_haproxy": {n: report.paired(cpu, n, HAPROXY, lambda r: r["cpu"], "/") for n in (FLOOR, A, B)},
            "b_over_a": report.paired(cpu, B, A, lambda r: r["cpu"], "/"),
            "raw": by_path,
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nA = {args.a}\nB = {args.b}")
    for workload, summary in results["workloads"].items():
        print(f"\n{workload}: CPU µs per request, median [min..max] over {args.rounds} rounds")
        for name, figures in summary["per_request_us"].items():
            cpu, user, system = figures["cpu"], figures["user"]["median"], figures["system"]["median"]
            ratio = summary["vs_haproxy"].get(name)
            vs = f"   {ratio['median']:.2f}× haproxy [{ratio['min']:.2f}..{ratio['max']:.2f}]" if ratio else ""
            print(f"  {name:8} {cpu['median']:6.1f} [{cpu['min']:.1f}..{cpu['max']:.1f}]  "
                  f"user {user:5.1f}  system {system:5.1f}{vs}")  # fmt: skip
        b_over_a = summary["b_over_a"]
        print(f"  B / A    {b_over_a['median']:.3f} [{b_over_a['min']:.3f}..{b_over_a['max']:.3f}]")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
