#!/usr/bin/env python3
"""Figures a user can hold against other proxies' published ones: direct vs haproxy vs quotagate.

At three fixed produce rates (1 KiB records) on one broker, for each path:

- end-to-end latency, produce to consume: a producer at the fixed rate stamps each record with
  the time it was handed to the client, a consumer of the same topic (another process, the same
  monotonic clock) reads it back; avg and p99 per round, the median over rounds and their spread
  (min-max), and what each proxy adds over direct in the same round;
- the proxy's CPU per MB/s moved, in millicores per MB/s (Kroxylicious publishes ~25 mCPU per
  MB/s, conservative): the proxy process's CPU seconds over the run, per MB produced through it
  (each record also goes back out to the consumer, as in a produce-and-consume pipeline).

quotagate runs with non-binding quotas (every request resolved and charged, none throttled), as
bench/run.py's quotagate_quota. Paths are rotated within each round. Writes
bench/results/compare.json and prints a table. Figures only: nothing is asserted.

    python bench/compare.py [--quick] [--rounds N] [--seconds S]

The client side (bench/compare.py --client ...) is this file run as a subprocess per measurement.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"
RECORD = 1024
RATES = (1_000, 5_000, 10_000)  # records/s: ~1, 5 and 10 MB/s
WARMUP_SECONDS = 2.0  # latencies of the first seconds (connections, the consumer's first fetch) dropped
TOPIC = "bench-e2e"
STAMP = struct.Struct(">q")  # time.monotonic_ns() when the record was handed to the producer


# --------------------------------------------------------------------------- the client side


def produce_at_rate(bootstrap: str, rate: int, seconds: float, ready: Any, counts: Any) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "client.id": "bench-e2e", "acks": 1, "linger.ms": 5, "batch.size": 65536}
    )
    padding = os.urandom(RECORD - STAMP.size)
    ready.wait(30)
    started = time.monotonic()
    sent = 0
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) - sent
        for _ in range(due):
            try:
                producer.produce(TOPIC, STAMP.pack(time.monotonic_ns()) + padding)
                sent += 1
            except BufferError:
                producer.poll(0.001)
                break
        producer.poll(0)
        time.sleep(0.0005)
    producer.flush(30)
    counts.value = sent


def client(bootstrap: str, rate: int, seconds: float) -> dict[str, Any]:
    """Consumes TOPIC from its end while a producer process writes at `rate`; the latencies."""
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-e2e", "enable.auto.commit": False, "client.id": "bench-e2e"}
    )
    consumer.assign([TopicPartition(TOPIC, 0, OFFSET_END)])
    consumer.consume(1, timeout=2.0)  # connected, end offset resolved
    ready, counts = multiprocessing.Event(), multiprocessing.Value("q", 0)
    producer = multiprocessing.Process(target=produce_at_rate, args=(bootstrap, rate, seconds, ready, counts))
    producer.start()
    ready.set()
    started_ns = time.monotonic_ns()
    warmup_ns = started_ns + int(WARMUP_SECONDS * 1e9)
    latencies_ms: list[float] = []
    received = 0
    deadline = time.monotonic() + seconds + 15
    while time.monotonic() < deadline:
        # poll() returns as soon as one record is there; consume(n, timeout) would wait for n or the timeout.
        first = consumer.poll(0.1)
        for message in ([first] if first is not None else []) + consumer.consume(1000, timeout=0):
            if message.error() is not None or len(message.value()) != RECORD:
                continue
            now = time.monotonic_ns()
            stamp = STAMP.unpack_from(message.value())[0]
            received += 1
            if stamp >= warmup_ns:
                latencies_ms.append((now - stamp) / 1e6)
        if not producer.is_alive() and received >= counts.value:
            break
    producer.join(30)
    consumer.close()
    latencies_ms.sort()
    return {
        "rate": rate,
        "sent": counts.value,
        "received": received,
        "avg_ms": round(statistics.fmean(latencies_ms), 3) if latencies_ms else None,
        "p50_ms": round(latencies_ms[len(latencies_ms) // 2], 3) if latencies_ms else None,
        "p99_ms": round(latencies_ms[int(len(latencies_ms) * 0.99)], 3) if latencies_ms else None,
    }


# --------------------------------------------------------------------------- the orchestrator


def log(message: str) -> None:
    print(f"[bench-compare {time.strftime('%H:%M:%S')}] {message}", flush=True)


def measure(path: Any, rate: int, seconds: float) -> dict[str, Any]:
    from bench import harness

    cpu_before = harness.cpu_seconds(path.pid) if path.pid else 0.0
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, __file__, "--client", path.bootstrap, "--rate", str(rate), "--seconds", str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 120,
        check=True,
    ).stdout
    wall = time.monotonic() - started
    result = json.loads(out.strip().splitlines()[-1])
    if path.pid:
        cpu = harness.cpu_seconds(path.pid) - cpu_before
        megabytes = result["sent"] * RECORD / 1e6
        result["proxy_cpu_s"] = round(cpu, 3)
        # millicores per MB/s = (cpu / wall * 1000) / (MB / wall)
        result["mcpu_per_mb_per_s"] = round(cpu * 1000 / megabytes, 1) if megabytes else None
    result["wall_s"] = round(wall, 2)
    return result


def spread(values: list[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def summarise(rounds: list[dict[str, dict[str, dict[str, Any]]]], paths: list[str]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for rate in RATES:
        per_path: dict[str, Any] = {}
        for name in paths:
            runs = [r[name][str(rate)] for r in rounds]
            entry: dict[str, Any] = {
                "avg_ms": spread([run["avg_ms"] for run in runs]),
                "p99_ms": spread([run["p99_ms"] for run in runs]),
                "received_over_sent": round(sum(r["received"] for r in runs) / max(1, sum(r["sent"] for r in runs)), 4),
            }
            if name != "direct":
                entry["avg_added_ms"] = spread(
                    [r[name][str(rate)]["avg_ms"] - r["direct"][str(rate)]["avg_ms"] for r in rounds]
                )
                entry["p99_added_ms"] = spread(
                    [r[name][str(rate)]["p99_ms"] - r["direct"][str(rate)]["p99_ms"] for r in rounds]
                )
                entry["mcpu_per_mb_per_s"] = spread([run["mcpu_per_mb_per_s"] for run in runs])
            per_path[name] = entry
        summary[str(rate)] = per_path
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 rounds of 6 s (about 4 minutes with the Kafka start)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=10.0, help="per path, rate and round")
    parser.add_argument("--out", type=Path, default=RESULTS / "compare.json")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    parser.add_argument("--rate", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        print(json.dumps(client(args.client, args.rate, args.seconds)))
        return 0
    rounds_count, seconds = (2, 6.0) if args.quick else (args.rounds, args.seconds)

    from bench import harness
    from bench.harness import HOST, BenchPath

    if harness.listening(harness.KAFKA_PORT) or harness.TMPFS_WORKDIR.exists():
        # The benches share these ports and the broker's tmpfs folder: starting would end the other run's broker.
        raise SystemExit(f"another bench is running (port {harness.KAFKA_PORT} or {harness.TMPFS_WORKDIR} in use)")
    workdir = Path(subprocess.check_output(["mktemp", "-d", "/tmp/quotagate-bench-compare-XXXX"], text=True).strip())
    load_before = os.getloadavg()
    rounds: list[dict[str, dict[str, dict[str, Any]]]] = []
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, workdir, True)
        stack.callback(shutil.rmtree, harness.TMPFS_WORKDIR, True)
        cluster = harness.start_broker(harness.TMPFS_WORKDIR)
        stack.callback(cluster.stop)
        haproxy = harness.start_haproxy(workdir)
        stack.callback(haproxy.stop)
        quotagate = harness.start_quotagate(workdir, "quotagate_quota")
        stack.callback(quotagate.stop)
        harness.create_topics({TOPIC: 1_000_000_000})
        base = harness.QUOTAGATE_BASES["quotagate_quota"]
        paths = [
            BenchPath("direct", f"{HOST}:{harness.KAFKA_PORT}", harness.KAFKA_PORT),
            BenchPath("haproxy", f"{HOST}:{harness.HAPROXY_PORT}", harness.HAPROXY_PORT, haproxy.pid),
            BenchPath("quotagate", f"{HOST}:{base}", base, quotagate.pid, base + 9),
        ]
        for path in paths:  # warms each path and the broker
            measure(path, RATES[0], 3.0)
        for round_index in range(rounds_count):
            results: dict[str, dict[str, dict[str, Any]]] = {path.name: {} for path in paths}
            order = paths[round_index % len(paths) :] + paths[: round_index % len(paths)]
            for rate in RATES:
                for path in order:
                    result = measure(path, rate, seconds)
                    results[path.name][str(rate)] = result
                    cpu = f", {result['mcpu_per_mb_per_s']} mCPU per MB/s" if path.pid else ""
                    log(
                        f"round {round_index + 1} {path.name} at {rate} records/s: avg {result['avg_ms']} ms, "
                        f"p99 {result['p99_ms']} ms, {result['received']}/{result['sent']} received{cpu}"
                    )
            rounds.append(results)
            quotagate.check_alive()
            haproxy.check_alive()
    names = [path.name for path in paths]
    summary = summarise(rounds, names)
    report = {
        "summary": summary,
        "rounds": rounds,
        "seconds": seconds,
        "record_bytes": RECORD,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\n{'rate':>8} {'path':<10} {'avg ms':>22} {'p99 ms':>22} {'p99 added':>20} {'mCPU per MB/s':>20}")
    for rate, per_path in summary.items():
        for name, s in per_path.items():

            def cell(value: dict[str, float] | None) -> str:
                return f"{value['median']:.2f} ({value['min']:.2f}-{value['max']:.2f})" if value else "-"

            print(
                f"{rate:>8} {name:<10} {cell(s['avg_ms']):>22} {cell(s['p99_ms']):>22} "
                f"{cell(s.get('p99_added_ms')):>20} {cell(s.get('mcpu_per_mb_per_s')):>20}"
            )
    print(f"\nload average before {report['load_average_before']}, after {report['load_average_after']}")
    print(f"written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
