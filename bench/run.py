#!/usr/bin/env python3
"""quotagate against direct and against haproxy (L4), on one broker, in one run.

Paths: direct; haproxy in TCP mode; quotagate without quotas; quotagate with quotas that never bind
(every request resolved and charged, nothing throttled), set through the Admin API as operators set
them, without and with usage records. Workloads, each on every path:

1. produce: Java producer perf test, 1 KiB records, acks=1, as fast as it goes (MB/s, p50/p99);
2. consume: Java consumer perf test reading the same records (MB/s);
3. small requests: several producers, 100 B records, linger.ms=0, one record per request (requests/s);
4. 200 connections: bench/conn_load.py, ApiVersions/Metadata in a closed loop, then idle
   (requests/s, p99, and the proxy's memory with 200 idle connections);
5. half load: the producer perf test at half the direct maximum (records/s), p99 per path.

The paths are interleaved inside each round, in a rotated order, so slow drift of the machine (page
cache, JIT, a neighbour) spreads over every path instead of landing on one. Writes every figure
to bench/results/latest.json and prints a table. Figures only: targets are reported, never asserted.

    python -m bench.run            # full: 3 rounds, ~10-12 min
    python -m bench.run --quick    # under 3 min with Kafka start
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import harness, report, workloads
from bench.harness import HOST, BenchPath, Child

RESULTS = harness.REPO_ROOT / "bench" / "results"


@dataclass(frozen=True)
class Settings:
    mode: str
    rounds: int  # produce and consume
    produce_records: int
    produce_warmup_records: int  # left out of the steady-state figures (JIT, connection set-up)
    consume_records: int
    small_rounds: int
    small_producers: int
    small_records_each: int
    connection_rounds: int
    connections: int
    connection_seconds: float
    connection_idle_seconds: float
    half_rounds: int
    half_seconds: float
    half_warmup_seconds: float


# Sized on this 2-core machine: ~75 MB/s produce, ~450 MB/s consume, ~2.5k small requests/s per
# producer, 7-37k ApiVersions+Metadata/s. Quick keeps 2 rounds where the headline ratios come from,
# so even a quick run shows its noise.
QUICK = Settings(
    mode="quick",
    rounds=2,
    produce_records=100_000,
    produce_warmup_records=25_000,
    consume_records=500_000,
    small_rounds=1,
    small_producers=4,
    small_records_each=2_000,
    connection_rounds=1,
    connections=200,
    connection_seconds=3,
    connection_idle_seconds=1,
    half_rounds=1,
    half_seconds=4,
    half_warmup_seconds=1,
)
# Full: 3 rounds of everything that feeds a headline ratio, and runs long enough that the
# producer's own JIT and GC settle (its first seconds carry 100+ ms latency spikes).
FULL = Settings(
    mode="full",
    rounds=3,
    produce_records=800_000,
    produce_warmup_records=150_000,
    consume_records=2_500_000,
    small_rounds=3,
    small_producers=4,
    small_records_each=15_000,
    connection_rounds=2,
    connections=200,
    connection_seconds=10,
    connection_idle_seconds=3,
    half_rounds=3,
    half_seconds=10,
    half_warmup_seconds=3,
)

WORKLOADS = ("produce", "consume", "small_requests", "connections", "half_load")
TOPIC_1K, TOPIC_SMALL, TOPIC_HALF = "bench-1k", "bench-small", "bench-half"
# What each topic keeps (on tmpfs, memory): bench-1k must hold the consume test's records.
RETENTION_BYTES = {TOPIC_1K: 4_000_000_000, TOPIC_SMALL: 500_000_000, TOPIC_HALF: 1_000_000_000}


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", flush=True)


# --------------------------------------------------------------------------- measuring


@dataclass
class Snapshot:
    at: float
    path_cpu_s: float
    path_user_cpu_s: float
    machine_cpu_s: float
    machine_busy_cpu_s: float
    ours_cpu_s: float
    metrics: dict[str, float]


def _ours_cpu_seconds(known_pids: list[int]) -> float:
    """CPU of everything this run started: itself, its finished children (the tool JVMs, conn_load),
    and the long-running ones (broker, haproxy, quotagates) by pid."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    for pid in known_pids:
        with contextlib.suppress(OSError):
            total += harness.cpu_seconds(pid)
    return total


