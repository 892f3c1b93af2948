"""Checks of the operator assets in ops/: the Grafana dashboard, the Prometheus alerts and their tests.

Every PromQL expression may use only the metrics quotagate exports (and Prometheus's `up`). The promtool
tests need `promtool` on PATH: `make prometheus-tools` (scripts/ensure_debian_tools.sh) installs it. Without
it they fail rather than skip, so that a run cannot pass without checking the rules.
"""

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

# The metrics quotagate exports (docs: ops/README.md).
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
}
HISTOGRAMS = {"quotagate_upstream_latency_seconds"}
KNOWN_METRICS = (
    ENTITY_METRICS
    | PROXY_METRICS
    | {f"{name}{suffix}" for name in HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")}
    | {"up"}
)

# PromQL's aggregation operators and functions (Prometheus 2.x).
PROMQL_FUNCTIONS = set(
    """
    sum min max avg group stddev stdvar count count_values bottomk topk quantile
    abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week days_in_month
    delta deriv exp floor histogram_quantile holt_winters hour idelta increase irate label_join label_replace
    ln log2 log10 minute month predict_linear rate resets round scalar sgn sort sort_desc sqrt time timestamp
    vector year avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time
    stddev_over_time stdvar_over_time last_over_time present_over_time
    """.split()
)
PROMQL_KEYWORDS = set("by without on ignoring group_left group_right bool and or unless offset inf nan".split())

REQUIRED_ALERTS = {
    "QuotagateEntityThrottled",
    "QuotagateUpstreamDown",
    "QuotagateUsageRecordsDropped",
    "QuotagateConfigReloadRejected",
    "QuotagateProtocolErrors",
    "QuotagateSharedQuotasFallback",
}


# ------------------------------------------------------------------------------------------- helpers


def grafana_to_promql(expr: str) -> str:
    """The expression with Grafana's variables replaced by values that make plain PromQL."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    expr = expr.replace("${__range_s}", "3600").replace("$__range_s", "3600")
    return re.sub(r"\$\{\w+(?::\w+)?\}|\$\w+", ".*", expr)  # dashboard variables only appear in =~ matchers


def promql_identifiers(expr: str) -> tuple[set[str], set[str]]:
    """(metric names, function names) used by a PromQL expression, found by a small tokenizer."""
    text = grafana_to_promql(expr)
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', text)  # string literals
    text = re.sub(r"\{[^{}]*\}", "{}", text)  # label matchers
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", r"\1()", text)  # label lists
    metrics: set[str] = set()
    functions: set[str] = set()
    for match in re.finditer(r"(?<![\w.:])([a-zA-Z_:][\w:]*)(\s*(?:(?:by|without)\s*\(\)\s*)?\()?", text):
        name, call = match.group(1), match.group(2)
        if name in PROMQL_KEYWORDS:
            continue
        (functions if call else metrics).add(name)
    return metrics, functions


def check_expr(where: str, expr: str) -> list[str]:
    """Problems with one expression: metric names outside the exported list, unknown functions."""
    problems = []
    assert expr.strip(), f"{where}: empty expression"
    # The plain check: every quotagate_* name anywhere in the text (also inside strings) is exported.
    for name in set(re.findall(r"quotagate_[a-z_]+", expr)):
        if name not in KNOWN_METRICS:
            problems.append(f"{where}: unknown metric {name!r} in {expr!r}")
    metrics, functions = promql_identifiers(expr)
    for name in sorted(metrics - KNOWN_METRICS):
        problems.append(f"{where}: unknown metric {name!r} in {expr!r}")
    for name in sorted(functions - PROMQL_FUNCTIONS):
        problems.append(f"{where}: unknown PromQL function {name!r} in {expr!r}")
    return sorted(set(problems))


def load_dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def dashboard_panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    panels = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
    return panels


def dashboard_exprs(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, expr) for every panel target."""
    exprs = []
    for panel in dashboard_panels(dashboard):
        for target in panel.get("targets", []):
            exprs.append((f"panel {panel['id']} {panel['title']!r} target {target.get('refId')}", target["expr"]))
    return exprs


def variable_query(variable: dict[str, Any]) -> str:
    query = variable.get("query")
    return query.get("query", "") if isinstance(query, dict) else query or ""


def alert_rule_chunks(text: str) -> list[tuple[str, str]]:
    """(name, text) of each rule in a rules file, split at `- alert:` / `- record:` lines."""
    chunks: list[tuple[str, str]] = []
    for match in re.finditer(
        r"^\s*- (?:alert|record):\s*(\S+)\s*\n(.*?)(?=^\s*- (?:alert|record):|\Z)", text, re.M | re.S
    ):
        chunks.append((match.group(1), match.group(2)))
    return chunks


def rule_expr(chunk: str) -> str:
    """The `expr:` of one rule: inline (plain or quoted) or a block scalar (`|`, `>`)."""
    lines = chunk.splitlines()
    for i, line in enumerate(lines):
        match = re.match(r"^(\s*)expr:\s*(.*?)\s*$", line)
        if not match:
            continue
        indent, value = len(match.group(1)), match.group(2)
        if value and value[0] in "|>":
            block = []
            for following in lines[i + 1 :]:
                if following.strip() and len(following) - len(following.lstrip()) <= indent:
                    break
                block.append(following.strip())
            return " ".join(part for part in block if part)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            return value[1:-1]
        return value
    raise AssertionError(f"no expr in rule:\n{chunk}")


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


# ------------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_finds_metrics_and_functions() -> None:
    metrics, functions = promql_identifiers(
        'histogram_quantile(0.99, sum by (le) (rate(quotagate_upstream_latency_seconds_bucket{job=~"$job"}'
        '[$__rate_interval]))) / on (instance) group_left up{job="quotagate"} > bool 1e6 or vector(0) offset 5m'
    )
    assert metrics == {"quotagate_upstream_latency_seconds_bucket", "up"}
    assert functions == {"histogram_quantile", "sum", "rate", "vector"}
    assert check_expr("t", "rate(quotagate_produce_bytes[5m])")  # without _total: not exported
    assert check_expr("t", "rate(kafka_server_bytes_total[5m])")
    assert check_expr("t", "quotagate_upstream_latency_seconds")  # a histogram has no bare series
    assert check_expr("t", "raet(quotagate_bytes_total[5m])")
    assert not check_expr("t", 'label_replace(rate(quotagate_bytes_total[5m]), "g", "x", "", "")')


def test_rule_parser() -> None:
    chunks = alert_rule_chunks(
        "groups:\n  - name: g\n    rules:\n      - alert: A\n        expr: up == 0\n        for: 1m\n"
        "      - alert: B\n        expr: |\n          sum(\n            x\n          ) > 0\n        labels: {}\n"
        "      - record: c:d\n        expr: 'rate(y[5m])'\n"
    )
    assert [(name, rule_expr(chunk)) for name, chunk in chunks] == [
        ("A", "up == 0"),
        ("B", "sum( x ) > 0"),
        ("c:d", "rate(y[5m])"),
    ]


# ------------------------------------------------------------------------------------------- dashboard


def test_dashboard_is_valid_json() -> None:
    dashboard = load_dashboard()
    assert dashboard["title"] == "quotagate"
    assert dashboard["uid"]
    assert 36 <= dashboard["schemaVersion"] <= 41
    assert isinstance(dashboard["panels"], list) and dashboard["panels"]


def test_dashboard_rows() -> None:
    rows = [panel["title"] for panel in load_dashboard()["panels"] if panel["type"] == "row"]
    assert rows == ["Overview", "Throttling", "Quotas", "Health"]


def test_dashboard_panel_ids_and_grid() -> None:
    panels = dashboard_panels(load_dashboard())
    ids = [panel["id"] for panel in panels]
    assert all(isinstance(i, int) and i > 0 for i in ids)
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    cells: dict[tuple[int, int], int] = {}
    for panel in panels:
        grid = panel["gridPos"]
        x, y, w, h = grid["x"], grid["y"], grid["w"], grid["h"]
        assert w > 0 and h > 0 and x >= 0 and y >= 0, panel["title"]
        assert x + w <= 24, f"panel {panel['title']!r} is wider than the 24-column grid"
        for cx in range(x, x + w):
            for cy in range(y, y + h):
                other = cells.setdefault((cx, cy), panel["id"])
                assert other == panel["id"], f"panels {other} and {panel['id']} overlap at {(cx, cy)}"


def test_dashboard_panels_in_their_rows() -> None:
    """Panels follow their row in y order, so each row groups the panels listed after it."""
    panels = load_dashboard()["panels"]
    ys = [(panel["gridPos"]["y"], panel["gridPos"]["x"]) for panel in panels]
    assert ys == sorted(ys)
    for panel in panels:
        if panel["type"] != "row":
            assert panel.get("targets"), f"panel {panel['title']!r} has no query"
            assert panel.get("title")


def test_dashboard_datasource_is_a_variable() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    datasource = variables["datasource"]
    assert datasource["type"] == "datasource" and datasource["query"] == "prometheus"
    for panel in dashboard_panels(dashboard):
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
    for variable in variables.values():
        if variable["type"] == "query":
            assert variable["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, variable["name"]


def test_dashboard_template_variables() -> None:
    dashboard = load_dashboard()
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    for name in ("user", "client_id"):
        variable = variables[name]
        assert variable["type"] == "query"
        query = variable_query(variable)
        assert re.fullmatch(rf"label_values\((quotagate_[a-z_]+)(\{{.*\}})?,\s*{name}\)", query), query
        assert variable["includeAll"] and variable["allValue"] == ".*"
    # the entity filters are used by the per-entity panels
    exprs = " ".join(expr for _, expr in dashboard_exprs(dashboard))
    assert 'user=~"$user"' in exprs and 'client_id=~"$client_id"' in exprs


def test_dashboard_uses_only_exported_metrics() -> None:
    dashboard = load_dashboard()
    problems: list[str] = []
    for where, expr in dashboard_exprs(dashboard):
        problems += check_expr(where, expr)
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.*),\s*\w+\)", variable_query(variable))
            assert match, variable["name"]
            problems += check_expr(f"variable {variable['name']}", match.group(1))
    assert not problems, "\n".join(problems)


