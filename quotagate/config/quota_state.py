"""The state file: quotas set through Kafka's admin APIs (kafka-configs.sh, Admin.alterClientQuotas),
kept beside the configuration file so they survive a restart.

JSON, written atomically: a temporary file in the same folder, fsync'd, renamed over the old one,
then the folder fsync'd, so a crash leaves either the old state or the new one, never half of
either. A key the API removed while the file sets it is kept as null (see quotas.admin).

    {"version": 1, "quotas": [{"user": "alice", "client_id": null, "values": {"producer_byte_rate": 1024.0}}]}
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from quotagate.config.settings import ConfigError
from quotagate.quotas.admin import ApiQuotas
from quotagate.quotas.entities import QuotaEntity, QuotaKey, quota_value_problem

STATE_VERSION = 1


def state_path(state_file: str, config_path: str | Path) -> Path:
    """[admin] state_file, relative to the config file's folder; by default `quotagate.toml` ->
    `quotagate.toml.quotas.json` beside it."""
    config = Path(config_path)
    return config.parent / state_file if state_file else config.with_name(config.name + ".quotas.json")


def load_state(path: Path) -> ApiQuotas:
    """The quotas the API set, or none if the file does not exist yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError("admin.state_file", f"cannot read {path}: {exc.strerror}") from exc
    try:
        data = json.loads(text)
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version')!r}, expected {STATE_VERSION}")
        return {
            _entity(entry["user"], entry["client_id"]): {
                QuotaKey(key): _value(path, key, value) for key, value in entry["values"].items()
            }
            for entry in data["quotas"]
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("admin.state_file", f"{path} is not a quotagate state file: {exc}") from exc


def _entity(user: object, client_id: object) -> QuotaEntity:
    if not all(name is None or (isinstance(name, str) and name) for name in (user, client_id)):
        raise ValueError(f"entity names must be non-empty strings or null, got {user!r}, {client_id!r}")
    return QuotaEntity(user, client_id)  # type: ignore[arg-type]


def _value(path: Path, key: str, value: object) -> float | None:
    """A stored quota, checked as AlterClientQuotas checks one (JSON may hold NaN and Infinity)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError("admin.state_file", f"{path}: {key} must be a number or null, got {value!r}")
    problem = quota_value_problem(QuotaKey(key), value)
    if problem is not None:
        raise ConfigError("admin.state_file", f"{path}: {key} {problem}")
    return float(value)


def save_state(path: Path, quotas: ApiQuotas) -> None:
    """Writes the state atomically (temp file, fsync, rename, fsync of the folder)."""
    entries: list[dict[str, Any]] = [
        {"user": entity.user, "client_id": entity.client_id, "values": {k.value: v for k, v in values.items()}}
        for entity, values in quotas.items()
    ]
    text = json.dumps({"version": STATE_VERSION, "quotas": entries}, indent=1) + "\n"
    folder = path.parent
    fd, temp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
    folder_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)
