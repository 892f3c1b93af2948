"""The state file: quotas set through Kafka's admin APIs (kafka-configs.sh, Admin.alterClientQuotas),
kept in [admin] state_file (by default beside the configuration file) so they survive a restart.

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
from quotagate.quotas.entities import QuotaEntity, QuotaKey

STATE_VERSION = 1


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
            QuotaEntity(entry["user"], entry["client_id"]): {
                QuotaKey(key): None if value is None else float(value) for key, value in entry["values"].items()
            }
            for entry in data["quotas"]
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError("admin.state_file", f"{path} is not a quotagate state file: {exc}") from exc


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