def test_dashboard_covers_the_main_metrics() -> None:
    used = set(re.findall(r"quotagate_[a-z_]+", " ".join(expr for _, expr in dashboard_exprs(load_dashboard()))))
    missing = KNOWN_METRICS - used - {"up"}
    assert not missing, f"metrics no panel shows: {sorted(missing)}"


def test_dashboard_exprs_parse(tmp_path: Path) -> None:
    """promtool parses every dashboard query (Grafana's variables replaced) as a recording rule."""
    lines = ["groups:", "  - name: dashboard", "    rules:"]
    for panel in dashboard_panels(load_dashboard()):
        for target in panel.get("targets", []):
            lines.append(f"      - record: dashboard:panel_{panel['id']}_{target['refId']}")
            lines.append(f"        expr: {json.dumps(grafana_to_promql(target['expr']))}")
    rules = tmp_path / "dashboard_rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = run_promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr


# ------------------------------------------------------------------------------------------- alerts


def test_alerts_have_the_required_rules_and_annotations() -> None:
    text = ALERTS.read_text()
    assert re.search(r"^\s*- name: quotagate\s*$", text, re.M)
    chunks = dict(alert_rule_chunks(text))
    assert REQUIRED_ALERTS <= set(chunks), f"missing: {sorted(REQUIRED_ALERTS - set(chunks))}"
    for name, chunk in chunks.items():
        assert name.startswith("Quotagate"), name
        for key in ("severity:", "summary:", "description:"):
            assert key in chunk, f"{name} has no {key}"
    throttled = chunks["QuotagateEntityThrottled"]
    assert "$labels.user" in throttled and "$labels.client_id" in throttled


