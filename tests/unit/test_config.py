import subprocess
import sys
from pathlib import Path

import pytest

from quotagate.config import ConfigError, parse_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_minimal_config_gets_documented_defaults() -> None:
    config = parse_config('[proxy]\nbootstrap_servers = ["kafka-1:9092", "[::1]:9093"]\n')
    assert config.proxy.bootstrap_servers == (("kafka-1", 9092), ("::1", 9093))
    assert (config.proxy.port, config.proxy.broker_port_base, config.proxy.advertised_host) == (9192, 9193, "127.0.0.1")
    assert config.proxy.broker_port(3) == 9196
    assert config.metrics.port == 9190


def test_broker_port_base_defaults_to_the_port_after_the_bootstrap_port() -> None:
    config = parse_config('[proxy]\nbootstrap_servers = ["k:9092"]\nport = 30000\n')
    assert config.proxy.broker_port(1) == 30002


@pytest.mark.parametrize(
    ("text", "key", "problem"),
    [
        ("", "proxy", "section is missing"),
        ("[proxy]\n", "proxy.bootstrap_servers", "is required"),
        ('[proxy]\nbootstrap_servers = "k:9092"\n', "proxy.bootstrap_servers", "non-empty list"),
        ('[proxy]\nbootstrap_servers = ["k"]\n', "proxy.bootstrap_servers", "host:port"),
        ('[proxy]\nbootstrap_servers = ["k:99999"]\n', "proxy.bootstrap_servers", "1..65535"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nport = "x"\n', "proxy.port", "integer in 1..65535"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nprot = 1\n', "proxy.prot", "unknown key"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nlisten_host = "0.0.0.0"\n', "proxy.advertised_host", "required"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\nconnect_timeout_seconds = 0\n', "proxy.connect_timeout_seconds", "> 0"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\n[metrics]\nport = true\n', "metrics.port", "integer"),
        ('[proxy]\nbootstrap_servers = ["k:1"]\n[metric]\n', "metric", "unknown key"),
        ("[proxy\n", "file", "not valid TOML"),
    ],
)
def test_bad_config_names_the_key_and_the_problem(text: str, key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.key == key
    assert problem in info.value.problem


def test_check_config_accepts_the_shipped_example() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "check-config", str(REPO_ROOT / "examples/quotagate.toml")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_check_config_exits_non_zero_naming_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[proxy]\nbootstrap_servers = ["k:1"]\nport = 0\n')
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "check-config", str(bad)], capture_output=True, text=True
    )
    assert result.returncode == 2
    assert "proxy.port: must be an integer in 1..65535, got 0" in result.stderr
