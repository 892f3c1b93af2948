"""The workloads, each run against one BenchPath and returning plain figures.

Java clients are Kafka's own perf tools from the same 4.2 jars as the broker (kafka_rig
run_tool), so the client side is identical on every path. Every run is bounded twice: by a record
count (or a duration) and by a subprocess timeout.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.harness import REPO_ROOT, BenchError, BenchPath
from kafka_rig import run_tool

BENCH_DIR = Path(__file__).resolve().parent
RECORD_SIZE = 1024
SMALL_RECORD_SIZE = 100

# "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency, P50 ms 50th, ..."
_SUMMARY = re.compile(
    r"(?P<records>\d+) (?P<steady>steady state )?records sent, (?P<rps>[\d.]+) records/sec "
    r"\((?P<mbps>[\d.]+) MB/sec\), (?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, "
    r"(?P<p50>\d+) ms 50th, (?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)
_METRIC = re.compile(r"^(?P<group>[\w-]+):(?P<name>[\w-]+):\{(?P<tags>[^}]*)\}\s*:\s*(?P<value>\S+)\s*$")


def _summary(match: re.Match[str]) -> dict[str, float]:
    return {
        "records": int(match["records"]),
        "records_per_s": float(match["rps"]),
        # The tool's MB is 2^20 bytes; every MB/s figure of the bench is the tool's own.
        "mb_per_s": float(match["mbps"]),
        "avg_ms": float(match["avg"]),
        "max_ms": float(match["max"]),
        "p50_ms": float(match["p50"]),
        "p95_ms": float(match["p95"]),
        "p99_ms": float(match["p99"]),
        "p999_ms": float(match["p999"]),
    }


def parse_producer_output(out: str) -> dict[str, object]:
    """The whole-run summary and, with --warmup-records, the steady-state one (used when present)."""
    whole: dict[str, float] | None = None
    steady: dict[str, float] | None = None
    for match in _SUMMARY.finditer(out):
        if match["steady"]:
            steady = _summary(match)
        else:
            whole = _summary(match)
    if whole is None:
        raise BenchError(f"no producer summary in:\n{out[-2000:]}")
    metrics: dict[str, float] = {}
    for line in out.splitlines():
        found = _METRIC.match(line.strip())
        if found and found["group"] == "producer-metrics":
            try:
                metrics[found["name"]] = float(found["value"])
            except ValueError:
                continue
    return {"whole": whole, "steady": steady or whole, "metrics": metrics}


def produce(
    path: BenchPath,
    topic: str,
    records: int,
    *,
    record_size: int = RECORD_SIZE,
    throughput: float = -1,
    warmup: int = 0,
    props: dict[str, str] | None = None,
    print_metrics: bool = False,
    timeout: float = 300,
) -> dict[str, object]:
    """One ProducerPerformance run, acks=1 unless props say otherwise."""
    properties = {"bootstrap.servers": path.bootstrap, "acks": "1", **(props or {})}
    args = [
        "--topic", topic, "--num-records", str(records), "--record-size", str(record_size),
        "--throughput", str(int(throughput)) if throughput > 0 else "-1",
        "--command-property", *(f"{key}={value}" for key, value in properties.items()),
    ]  # fmt: skip
    if warmup:
        args += ["--warmup-records", str(warmup)]
    if print_metrics:
        args.append("--print-metrics")
    done = run_tool("producer-perf", *args, timeout=timeout)
    return parse_producer_output(done.stdout)


def consume(path: BenchPath, topic: str, records: int, timeout: float = 300) -> dict[str, float]:
    """One ConsumerPerformance run from the earliest offset, in a group of its own.

    mb_per_s is the tool's fetch.MB.sec: data over the time spent fetching, without the group join
    (rebalance.time.ms, reported apart), which is a fixed cost of a few hundred ms per run."""
    group = f"bench-{uuid.uuid4().hex[:12]}"
    done = run_tool(
        "consumer-perf",
        "--bootstrap-server", path.bootstrap, "--topic", topic, "--num-records", str(records),
        "--group", group, "--timeout", "20000",
        timeout=timeout,
    )  # fmt: skip
    rows = [line.split(",") for line in done.stdout.splitlines() if line.count(",") >= 5]
    if len(rows) < 2:
        raise BenchError(f"no consumer summary in:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    values = dict(zip((c.strip() for c in rows[0]), (v.strip() for v in rows[-1]), strict=False))
    consumed = float(values["data.consumed.in.nMsg"])
    if consumed < records:
        raise BenchError(f"consumer-perf read {consumed:.0f} of {records} records from {path.name}")
    return {
        "records": consumed,
        "mb": float(values["data.consumed.in.MB"]),
        "mb_per_s": float(values["fetch.MB.sec"]),
        "mb_per_s_with_join": float(values["MB.sec"]),
        "rebalance_ms": float(values["rebalance.time.ms"]),
        "fetch_ms": float(values["fetch.time.ms"]),
    }


def small_requests(path: BenchPath, producers: int, records_each: int, timeout: float = 300) -> dict[str, object]:
    """Several producers in parallel, 100 B records, linger.ms=0, one record per request.

    batch.size=100 (below the record size) makes every batch hold exactly one record, and a produce
    request to one partition carries one batch: each record is its own request, so the figure is
    the path's request rate, not its byte rate. Each producer keeps max.in.flight (5) requests
    outstanding. Requests are counted by each producer's own request-total metric."""
    props = {"linger.ms": "0", "batch.size": "100"}

    def one(index: int) -> dict[str, object]:
        return produce(
            path,
            "bench-small",
            records_each,
            record_size=SMALL_RECORD_SIZE,
            props={**props, "client.id": f"bench-small-{index}"},
            print_metrics=True,
            timeout=timeout,
        )

    with ThreadPoolExecutor(producers) as pool:
        runs = list(pool.map(one, range(producers)))
    requests_per_s = 0.0
    requests = 0.0
    latency = []
    for run in runs:
        whole = run["whole"]
        metrics = run["metrics"]
        assert isinstance(whole, dict) and isinstance(metrics, dict)
        elapsed = whole["records"] / whole["records_per_s"]
        requests += metrics["request-total"]
        # Each producer's own rate over its own run: the producers overlap (they start together and
        # carry the same count), so the sum is the path's aggregate request rate.
        requests_per_s += metrics["request-total"] / elapsed
        latency.append(metrics["request-latency-avg"])
    return {
        "producers": producers,
        "requests": requests,
        "requests_per_s": round(requests_per_s, 1),
        "records_per_request": round(sum(r["metrics"]["records-per-request-avg"] for r in runs) / producers, 3),  # type: ignore[index]
        "request_latency_avg_ms": round(sum(latency) / len(latency), 3),
    }


def connections(
    path: BenchPath, count: int, seconds: float, idle_seconds: float, timeout: float = 120
) -> dict[str, object]:
    """bench/conn_load.py against the path; it samples the proxy itself during the idle phase."""
    cmd = [
        sys.executable, "-m", "bench.conn_load", "--port", str(path.port), "--connections", str(count),
        "--seconds", str(seconds), "--idle-seconds", str(idle_seconds), "--watch-pid", str(path.pid or 0),
    ]  # fmt: skip
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"conn_load.py on {path.name} timed out after {timeout}s") from exc
    if done.returncode != 0:
        raise BenchError(f"conn_load.py on {path.name} exited {done.returncode}:\n{done.stderr[-3000:]}")
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