def test_alerts_use_only_exported_metrics() -> None:
    problems: list[str] = []
    for name, chunk in alert_rule_chunks(ALERTS.read_text()):
        problems += check_expr(name, rule_expr(chunk))
    assert not problems, "\n".join(problems)


def test_every_alert_is_tested_firing_and_not_firing() -> None:
    names = {name for name, _ in alert_rule_chunks(ALERTS.read_text())}
    cases = re.findall(
        r"alertname:\s*(\w+)\s*\n\s*exp_alerts:(.*?)(?=\n\s*- eval_time:|\n\s*- interval:|\Z)",
        ALERTS_TEST.read_text(),
        re.S,
    )
    fired = {name for name, body in cases if "exp_labels" in body}
    quiet = {name for name, body in cases if body.strip() == "[]"}
    assert names <= fired, f"alerts never tested firing: {sorted(names - fired)}"
    assert names <= quiet, f"alerts never tested not firing: {sorted(names - quiet)}"


def test_promtool_check_rules() -> None:
    result = run_promtool("check", "rules", str(ALERTS.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    found = re.search(r"SUCCESS: (\d+) rules found", result.stdout + result.stderr)
    assert found and int(found.group(1)) == len(alert_rule_chunks(ALERTS.read_text())), result.stdout


def test_promtool_test_rules() -> None:
    result = run_promtool("test", "rules", str(ALERTS_TEST.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_promtool_check_config() -> None:
    result = run_promtool("check", "config", str(PROMETHEUS_EXAMPLE.relative_to(ROOT)))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr  # alerts.yml, by relative path


# ------------------------------------------------------------------------------------------- tooling and docs


def test_ensure_prometheus_script() -> None:
    subprocess.run(["bash", "-n", str(ENSURE_SCRIPT)], check=True, timeout=30)
    promtool()  # installed: the script must then be a no-op that prints the versions
    result = subprocess.run(
        ["bash", str(ENSURE_SCRIPT), "prometheus", "promtool", "prometheus"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "promtool, version" in result.stdout and "prometheus, version" in result.stdout, result.stdout
    assert "installing" not in result.stderr


def test_makefile_has_prometheus_tools_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^prometheus-tools:.*\n\t.*scripts/ensure_debian_tools\.sh prometheus ", makefile, re.M)


def test_readme_documents_cardinality() -> None:
    from quotagate.config.settings import MetricsConfig

    readme = (OPS / "README.md").read_text()
    assert "metrics.max_entities" in readme
    assert str(MetricsConfig().max_entities) in readme
    assert '"other"' in readme
    assert "make prometheus-tools" in readme
