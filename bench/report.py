"""From the rounds the bench measured to the figures it reports: medians, spreads, ratios, targets.

Everything here is pure (dicts in, dicts out), so the arithmetic can be checked without a broker.
Conventions:
- a path's figure is the median over its rounds; its noise is (max − min) / median over the rounds;
- a ratio vs direct is the median over rounds of the per-round ratio (paths are interleaved within
  a round, so a round's two figures share the same machine state), with the range of those ratios;
- CPU per GB is the proxy's CPU over all produce and consume rounds divided by all payload bytes
  moved in them (records × record size; 1 GB = 1e9 bytes), so long and short rounds weigh by bytes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any

DIRECT, HAPROXY, NO_QUOTA, QUOTA = "direct", "haproxy", "quotagate_no_quota", "quotagate_quota"
# Quotas that never bind and usage records on (v2 aggregates to Parquet): the configuration an
# operator running the pipeline has.
USAGE = "quotagate_usage"
PATHS = (DIRECT, HAPROXY, NO_QUOTA, QUOTA, USAGE)
QUOTAGATE_PATHS = (NO_QUOTA, QUOTA, USAGE)
PROXY_PATHS = (HAPROXY, NO_QUOTA, QUOTA, USAGE)

TARGETS: dict[str, tuple[str, float]] = {
    "produce_ratio_vs_direct": (">=", 0.9),
    "consume_ratio_vs_direct": (">=", 0.9),
    "small_requests_ratio_vs_direct": (">=", 0.9),
    "connections_ratio_vs_direct": (">=", 0.6),
    "cpu_per_gb_ratio_vs_haproxy": ("<=", 1.3),
    "cpu_per_request_ratio_vs_haproxy": ("<=", 1.5),
    "p99_added_ms": ("<=", 1.0),
}
# The steady figures: CPU seconds of two proxies measured in the same round depend on the work done,
# not on how fast the shared machine happened to be (throughput ratios swing by ±0.2 run to run).
CPU_RATIOS = ("cpu_per_gb_ratio_vs_haproxy", "cpu_per_request_ratio_vs_haproxy", "connections_cpu_ratio_vs_haproxy")

Rounds = list[dict[str, Any]]


def _r(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def spread(values: Sequence[float]) -> float | None:
    """(max − min) / median: 0.1 means the rounds lay within 10 % of their median."""
    if len(values) < 2:
        return None
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else None


def summarize(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    return {
        "median": _r(median(values), digits),
        "min": _r(min(values), digits) if values else None,
        "max": _r(max(values), digits) if values else None,
        "spread": _r(spread(values)),
        "rounds": [_r(v, digits) for v in values],
    }


def paired(
    rounds: dict[str, Rounds], path: str, base: str, figure: Callable[[dict[str, Any]], float], op: str
) -> dict[str, Any] | None:
    """Per-round ratio (op "/") or difference (op "-") of path against base, summarized."""
    values = []
    for mine, theirs in zip(rounds.get(path, []), rounds.get(base, []), strict=False):
        a, b = figure(mine), figure(theirs)
        if op == "/":
            if b:
                values.append(a / b)
        else:
            values.append(a - b)
    return summarize(values) if values else None


def cpu_per_gb(produce: Rounds, consume: Rounds) -> dict[str, float | None]:
    def per_gb(runs: Rounds) -> tuple[float, float]:
        return sum(r["path_cpu_s"] for r in runs), sum(r["payload_bytes"] for r in runs) / 1e9

    p_cpu, p_gb = per_gb(produce)
    c_cpu, c_gb = per_gb(consume)
    return {
        "cpu_s_per_gb": _r((p_cpu + c_cpu) / (p_gb + c_gb)) if p_gb + c_gb else None,
        "cpu_s_per_gb_produce": _r(p_cpu / p_gb) if p_gb else None,
        "cpu_s_per_gb_consume": _r(c_cpu / c_gb) if c_gb else None,
        "gb_measured": _r(p_gb + c_gb),
    }


def path_figures(name: str, raw: dict[str, Rounds], peak_rss_mb: float | None) -> dict[str, Any]:
    """One path's figures from its rounds of every workload."""
    produce, consume = raw["produce"], raw["consume"]
    small, conns, half = raw["small_requests"], raw["connections"], raw["half_load"]
    figures: dict[str, Any] = {
        "produce_mb_per_s": summarize([r["steady"]["mb_per_s"] for r in produce], 2),
        "produce_records_per_s": summarize([r["steady"]["records_per_s"] for r in produce], 0),
        # At full speed the producer's 32 MB buffer is always full: these latencies are queueing in
        # the client, reported because they were asked for; the half-load test measures the path.
        "produce_p50_ms": summarize([r["steady"]["p50_ms"] for r in produce], 1),
        "produce_p99_ms": summarize([r["steady"]["p99_ms"] for r in produce], 1),
        "consume_mb_per_s": summarize([r["result"]["mb_per_s"] for r in consume], 2),
        "small_requests_per_s": summarize([r["result"]["requests_per_s"] for r in small], 0),
        "small_request_latency_avg_ms": summarize([r["result"]["request_latency_avg_ms"] for r in small]),
        "connections_requests_per_s": summarize([r["result"]["requests_per_s"] for r in conns], 0),
        "connections_p50_ms": summarize([r["result"]["latency"]["p50_ms"] for r in conns]),
        "connections_p99_ms": summarize([r["result"]["latency"]["p99_ms"] for r in conns]),
        "half_load_p99_ms": summarize([r["steady"]["p99_ms"] for r in half], 1),
        "half_load_p50_ms": summarize([r["steady"]["p50_ms"] for r in half], 1),
        "half_load_p95_ms": summarize([r["steady"]["p95_ms"] for r in half], 1),
        "half_load_avg_ms": summarize([r["steady"]["avg_ms"] for r in half]),
        "half_load_mb_per_s": summarize([r["steady"]["mb_per_s"] for r in half], 2),
    }
    if name == DIRECT:
        return figures
    figures.update(cpu_per_gb(produce, consume))
    small_cpu = sum(r["path_cpu_s"] for r in small)
    small_requests = sum(r["requests_counted"] for r in small)
    figures["cpu_s_per_100k_requests"] = _r(small_cpu / small_requests * 1e5) if small_requests else None
    # Where a small request's CPU goes: the proxy's own code (user) or the kernel (system).
    small_user_cpu = sum(r.get("path_user_cpu_s", 0.0) for r in small)
    figures["user_cpu_us_per_small_request"] = _r(small_user_cpu / small_requests * 1e6, 1) if small_requests else None
    figures["system_cpu_us_per_small_request"] = (
        _r((small_cpu - small_user_cpu) / small_requests * 1e6, 1) if small_requests else None
    )
    conn_cpu = sum(r["result"].get("watched_cpu_s_active", 0.0) for r in conns)
    conn_requests = sum(r["result"]["requests"] for r in conns)
    # ApiVersions + Metadata: responses the proxy decodes and re-encodes (haproxy only copies them).
    figures["cpu_s_per_100k_requests_api_versions_metadata"] = (
        _r(conn_cpu / conn_requests * 1e5) if conn_requests else None
    )
    if conns:
        # The first round: later rounds start with the memory Python kept from the one before.
        last = conns[0]["result"]
        before, idle = last.get("watched_rss_before_mb"), last.get("watched_rss_idle_mb")
        figures["rss_before_connections_mb"] = _r(before, 1)
        figures["rss_idle_200_connections_mb"] = _r(idle, 1)
        if before is not None and idle is not None:
            figures["rss_per_idle_connection_kb"] = _r((idle - before) * 1024 / last["connections"], 1)
        figures["cpu_s_idle_200_connections"] = last.get("watched_cpu_s_idle")
    figures["peak_rss_mb"] = _r(peak_rss_mb, 1)
    return figures


