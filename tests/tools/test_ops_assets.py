"""The operator assets checked by promtool (Debian's prometheus package: `make prometheus-tools`). Without it
these tests fail rather than skip, so that a run cannot pass without checking the rules."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.support.ops_assets import (
    ALERTS,
    ALERTS_TEST,
    ENSURE_SCRIPT,
    PROMETHEUS_EXAMPLE,
    ROOT,
    alert_rule_chunks,
    dashboard_panels,
    grafana_to_promql,
    load_dashboard,
    promtool,
    run_promtool,
)


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
