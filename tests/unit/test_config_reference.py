"""The configuration reference (docs/configuration.md) and the effective configuration check-config prints.

Both are read from the config dataclasses; these tests pin that the reference is current, that it lists
exactly the keys parse_config accepts with the defaults parse_config fills in, and that a key without a
meaning stops the generator by name.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from quotagate import __version__, compiled
from quotagate.config import ConfigError, load_config, parse_config
from quotagate.config import reference as reference_module
from quotagate.config.reference import (
    ARRAY_OF_TABLES,
    TOP_LEVEL,
    SchemaError,
    config_sections,
    effective_toml,
    reference_markdown,
)

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"
MINIMAL = '[proxy]\nbootstrap_servers = ["k:1"]\n'


def test_configuration_reference_is_up_to_date() -> None:
    expected = reference_markdown()
    written = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    if written != expected:
        diff = "".join(
            difflib.unified_diff(
                written.splitlines(keepends=True), expected.splitlines(keepends=True), "written", "generated", n=1
            )
        )
        pytest.fail(f"docs/configuration.md is stale: run `make docs` and commit it.\n{diff[:3000]}", pytrace=False)


def _known_keys(text: str, unknown_key: str) -> set[str]:
    """The keys parse_config accepts where `unknown_key` stands, from its unknown-key error."""
    with pytest.raises(ConfigError) as info:
        parse_config(text)
    assert info.value.key == unknown_key, info.value
    listed = re.fullmatch(r"unknown key \(known: (.*)\)", info.value.problem)
    assert listed, info.value.problem
    return set(listed.group(1).split(", "))


def test_reference_lists_exactly_the_keys_parse_config_accepts() -> None:
    sections = config_sections()
    top_level = {key.name for s in sections if s.shape == TOP_LEVEL for key in s.keys}
    section_names = {s.toml_name.split(".")[0] for s in sections if s.shape != TOP_LEVEL}
    assert _known_keys("zz_unknown = 1\n" + MINIMAL, "zz_unknown") == top_level | section_names
    for section in sections:
        documented = {key.name for key in section.keys}
        name = section.toml_name
        if section.shape == TOP_LEVEL:
            continue
        if section.shape == ARRAY_OF_TABLES:
            probe, where = MINIMAL + f"[[{name}]]\nzz_unknown = 1\n", f"{name}[0].zz_unknown"
        elif name == "proxy":
            probe, where = MINIMAL + "zz_unknown = 1\n", "proxy.zz_unknown"
        else:
            probe, where = MINIMAL + f"[{name}]\nzz_unknown = 1\n", f"{name}.zz_unknown"
        assert _known_keys(probe, where) == documented, f"[{name}]: the reference and parse_config differ"


def test_reference_defaults_are_what_parse_config_fills_in() -> None:
    """A default written as a value (not in words) is the value a file without the key gets."""
    config = parse_config(MINIMAL)
    checked = 0
    for section in config_sections():
        value = getattr(config, section.attribute)
        if value is None or section.shape == ARRAY_OF_TABLES:
            continue
        for key in section.keys:
            if key.default_is_text:
                continue
            effective = reference_module.toml_value(reference_module.toml_data(getattr(value, key.name)))
            assert effective == key.default, f"{section.attribute}.{key.name}: parse_config fills in {effective}"
            checked += 1
    assert checked >= 15


def test_every_key_has_a_type_and_a_meaning() -> None:
    for section in config_sections():
        assert section.meaning
        for key in section.keys:
            assert key.toml_type and key.meaning, f"{section.attribute}.{key.name}"


# A config whose [usage] gained a key nobody documented, as a parallel change might bring it.
@dataclass(frozen=True)
class UsageWithNewKey:
    enabled: bool = field(default=False, metadata={"doc": "Write records."})
    format: str = "jsonl"


@dataclass(frozen=True)
class ConfigWithNewKey:
    usage: UsageWithNewKey = field(default_factory=UsageWithNewKey, metadata={"doc": "Usage records."})


@dataclass(frozen=True)
class ConfigWithNewSection:
    limits: UsageWithNewKey = field(default_factory=UsageWithNewKey)


def test_a_key_without_a_meaning_stops_the_generator_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reference_module, "Config", ConfigWithNewKey)
    with pytest.raises(SchemaError, match=r'^usage\.format has no meaning: give its field metadata=\{"doc"'):
        reference_markdown()
    monkeypatch.setattr(reference_module, "Config", ConfigWithNewSection)
    with pytest.raises(SchemaError, match=r"^limits has no meaning"):
        reference_markdown()


def test_config_reference_command_prints_the_reference() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "quotagate", "config-reference"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == reference_markdown()


# ------------------------------------------------------------------------------------------- effective config

FULL = """
quota_window_num = 5
quota_window_size_seconds = 0.5