def snapshot(path: BenchPath, known_pids: list[int]) -> Snapshot:
    return Snapshot(
        time.monotonic(),
        harness.cpu_seconds(path.pid) if path.pid else 0.0,
        harness.cpu_split(path.pid)[0] if path.pid else 0.0,
        harness.total_cpu_seconds(),
        harness.busy_cpu_seconds_but_steal(),
        _ours_cpu_seconds(known_pids),
        harness.scrape(path.metrics_port) if path.metrics_port else {},
    )


def measured(path: BenchPath, run: Callable[[], dict[str, Any]], known_pids: list[int]) -> dict[str, Any]:
    """Runs one workload on one path; adds the proxy's CPU, the machine's CPU and quotagate's counters."""
    before = snapshot(path, known_pids)
    result = run()
    after = snapshot(path, known_pids)
    # All busy time but steal: a process's stime includes the softirq work (loopback TCP) done in
    # its context, which /proc/stat books under softirq, so leaving softirq out would make ours
    # look bigger than the machine's.
    machine_busy = after.machine_busy_cpu_s - before.machine_busy_cpu_s
    figures: dict[str, Any] = {
        "wall_s": round(after.at - before.at, 2),
        "path_cpu_s": round(after.path_cpu_s - before.path_cpu_s, 3),
        # Of which in the proxy's own code (the rest is the kernel's: syscalls and loopback TCP).
        "path_user_cpu_s": round(after.path_user_cpu_s - before.path_user_cpu_s, 3),
        # Both cores together: how close to CPU-bound the whole box was (2.0 x wall = saturated).
        "machine_cpu_s": round(after.machine_cpu_s - before.machine_cpu_s, 2),
        # CPU used by processes this run did not start: anything else on the machine competing
        # for the same two cores (another test suite, say). Near 0 in a clean run.
        "foreign_cpu_s": round(machine_busy - (after.ours_cpu_s - before.ours_cpu_s), 2),
    }
    if path.metrics_port:
        figures["quotagate_requests"] = harness.all_requests(after.metrics) - harness.all_requests(before.metrics)
        figures["quotagate_produce_requests"] = harness.produce_requests(after.metrics) - harness.produce_requests(
            before.metrics
        )
        figures["quotagate_bytes"] = harness.forwarded_bytes(after.metrics) - harness.forwarded_bytes(before.metrics)
    return {**result, **figures}


