"""The deployment assets, checked with the real tools that read them (no cluster, no systemd as PID 1):
the Helm chart rendered by `helm template` and linted by `helm lint --strict` (Helm 3 built from its
Go module by `make helm-tool`, under .cache/helm), then what it renders checked against the proxy's own
configuration; the systemd units by `systemd-analyze verify`. Without helm they fail, not skip."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from quotagate.config import load_config
from quotagate.config.written_paths import written_folders
from tests.support.compose import compose_tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "quotagate"
UNITS = ROOT / "deploy" / "systemd"


def helm_binary() -> Path:
    version = re.search(r"^HELM_VERSION := (\S+)", (ROOT / "Makefile").read_text(), re.M)
    assert version, "the Makefile names no HELM_VERSION"
    path = ROOT / ".cache" / "helm" / version.group(1) / "helm"
    if not path.exists():
        pytest.fail(f"{path.relative_to(ROOT)} is missing: run `make helm-tool`, then the tests again.", pytrace=False)
    return path


def helm(*args: str) -> str:
    result = subprocess.run(
        [str(helm_binary()), *args], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def render(*values: str) -> dict[str, dict[str, Any]]:
    """`helm template` with --set `values`: kind -> the object (one of each kind here)."""
    args = [arg for value in values for arg in ("--set", value)]
    text = helm("template", "qg", str(CHART), "--namespace", "kafka", *args)
    to_json = "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)"
    result = subprocess.run(
        [compose_tool("python"), "-c", to_json], input=text, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    objects = json.loads(result.stdout)
    kinds = [obj["kind"] for obj in objects]
    assert len(kinds) == len(set(kinds)), kinds
    return {obj["kind"]: obj for obj in objects}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    return render("serviceMonitor.enabled=true", "redisUrl=redis://redis.kafka.svc:6379/0")


def test_helm_lint_strict_passes() -> None:
    out = helm("lint", "--strict", str(CHART), "--set", "serviceMonitor.enabled=true")
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


def test_the_chart_makes_every_object_a_deployment_needs(rendered: dict[str, dict[str, Any]]) -> None:
    assert set(rendered) == {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"}
    assert "ServiceMonitor" not in render(), "the ServiceMonitor needs the operator's CRDs: off unless asked"
    assert rendered["PodDisruptionBudget"]["spec"]["maxUnavailable"] == 1


def chart_config(rendered: dict[str, dict[str, Any]], tmp_path: Path) -> Path:
    path = tmp_path / "etc" / "quotagate.toml"
    path.parent.mkdir()
    path.write_text(rendered["ConfigMap"]["data"]["quotagate.toml"])
    return path


def test_the_configmap_holds_a_configuration_check_config_accepts(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    path = chart_config(rendered, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "check-config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    config = load_config(path)
    assert config.proxy.listen_host == "0.0.0.0" and config.metrics.host == "0.0.0.0"
    assert config.cluster.processes == rendered["Deployment"]["spec"]["replicas"] == 2
    assert config.cluster.redis_url == "redis://redis.kafka.svc:6379/0"
    assert len(list(config.quotas.items())) == 1, "values.yaml extraConfig quota"


def test_the_service_and_the_pods_carry_exactly_the_configured_ports(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    config = load_config(chart_config(rendered, tmp_path))
    first, last = config.proxy.broker_node_ids
    expected = {"bootstrap": config.proxy.port, "metrics": config.metrics.port}
    expected |= {f"broker-{node}": config.proxy.broker_port(node) for node in range(first, last + 1)}
    container = rendered["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert {port["name"]: port["containerPort"] for port in container["ports"]} == expected
    service = {port["name"]: (port["port"], port["targetPort"]) for port in rendered["Service"]["spec"]["ports"]}
    assert service == {name: (port, name) for name, port in expected.items()}, "outside port = inside port"
    wider = render("proxy.brokerNodeIds={1,5}")
    assert [p["name"] for p in wider["Service"]["spec"]["ports"]][1:-1] == [f"broker-{n}" for n in range(1, 6)]


def test_the_pods_probe_readyz_and_healthz_and_drain_before_they_are_killed(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    config = load_config(chart_config(rendered, tmp_path))
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert pod["terminationGracePeriodSeconds"] > config.proxy.shutdown_timeout_seconds
    assert container["args"] == ["run", "--config", "/etc/quotagate/quotagate.toml"]
    strategy = rendered["Deployment"]["spec"]["strategy"]["rollingUpdate"]
    assert strategy == {"maxUnavailable": 0, "maxSurge": 1}
    monitor = rendered["ServiceMonitor"]["spec"]
    assert monitor["endpoints"][0]["port"] == "metrics" and monitor["endpoints"][0]["path"] == "/metrics"
    assert monitor["selector"]["matchLabels"] == rendered["Service"]["spec"]["selector"]


def test_the_pods_run_as_the_images_user_and_write_only_to_their_data_volume(
    rendered: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    config = load_config(chart_config(rendered, tmp_path))
    pod = rendered["Deployment"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsNonRoot"]
    assert container["securityContext"]["readOnlyRootFilesystem"]
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert mounts["/etc/quotagate"].get("readOnly") is True
    writable = [path for path, mount in mounts.items() if not mount.get("readOnly")]
    everything = replace(
        config, usage=replace(config.usage, enabled=True), admin=replace(config.admin, alter_principals=("admin",))
    )
    for key, folder in written_folders(everything):
        assert any(folder.is_relative_to(path) for path in writable), f"{key}: {folder} is on no writable volume"


def test_systemd_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    # verify checks that each command exists: this venv's quotagate stands in for /opt/quotagate's.
    for unit in UNITS.iterdir():
        text = unit.read_text().replace("/opt/quotagate/bin/quotagate", str(Path(sys.executable).parent / "quotagate"))
        (tmp_path / unit.name).write_text(text)
    names = sorted(unit.name for unit in UNITS.iterdir())
    assert names == ["quotagate-liveness.service", "quotagate-liveness.timer", "quotagate.service"]
    result = subprocess.run(
        [analyze, "verify", "--man=no", *names], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr


def test_the_systemd_unit_probes_as_the_chart_does_and_writes_only_its_state_directory() -> None:
    unit = (UNITS / "quotagate.service").read_text()
    liveness = (UNITS / "quotagate-liveness.service").read_text()
    assert re.search(r"^ExecStartPost=.*quotagate probe --ready --config /etc/quotagate/quotagate.toml", unit, re.M)
    assert re.search(r"^ExecStart=.*quotagate probe --timeout 5 --config /etc/quotagate/quotagate.toml", liveness, re.M)
    assert re.search(r"^ExecStart=\S+ run --config /etc/quotagate/quotagate.toml$", unit, re.M)
    assert {
        "ProtectSystem=strict",
        "StateDirectory=quotagate",
        "User=quotagate",
        "ExecReload=/bin/kill -HUP $MAINPID",
    } <= (set(unit.splitlines()))
    stop = int(re.search(r"^TimeoutStopSec=(\d+)$", unit, re.M).group(1))  # type: ignore[union-attr]
    assert stop > 30, "longer than the default shutdown_timeout_seconds"


def test_the_chart_deploys_this_version_and_make_test_builds_helm() -> None:
    from quotagate import __version__

    chart = (CHART / "Chart.yaml").read_text()
    assert f'appVersion: "{__version__}"' in chart, "the image tag defaults to the chart's appVersion"
    assert re.search(r"^test: .*\bhelm-tool\b", (ROOT / "Makefile").read_text(), re.M)
