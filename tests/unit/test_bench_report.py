"""bench/report.py's arithmetic, on rounds whose right figures are known by construction."""

from __future__ import annotations

from typing import Any

import pytest

from bench import report
from bench.report import DIRECT, HAPROXY, NO_QUOTA, QUOTA


def test_spread_is_the_range_over_the_median() -> None:
    assert report.spread([9.0, 10.0, 11.0]) == pytest.approx(0.2)
    assert report.spread([5.0]) is None, "one round has no spread"
    assert report.spread([0.0, 0.0]) is None, "a zero median has no relative spread"


def test_summarize_rounds_each_figure_and_keeps_the_rounds() -> None:
    assert report.summarize([1.23456, 2.5, 1.0], digits=2) == {
        "median": 1.23,
        "min": 1.0,
        "max": 2.5,
        "spread": round(1.5 / 1.23456, 3),
        "rounds": [1.23, 2.5, 1.0],
    }
    assert report.summarize([])["median"] is None


def test_paired_ratios_are_taken_round_by_round_and_skip_a_zero_base() -> None:
    rounds = {"a": [{"x": 10.0}, {"x": 30.0}, {"x": 7.0}], "b": [{"x": 5.0}, {"x": 10.0}, {"x": 0.0}]}
    ratio = report.paired(rounds, "a", "b", lambda r: r["x"], "/")
    assert ratio is not None and ratio["rounds"] == [2.0, 3.0] and ratio["median"] == 2.5
    difference = report.paired(rounds, "a", "b", lambda r: r["x"], "-")
    assert difference is not None and difference["rounds"] == [5.0, 20.0, 7.0] and difference["median"] == 7.0
    assert report.paired(rounds, "a", "missing", lambda r: r["x"], "/") is None


def test_cpu_per_gb_weighs_rounds_by_the_bytes_they_moved() -> None:
    produce = [{"path_cpu_s": 2.0, "payload_bytes": 1e9}, {"path_cpu_s": 1.0, "payload_bytes": 0.25e9}]
    consume = [{"path_cpu_s": 0.5, "payload_bytes": 0.5e9}]
    assert report.cpu_per_gb(produce, consume) == {
        "cpu_s_per_gb": 2.0,  # 3.5 s over 1.75 GB, not the mean of 2, 4 and 1
        "cpu_s_per_gb_produce": 2.4,
        "cpu_s_per_gb_consume": 1.0,
        "gb_measured": 1.75,
    }
    assert report.cpu_per_gb([], [])["cpu_s_per_gb"] is None


def path_rounds(rate: float, cpu_per_gb: float, cpu_per_request: float, p99_ms: float) -> dict[str, list[dict]]:
    """Three rounds of every workload of one path: throughput `rate` (MB/s, requests/s) in each,
    the given CPU per GB and per small request, and a p99 at half load."""
    rounds: dict[str, list[dict[str, Any]]] = {w: [] for w in ("produce", "consume", "small_requests")}
    rounds.update(connections=[], half_load=[])
    for number in range(3):
        steady = {"mb_per_s": rate, "records_per_s": rate * 1000, "p50_ms": 1.0, "p99_ms": p99_ms}
        steady |= {"p95_ms": p99_ms - 1, "avg_ms": 1.0}
        moved = {"payload_bytes": 1e9, "path_cpu_s": cpu_per_gb, "round": number}
        rounds["produce"].append({"steady": steady, **moved})
        rounds["consume"].append({"result": {"mb_per_s": rate}, **moved})
        rounds["small_requests"].append(
            {
                "result": {"requests_per_s": rate, "request_latency_avg_ms": 1.0},
                "requests_counted": 100_000,
                "path_cpu_s": cpu_per_request * 100_000,
                "path_user_cpu_s": cpu_per_request * 100_000 / 2,
                "round": number,
            }
        )
        latency = {"p50_ms": 1.0, "p99_ms": p99_ms}
        result = {"requests_per_s": rate, "latency": latency, "requests": 1000, "watched_cpu_s_active": 1.0}
        rounds["connections"].append({"result": result, "connections": 200, "round": number})
        rounds["half_load"].append({"steady": steady, "round": number})
    return rounds


