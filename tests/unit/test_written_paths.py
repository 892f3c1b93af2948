"""The paths the proxy writes are explicit: taken from the config file's folder (never from the
working directory), and checked before it listens, with an error naming the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from quotagate.cli import main
from quotagate.config import ConfigError, load_config
from quotagate.config.written_paths import check_written_folders, written_folders

PROXY = '[proxy]\nbootstrap_servers = ["kafka-1:9092"]\n'


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_relative_paths_are_taken_from_the_config_files_folder_not_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_path = write(tmp_path / "etc" / "quotagate.toml", PROXY + '[admin]\nstate_file = "q.json"\n')
    monkeypatch.chdir("/")
    config = load_config(config_path)
    assert config.admin.state_file == str(tmp_path / "etc" / "q.json")
    assert config.usage.directory == str(tmp_path / "etc" / "usage")
    write(config_path, PROXY + '[admin]\nstate_file = "/var/lib/quotagate/q.json"\n')
    assert load_config(config_path).admin.state_file == "/var/lib/quotagate/q.json"


def test_the_state_file_defaults_to_beside_the_config_file(tmp_path: Path) -> None:
    config = load_config(write(tmp_path / "quotagate.toml", PROXY))
    assert config.admin.state_file == str(tmp_path / "quotagate.toml.quotas.json")


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("", ["admin.state_file"]),  # the buckets' levels, beside the state file
        ("workers = 2\n", []),  # shared buckets, nobody may alter quotas and no usage records
        ('workers = 2\n[admin]\nalter_principals = ["admin"]\n', ["admin.state_file"]),
        ('workers = 2\n[admin]\nalter_principals = ["admin"]\nquota_api = "forward"\n', []),
        ("workers = 2\n[usage]\nenabled = true\n", ["usage.directory"]),
        ('workers = 2\n[usage]\nenabled = true\nsink = "kafka"\n', []),
    ],
)
def test_only_the_folders_the_configuration_writes_are_checked(tmp_path: Path, text: str, keys: list[str]) -> None:
    config = load_config(write(tmp_path / "quotagate.toml", PROXY + text))
    assert [key for key, _ in written_folders(config)] == keys


def test_a_folder_the_proxy_cannot_write_is_refused_naming_the_key(tmp_path: Path) -> None:
    # Root may write anywhere, so the folder is made impossible instead: under a regular file.
    blocker = write(tmp_path / "a-file", "")
    text = PROXY + f'[usage]\nenabled = true\ndirectory = "{blocker}/usage"\n'
    with pytest.raises(ConfigError) as raised:
        check_written_folders(load_config(write(tmp_path / "quotagate.toml", text)))
    assert raised.value.key == "usage.directory"
    assert f"{blocker}/usage is not writable by this process (uid {os.getuid()})" in str(raised.value)
    text = PROXY + f'[admin]\nalter_principals = ["admin"]\nstate_file = "{blocker}/q.json"\n'
    with pytest.raises(ConfigError) as raised:
        check_written_folders(load_config(write(tmp_path / "quotagate.toml", text)))
    assert raised.value.key == "admin.state_file"


def test_a_writable_folder_is_created_and_left_clean(tmp_path: Path) -> None:
    text = PROXY + f'[usage]\nenabled = true\ndirectory = "{tmp_path}/data/usage"\n'
    folders = check_written_folders(load_config(write(tmp_path / "quotagate.toml", text)))
    assert folders == [("admin.state_file", tmp_path), ("usage.directory", tmp_path / "data" / "usage")]
    assert list((tmp_path / "data" / "usage").iterdir()) == [], "the write check left a file behind"


def test_run_exits_2_naming_the_key_before_it_listens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = write(tmp_path / "a-file", "")
    text = PROXY + f'[usage]\nenabled = true\ndirectory = "{blocker}/usage"\n'
    assert main(["run", "--config", str(write(tmp_path / "quotagate.toml", text))]) == 2
    assert "quotagate: bad configuration: usage.directory: " in capsys.readouterr().err


def test_check_config_prints_the_absolute_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(write(tmp_path / "quotagate.toml", PROXY))]) == 0
    out = capsys.readouterr().out
    assert f'state_file = "{tmp_path}/quotagate.toml.quotas.json"' in out
    assert f'directory = "{tmp_path}/usage"  # default' in out
