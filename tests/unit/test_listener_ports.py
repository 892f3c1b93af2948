"""Every port the proxy listens on has one key and one purpose: check-config refuses two listeners on
one port (bootstrap, the broker range, each worker's metrics), naming both keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from quotagate.cli import main
from quotagate.config import ConfigError, parse_config

PROXY = '[proxy]\nbootstrap_servers = ["kafka-1:9092"]\n'


def refusal(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        parse_config(text)
    return raised.value


def test_four_workers_with_default_ports_are_refused_naming_both_keys() -> None:
    # Worker 2's metrics would be on 9192, the bootstrap port (the issue's first-day collision).
    error = refusal(PROXY + "workers = 4\n")
    assert error.key == "metrics.port"
    assert "worker 2" in str(error) and "proxy.port" in str(error) and "9192" in str(error), str(error)


def test_a_metrics_port_inside_the_broker_range_is_refused() -> None:
    error = refusal(PROXY + "[metrics]\nport = 9197\n")
    assert error.key == "metrics.port"
    assert "proxy.broker_port_base" in str(error) and "9193..9202" in str(error), str(error)


def test_a_broker_range_over_the_bootstrap_port_is_refused() -> None:
    error = refusal(PROXY + "port = 9300\nbroker_port_base = 9295\n")
    assert error.key == "proxy.broker_port_base"
    assert "proxy.port" in str(error) and "brokers 0..9" in str(error), str(error)


def test_the_broker_range_follows_broker_node_ids() -> None:
    # broker_port_base = port is fine when no broker has node id 0 (bench/harness.py's layout).
    config = parse_config(PROXY + "port = 30000\nbroker_port_base = 30000\nbroker_node_ids = [1, 8]\n")
    assert config.proxy.broker_node_ids == (1, 8)
    assert config.proxy.expects_node(1) and config.proxy.expects_node(8)
    assert not config.proxy.expects_node(0) and not config.proxy.expects_node(9)
    assert refusal(PROXY + "port = 30000\nbroker_port_base = 30000\n").key == "proxy.broker_port_base"


@pytest.mark.parametrize(
    ("extra", "problem"),
    [
        ("broker_node_ids = [3]\n", "two integers"),
        ('broker_node_ids = [0, "9"]\n', "two integers"),
        ("broker_node_ids = [5, 2]\n", "first <= last"),
        ("broker_node_ids = [-1, 2]\n", "first <= last"),
        ("broker_port_base = 65000\nbroker_node_ids = [0, 600]\n", "above 65535"),
    ],
)
def test_bad_broker_node_ids_are_refused(extra: str, problem: str) -> None:
    error = refusal(PROXY + extra)
    assert error.key == "proxy.broker_node_ids" and problem in str(error), str(error)


def test_workers_metrics_ports_can_be_set_explicitly() -> None:
    config = parse_config(PROXY + "workers = 4\n[metrics]\nworker_ports = [9180, 9181, 9185, 9186]\n")
    assert [config.metrics.worker_port(worker) for worker in range(4)] == [9180, 9181, 9185, 9186]
    assert config.metrics.port == 9180  # worker 0's, which the probe asks
    default = parse_config(PROXY + "workers = 3\n[metrics]\nport = 9100\n")
    assert [default.metrics.worker_port(worker) for worker in range(3)] == [9100, 9101, 9102]


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("workers = 2\n[metrics]\nworker_ports = [9180]\n", "metrics.worker_ports", "1 ports for proxy.workers = 2"),
        ("workers = 2\n[metrics]\nworker_ports = [9180, 9180]\n", "metrics.worker_ports[1]", "metrics.worker_ports[0]"),
        ("workers = 2\n[metrics]\nworker_ports = [9180, 9192]\n", "metrics.worker_ports[1]", "proxy.port"),
        ("[metrics]\nworker_ports = [70000]\n", "metrics.worker_ports[0]", "1..65535"),
        ("[metrics]\nworker_ports = 9180\n", "metrics.worker_ports", "array of ports"),
        ("[metrics]\nport = 9100\nworker_ports = [9180]\n", "metrics.worker_ports", "not metrics.port = 9100"),
        ("workers = 2\n[metrics]\nport = 65535\n", "metrics.port", "worker 1's metrics port 65536 (metrics.port + 1)"),
    ],
)
def test_bad_worker_ports_are_refused_naming_the_key(text: str, key: str, problem: str) -> None:
    error = refusal(PROXY + text)
    assert error.key == key and problem in str(error), str(error)


def test_check_config_exits_2_and_names_both_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "quotagate.toml"
    path.write_text(PROXY + "workers = 4\n")
    assert main(["check-config", str(path)]) == 2
    message = capsys.readouterr().err
    assert "metrics.port: worker 2's metrics port 9192 (metrics.port + 2) overlaps proxy.port" in message, message
    path.write_text(PROXY + "workers = 4\n[metrics]\nworker_ports = [9180, 9181, 9182, 9183]\n")
    assert main(["check-config", str(path)]) == 0
    assert "worker_ports = [9180, 9181, 9182, 9183]" in capsys.readouterr().out
