"""The state file: quotas set through Kafka's admin APIs (kafka-configs.sh, Admin.alterClientQuotas),
kept in [admin] state_file (by default beside the configuration file) so they survive a restart.

JSON, written atomically: a temporary file in the same folder, fsync'd, renamed over the old one,
then the folder fsync'd, so a crash leaves either the old state or the new one, never half of
either. A key the API removed while the file sets it is kept as null (see quotas.admin).

    {"version": 1, "quotas": [{"user": "alice", "client_id": null, "values": {"producer_byte_rate": 1024.0}}]}

An entry for a client-id prefix also has "client_id_prefix", one for an ip entity "ip" (absent elsewhere).

Read back, any bytes give a clean answer. The state file holds what operators set: a file that is
not one the proxy could have written (not UTF-8, not JSON, nested past the decoder's depth, a wrong
type, an entry AlterClientQuotas would refuse) raises ConfigError naming the file, the entry and the
key, and the start stops with exit 2. The bucket levels beside it only keep debts: a levels file that
cannot be used raises ValueError saying why, and the proxy forgives it as a lost one.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from quotagate.config.settings import ConfigError
from quotagate.protocol.client_quotas import Alteration, QuotaOp
from quotagate.quotas.admin import CLIENT_ID, CLIENT_ID_PREFIX, IP, USER, ApiQuotas, check_alteration
from quotagate.quotas.engine import BucketId
from quotagate.quotas.entities import DEFAULT, QuotaEntity, QuotaKey, quota_key

STATE_VERSION = 1
# A bucket id: (key, scope, user, client-id or prefix), as quotas.entities.Resolution.bucket_id.
BUCKET_ID_PARTS = 4
STATE_KEY = "admin.state_file"
STATE_REMEDY = " (it keeps the quotas set through AlterClientQuotas: correct it, or move it away to start without them)"
# An entry's entity fields and the AlterClientQuotas entity type each one is.
_ENTITY_FIELDS = {"user": USER, "client_id": CLIENT_ID, "client_id_prefix": CLIENT_ID_PREFIX, "ip": IP}
# Longest excerpt of a bad value quoted in a message (a value can be as long as the file), and of
# AlterClientQuotas' own message about an entry (it quotes names).
_SHOWN_CHARS = 80
_PROBLEM_CHARS = 300


def load_state(path: Path) -> ApiQuotas:
    """The quotas the API set, or none if the file does not exist yet. Any other content that is not
    a state file the proxy wrote (or could have) raises ConfigError naming the file, and the entry
    and key where there is one: each entry is checked as AlterClientQuotas checks an alteration."""
    try:
        document = _read_json(path)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(STATE_KEY, f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(STATE_KEY, f"{path} is not a quotagate state file: {exc}{STATE_REMEDY}") from None
    try:
        return _state_quotas(document)
    except ValueError as exc:
        raise ConfigError(STATE_KEY, f"{path}: {exc}{STATE_REMEDY}") from None


def _read_json(path: Path) -> object:
    """The JSON document in `path`. FileNotFoundError or another OSError when it cannot be read;
    ValueError saying why its bytes are not one JSON document."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start})") from None
    try:
        return json.loads(text)
    except RecursionError:  # the decoder's own depth guard: nothing this proxy writes comes close
        raise ValueError("JSON nested deeper than the decoder follows") from None
    except ValueError as exc:  # not JSON, or an integer past Python's 4 300 digits
        raise ValueError(f"not JSON: {_shown(str(exc), quoted=False)}") from None


def _state_quotas(document: object) -> ApiQuotas:
    fields = _fields(document, "the file", required=("version", "quotas"))
    _check_version(fields["version"])
    entries = fields["quotas"]
    if not isinstance(entries, list):
        raise ValueError(f"quotas must be a list, got {_shown(entries)}")
    quotas: ApiQuotas = {}
    first_seen: dict[QuotaEntity, int] = {}
    for index, entry in enumerate(entries):
        entity, values = _state_entry(entry, f"quotas[{index}]")
        if entity in first_seen:
            raise ValueError(f"quotas[{index}] names the same entity as quotas[{first_seen[entity]}]")
        first_seen[entity] = index
        quotas[entity] = values
    return quotas