def comparisons(name: str, raw: dict[str, dict[str, Rounds]], figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One proxy path against direct (and, for CPU, against haproxy)."""

    def by_workload(workload: str) -> dict[str, Rounds]:
        return {path: raw[path][workload] for path in raw}

    def median_of(summary: dict[str, Any] | None) -> float | None:
        return None if summary is None else summary["median"]

    produce = paired(by_workload("produce"), name, DIRECT, lambda r: r["steady"]["mb_per_s"], "/")
    consume = paired(by_workload("consume"), name, DIRECT, lambda r: r["result"]["mb_per_s"], "/")
    small = paired(by_workload("small_requests"), name, DIRECT, lambda r: r["result"]["requests_per_s"], "/")
    conns = paired(by_workload("connections"), name, DIRECT, lambda r: r["result"]["requests_per_s"], "/")
    p99 = paired(by_workload("half_load"), name, DIRECT, lambda r: r["steady"]["p99_ms"], "-")
    avg = paired(by_workload("half_load"), name, DIRECT, lambda r: r["steady"]["avg_ms"], "-")
    # p95 too: the tool's percentiles are whole ms, and p99 of a 5-10 s run moves by 5-20 ms
    # whenever a JVM or the scheduler hiccups, on any path; p95 and the mean are steadier.
    p95 = paired(by_workload("half_load"), name, DIRECT, lambda r: r["steady"]["p95_ms"], "-")
    mine = figures[name].get("cpu_s_per_gb")
    haproxy = figures.get(HAPROXY, {}).get("cpu_s_per_gb")

    def direction_ratio(key: str) -> float | None:
        """CPU per GB of one direction (produce or consume) over haproxy's, over the whole run."""
        path_figure, haproxy_figure = figures[name].get(key), figures.get(HAPROXY, {}).get(key)
        return _r(path_figure / haproxy_figure) if path_figure and haproxy_figure else None

    cpu_ratio = None
    if HAPROXY in raw and name != HAPROXY:

        def round_cpu_per_gb(path: str, round_no: int) -> float:
            runs = [r for r in raw[path]["produce"] + raw[path]["consume"] if r.get("round") == round_no]
            moved = sum(r["payload_bytes"] for r in runs)
            return sum(r["path_cpu_s"] for r in runs) / moved * 1e9 if moved else 0.0

        round_nos = sorted({r.get("round", 0) for r in raw[name]["produce"]})
        ratios = [round_cpu_per_gb(name, n) / round_cpu_per_gb(HAPROXY, n) for n in round_nos]
        cpu_ratio = summarize([v for v in ratios if v]) if any(ratios) else None

    def cpu_per_request_vs_haproxy(
        workload: str, cpu: Callable[[dict[str, Any]], float], requests: Callable[[dict[str, Any]], float]
    ) -> dict[str, Any] | None:
        """The proxy's CPU per request of `workload` over haproxy's, round by round."""
        if HAPROXY not in raw or name == HAPROXY:
            return None
        return paired(by_workload(workload), name, HAPROXY, lambda r: cpu(r) / requests(r) if requests(r) else 0.0, "/")

    # Small produce requests: the requests each path's producers made, counted by the producers.
    request_cpu_ratio = cpu_per_request_vs_haproxy(
        "small_requests", lambda r: r["path_cpu_s"], lambda r: r.get("requests_counted") or 0
    )
    # ApiVersions/Metadata of the 200-connection workload, CPU of its active phase: the steady figure
    # for that workload, whose throughput ratio swings with the machine's load.
    connections_cpu_ratio = cpu_per_request_vs_haproxy(
        "connections",
        lambda r: r["result"].get("watched_cpu_s_active", 0.0),
        lambda r: r["result"].get("requests") or 0,
    )
    out: dict[str, Any] = {
        "produce_ratio_vs_direct": median_of(produce),
        "consume_ratio_vs_direct": median_of(consume),
        "small_requests_ratio_vs_direct": median_of(small),
        "connections_ratio_vs_direct": median_of(conns),
        "cpu_per_gb_ratio_vs_haproxy": _r(mine / haproxy) if mine and haproxy else None,
        "cpu_per_gb_produce_ratio_vs_haproxy": direction_ratio("cpu_s_per_gb_produce"),
        "cpu_per_gb_consume_ratio_vs_haproxy": direction_ratio("cpu_s_per_gb_consume"),
        "cpu_per_request_ratio_vs_haproxy": median_of(request_cpu_ratio),
        "connections_cpu_ratio_vs_haproxy": median_of(connections_cpu_ratio),
        "p99_added_ms": median_of(p99),
        "p95_added_ms": median_of(p95),
        "avg_latency_added_ms": median_of(avg),
        "cpu_s_per_gb": mine,
        "cpu_s_per_100k_requests": figures[name].get("cpu_s_per_100k_requests"),
        "peak_rss_mb": figures[name].get("peak_rss_mb"),
        "per_round": {
            "produce_ratio_vs_direct": produce,
            "consume_ratio_vs_direct": consume,
            "small_requests_ratio_vs_direct": small,
            "connections_ratio_vs_direct": conns,
            "cpu_per_gb_ratio_vs_haproxy": cpu_ratio,
            "cpu_per_request_ratio_vs_haproxy": request_cpu_ratio,
            "connections_cpu_ratio_vs_haproxy": connections_cpu_ratio,
            "p99_added_ms": p99,
            "p95_added_ms": p95,
            "avg_latency_added_ms": avg,
        },
    }
    return out


def targets(comparison: dict[str, Any]) -> dict[str, Any]:
    """Each target: the value, met or not, and whether every round agrees (clear: the rounds' whole
    range is on one side of the bound; null with a single round, when the noise is unknown)."""

    def ok(value: float, op: str, bound: float) -> bool:
        return value >= bound if op == ">=" else value <= bound

    verdicts = {}
    for key, (op, bound) in TARGETS.items():
        value = comparison.get(key)
        per_round = comparison.get("per_round", {}).get(key)
        clear = None
        if per_round and len(per_round["rounds"]) > 1:
            clear = ok(per_round["min"], op, bound) == ok(per_round["max"], op, bound)
        verdicts[key] = {
            "value": value,
            "target": f"{op} {bound:g}",
            "met": None if value is None else ok(value, op, bound),
            "rounds_range": [per_round["min"], per_round["max"]] if per_round else None,
            "clear": clear,
        }
    return verdicts


def noise(figures: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The largest round-to-round spread of each figure over the paths, to judge any one ratio by."""
    keys = (
        "produce_mb_per_s",
        "consume_mb_per_s",
        "small_requests_per_s",
        "connections_requests_per_s",
        "half_load_p95_ms",
        "half_load_p99_ms",
        "half_load_avg_ms",
    )
    out: dict[str, Any] = {}
    for key in keys:
        spreads = {path: f[key]["spread"] for path, f in figures.items() if f.get(key, {}).get("spread") is not None}
        out[key] = {"max_spread": max(spreads.values()) if spreads else None, "by_path": spreads}
    return out


def foreign_load(raw: dict[str, dict[str, Rounds]], cpus: int) -> dict[str, Any]:
    """Runs during which processes the bench did not start used more than 5 % of the machine."""
    flagged = []
    worst = 0.0
    for path, workloads in raw.items():
        for workload, runs in workloads.items():
            for run in runs:
                if "foreign_cpu_s" not in run or not run.get("wall_s"):
                    continue
                share = run["foreign_cpu_s"] / (run["wall_s"] * cpus)
                worst = max(worst, share)
                if share > 0.05:
                    flagged.append(
                        {"path": path, "workload": workload, "round": run.get("round"), "share": round(share, 3)}
                    )
    return {"worst_share": round(worst, 3), "runs_over_5_percent": flagged}


def build(raw: dict[str, dict[str, Rounds]], peak_rss: dict[str, float | None], cpus: int = 2) -> dict[str, Any]:
    """Every figure and the headline keys: the quotas-not-binding config at top level, no_quota beside it."""
    figures = {name: path_figures(name, raw[name], peak_rss.get(name)) for name in raw}
    compared = {name: comparisons(name, raw, figures) for name in raw if name != DIRECT}
    report: dict[str, Any] = {}
    if QUOTA in compared:
        report.update({k: v for k, v in compared[QUOTA].items() if k != "per_round"})
    if NO_QUOTA in compared:
        report["no_quota"] = {k: v for k, v in compared[NO_QUOTA].items() if k != "per_round"}
    if USAGE in compared:
        report["usage"] = {k: v for k, v in compared[USAGE].items() if k != "per_round"}
    if HAPROXY in compared:
        report["haproxy"] = {k: v for k, v in compared[HAPROXY].items() if k not in ("per_round", *CPU_RATIOS)}
    report["targets"] = {name: targets(compared[name]) for name in QUOTAGATE_PATHS if name in compared}
    report["comparisons"] = {name: {k: v for k, v in c.items() if k != "per_round"} for name, c in compared.items()}
    report["per_round_comparisons"] = {name: c["per_round"] for name, c in compared.items()}
    report["paths"] = figures
    report["noise"] = noise(figures)
    report["foreign_load"] = foreign_load(raw, cpus)
    return report


# --------------------------------------------------------------------------- text


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        middle = value.get("median")
        if middle is None:
            return "-"
        text = f"{middle:.{digits}f}"
        if value.get("spread") is not None:
            text += f" ±{value['spread'] * 50:.0f}%"  # half the range, as ± around the median
        return text
    if isinstance(value, bool):
        return "yes" if value else "NO"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def table(report: dict[str, Any]) -> str:
    """The figures as text: one column per path, then the comparisons and the targets."""
    figures = report["paths"]
    names = [p for p in PATHS if p in figures]
    rows: list[tuple[str, str, int]] = [
        ("produce MB/s (1 KiB, acks=1, max)", "produce_mb_per_s", 1),
        ("  p50 ms at max (client queueing)", "produce_p50_ms", 0),
        ("  p99 ms at max (client queueing)", "produce_p99_ms", 0),
        ("consume MB/s", "consume_mb_per_s", 1),
        ("small produce requests/s", "small_requests_per_s", 0),
        ("  avg request latency ms", "small_request_latency_avg_ms", 2),
        ("200 conns: requests/s", "connections_requests_per_s", 0),
        ("200 conns: p99 ms (loaded)", "connections_p99_ms", 1),
        ("half load: p95 ms", "half_load_p95_ms", 1),
        ("half load: p99 ms", "half_load_p99_ms", 1),
        ("half load: avg ms", "half_load_avg_ms", 2),
        ("proxy CPU s/GB (produce+consume)", "cpu_s_per_gb", 2),
        ("  CPU s/GB produce", "cpu_s_per_gb_produce", 2),
        ("  CPU s/GB consume", "cpu_s_per_gb_consume", 2),
        ("proxy CPU s/100k small produce req", "cpu_s_per_100k_requests", 2),
        ("  user µs per small req (own code)", "user_cpu_us_per_small_request", 1),
        ("  system µs per small req (kernel)", "system_cpu_us_per_small_request", 1),
        ("proxy CPU s/100k ApiVersions+Metadata", "cpu_s_per_100k_requests_api_versions_metadata", 2),
        ("proxy RSS MB before 200 conns", "rss_before_connections_mb", 1),
        ("proxy RSS MB, 200 idle conns", "rss_idle_200_connections_mb", 1),
        ("proxy KB per idle connection", "rss_per_idle_connection_kb", 1),
        ("proxy peak RSS MB (VmHWM)", "peak_rss_mb", 1),
    ]
    headers = {"direct": "direct", "haproxy": "haproxy", NO_QUOTA: "qg no quota", QUOTA: "qg quotas", USAGE: "qg usage"}
    width = 40
    lines = [f"{'':<{width}}" + "".join(f"{headers[n]:>16}" for n in names)]
    for label, key, digits in rows:
        row = "".join(f"{_fmt(figures[n].get(key), digits):>16}" for n in names)
        lines.append(f"{label:<{width}}{row}")
    lines.append("")
    lines.append("± is half the range over rounds, relative to the median (no ± with one round).")
    lines.append("")
    compare = [
        ("produce ratio vs direct", "produce_ratio_vs_direct", 3),
        ("consume ratio vs direct", "consume_ratio_vs_direct", 3),
        ("small requests ratio vs direct", "small_requests_ratio_vs_direct", 3),
        ("200 conns ratio vs direct", "connections_ratio_vs_direct", 3),
        ("CPU/GB ratio vs haproxy (steady)", "cpu_per_gb_ratio_vs_haproxy", 2),
        ("CPU/small request ratio vs haproxy (steady)", "cpu_per_request_ratio_vs_haproxy", 2),
        ("CPU/ApiVersions+Metadata ratio vs haproxy", "connections_cpu_ratio_vs_haproxy", 2),
        ("p99 added at half load, ms", "p99_added_ms", 1),
        ("p95 added at half load, ms", "p95_added_ms", 1),
        ("avg latency added at half load, ms", "avg_latency_added_ms", 2),
    ]
    per_round = report.get("per_round_comparisons", {})
    cols = [p for p in PROXY_PATHS if p in per_round]
    lines.append(
        f"{'vs direct or haproxy (per-round median [min..max])':<{width + 14}}"
        + "".join(f"{headers[c]:>22}" for c in cols)
    )
    for label, key, digits in compare:
        cells: list[str] = []
        for c in cols:
            summary = per_round[c].get(key)
            if key == "cpu_per_gb_ratio_vs_haproxy":  # over all bytes; the range from each round's own
                value = report.get("comparisons", {}).get(c, {}).get(key)
                text = _fmt(value, digits)
                if summary is not None and len(summary["rounds"]) > 1:
                    text += f" [{summary['min']:.{digits}f}..{summary['max']:.{digits}f}]"
                cells.append(f"{text:>22}")
            elif summary is None or summary["median"] is None:
                cells.append(f"{'-':>22}")
            else:
                text = f"{summary['median']:.{digits}f}"
                if len(summary["rounds"]) > 1:
                    text += f" [{summary['min']:.{digits}f}..{summary['max']:.{digits}f}]"
                cells.append(f"{text:>22}")
        lines.append(f"{label:<{width + 14}}" + "".join(cells))
    half_rounds = max(
        (len(s["rounds"]) for s in (per_round.get(c, {}).get("p99_added_ms") for c in cols) if s), default=0
    )
    if half_rounds < 3:
        # Measured here: one JVM or scheduler hiccup moves a 5-10 s run's p99 by 5-20 ms on any path.
        lines.append(
            f"note: p99 added comes from {half_rounds} round(s); p99 moves by 5-20 ms between runs on every path "
            "here, so only a full run's median (3+ rounds) is worth comparing with 1 ms; p95 and avg are steadier."
        )
    foreign = report.get("foreign_load", {})
    if foreign.get("runs_over_5_percent"):
        runs = ", ".join(
            f"{r['workload']}/{r['path']}/r{r['round']} {r['share']:.0%}" for r in foreign["runs_over_5_percent"]
        )
        lines.append(f"WARNING: other processes used the CPU during: {runs}; those figures are suspect.")
    elif foreign:
        lines.append(
            f"other processes on the machine: at most {foreign.get('worst_share', 0):.1%} of the CPU during any run"
        )
    lines.append(
        "trust first: the CPU ratios vs haproxy (same round, same work); throughput ratios vs direct swing "
        "by ±0.2 run to run here: judge them by their [min..max]."
    )
    lines.append("")
    for name, verdicts in report.get("targets", {}).items():
        verdict = {True: "met", False: "MISSED", None: "?"}
        clarity = {True: "", False: " (rounds disagree: within noise)", None: " (one round)"}
        parts = [
            f"{key} {_fmt(v['value'], 3)} ({v['target']}): {verdict[v['met']]}{clarity[v['clear']]}"
            for key, v in verdicts.items()
        ]
        lines.append(f"targets, {headers[name]}: " + "; ".join(parts))
    return "\n".join(lines)
