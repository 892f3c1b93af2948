"""quotagate's command line run as a process (`python -m quotagate ...`): what it prints and how it exits."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

from quotagate import __version__, compiled
from quotagate.config import load_config, parse_config
from quotagate.config.reference import reference_markdown
from tests.support.configs import FULL
from tests.support.proxy_fixtures import free_port_block

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def test_config_reference_command_prints_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "config-reference"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference_markdown()


def test_check_config_prints_the_effective_configuration(tmp_path: Path) -> None:
    path = tmp_path / "quotagate.toml"
    path.write_text(FULL)
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "check-config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"# {path}: OK.")
    assert parse_config(result.stdout) == load_config(path)
    assert "metadata_refresh_seconds = 30  # default" in result.stdout.splitlines()


def test_version_is_the_package_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "--version"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == f"quotagate {__version__}"
    assert importlib.metadata.version("quotagate") == __version__


def test_version_says_which_core_runs() -> None:
    built = "compiled" if compiled.extensions_built() else "pure Python"
    for no_extensions, build in (("1", "pure Python"), ("", built)):
        result = subprocess.run(
            [sys.executable, "-m", "quotagate", "--version"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "QUOTAGATE_NO_EXTENSIONS": no_extensions},
        )
        assert result.stdout.splitlines()[1] == f"core: {build}", result.stderr


def test_top_names_the_proxy_it_cannot_reach_and_exits_1_before_opening_the_screen() -> None:
    closed = free_port_block(1)  # nothing listens there
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "top", "--url", f"127.0.0.1:{closed}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert f"quotagate top: cannot read http://127.0.0.1:{closed}/metrics: " in result.stderr, result.stderr
    assert "Connection refused" in result.stderr and result.stdout == "", "no screen was drawn"