class Profiler:
    """py-spy on one quotagate process around chosen runs (`--profile WORKLOAD`).

    Records raw collapsed stacks, then summarises the top frames by own and by inclusive samples.
    A profiled run's figures carry py-spy's overhead: profile to find hot frames, not for numbers."""

    def __init__(self, workload: str | None, target: str, out_dir: Path) -> None:
        self.workload = workload
        self.target = target
        self.out_dir = out_dir
        self.binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.summaries: dict[str, Any] = {}

    @contextlib.contextmanager
    def around(self, workload: str, path: BenchPath, tag: str) -> Any:
        if workload != self.workload or path.name != self.target or path.pid is None:
            yield
            return
        raw = self.out_dir / f"profile-{workload}-{path.name}-{tag}.txt"
        proc = subprocess.Popen(
            [self.binary, "record", "--pid", str(path.pid), "--rate", "250", "--format", "raw", "-o", str(raw),
             "--duration", "600", "--nonblocking"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        time.sleep(0.5)  # attached before the load starts
        try:
            yield
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if raw.exists():
                self.summaries[f"{workload}/{path.name}/{tag}"] = {"file": str(raw), **summarize_profile(raw)}


class SyscallCounter:
    """`strace -c -f` on every proxy process around one workload's runs (`--syscalls WORKLOAD`).

    Gives each run's syscalls by name (`syscalls` in its raw result), to put per request next to
    haproxy's. ptrace stops the proxy at every syscall: such a run's CPU and throughput are not figures."""

    def __init__(self, workload: str | None, out_dir: Path) -> None:
        self.workload = workload
        self.out_dir = out_dir

    @contextlib.contextmanager
    def around(self, workload: str, path: BenchPath, tag: str) -> Any:
        counts: dict[str, int] = {}
        if workload != self.workload or path.pid is None:
            yield counts
            return
        out = self.out_dir / f"strace-{workload}-{path.name}-{tag}.txt"
        proc = subprocess.Popen(
            ["strace", "-c", "-f", "-o", str(out), "-p", str(path.pid)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(0.5)  # attached before the load starts
        try:
            yield counts
        finally:
            proc.send_signal(signal.SIGINT)  # strace -c prints its table when it detaches
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
            if out.exists():
                counts.update(parse_strace_summary(out.read_text()))


def parse_strace_summary(text: str) -> dict[str, int]:
    """{syscall: calls} from `strace -c`'s table (% time, seconds, usecs/call, calls, [errors,] name)."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[0][:1].isdigit() and fields[-1] != "total" and fields[3].isdigit():
            counts[fields[-1]] = int(fields[3])
    return counts


def syscalls_per_request(raw: dict[str, dict[str, list[dict[str, Any]]]], workload: str) -> dict[str, Any]:
    """Per proxy path: syscalls per request of the counted runs of `workload`, by name, most first."""
    out: dict[str, Any] = {}
    for path, workloads_of_path in raw.items():
        runs = [r for r in workloads_of_path.get(workload, []) if r.get("syscalls")]
        requests = sum(r.get("requests_counted") or r["result"].get("requests", 0) for r in runs)
        if not runs or not requests:
            continue
        totals: dict[str, int] = {}
        for run in runs:
            for name, calls in run["syscalls"].items():
                totals[name] = totals.get(name, 0) + calls
        by_name = {n: round(c / requests, 2) for n, c in sorted(totals.items(), key=lambda kv: -kv[1])}
        out[path] = {"total": round(sum(totals.values()) / requests, 2), "by_name": by_name}
    return out


def summarize_profile(raw: Path, top: int = 15) -> dict[str, Any]:
    """Top frames of a py-spy raw (collapsed) profile: by own samples and by inclusive samples."""
    own: dict[str, int] = {}
    inclusive: dict[str, int] = {}
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        own[frames[-1]] = own.get(frames[-1], 0) + count
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + count

    def ranked(table: dict[str, int]) -> list[dict[str, Any]]:
        best = sorted(table.items(), key=lambda item: item[1], reverse=True)[:top]
        return [{"frame": frame, "percent": round(100 * count / total, 1)} for frame, count in best]

    return {"samples": total, "top_own": ranked(own), "top_inclusive": ranked(inclusive)}


# --------------------------------------------------------------------------- the bench


class Bench:
    def __init__(
        self,
        settings: Settings,
        paths: list[BenchPath],
        profiler: Profiler,
        known_pids: list[int],
        selected: tuple[str, ...] = WORKLOADS,
        syscalls: SyscallCounter | None = None,
    ) -> None:
        self.syscalls = syscalls or SyscallCounter(None, Path("."))
        self.settings = settings
        self.selected = selected
        self.half_rate: int | None = None
        self.paths = paths
        self.known_pids = known_pids
        self.profiler = profiler
        self.raw: dict[str, dict[str, list[dict[str, Any]]]] = {p.name: {w: [] for w in WORKLOADS} for p in paths}
        self.phase_seconds: dict[str, float] = {}

    def rotated(self, round_no: int) -> list[BenchPath]:
        shift = round_no % len(self.paths)
        return self.paths[shift:] + self.paths[:shift]

    def phase(self, name: str, rounds: int, run_one: Callable[[BenchPath, int], dict[str, Any]]) -> None:
        if name not in self.selected:
            return
        started = time.monotonic()
        for round_no in range(rounds):
            for path in self.rotated(round_no):
                tag = f"r{round_no}"
                with self.profiler.around(name, path, tag), self.syscalls.around(name, path, tag) as syscalls:
                    result = measured(path, functools.partial(run_one, path, round_no), self.known_pids)
                if syscalls:
                    result["syscalls"] = syscalls
                result["round"] = round_no
                self.raw[path.name][name].append(result)
                log(f"{name} r{round_no} {path.name}: {short(name, result)}")
        self.phase_seconds[name] = round(time.monotonic() - started, 1)

    def warm_up(self) -> None:
        """JIT in the broker, the page cache, and every path's first connections; nothing measured."""
        started = time.monotonic()
        direct = self.paths[0]
        records = 300_000 if self.settings.mode == "full" else 100_000
        if "consume" in self.selected and "produce" not in self.selected:
            records += self.settings.consume_records  # what the produce phase would have left to read
        workloads.produce(direct, TOPIC_1K, records)
        for path in self.paths[1:]:
            workloads.produce(path, TOPIC_1K, 20_000)
        workloads.consume(direct, TOPIC_1K, min(200_000, records))
        self.phase_seconds["warm_up"] = round(time.monotonic() - started, 1)

    def run(self) -> None:
        s = self.settings
        self.warm_up()

        def produce(path: BenchPath, _round: int) -> dict[str, Any]:
            out = workloads.produce(path, TOPIC_1K, s.produce_records, warmup=s.produce_warmup_records)
            return {**out, "payload_bytes": s.produce_records * workloads.RECORD_SIZE}

        self.phase("produce", s.rounds, produce)

        def consume(path: BenchPath, _round: int) -> dict[str, Any]:
            out = workloads.consume(path, TOPIC_1K, s.consume_records)
            return {"result": out, "payload_bytes": s.consume_records * workloads.RECORD_SIZE}

        self.phase("consume", s.rounds, consume)

        def small(path: BenchPath, _round: int) -> dict[str, Any]:
            out = workloads.small_requests(path, s.small_producers, s.small_records_each)
            return {"result": out, "requests_counted": out["requests"]}

        self.phase("small_requests", s.small_rounds, small)

        def conns(path: BenchPath, _round: int) -> dict[str, Any]:
            out = workloads.connections(path, s.connections, s.connection_seconds, s.connection_idle_seconds)
            return {"result": out}

        self.phase("connections", s.connection_rounds, conns)

        if "half_load" not in self.selected:
            return
        direct_rps = report.median([r["steady"]["records_per_s"] for r in self.raw["direct"]["produce"]])
        assert direct_rps is not None  # main() makes half_load bring produce along
        half_rate = direct_rps / 2
        self.half_rate = round(half_rate)

        def half(path: BenchPath, _round: int) -> dict[str, Any]:
            warmup = int(half_rate * s.half_warmup_seconds)
            records = warmup + int(half_rate * s.half_seconds)
            out = workloads.produce(path, TOPIC_HALF, records, throughput=half_rate, warmup=warmup)
            return {**out, "payload_bytes": records * workloads.RECORD_SIZE, "target_records_per_s": round(half_rate)}

        self.phase("half_load", s.half_rounds, half)


def short(workload: str, result: dict[str, Any]) -> str:
    cpu = f", proxy CPU {result['path_cpu_s']:.2f}s" if result.get("path_cpu_s") else ""
    if workload in ("produce", "half_load"):
        st = result["steady"]
        return f"{st['mb_per_s']:.1f} MB/s, p50 {st['p50_ms']:.0f} p99 {st['p99_ms']:.0f} ms{cpu}"
    r = result["result"]
    if workload == "consume":
        return f"{r['mb_per_s']:.1f} MB/s{cpu}"
    if workload == "small_requests":
        return f"{r['requests_per_s']:.0f} requests/s ({r['records_per_request']} records/request){cpu}"
    return f"{r['requests_per_s']:.0f} requests/s, p99 {r['latency']['p99_ms']:.1f} ms{cpu}"


# --------------------------------------------------------------------------- environment


def _cmd(*cmd: str) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20, cwd=harness.REPO_ROOT).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return ""


def environment() -> dict[str, Any]:
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    jars = sorted(p.name for p in (harness.REPO_ROOT / ".cache" / "kafka" / "libs").glob("kafka_2.13-*.jar"))
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "kafka_jar": jars[0] if jars else None,
        "haproxy": _cmd("haproxy", "-v").splitlines()[0] if _cmd("haproxy", "-v") else None,
        "git_commit": _cmd("git", "rev-parse", "HEAD"),
        # Another change under review may sit uncommitted in quotagate/: the figures are of that tree.
        "quotagate_tree_dirty": bool(_cmd("git", "status", "--porcelain", "--", "quotagate")),
    }


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short run (under 3 minutes)")
    parser.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    parser.add_argument(
        "--quotagate-path",
        type=Path,
        help="run quotagate from this directory's copy of the package (PYTHONPATH), e.g. a patched copy",
    )
    parser.add_argument(
        "--profile",
        choices=WORKLOADS,
        help="py-spy the quotagate process during this workload (its figures then carry py-spy's cost)",
    )
    parser.add_argument("--profile-target", default=report.QUOTA, choices=report.QUOTAGATE_PATHS)
    parser.add_argument(
        "--syscalls",
        choices=WORKLOADS,
        help="strace -c every proxy during this workload: syscalls per request (its CPU figures carry strace's cost)",
    )
    parser.add_argument(
        "--kafka-on-disk", action="store_true", help="keep the broker's log on disk, not tmpfs (see harness.py)"
    )
    parser.add_argument(
        "--workloads",
        default=",".join(WORKLOADS),
        help="comma-separated subset to run, for a focused comparison (half_load brings produce: its rate)",
    )
    args = parser.parse_args()
    asked = set(args.workloads.split(","))
    selected = tuple(w for w in WORKLOADS if w in asked)
    unknown = asked - set(WORKLOADS)
    if unknown or not selected:
        parser.error(f"--workloads: unknown {sorted(unknown)}; choose from {', '.join(WORKLOADS)}")
    if "half_load" in selected and "produce" not in selected:
        selected = tuple(w for w in WORKLOADS if w in (*selected, "produce"))
    # `make` stopped by SIGTERM: unwind like Ctrl-C, so every process we started is stopped by pid.
    signal.signal(signal.SIGTERM, _terminate)
    settings = QUICK if args.quick else FULL
    started = time.monotonic()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    workdir = Path(tempfile.mkdtemp(prefix="quotagate-bench-"))
    log(f"{settings.mode} run; logs and configs in {workdir}")
    peak_rss: dict[str, float | None] = {}
    with contextlib.ExitStack() as stack:
        kafka_dir = None if args.kafka_on_disk else harness.TMPFS_WORKDIR
        if kafka_dir is not None:
            stack.callback(shutil.rmtree, kafka_dir, True)  # runs after the broker has stopped
        cluster = harness.start_broker(kafka_dir)
        stack.callback(cluster.stop)
        log(f"broker up at {HOST}:{harness.KAFKA_PORT} (haproxy listener {harness.KAFKA_HAPROXY_LISTENER_PORT})")
        children: list[Child] = []
        haproxy = harness.start_haproxy(workdir)
        stack.callback(haproxy.stop)
        children.append(haproxy)
        quotagates = {}
        for name in report.QUOTAGATE_PATHS:
            child = harness.start_quotagate(workdir, name, args.quotagate_path)
            stack.callback(child.stop)
            quotagates[name] = child
        harness.create_topics(RETENTION_BYTES)
        paths = [
            BenchPath(report.DIRECT, f"{HOST}:{harness.KAFKA_PORT}", harness.KAFKA_PORT),
            BenchPath(report.HAPROXY, f"{HOST}:{harness.HAPROXY_PORT}", harness.HAPROXY_PORT, haproxy.pid),
        ]
        for name, child in quotagates.items():
            base = harness.QUOTAGATE_BASES[name]
            paths.append(BenchPath(name, f"{HOST}:{base}", base, child.pid, base + 9))
        # Raw profiles go with the logs (outside the repo); their summaries go into the results.
        profiler = Profiler(args.profile, args.profile_target, workdir)
        known_pids = [p for p in (*(n.pid for n in cluster.nodes), haproxy.pid) if p is not None]
        known_pids += [child.pid for child in quotagates.values()]
        syscalls = SyscallCounter(args.syscalls, workdir)
        bench = Bench(settings, paths, profiler, known_pids, selected, syscalls)
        log(f"all paths up after {time.monotonic() - started:.1f}s")
        bench.run()
        for path in paths[1:]:
            assert path.pid is not None
            peak_rss[path.name] = harness.peak_rss_mb(path.pid)
        for child in [haproxy, *quotagates.values()]:
            child.check_alive()
    results: dict[str, Any] = report.build(bench.raw, peak_rss, os.cpu_count() or 1)
    results = {
        **results,
        "mode": settings.mode,
        "started_at": started_at,
        "duration_s": round(time.monotonic() - started, 1),
        "phase_seconds": bench.phase_seconds,
        "half_load_target_records_per_s": bench.half_rate,
        "settings": asdict(settings),
        "quotagate_path": str(args.quotagate_path) if args.quotagate_path else None,
        "environment": environment(),
        "profiles": profiler.summaries,
        "syscalls_per_request": syscalls_per_request(bench.raw, args.syscalls) if args.syscalls else None,
        "raw": bench.raw,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print()
    print(report.table(results))
    for key, summary in profiler.summaries.items():
        print(f"\nprofile {key} ({summary['samples']} samples, {summary['file']}), top own frames:")
        for row in summary["top_own"][:10]:
            print(f"  {row['percent']:5.1f}%  {row['frame']}")
    if args.syscalls:
        print(f"\nsyscalls per request during {args.syscalls} (strace -c; these runs' CPU figures carry its cost):")
        for path_name, counted in results["syscalls_per_request"].items():
            top = ", ".join(f"{name} {calls}" for name, calls in list(counted["by_name"].items())[:6])
            print(f"  {path_name:<20} {counted['total']:5.2f}  ({top})")
    print(f"\n{settings.mode} run took {results['duration_s']:.0f}s; wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
