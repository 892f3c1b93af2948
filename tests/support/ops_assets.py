"""The operator assets in ops/ (the Grafana dashboard, the Prometheus alerts and their tests), read as
data, and promtool (Debian's prometheus package, installed by `make prometheus-tools`) to check them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
OPS = ROOT / "ops"
DASHBOARD = OPS / "grafana" / "quotagate-dashboard.json"
ALERTS = OPS / "prometheus" / "alerts.yml"
ALERTS_TEST = OPS / "prometheus" / "alerts_test.yml"
PROMETHEUS_EXAMPLE = OPS / "prometheus" / "prometheus.example.yml"
ENSURE_SCRIPT = ROOT / "scripts" / "ensure_debian_tools.sh"


def grafana_to_promql(expr: str) -> str:
    """The expression with Grafana's variables replaced by values that make plain PromQL."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    expr = expr.replace("${__range_s}", "3600").replace("$__range_s", "3600")
    return re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+", ".*", expr)  # dashboard variables only appear in =~ matchers


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
    return panels


def alert_rule_chunks(text: str) -> list[tuple[str, str]]:
    """(name, text) of each rule in a rules file, split at `- alert:` / `- record:` lines."""
    chunks: list[tuple[str, str]] = []
    for match in re.finditer(
        r"^\s*- (?:alert|record):\s*(\S+)\s*\n(.*?)(?=^\s*- (?:alert|record):|\Z)", text, re.M | re.S
    ):
        chunks.append((match.group(1), match.group(2)))
    return chunks


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail(
            "promtool is not on PATH, so the Prometheus rules cannot be checked. "
            "Run `make prometheus-tools` (scripts/ensure_debian_tools.sh installs Debian's prometheus package), "
            "then run the tests again.",
            pytrace=False,
        )
    return path


def run_promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([promtool(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)


# Every series the proxy exports, as the dashboard, the alerts and the docs may name them.
ENTITY_METRICS = {
    "quotagate_produce_bytes_total",
    "quotagate_fetch_bytes_total",
    "quotagate_produce_throttle_time_seconds_total",
    "quotagate_fetch_throttle_time_seconds_total",
    "quotagate_request_time_seconds_total",
    "quotagate_request_throttle_time_seconds_total",
    "quotagate_controller_mutations_total",
    "quotagate_controller_mutation_throttle_time_seconds_total",
    "quotagate_throttled_responses_total",
    "quotagate_quota_tokens",
    "quotagate_quota_limit",
}
PROXY_METRICS = {
    "quotagate_request_exempt_time_seconds_total",
    "quotagate_delay_queue_size",
    "quotagate_muted_connections",
    "quotagate_client_connections_open",
    "quotagate_client_connections_total",
    "quotagate_requests_total",
    "quotagate_bytes_total",
    "quotagate_upstream_connect_failures_total",
    "quotagate_protocol_errors_total",
    "quotagate_frames_refused_total",
    "quotagate_partial_frame_bytes",
    "quotagate_config_reloads_total",
    "quotagate_background_task_failures_total",
    "quotagate_tls_handshake_failures_total",
    "quotagate_usage_records_dropped_total",
    "quotagate_usage_records_written_total",
    "quotagate_upstream_up",
    "quotagate_topic_threshold_refusals_total",
    "quotagate_mutation_refusals_total",
    "quotagate_entities_exported",
    "quotagate_entities_folded",
    "quotagate_cluster_fallback",
    "quotagate_cluster_processes",
    "quotagate_cluster_redis_calls_total",
    "quotagate_cluster_fallbacks_total",
    "quotagate_cluster_rejoins_total",
}
HISTOGRAMS = {"quotagate_upstream_latency_seconds"}
KNOWN_METRICS = (
    ENTITY_METRICS
    | PROXY_METRICS
    | {f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
    | {"up"}
)
