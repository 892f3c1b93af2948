"""Checks of docker-compose.yml and the Dockerfile without a Docker engine (there is none here).

docker-compose.yml is parsed and normalised by `docker-compose config` (docker-compose 1.29.2, the
Python v1 from PyPI, installed by `make compose-tools` in .cache/compose-venv), and loaded again with
compose-go, the loader of `docker compose` v2 (scripts/compose_check, built by the same target), which
must agree on the profiles, mounts and healthchecks. The tests then check
what it would run: every file it mounts exists and is the one the other tests check, every quotagate
configuration passes `quotagate check-config`, Prometheus's configuration as mounted passes `promtool
check config`, the ports and profiles agree with the configurations. Without docker-compose they fail
rather than skip. No container is started: tests/stack is what runs against a started stack.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from quotagate import __version__
from quotagate.config.written_paths import written_folders
from quotagate.quotas import ANONYMOUS, QuotaKey
from tests.support.compose import (
    ROOT,
    active,
    bind_mounts,
    compose_config,
    compose_v2,
    config_path_in_command,
    kafka_services,
    load_yaml,
    mounted_source,
    named_volumes,
    place_mounts,
    quotagate_config,
    services,
)
from tests.support.ops_assets import ALERTS, DASHBOARD, run_promtool

DOCKERFILE = ROOT / "Dockerfile"
CORE_SERVICES = {"kafka-1", "quotagate", "demo-producer", "prometheus", "grafana"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return compose_config()


# ------------------------------------------------------------------------------------------- the compose file


@pytest.mark.parametrize(
    ("profiles", "expected"),
    [
        ((), CORE_SERVICES),
        (("cluster",), CORE_SERVICES | {"kafka-2", "kafka-3"}),
        (("test",), CORE_SERVICES | {"tests"}),
        (("cluster", "test"), CORE_SERVICES | {"kafka-2", "kafka-3", "tests"}),
    ],
)
def test_profiles_start_one_or_three_brokers_and_the_tests(
    compose: dict[str, Any], profiles: tuple[str, ...], expected: set[str]
) -> None:
    started = active(compose, *profiles)
    assert started == expected
    brokers = started & set(kafka_services(compose))
    assert len(brokers) == (3 if "cluster" in profiles else 1)
    for name in started:
        service = services(compose)[name]
        needs = set(service.get("depends_on", {}))
        if service.get("network_mode", "").startswith("service:"):
            needs.add(service["network_mode"].split(":", 1)[1])
        assert needs <= started, f"{name} needs {sorted(needs - started)}, not started with profiles {profiles}"
    assert set(compose_v2(*profiles)["services"]) == expected, "docker compose v2's loader starts other services"


def test_compose_v2_loader_sees_the_same_mounts_and_healthchecks(compose: dict[str, Any]) -> None:
    loaded = compose_v2("cluster", "test")["services"]
    assert set(loaded) == set(services(compose))
    for name, service in loaded.items():
        mounts = [(Path(v["source"]), v["target"]) for v in service.get("volumes", []) if v["type"] == "bind"]
        assert mounts == bind_mounts(services(compose)[name]), name
        assert service["healthcheck"]["test"] == services(compose)[name]["healthcheck"]["test"], name
        binds = [v for v in service.get("volumes", []) if v["type"] == "bind"]
        assert all(v.get("read_only") for v in binds), f"{name} mounts a file writable"
        volumes = {v["target"]: not v.get("read_only") for v in service.get("volumes", []) if v["type"] == "volume"}
        assert volumes == {target: mode == "rw" for target, mode in named_volumes(services(compose)[name]).items()}


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        check = service.get("healthcheck", {})
        assert check.get("test") and not check.get("disable") and check["test"] != ["NONE"], f"{name}: no healthcheck"


def test_dependencies_wait_for_health(compose: dict[str, Any]) -> None:
    for name, service in services(compose).items():
        for needed, condition in service.get("depends_on", {}).items():
            assert condition == {"condition": "service_healthy"}, f"{name} -> {needed}: {condition}"


def test_kafka_is_the_official_image_in_kraft_mode(compose: dict[str, Any]) -> None:
    brokers = kafka_services(compose)
    assert set(brokers) == {"kafka-1", "kafka-2", "kafka-3"}
    node_ids = {}
    for name, service in brokers.items():
        env = service["environment"]
        node_ids[name] = int(env["KAFKA_NODE_ID"])
        assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == "1@kafka-1:9093"
        assert "ports" not in service, f"{name} is published: clients must go through the proxy"
        cluster_id = env["CLUSTER_ID"]
        assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16, "CLUSTER_ID is not a Kafka Uuid"
        assert "kafka-broker-api-versions.sh" in " ".join(service["healthcheck"]["test"])
    assert node_ids == {"kafka-1": 1, "kafka-2": 2, "kafka-3": 3}
    assert len({service["environment"]["CLUSTER_ID"] for service in brokers.values()}) == 1
    controller = brokers["kafka-1"]["environment"]
    assert controller["KAFKA_PROCESS_ROLES"] == "broker,controller"
    assert "CONTROLLER://:9093" in controller["KAFKA_LISTENERS"]
    assert int(controller["KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR"]) == 1  # kafka-1 alone must work


def test_mounted_files_exist_and_are_the_ones_the_tests_check(compose: dict[str, Any]) -> None:
    mounted = set()
    for name, service in services(compose).items():
        for source, target in bind_mounts(service):
            assert source.is_file(), f"{name} mounts {source} at {target}: no such file"
            assert source.resolve().is_relative_to(ROOT), f"{name} mounts {source} from outside the repo"
            mounted.add(source.resolve())
    # The dashboard and the alerts are the very files tests/unit/test_ops_assets.py checks.
    assert (
        mounted_source(
            services(compose)["grafana"], "/var/lib/grafana/dashboards/quotagate/quotagate-dashboard.json"
        ).resolve()
        == DASHBOARD.resolve()
    )
    assert mounted_source(services(compose)["prometheus"], "/etc/prometheus/alerts.yml").resolve() == ALERTS.resolve()
    assert all(
        path.is_relative_to(ROOT / "examples" / "compose") or path.is_relative_to(ROOT / "ops") for path in mounted
    )


def test_every_mounted_quotagate_config_passes_check_config(compose: dict[str, Any]) -> None:
    configs = {
        source
        for service in services(compose).values()
        for source, _ in bind_mounts(service)
        if source.suffix == ".toml"
    }
    assert configs, "no quotagate configuration is mounted"
    for path in sorted(configs):
        result = subprocess.run(
            [sys.executable, "-m", "quotagate", "check-config", str(path)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, f"quotagate check-config {path}:\n{result.stderr}"


def test_quotagate_service_publishes_the_configured_ports(compose: dict[str, Any]) -> None:
    service = services(compose)["quotagate"]
    config = quotagate_config(compose)
    assert service["build"]["target"] == "proxy"
    assert {host for host, _ in config.proxy.bootstrap_servers} <= set(kafka_services(compose))
    assert config.proxy.listen_host == "0.0.0.0" and config.metrics.host == "0.0.0.0"
    node_ids = [int(broker["environment"]["KAFKA_NODE_ID"]) for broker in kafka_services(compose).values()]
    expected = {config.proxy.port, config.metrics.port} | {config.proxy.broker_port(node) for node in node_ids}
    published = {(port["published"], port["target"]) for port in service["ports"]}
    assert published == {(port, port) for port in expected}
    check = service["healthcheck"]["test"]
    assert check[:3] == ["CMD", "quotagate", "probe"] and "--ready" in check
    assert check[check.index("--config") + 1] == config_path_in_command(service)


def test_demo_producer_asks_more_than_its_quota(compose: dict[str, Any]) -> None:
    service = services(compose)["demo-producer"]
    config = quotagate_config(compose)
    env = service["environment"]
    script = mounted_source(service, service["entrypoint"][-1])
    assert script == ROOT / "examples" / "compose" / "demo_producer.py"
    assert service["image"] == services(compose)["quotagate"]["image"]  # kafka-python is in the proxy image
    # It shares the proxy's network namespace, so the advertised "localhost" is the proxy.
    assert service["network_mode"] == "service:quotagate" and config.proxy.advertised_host == "localhost"
    assert env["DEMO_BOOTSTRAP"] == f"localhost:{config.proxy.port}"
    quota = config.quotas.resolve(ANONYMOUS, env["DEMO_CLIENT_ID"], QuotaKey.PRODUCER_BYTE_RATE)
    assert quota is not None and quota.entity.client_id == env["DEMO_CLIENT_ID"]
    assert int(env["DEMO_BYTES_PER_SECOND"]) >= 2 * quota.value, "the demo producer would not be throttled"


def test_prometheus_config_as_mounted_passes_promtool(compose: dict[str, Any], tmp_path: Path) -> None:
    """The files at the paths the container sees them, so alerts.yml is found the way Prometheus finds it
    (prometheus.yml is the image's --config.file)."""
    config_file = place_mounts(services(compose)["prometheus"], tmp_path) / "etc/prometheus/prometheus.yml"
    result = run_promtool("check", "config", str(config_file))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 rule files found" in result.stdout + result.stderr
    scrape = load_yaml(config_file.read_text())["scrape_configs"]
    targets = {job["job_name"]: job["static_configs"][0]["targets"] for job in scrape}
    assert targets["quotagate"] == [f"quotagate:{quotagate_config(compose).metrics.port}"]


def test_grafana_provisions_the_prometheus_source_and_the_dashboard(compose: dict[str, Any]) -> None:
    service = services(compose)["grafana"]
    provisioned = {target: source for source, target in bind_mounts(service)}
    sources = load_yaml(provisioned["/etc/grafana/provisioning/datasources/prometheus.yml"].read_text())["datasources"]
    assert [(s["type"], s["url"], s["isDefault"]) for s in sources] == [("prometheus", "http://prometheus:9090", True)]
    assert {"published": 9090, "target": 9090} in [
        dict(p, published=int(p["published"])) for p in services(compose)["prometheus"]["ports"]
    ]
    providers = load_yaml(provisioned["/etc/grafana/provisioning/dashboards/quotagate.yml"].read_text())["providers"]
    dashboard_dirs = {str(Path(target).parent) for target, source in provisioned.items() if source.suffix == ".json"}
    assert [provider["options"]["path"] for provider in providers] == sorted(dashboard_dirs)


def test_tests_service_runs_the_stack_tests_against_the_proxy(compose: dict[str, Any]) -> None:
    service = services(compose)["tests"]
    config = quotagate_config(compose)
    env = service["environment"]
    assert service["build"]["target"] == "test" and service["network_mode"] == "service:quotagate"
    assert env["QUOTAGATE_STACK_BOOTSTRAP"] == f"localhost:{config.proxy.port}"
    assert env["QUOTAGATE_STACK_ADMIN"] == f"http://localhost:{config.metrics.port}"
    assert env["QUOTAGATE_STACK_DEMO_CLIENT_ID"] == services(compose)["demo-producer"]["environment"]["DEMO_CLIENT_ID"]
    assert (ROOT / "tests" / "stack" / "test_stack.py").is_file()


# ------------------------------------------------------------------------------------------- the Dockerfile


def dockerfile_stages() -> dict[str, list[str]]:
    """Stage name -> its instructions (continuation lines joined, comments dropped)."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE.read_text())
    stages: dict[str, list[str]] = {"": []}
    current = ""
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = re.fullmatch(r"FROM\s+\S+\s+AS\s+(\S+)", line, re.I)
        if match:
            current = match.group(1)
            stages[current] = []
        stages[current].append(line)
    return stages


def test_dockerfile_proxy_image() -> None:
    stages = dockerfile_stages()
    assert list(stages)[-1] == "proxy", "the proxy must be the last stage: what `docker build .` makes"
    assert any(re.fullmatch(r"ARG PYTHON_IMAGE=python:3\.11-slim\S*", line) for line in stages[""])
    proxy = stages["proxy"]
    assert proxy[0] == "FROM base AS proxy" and stages["base"][0] == "FROM ${PYTHON_IMAGE} AS base"
    users = [line.split()[1] for line in proxy if line.startswith("USER ")]
    assert users and users[-1] not in ("root", "0"), "the proxy must not run as root"
    healthcheck = next(line for line in proxy if line.startswith("HEALTHCHECK "))
    assert '"quotagate", "probe", "--config", "/etc/quotagate/quotagate.toml"]' in healthcheck  # probe asks /healthz
    assert "--ready" not in healthcheck
    assert 'VOLUME ["/etc/quotagate", "/var/lib/quotagate"]' in proxy
    assert 'CMD ["run", "--config", "/etc/quotagate/quotagate.toml"]' in proxy
    labels = " ".join(line for line in proxy if line.startswith("LABEL "))
    for label in ("title", "description", "version", "licenses"):
        assert f"org.opencontainers.image.{label}=" in labels
    assert f"ARG VERSION={__version__}" in proxy, "the image's version label must default to quotagate.__version__"


def test_what_the_proxy_writes_goes_to_a_writable_volume_its_user_owns(compose: dict[str, Any]) -> None:
    """The image's layout without Docker: the config folder is a read-only mount, and every folder the
    compose configuration makes the proxy write (with the Admin API open and usage records on) is in a
    named volume mounted read-write, which the Dockerfile declares and gives to the proxy's user
    (Docker copies that ownership into a new named volume). tests/integration/test_operator_first_day.py
    runs the proxy in this layout as uid 10001."""
    service = services(compose)["quotagate"]
    config = quotagate_config(compose)
    everything = replace(
        config, usage=replace(config.usage, enabled=True), admin=replace(config.admin, alter_principals=("admin",))
    )
    folders = written_folders(everything)
    assert [key for key, _ in folders] == ["admin.state_file", "usage.directory"]
    volumes = named_volumes(service)
    proxy = dockerfile_stages()["proxy"]
    user = [line.split()[1] for line in proxy if line.startswith("USER ")][-1]
    declared = json.loads(next(line for line in proxy if line.startswith("VOLUME ")).removeprefix("VOLUME "))
    config_folder = str(Path(config_path_in_command(service)).parent)
    for key, folder in folders:
        assert not folder.is_relative_to(config_folder), f"{key}: {folder} is in the read-only config folder"
        volume = next((target for target in volumes if folder.is_relative_to(target)), None)
        assert volume is not None, f"{key}: {folder} is in no named volume of the quotagate service"
        assert volumes[volume] == "rw", f"{key}: the volume at {volume} is mounted {volumes[volume]}"
        assert volume in declared, f"the Dockerfile does not declare VOLUME {volume}"
        assert f"RUN mkdir -p {volume} && chown {user}:{user} {volume}" in proxy, f"{user} does not own {volume}"
    assert all(target.startswith(config_folder) for _, target in bind_mounts(service))


def test_dockerfile_proxy_image_has_no_pipeline_extra() -> None:
    stages = dockerfile_stages()
    installs = [line for stage in ("base", "proxy") for line in stages[stage] if "pip install" in line]
    assert installs == ["RUN pip install /wheels/quotagate-*.whl && rm -rf /app /wheels"], installs
    assert not any(re.search(r"pyspark|pipeline|\[", line) for line in installs)
    # the wheel, compiled in a stage of its own (no compiler in the image), without extras
    assert "COPY --from=wheel /wheels /wheels" in stages["proxy"]
    assert any("pip wheel --no-deps --wheel-dir /wheels ." in line for line in stages["wheel"])
    assert not any("COPY tests" in line for line in stages["base"] + stages["proxy"])


def test_probe_in_the_healthchecks_is_a_quotagate_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "probe", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and "--ready" in result.stdout


def test_dockerignore_keeps_caches_out_of_the_build_context() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".cache"} <= ignored


def test_compose_tools_are_installed_by_the_makefile() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^test: .*\bcompose-tools\b", makefile, re.M)
    assert "docker-compose==1.29.2" in (ROOT / "scripts" / "compose-tools-constraints.txt").read_text().split()