def _state_entry(entry: object, where: str) -> tuple[QuotaEntity, dict[QuotaKey, float | None]]:
    """One entry, checked as AlterClientQuotas checks an alteration (quotas.admin.check_alteration):
    the same entity rules, keys and value ranges, so the file holds only what the API could set."""
    fields = _fields(entry, where, required=("values",), optional=tuple(_ENTITY_FIELDS))
    parts: list[tuple[str, str | None]] = []
    for field, entity_type in _ENTITY_FIELDS.items():
        name = fields.get(field)
        if name is None:
            continue
        if not isinstance(name, str):
            raise ValueError(f"{where}.{field} must be a string or null, got {_shown(name)}")
        _check_unicode(name, f"{where}.{field}")
        parts.append((entity_type, None if name == DEFAULT else name))
    values = fields["values"]
    if not isinstance(values, dict):
        raise ValueError(f"{where}.values must be an object, got {_shown(values)}")
    ops = []
    for key, value in values.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValueError(f"{where}.values[{_shown(key)}] must be a number or null, got {_shown(value)}")
        ops.append(QuotaOp(key, 0.0 if value is None else value, value is None))
    entity, problem = check_alteration(Alteration(tuple(parts), tuple(ops)))
    if entity is None or problem is not None:
        raise ValueError(f"{where}: {_shown(problem, quoted=False, chars=_PROBLEM_CHARS)}")
    if entity.ip is not None and fields["ip"] != entity.ip:
        raise ValueError(f"{where}.ip {_shown(fields['ip'])} must be an address in its short form ({entity.ip})")
    quotas: dict[QuotaKey, float | None] = {}
    for key, value in values.items():
        try:  # a removal (null) is not checked as a value is: its key must still be one the proxy knows
            quotas[quota_key(key)] = None if value is None else float(value)  # type: ignore[index]
        except ValueError:
            raise ValueError(f"{where}.values: unknown quota key {_shown(key)}") from None
    return entity, quotas


def _fields(value: object, where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """`value` as a JSON object holding every required key and no key but those named."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, got {_shown(value)}")
    missing = [key for key in required if key not in value]
    if missing:
        raise ValueError(f"{where} has no {', '.join(missing)}")
    unknown = [key for key in value if key not in required and key not in optional]
    if unknown:
        known = ", ".join((*required, *optional))
        raise ValueError(f"{where} has an unknown key {_shown(unknown[0])} (known: {known})")
    return value


def _check_version(version: object) -> None:
    if type(version) is not int or version != STATE_VERSION:
        raise ValueError(f"version {_shown(version)}, expected {STATE_VERSION}")


def _check_unicode(name: str, where: str) -> None:
    """JSON can spell a lone UTF-16 surrogate (\\ud800), which no Kafka string holds."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{where} is not valid Unicode (it holds a lone surrogate)") from None


def _finite(value: object, where: str) -> float:
    """A JSON number as a finite float: an integer too large for a float is refused, not rounded."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{where} must be a number, got {_shown(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"{where} is out of range ({len(str(abs(value)))} digits)") from None  # type: ignore[arg-type]
    if not math.isfinite(number):
        raise ValueError(f"{where} must be a finite number, got {number!r}")
    return number


def _shown(value: object, quoted: bool = True, chars: int = _SHOWN_CHARS) -> str:
    """`value` for a message: its JSON kind for a container, its repr (or str) cut to `chars` otherwise."""
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    text = repr(value) if quoted else str(value)
    return text if len(text) <= chars else text[: chars - 1] + "…"


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
    """The saved levels and when they were saved; none if the file does not exist. Raises OSError
    or ValueError (naming what is wrong) for a file it cannot use: the caller forgives the debts in
    it, as for a lost file, rather than stop the proxy (Proxy counts and logs that reset)."""
    try:
        document = _read_json(path)
    except FileNotFoundError:
        return {}, 0.0
    fields = _fields(document, "the file", required=("version", "saved_at", "buckets"))
    _check_version(fields["version"])
    saved_at = _finite(fields["saved_at"], "saved_at")
    entries = fields["buckets"]
    if not isinstance(entries, list):
        raise ValueError(f"buckets must be a list, got {_shown(entries)}")
    levels: dict[BucketId, float] = {}
    for index, entry in enumerate(entries):
        where = f"buckets[{index}]"
        bucket = _fields(entry, where, required=("id", "tokens"))
        levels[_bucket_id(bucket["id"], f"{where}.id")] = _finite(bucket["tokens"], f"{where}.tokens")
    return levels, saved_at


def _bucket_id(value: object, where: str) -> BucketId:
    """[key, scope, name, name] as QuotaEngine.levels keys a bucket: two strings, then strings or nulls."""
    if (
        not isinstance(value, list)
        or len(value) != BUCKET_ID_PARTS
        or not all(isinstance(part, str) for part in value[:2])
        or not all(part is None or isinstance(part, str) for part in value[2:])
    ):
        raise ValueError(f"{where} must be [key, scope, name or null, name or null], got {_shown(value)}")
    for part in value:
        if part is not None:
            _check_unicode(part, where)
    return tuple(value)


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
