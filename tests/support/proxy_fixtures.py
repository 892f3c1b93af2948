"""Runs quotagate as a real subprocess (`quotagate run --config FILE`) in front of a test cluster."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
PROXY_HOST = "127.0.0.1"


def port_is_free(port: int) -> bool:
    with socket.socket() as sock:
        # As the proxy binds (asyncio sets SO_REUSEADDR): a port other connections left in TIME_WAIT
        # is free for it, and a busy machine has thousands of those.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((PROXY_HOST, port))
        except OSError:
            return False
    return True


# Ports the tests pick for themselves: above Linux's ephemeral range (32768-60999), where no client's
# connection can take a port between the pick and the bind, and below the fixed ports of other runs
# (Kafka 29092+, soak and chaos 21xxx-22xxx, bench 16xxx, demo 19xxx) there is nothing else of ours.
# A run picks in its own lane (QUOTAGATE_TEST_PORT_LANE: 0 for the whole run, 1-5 for the version
# slices make test starts beside it), and each pytest-xdist worker in its own slice of the lane, so
# no two processes of one make test ever pick the same block.
PORT_LANES = (range(61000, 64000), *(range(64000 + 300 * i, 64300 + 300 * i) for i in range(5)))


def worker_port_slice() -> range:
    """This process's slice of its lane: all of it alone, 1/n of it on each of n xdist workers."""
    lane = PORT_LANES[int(os.environ.get("QUOTAGATE_TEST_PORT_LANE", "0"))]
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    index = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % workers
    width = len(lane) // workers
    return range(lane.start + index * width, lane.start + (index + 1) * width)


def free_port_block(size: int) -> int:
    """First port of `size` consecutive free ports, picked at random in this worker's slice of its lane."""
    ports = worker_port_slice()
    for _ in range(200):
        first = random.randrange(ports.start, ports.stop - size)
        if all(port_is_free(first + i) for i in range(size)):
            return first
    raise RuntimeError(f"no {size} consecutive free ports found in {ports.start}-{ports.stop - 1}")


@dataclass
class ProxyProcess:
    process: subprocess.Popen[bytes]
    config_path: Path
    log_path: Path
    port: int
    broker_port_base: int
    metrics_port: int

    @property
    def bootstrap(self) -> str:
        return f"{PROXY_HOST}:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def broker_port(self, node_id: int) -> int:
        return self.broker_port_base + node_id

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_proxy(
    bootstrap: str,
    workdir: Path,
    extra_toml: str = "",
    wait: float = 20.0,
    proxy_toml: str = "",
    metrics_toml: Callable[[int], str] | None = None,
) -> ProxyProcess:
    # One block of 14: bootstrap port, broker node N (1..9) on first + 1 + N, metrics at first + 11
    # (and + 12, + 13 for workers 1 and 2). proxy_toml: more keys of [proxy] (workers = 2);
    # metrics_toml: more keys of [metrics], given the metrics port (worker_ports = [...]).
    first = free_port_block(14)
    port, broker_port_base, metrics_port = first, first + 1, first + 11
    servers = ", ".join(f'"{server}"' for server in bootstrap.split(","))
    config_path = workdir / f"quotagate-{port}.toml"
    # extra_toml goes first: it may hold top-level keys (quota_window_num, ...), which TOML only
    # allows before the first [section]; its [[quotas]] tables may stand anywhere.
    config_path.write_text(
        f"{extra_toml}\n[proxy]\nbootstrap_servers = [{servers}]\nport = {port}\n"
        f"broker_port_base = {broker_port_base}\nmetadata_refresh_seconds = 5\n{proxy_toml}\n"
        f"[metrics]\nport = {metrics_port}\n{metrics_toml(metrics_port) if metrics_toml else ''}\n"
    )
    log_path = workdir / f"quotagate-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "quotagate", "--log-level", "DEBUG", "run", "--config", str(config_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    proxy = ProxyProcess(process, config_path, log_path, port, broker_port_base, metrics_port)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"quotagate exited with {process.returncode}:\n{proxy.log_text()}")
        if "quotagate ready" in proxy.log_text():
            return proxy
        time.sleep(0.1)
    proxy.stop()
    raise RuntimeError(f"quotagate not ready after {wait} s:\n{proxy.log_text()}")


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., ProxyProcess]]:
    started: list[ProxyProcess] = []

    def factory(
        bootstrap: str, extra_toml: str = "", proxy_toml: str = "", metrics_toml: Callable[[int], str] | None = None
    ) -> ProxyProcess:
        proxy = start_proxy(bootstrap, tmp_path, extra_toml, proxy_toml=proxy_toml, metrics_toml=metrics_toml)
        started.append(proxy)
        return proxy

    yield factory
    for proxy in started:
        proxy.stop()


@pytest.fixture
def proxy(kafka, proxy_factory) -> ProxyProcess:
    """A proxy in front of the single-broker test Kafka."""
    return proxy_factory(kafka.bootstrap)


@pytest.fixture
def cluster_proxy(kafka_cluster, proxy_factory) -> ProxyProcess:
    """A proxy in front of the 3-broker test cluster."""
    return proxy_factory(kafka_cluster.bootstrap)


def metric(proxy: ProxyProcess, name: str, worker: int = 0) -> float:
    """A sample of the proxy's (or worker's) /metrics, by its series name."""
    url = f"http://127.0.0.1:{proxy.metrics_port + worker}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported by the proxy on {proxy.port}")