[proxy]
bootstrap_servers = ["kafka-1:9092", "[::1]:9093"]
listen_host = "0.0.0.0"
advertised_host = "quotagate.internal"
broker_port_base = 20000
connect_timeout_seconds = 2.5

[metrics]
max_entities = 7

[[quotas]]
user = "<default>"
client_id = "<default>"
producer_byte_rate = 1048576
request_percentage = 12.5

[[quotas]]
client_id = "odd \\"id\\" \\u0001"
controller_mutation_rate = 20

[topic_thresholds]
total_bytes_in_per_sec = 1000
[topic_thresholds.topics]
"orders-v1" = 400
"a b" = 100

[usage]
enabled = true
sink = "kafka"
kafka_bootstrap_servers = ["k:1"]
"""


@pytest.mark.parametrize(
    "text",
    [
        MINIMAL,
        FULL,
        (ROOT / "examples" / "quotagate.toml").read_text(),
        *(path.read_text() for path in sorted((ROOT / "examples" / "compose").glob("*.toml"))),
    ],
    ids=lambda text: text.splitlines()[0][:30] or "full",
)
def test_effective_configuration_reads_back_to_the_same_configuration(text: str) -> None:
    config = parse_config(text)
    written = effective_toml(config, tomllib.loads(text))
    assert parse_config(written) == config, written


def test_effective_configuration_marks_the_defaults_it_filled_in() -> None:
    written = effective_toml(parse_config(FULL), tomllib.loads(FULL))
    lines = written.splitlines()
    assert "quota_window_num = 5" in lines
    assert "controller_quota_window_num = 11  # default" in lines
    assert 'advertised_host = "quotagate.internal"' in lines
    assert "port = 9192  # default" in lines
    assert "broker_port_base = 20000" in lines
    assert 'bootstrap_servers = ["kafka-1:9092", "[::1]:9093"]' in lines
    assert "max_entities = 7" in lines
    assert "request_percentage = 12.5" in lines
    assert 'topics = {orders-v1 = 400, "a b" = 100}' in lines
    assert 'proxy_id = ""  # default: the host name' in lines
    minimal = effective_toml(parse_config(MINIMAL), tomllib.loads(MINIMAL)).splitlines()
    assert "broker_port_base = 9193  # default: port + 1" in minimal
    assert "# [topic_thresholds]: not set" in minimal and "# [[quotas]]: none" in minimal


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
    assert result.stdout.splitlines() == [f"quotagate {__version__}", f"core: {compiled.core_build()}"]
    assert importlib.metadata.version("quotagate") == __version__


def test_version_says_which_core_runs() -> None:
    for no_extensions, build in (("1", "pure Python"), ("", compiled.core_build())):
        result = subprocess.run(
            [sys.executable, "-m", "quotagate", "--version"],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "QUOTAGATE_NO_EXTENSIONS": no_extensions},
        )
        assert result.stdout.splitlines()[1] == f"core: {build}", result.stderr
