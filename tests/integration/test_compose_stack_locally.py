"""The compose stack's pieces run here without Docker, and tests/stack passes against them.

No Docker engine is available, so this starts what docker-compose.yml would, as local processes on
loopback, from the same files: the test Kafka for kafka-1, quotagate with the compose configuration's
quotas, the demo producer script with the compose environment, and Prometheus (Debian's, from `make
prometheus-tools`) with the compose prometheus.yml and the alerts as mounted, its targets pointed at
the local ports. Then it runs tests/stack against them, as the compose `tests` service does. Grafana
is not available here: its test in tests/stack is skipped.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.compose import compose_config, mounted_source, place_mounts, quotagate_config, quotas_toml
from tests.support.proxy_fixtures import ProxyProcess, free_port_block, start_proxy

ROOT = Path(__file__).resolve().parents[2]


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_for_http(url: str, what: str, process: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"{what} exited with {process.returncode}:\n{log.read_text(errors='replace')[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{what} not ready at {url} after {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture
def stack_proxy(kafka, tmp_path: Path) -> Iterator[tuple[ProxyProcess, dict]]:
    compose = compose_config()
    proxy = start_proxy(kafka.bootstrap, tmp_path, extra_toml=quotas_toml(compose))
    yield proxy, compose
    proxy.stop()


def probe(proxy: ProxyProcess, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "quotagate", "probe", *flags, "--config", str(proxy.config_path)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_probe_answers_for_the_running_proxy_and_fails_when_it_is_gone(stack_proxy) -> None:
    proxy, _ = stack_proxy
    healthy = probe(proxy)
    assert healthy.returncode == 0 and "/healthz: 200" in healthy.stdout, healthy.stderr
    deadline = time.monotonic() + 30
    while (ready := probe(proxy, "--ready")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ready.returncode == 0 and "/readyz: 200" in ready.stdout, ready.stderr
    proxy.stop()
    gone = probe(proxy, "--timeout", "2")
    assert gone.returncode == 1 and "/healthz" in gone.stderr


@pytest.mark.long_only
@pytest.mark.timeout(240)
def test_stack_tests_pass_against_the_compose_pieces_run_locally(stack_proxy, tmp_path: Path) -> None:
    proxy, compose = stack_proxy
    services = compose["services"]
    prometheus_binary = shutil.which("prometheus")
    if prometheus_binary is None:
        pytest.fail("prometheus is not on PATH: run `make prometheus-tools`", pytrace=False)
    started: list[subprocess.Popen[bytes]] = []
    try:
        # The demo producer, as the compose service runs it, against the local proxy.
        demo = services["demo-producer"]
        heartbeat = tmp_path / "demo-producer.alive"
        demo_log = tmp_path / "demo-producer.log"
        with demo_log.open("wb") as log:
            started.append(
                subprocess.Popen(
                    [sys.executable, str(mounted_source(demo, demo["entrypoint"][-1]))],
                    env={
                        **os.environ,
                        **{key: str(value) for key, value in demo["environment"].items()},
                        "DEMO_BOOTSTRAP": proxy.bootstrap,
                        "DEMO_HEARTBEAT_FILE": str(heartbeat),
                    },
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        # Prometheus with the compose files as mounted, its targets on the local ports.
        prometheus_port = free_port_block(1)
        etc = place_mounts(services["prometheus"], tmp_path / "prometheus") / "etc/prometheus"
        config = (etc / "prometheus.yml").read_text()
        metrics_target = f"quotagate:{quotagate_config(compose).metrics.port}"
        assert metrics_target in config and "localhost:9090" in config
        config = config.replace(metrics_target, f"127.0.0.1:{proxy.metrics_port}")
        (etc / "prometheus.yml").write_text(config.replace("localhost:9090", f"127.0.0.1:{prometheus_port}"))
        prometheus_log = tmp_path / "prometheus.log"
        with prometheus_log.open("wb") as log:
            prometheus = subprocess.Popen(
                [
                    prometheus_binary,
                    f"--config.file={etc / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        started.append(prometheus)
        wait_for_http(f"http://127.0.0.1:{prometheus_port}/-/ready", "prometheus", prometheus, prometheus_log)

        # tests/stack, with the environment of the compose `tests` service pointed at the local pieces.
        env = {key: str(value) for key, value in services["tests"]["environment"].items()}
        env.update(
            QUOTAGATE_STACK_BOOTSTRAP=proxy.bootstrap,
            QUOTAGATE_STACK_ADMIN=f"http://127.0.0.1:{proxy.metrics_port}",
            QUOTAGATE_STACK_PROMETHEUS=f"http://127.0.0.1:{prometheus_port}",
        )
        env.pop("QUOTAGATE_STACK_GRAFANA")
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests/stack"],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=200,
            check=False,
        )
        logs = f"\n--- demo producer:\n{demo_log.read_text()[-1500:]}\n--- proxy:\n{proxy.log_text()[-1500:]}"
        assert result.returncode == 0, result.stdout[-5000:] + logs
        assert "5 passed, 1 skipped" in result.stdout, result.stdout[-3000:]
        assert heartbeat.exists(), "the demo producer never had a batch acknowledged"
        # The proxy answered the demo producer with throttle times, and it says so.
        assert re.search(r"throttle up to [1-9]\d* ms", demo_log.read_text()), demo_log.read_text()[-1500:]
    finally:
        for process in started:
            stop(process)
