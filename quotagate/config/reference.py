"""The configuration file's keys, read from the config dataclasses: the reference in
docs/configuration.md (`quotagate config-reference`) and the effective configuration that
`quotagate check-config` prints.

Every section is a field of Config and every key a field of that section's dataclass (or an entry
of the field's "keys" metadata); the meaning, and where needed the TOML type and a default in
words, come from the field's metadata (see settings.py). A key without a meaning is a SchemaError
naming it, so a new key cannot reach the reference undocumented. Never used while serving.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import MISSING, Field, dataclass, fields, is_dataclass
from types import NoneType, UnionType
from typing import Any, get_args, get_origin, get_type_hints

from quotagate.config.reload import RELOAD_RULES, reload_rule
from quotagate.config.settings import Config
from quotagate.quotas import QuotaKey, QuotaTable
from quotagate.quotas.tenants import TENANT_LISTS, Tenants

TOP_LEVEL = "top-level keys"
ARRAY_OF_TABLES = "array of tables"
_FILE_ORDER = {TOP_LEVEL: 0, "table": 1, ARRAY_OF_TABLES: 2}  # TOML: top-level keys before any table
_TOML_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class SchemaError(Exception):
    """A config field the reference cannot describe (no meaning, or a type without a TOML name)."""


@dataclass(frozen=True)
class KeyDoc:
    name: str
    toml_type: str
    default: str  # a TOML value, or words (`default_is_text`), or "" when there is none
    default_is_text: bool
    meaning: str
    bounds: str = ""  # the values it may take, from its field's metadata ("1..65535"), or ""


@dataclass(frozen=True)
class SectionDoc:
    attribute: str  # the Config field
    shape: str  # "table", ARRAY_OF_TABLES or TOP_LEVEL
    meaning: str
    keys: tuple[KeyDoc, ...]
    name: str = ""  # the table's dotted TOML name (`proxy.tls`), when it is not the attribute

    @property
    def toml_name(self) -> str:
        return self.name or self.attribute

    @property
    def header(self) -> str:
        if self.shape == TOP_LEVEL:
            return ""
        return f"[[{self.toml_name}]]" if self.shape == ARRAY_OF_TABLES else f"[{self.toml_name}]"


def config_sections() -> list[SectionDoc]:
    """Every section of the file and its keys, in the order a file has them (then Config's field order)."""
    hints = get_type_hints(Config)
    sections = []
    for section in fields(Config):
        meaning = _meaning(section.name, section)
        shape = section.metadata.get("toml", "table")
        if "keys" in section.metadata:
            keys = tuple(
                KeyDoc(str(name), toml_type, "", True, doc)
                for name, (toml_type, doc) in section.metadata["keys"].items()
            )
        else:
            section_type = _without_none(hints[section.name])
            if not is_dataclass(section_type):
                raise SchemaError(f'{section.name}: not a dataclass: list its keys in its metadata "keys"')
            name = section.metadata.get("toml_name", section.name)
            prefix = "" if shape == TOP_LEVEL else name + "."
            key_hints = get_type_hints(section_type)
            keys = tuple(_key_doc(prefix, key, key_hints[key.name]) for key in fields(section_type))
        sections.append(SectionDoc(section.name, shape, meaning, keys, section.metadata.get("toml_name", "")))
    return sorted(sections, key=lambda section: _FILE_ORDER[section.shape])


def _meaning(where: str, field: Field[Any]) -> str:
    doc = field.metadata.get("doc")
    if not isinstance(doc, str) or not doc.strip():
        raise SchemaError(
            f'{where} has no meaning: give its field metadata={{"doc": "..."}} '
            "(see quotagate/config/settings.py), then run `make docs`"
        )
    return doc


def _key_doc(prefix: str, key: Field[Any], hint: Any) -> KeyDoc:
    where = prefix + key.name
    meaning = _meaning(where, key)
    if "default" in key.metadata:
        default, is_text = key.metadata["default"], True
    elif key.default is not MISSING:
        default, is_text = toml_value(toml_data(key.default)), False
    elif key.default_factory is not MISSING:
        default, is_text = toml_value(toml_data(key.default_factory())), False
    else:
        default, is_text = "required", True
    return KeyDoc(key.name, _toml_type(where, key, hint), default, is_text, meaning, bounds(key.metadata))


def bounds(rules: Mapping[str, Any]) -> str:
    """The values a key may take, in words, from the rules parse_config applies (see settings.py)."""
    if "choices" in rules:
        return "one of " + ", ".join(toml_value(choice) for choice in rules["choices"])
    if "min" in rules:
        return f"{rules['min']}..{rules['max']}"
    if "max" in rules:
        return f"> 0, at most {rules['max']:g}"
    if rules.get("file"):
        return "an existing file"
    return ""


def _toml_type(where: str, key: Field[Any], hint: Any) -> str:
    if "type" in key.metadata:
        return str(key.metadata["type"])
    if hint in _TOML_TYPES:
        return _TOML_TYPES[hint]
    args = get_args(hint)
    if get_origin(hint) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] in _TOML_TYPES:
        return f"array of {_TOML_TYPES[args[0]]}s"
    raise SchemaError(f'{where}: no TOML type for {hint!r}: give its field metadata a "type"')


