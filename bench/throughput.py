#!/usr/bin/env python3
"""Throughput through quotagate against going direct: the Java perf producer and consumer, same jars.

Runs its own single-broker Kafka (cluster "bench", port 39092) and a quotagate subprocess, then for
each path (direct, proxy) produces N records of 1 KiB with acks=1 and consumes them back. Reports
MB/s, wall time, and the proxy's CPU seconds (utime + stime from /proc) during each phase.
Writes bench/results/latest.json. Figures only; nothing here asserts a target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "scripts"))

from kafka_rig import fresh_cluster, run_tool  # noqa: E402

KAFKA_PORT = 39092
PROXY_PORT = 39392
RECORD_SIZE = 1024
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def produce(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    out = run_tool(
        "producer-perf",
        "--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_SIZE),
        "--throughput", "-1", "--command-property", f"bootstrap.servers={bootstrap}", "acks=1",
        timeout=600,
    ).stdout  # fmt: skip
    summary = [line for line in out.splitlines() if "records sent" in line][-1]
    parts = summary.replace("(", ",").replace(")", ",").split(",")
    mb_per_s = float(next(p for p in parts if "MB/sec" in p).split()[0])
    p50 = float(next(p for p in parts if "50th" in p).split()[0])
    p99 = float(next(p for p in parts if "99th" in p and "99.9th" not in p).split()[0])
    return {"mb_per_s": mb_per_s, "p50_ms": p50, "p99_ms": p99}


def consume(bootstrap: str, topic: str, records: int) -> dict[str, float]:
    out = run_tool(
        "consumer-perf",
        "--bootstrap-server", bootstrap, "--topic", topic, "--messages", str(records), "--timeout", "60000",
        timeout=600,
    ).stdout  # fmt: skip
    rows = [line.split(",") for line in out.splitlines() if "," in line]
    header = [column.strip() for column in rows[0]]
    values = dict(zip(header, (value.strip() for value in rows[-1]), strict=False))
    return {"mb_per_s": float(values["MB.sec"]), "messages": float(values["data.consumed.in.nMsg"])}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=100_000, help="records of 1 KiB per run (default ~100 MB)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds per path; the best counts")
    args = parser.parse_args()
    cluster = fresh_cluster("bench", 1, KAFKA_PORT, controller_base_port=KAFKA_PORT + 1)
    workdir = Path(tempfile.mkdtemp(prefix="quotagate-bench-"))
    config = workdir / "quotagate.toml"
    config.write_text(
        f'[proxy]\nbootstrap_servers = ["127.0.0.1:{KAFKA_PORT}"]\nport = {PROXY_PORT}\n[metrics]\nport = 39390\n'
    )
    log = (workdir / "quotagate.log").open("wb")
    proxy = subprocess.Popen(
        [sys.executable, "-m", "quotagate", "--log-level", "WARNING", "run", "--config", str(config)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    time.sleep(2)
    results: dict[str, object] = {"records": args.records, "record_size": RECORD_SIZE}
    try:
        paths = {"direct": f"127.0.0.1:{KAFKA_PORT}", "quotagate": f"127.0.0.1:{PROXY_PORT}"}
        produce(paths["direct"], "warmup", 20_000)  # JIT and page cache warm-up, not measured
        for round_no in range(args.rounds):
            for name, bootstrap in paths.items():
                topic = f"bench-{name}-{round_no}"
                cpu_before = cpu_seconds(proxy.pid)
                produced = produce(bootstrap, topic, args.records)
                cpu_mid = cpu_seconds(proxy.pid)
                consumed = consume(bootstrap, topic, args.records)
                cpu_after = cpu_seconds(proxy.pid)
                run = {
                    "produce": produced,
                    "consume": consumed,
                    "proxy_cpu_s_produce": round(cpu_mid - cpu_before, 2),
                    "proxy_cpu_s_consume": round(cpu_after - cpu_mid, 2),
                }
                results.setdefault(f"{name}_rounds", []).append(run)  # type: ignore[union-attr]
                best = results.get(name)
                if best is None:
                    results[name] = dict(run)  # a copy: the rounds log keeps what each round measured
                else:  # best throughput per phase, with the CPU of that same phase
                    if produced["mb_per_s"] > best["produce"]["mb_per_s"]:
                        best["produce"], best["proxy_cpu_s_produce"] = produced, run["proxy_cpu_s_produce"]
                    if consumed["mb_per_s"] > best["consume"]["mb_per_s"]:
                        best["consume"], best["proxy_cpu_s_consume"] = consumed, run["proxy_cpu_s_consume"]
        direct, proxied = results["direct"], results["quotagate"]
        results["produce_ratio_vs_direct"] = round(proxied["produce"]["mb_per_s"] / direct["produce"]["mb_per_s"], 3)
        results["consume_ratio_vs_direct"] = round(proxied["consume"]["mb_per_s"] / direct["consume"]["mb_per_s"], 3)
        gb = args.records * RECORD_SIZE / 1e9
        results["proxy_cpu_s_per_gb"] = round(
            (proxied["proxy_cpu_s_produce"] + proxied["proxy_cpu_s_consume"]) / (2 * gb), 2
        )
        results["proxy_peak_rss_mb"] = round(peak_rss_mb(proxy.pid), 1)
    finally:
        proxy.terminate()
        proxy.wait(10)
        cluster.stop()
    print(f"{'path':<10} {'produce MB/s':>13} {'p50 ms':>8} {'p99 ms':>8} {'consume MB/s':>13} {'proxy CPU s':>12}")
    for name in ("direct", "quotagate"):
        r = results[name]
        cpu = r["proxy_cpu_s_produce"] + r["proxy_cpu_s_consume"] if name == "quotagate" else 0.0
        print(
            f"{name:<10} {r['produce']['mb_per_s']:>13.1f} {r['produce']['p50_ms']:>8.0f} "
            f"{r['produce']['p99_ms']:>8.0f} {r['consume']['mb_per_s']:>13.1f} {cpu:>12.2f}"
        )
    print(
        f"produce ratio {results['produce_ratio_vs_direct']}, consume ratio {results['consume_ratio_vs_direct']}, "
        f"proxy CPU {results['proxy_cpu_s_per_gb']} s/GB, peak RSS {results['proxy_peak_rss_mb']} MB"
    )
    out = REPO_ROOT / "bench" / "results" / "latest.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(REPO_ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