def test_build_compares_each_proxy_with_direct_and_its_cpu_with_haproxys() -> None:
    raw = {
        DIRECT: path_rounds(100.0, 0.0, 0.0, p99_ms=4.0),
        HAPROXY: path_rounds(95.0, 2.0, 10e-6, p99_ms=4.5),
        NO_QUOTA: path_rounds(90.0, 2.4, 15e-6, p99_ms=5.0),
        QUOTA: path_rounds(80.0, 3.0, 20e-6, p99_ms=6.0),
    }
    built = report.build(raw, {name: 50.0 for name in raw})
    assert built["produce_ratio_vs_direct"] == 0.8 and built["no_quota"]["produce_ratio_vs_direct"] == 0.9
    assert built["cpu_per_gb_ratio_vs_haproxy"] == 1.5
    assert built["cpu_per_request_ratio_vs_haproxy"] == 2.0
    assert built["p99_added_ms"] == 2.0
    assert built["paths"][QUOTA]["cpu_s_per_100k_requests"] == 2.0
    assert built["paths"][QUOTA]["user_cpu_us_per_small_request"] == 10.0
    assert built["paths"][QUOTA]["system_cpu_us_per_small_request"] == 10.0
    quota_targets = built["targets"][QUOTA]
    assert quota_targets["produce_ratio_vs_direct"] == {
        "value": 0.8,
        "target": ">= 0.9",
        "met": False,
        "rounds_range": [0.8, 0.8],
        "clear": True,
    }
    assert quota_targets["cpu_per_gb_ratio_vs_haproxy"]["met"] is False
    assert built["targets"][NO_QUOTA]["produce_ratio_vs_direct"]["met"] is True
    assert "cpu_per_gb_ratio_vs_haproxy" not in built["haproxy"], "haproxy is not compared with itself"


def test_the_usage_path_is_compared_as_the_others_with_cpu_per_gb_of_each_direction() -> None:
    raw = {
        DIRECT: path_rounds(100.0, 0.0, 0.0, p99_ms=4.0),
        HAPROXY: path_rounds(95.0, 2.0, 10e-6, p99_ms=4.5),
        QUOTA: path_rounds(80.0, 3.0, 20e-6, p99_ms=6.0),
        report.USAGE: path_rounds(80.0, 2.4, 12e-6, p99_ms=6.0),
    }
    built = report.build(raw, {name: 50.0 for name in raw})
    usage = built["usage"]
    assert usage["cpu_per_gb_ratio_vs_haproxy"] == 1.2 and usage["cpu_per_request_ratio_vs_haproxy"] == 1.2
    assert usage["cpu_per_gb_produce_ratio_vs_haproxy"] == 1.2 and usage["cpu_per_gb_consume_ratio_vs_haproxy"] == 1.2
    assert built["paths"][report.USAGE]["cpu_s_per_100k_requests"] == 1.2
    assert built["targets"][report.USAGE]["cpu_per_request_ratio_vs_haproxy"]["met"] is True
    assert "qg usage" in report.table(built)


def test_a_target_whose_rounds_straddle_the_bound_is_not_clear() -> None:
    comparison = {
        "produce_ratio_vs_direct": 0.92,
        "per_round": {"produce_ratio_vs_direct": {"min": 0.85, "max": 0.97, "rounds": [0.85, 0.92, 0.97]}},
    }
    verdict = report.targets(comparison)["produce_ratio_vs_direct"]
    assert (verdict["met"], verdict["clear"]) == (True, False)
    assert report.targets({})["p99_added_ms"]["met"] is None, "a figure not measured meets nothing"


def test_foreign_load_flags_runs_where_other_processes_took_over_5_percent() -> None:
    raw = {
        DIRECT: {"produce": [{"foreign_cpu_s": 0.9, "wall_s": 10.0, "round": 0}, {"wall_s": 10.0}]},
        QUOTA: {"produce": [{"foreign_cpu_s": 1.1, "wall_s": 10.0, "round": 1}]},
    }
    assert report.foreign_load(raw, cpus=2) == {
        "worst_share": 0.055,
        "runs_over_5_percent": [{"path": QUOTA, "workload": "produce", "round": 1, "share": 0.055}],
    }


def test_the_table_shows_medians_with_their_spread_and_the_verdicts() -> None:
    raw = {DIRECT: path_rounds(100.0, 0.0, 0.0, 4.0), QUOTA: path_rounds(80.0, 3.0, 20e-6, 6.0)}
    raw[QUOTA]["produce"][0]["steady"] = dict(raw[QUOTA]["produce"][0]["steady"], mb_per_s=72.0)
    text = report.table(report.build(raw, {}))
    produce_row = next(line for line in text.splitlines() if line.startswith("produce MB/s"))
    assert produce_row.split()[-4:] == ["100.0", "±0%", "80.0", "±5%"]  # (80 - 72) / 80, halved
    assert "targets, qg quotas: produce_ratio_vs_direct 0.800 (>= 0.9): MISSED" in text