def _without_none(hint: Any) -> Any:
    if isinstance(hint, UnionType):
        (hint,) = (arg for arg in get_args(hint) if arg is not NoneType)
    return hint


# ------------------------------------------------------------------------------------------- reference


def reference_markdown() -> str:
    """docs/configuration.md."""
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated from quotagate/config/settings.py by `quotagate config-reference` (`make docs`).",
        "     Do not edit: change the field's metadata and run `make docs`. -->",
        "",
        "quotagate reads one TOML file: `quotagate run --config FILE`. `quotagate check-config FILE` validates it",
        "(exit status 2 and the name of the key on an error) and prints the effective configuration, every",
        "default filled in. A key that is not listed here is an error. A *number* is an integer or a float.",
        "An annotated example: [examples/quotagate.toml](../examples/quotagate.toml).",
    ]
    for section in config_sections():
        title = section.header or "Top-level keys"
        lines += ["", f"## {title}", "", section.meaning, ""]
        lines += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        for key in section.keys:
            default = key.default if key.default_is_text else f"`{key.default}`"
            toml_type = f"{key.toml_type} ({key.bounds})" if key.bounds else key.toml_type
            cells = (f"`{key.name}`", toml_type, default or "–", key.meaning)
            lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines + reload_markdown()) + "\n"


def reload_markdown() -> list[str]:
    """The section on reloads, from RELOAD_RULES: what each section (or key) does on a reload."""
    lines = [
        "",
        "## What a reload applies",
        "",
        "The proxy reads the file again when its content changes (checked every 0.5 s) and on SIGHUP. A file that",
        "fails validation is refused and the running configuration stays. A valid one is applied, and the log",
        "names each changed key: `config reloaded from FILE: N changed keys applied (...); M wait for a restart",
        "(...)`, with a warning listing the latter. `quotagate_config_restart_pending_keys` counts the keys that",
        "changed since the start and wait for a restart; it goes back to 0 when the file is back as it was, or",
        "at the restart.",
        "",
        "| section or key | on reload | how |",
        "| --- | --- | --- |",
    ]
    for section in config_sections():
        name = section.header or "top-level keys"
        whole = next((rule for rule in RELOAD_RULES if (rule.section, rule.key) == (section.attribute, "")), None)
        if whole is not None:
            lines.append(f"| {name} | {_effect(whole.applied)} | {whole.how} |")
        for key in section.keys:
            rule = reload_rule(section.attribute, key.name)  # a key without a rule fails here, and in the tests
            if rule is not whole:
                lines.append(f"| {name} `{key.name}` | {_effect(rule.applied)} | {rule.how} |")
    return lines


