"""The state file: quotas set through Kafka's admin APIs (kafka-configs.sh, Admin.alterClientQuotas),
kept in [admin] state_file (by default beside the configuration file) so they survive a restart.

JSON, written atomically: a temporary file in the same folder, fsync'd, renamed over the old one,
then the folder fsync'd, so a crash leaves either the old state or the new one, never half of
either. A key the API removed while the file sets it is kept as null (see quotas.admin).

    {"version": 1, "quotas": [{"user": "alice", "client_id": null, "values": {"producer_byte_rate": 1024.0}}]}

An entry for a client-id prefix also has "client_id_prefix", one for an ip entity "ip" (absent elsewhere).
"""

from __future__ import annotations

import json
import logging
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from quotagate.config.settings import ConfigError
from quotagate.quotas.admin import ApiQuotas
from quotagate.quotas.engine import BucketId
from quotagate.quotas.entities import (
    QuotaEntity,
    QuotaKey,
    client_id_prefix_problem,
    connection_creation_rate_problem,
    ip_entity_name,
    quota_key,
    quota_value_problem,
)

log = logging.getLogger("quotagate.config")
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
            _entity(entry["user"], entry["client_id"], entry.get("client_id_prefix"), entry.get("ip")): {
                quota_key(key): _value(path, key, value) for key, value in entry["values"].items()
            }
            for entry in data["quotas"]
        }
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError("admin.state_file", f"{path} is not a quotagate state file: {exc}") from exc


def _entity(user: object, client_id: object, client_id_prefix: object, ip: object) -> QuotaEntity:
    names = (user, client_id, client_id_prefix, ip)
    if not all(name is None or (isinstance(name, str) and name) for name in names):
        raise ValueError(f"entity names must be non-empty strings or null, got {', '.join(map(repr, names))}")
    if isinstance(client_id_prefix, str):
        problem = client_id_prefix_problem(client_id_prefix)
        if client_id is not None:
            problem = "cannot be given with client_id"
        if problem is not None:
            raise ValueError(f"client_id_prefix {client_id_prefix!r} {problem}")
    if ip is not None and (ip_entity_name(ip) != ip or any(name is not None for name in names[:3])):  # type: ignore[arg-type]
        raise ValueError(f"ip {ip!r} must be an address in its short form or <default>, alone")
    return QuotaEntity(user, client_id, client_id_prefix, ip)  # type: ignore[arg-type]


def _value(path: Path, key: str, value: object) -> float | None:
    """A stored quota, checked as AlterClientQuotas checks one (JSON may hold NaN and Infinity)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError("admin.state_file", f"{path}: {key} must be a number or null, got {value!r}")
    parsed = quota_key(key)
    if isinstance(parsed, QuotaKey):
        problem = quota_value_problem(parsed, value)
    else:
        problem = connection_creation_rate_problem(value)
    if problem is not None:
        raise ConfigError("admin.state_file", f"{path}: {key} {problem}")
    return float(value)


def save_state(path: Path, quotas: ApiQuotas) -> None:
    """Writes the state atomically (temp file, fsync, rename, fsync of the folder)."""
    entries: list[dict[str, Any]] = [
        {
            "user": entity.user,
            "client_id": entity.client_id,
            # Only where set, so a state file without prefixes reads as before (and older versions read it).
            **({"client_id_prefix": entity.client_id_prefix} if entity.client_id_prefix is not None else {}),
            **({"ip": entity.ip} if entity.ip is not None else {}),
            "values": {k.value: v for k, v in values.items()},
        }
        for entity, values in quotas.items()
    ]
    write_atomically(path, json.dumps({"version": STATE_VERSION, "quotas": entries}, indent=1) + "\n")


# The bucket levels beside the state file: what a restart would otherwise forgive (QuotaEngine.levels).
#     {"version": 1, "saved_at": 1795600000.5, "buckets": [{"id": ["producer_byte_rate", "user", "alice", null],
#      "tokens": -52000.0}]}
# saved_at is wall-clock time: the next process refills each balance for the time it was down.


def levels_path(state_path: Path) -> Path:
    """quotas.json -> quotas.buckets.json beside it."""
    return state_path.with_suffix(".buckets.json")


def save_levels(path: Path, levels: dict[BucketId, float], saved_at: float) -> None:
    buckets = [{"id": [str(part) if part is not None else None for part in bucket_id], "tokens": tokens}
               for bucket_id, tokens in levels.items()]  # fmt: skip
    write_atomically(path, json.dumps({"version": STATE_VERSION, "saved_at": saved_at, "buckets": buckets}) + "\n")


def load_levels(path: Path) -> tuple[dict[BucketId, float], float]:
    """The saved levels and when they were saved; none if the file is missing or unreadable (a lost
    file forgives debts, as before, rather than stopping the proxy)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get("version") != STATE_VERSION:
            raise ValueError(f"version {data.get('version')!r}")
        levels = {tuple(entry["id"]): float(entry["tokens"]) for entry in data["buckets"]}
        saved_at = float(data["saved_at"])
    except FileNotFoundError:
        return {}, 0.0
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("bucket levels not restored from %s: %s", path, exc)
        return {}, 0.0
    if not all(math.isfinite(tokens) for tokens in levels.values()) or not math.isfinite(saved_at):
        log.warning("bucket levels not restored from %s: a number is not finite", path)
        return {}, 0.0
    return levels, saved_at


def write_atomically(path: Path, text: str) -> None:
    """Temp file in the same folder, fsync'd, renamed over `path`, then the folder fsync'd."""
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
    fsync_folder(folder)


def fsync_folder(folder: Path) -> None:
    """Makes the names in `folder` durable (a rename into it survives a crash once this returns)."""
    folder_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(folder_fd)
    finally:
        os.close(folder_fd)