def _effect(applied: bool) -> str:
    return "applied" if applied else "at restart"


# ------------------------------------------------------------------------------------------- effective TOML


def effective_toml(config: Config, given: Mapping[str, Any] | None = None) -> str:
    """The configuration as TOML, every default filled in; parse_config reads it back to `config`.

    With `given` (the file as tomllib read it), keys the file did not set are marked `# default`.
    """
    given = given or {}
    lines: list[str] = []
    for section in config_sections():
        value = getattr(config, section.attribute)
        if section.shape == ARRAY_OF_TABLES:
            entries = toml_data(value)
            if not entries:
                lines += ["", f"# {section.header}: none"]
            for entry in entries:
                lines += ["", section.header, *(f"{_toml_key(k)} = {toml_value(v)}" for k, v in entry.items())]
            continue
        if value is None:
            lines += ["", f"# {section.header}: not set"]
            continue
        set_here: Mapping[str, Any] = given
        if section.shape != TOP_LEVEL:
            for part in section.toml_name.split("."):
                set_here = set_here.get(part, {})
        if section.header:
            lines += ["", section.header]
        for key in section.keys:
            line = f"{key.name} = {toml_value(toml_data(getattr(value, key.name)))}"
            if key.name not in set_here:
                line += f"  # default: {key.default}" if key.default_is_text else "  # default"
            lines.append(line)
    return "\n".join(lines).lstrip("\n") + "\n"


def toml_data(value: Any) -> Any:
    """A config value as the plain data its TOML is written from."""
    if isinstance(value, QuotaTable):
        return [
            {
                **_quota_entry(entity.user, entity.client_id, values),
                **({"client_id_prefix": entity.client_id_prefix} if entity.client_id_prefix is not None else {}),
                **({"ip": entity.ip, **{str(k): toml_data(v) for k, v in values.items()}} if entity.ip else {}),
                **({"shadow": True} if entity in value.shadow else {}),
            }
            for entity, values in value.items()
        ]
    if isinstance(value, Tenants):
        return [
            {
                "name": tenant.name,
                **{key: list(getattr(tenant, key)) for key in TENANT_LISTS if getattr(tenant, key)},
                **_quota_entry(None, None, tenant.quotas),
                **({"shadow": True} if tenant.shadow else {}),
            }
            for tenant in value.tenants
        ]
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
        return int(value)  # 1048576, not 1048576.0; parse_config reads both
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str) and isinstance(value[1], int):
        host, port = value  # a Kafka address, kept parsed as (host, port)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if isinstance(value, list | tuple):
        return [toml_data(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): toml_data(item) for key, item in value.items()}
    return value


def _quota_entry(user: str | None, client_id: str | None, values: Mapping[QuotaKey, float]) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if user is not None:
        entry["user"] = user
    if client_id is not None:
        entry["client_id"] = client_id
    for key in QuotaKey:
        if key in values:
            entry[key.value] = toml_data(values[key])
    return entry


def toml_value(data: Any) -> str:
    """One TOML value (inline), for the data toml_data makes."""
    if isinstance(data, bool):
        return "true" if data else "false"
    if isinstance(data, int | float):
        return repr(data)
    if isinstance(data, str):
        return _toml_string(data)
    if isinstance(data, list):
        return "[" + ", ".join(toml_value(item) for item in data) + "]"
    if isinstance(data, dict):
        return "{" + ", ".join(f"{_toml_key(key)} = {toml_value(item)}" for key, item in data.items()) + "}"
    raise TypeError(f"no TOML form for {data!r}")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    return '"' + "".join(_escaped(char) for char in text) + '"'


def _escaped(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if char < " " or char == "\x7f":  # control characters must be escaped in a basic string
        return f"\\u{ord(char):04x}"
    return char
