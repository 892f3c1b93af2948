"""apply and promote: recommendations into a running proxy's quota file, first as shadow quotas.

The proxy reloads its configuration file when it changes (and on SIGHUP), and only the file can mark
a quota shadow (`shadow = true`: charged and reported, never applied; docs/quotas.md). So `apply`
writes the recommendations as `[[quotas]]` entries with `shadow = true` in one block of that file,
between two marker lines, replacing the block a previous apply wrote; `promote` makes the same
quotas binding (the debt run up while shadow is kept). The next pipeline run reads the shadow quotas
from the usage records and reports, for each, what the replay predicts beside what the shadow quota
observed on live traffic.

Whatever the client ids in it, the block is found and rewritten the same way: its markers count
only as whole comment lines, and the block is written from a QuotaTable by the proxy's own TOML
writer (config.reference), every name a one-line escaped string, so no name can make a line of its
own; promote reads the block back with the proxy's parser and writes it again without the flags.

Safely: a shadow entry stands in for its entity's whole quota while it is tried, so an entity (and
key) that has a binding quota in force is left out, and so is an entity the file already gives an
entry of its own outside the block (edit those by hand, or with kafka-configs.sh at the proxy), and
one the file cannot name (recommend.unnamable). The new file is checked with the proxy's own parser
before it is written, and written by a rename, so the proxy never reads half of it. Pure text in,
text out, but for `write_config`. The quota file is a local path (the proxy reads it from its disk).

Tenants: a tenant's quota belongs in its own `[[tenants]]` entry, which holds its members (only the
operator knows them), so apply writes a tenant's recommended quotas into the entry of that name
with `shadow = true`, editing the file around it as it is (tomlkit: comments and layout kept), and
refuses, naming it, a tenant the file does not declare. The same safety as for entities: an entry
with binding quotas in force is left out (its shadow flag would lift them while tried). The block
names the tenants apply made shadow (one comment line, JSON: no name can make a line or a marker),
and promote drops the shadow flag of those entries only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import tomlkit

from quotagate.config.quota_state import write_atomically
from quotagate.config.settings import parse_config
from quotagate.pipeline.recommend import (
    INTEGER_KEYS,
    entity_rows,
    quota_entries,
    quota_table,
    shown,
    tenant_rows,
    unnamable,
)
from quotagate.quotas import ANONYMOUS, QuotaEntity, QuotaKey, QuotaTable

BEGIN = "# BEGIN quotagate pipeline apply"
END = "# END quotagate pipeline apply"
# The block's line naming the tenants whose [[tenants]] entries apply made shadow (a JSON list).
TENANTS_LINE = "# shadow tenants: "


@dataclass(frozen=True)
class Skipped:
    user: str | None  # None: a tenant's recommendation, named by `client_id`
    client_id: str
    quota_key: str
    why: str

    def __str__(self) -> str:
        if self.user is None:  # a tenant's
            return f"tenant {shown(self.client_id)}, {self.quota_key}: {self.why}"
        return f"user {shown(self.user)}, client id {shown(self.client_id)}, {self.quota_key}: {self.why}"


def entity_of(user: str, client_id: str) -> QuotaEntity:
    """The entity a recommendation is written for (to_toml: an ANONYMOUS user gets a client-id quota)."""
    return QuotaEntity(None if user == ANONYMOUS else user, client_id)


def split_block(text: str) -> tuple[str, str | None]:
    """The file without the applied block, and the block (None if the file has none). A marker is a
    whole line (the BEGIN line may go on with a note), lines as TOML has them (split at LF only:
    str.splitlines would also split inside a value at U+2028, U+0085 ...): text inside a value is
    never one."""
    lines = text.split("\n")
    begins = [i for i, line in enumerate(lines) if line.startswith(BEGIN)]
    ends = [i for i, line in enumerate(lines) if line.rstrip("\r") == END]
    if not begins and not ends:
        return text, None
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise ValueError(f"the file needs one {BEGIN!r} line and one {END!r} line after it: fix it by hand")
    before, block, after = lines[: begins[0]], lines[begins[0] : ends[0] + 1], lines[ends[0] + 1 :]
    outside = "\n".join(before).rstrip("\n") + "\n" + "\n".join(after).lstrip("\n")
    return outside, "\n".join(block) + "\n"


def shadow_recommendations(recommendations: pd.DataFrame, config_text: str) -> tuple[pd.DataFrame, list[Skipped]]:
    """The recommendations that can be tried as shadow quotas, and the rest with the reason."""
    outside, _ = split_block(config_text)
    in_file = {entity for entity, _ in parse_config(outside).quotas.items()}
    recommendations = entity_rows(recommendations)
    keep, skipped = [], []
    for index, row in recommendations.iterrows():
        current, shadow = row.get("current"), row.get("current_shadow")
        held = current is not None and not (isinstance(current, float) and math.isnan(current))
        tried = shadow is not None and not (isinstance(shadow, float) and math.isnan(shadow)) and bool(shadow)
        cannot_name = unnamable(row["user"], row["client_id"])
        if cannot_name is not None:
            why = cannot_name
        elif entity_of(row["user"], row["client_id"]) in in_file:
            why = "the file gives this entity quotas of its own; edit them there"
        elif held and not tried:
            why = f"a binding quota {current:g} is in force; a shadow entry would lift it while tried"
        elif not row.get("met", True):
            why = "no candidate met the objective: nothing to try"
        else:
            keep.append(index)
            continue
        skipped.append(Skipped(row["user"], row["client_id"], row["quota_key"], why))
    return recommendations.loc[keep], skipped


def apply_shadow(config_text: str, recommendations: pd.DataFrame) -> str:
    """The config with `recommendations` as the shadow block (replacing a previous one), and the
    tenants' recommendations in their [[tenants]] entries (apply_tenants; the ones it leaves out:
    tenant_skips)."""
    outside, tenants, _ = apply_tenants(config_text, recommendations)
    note = " (shadow: tried, never applied, until `quotagate pipeline promote`)"
    return _with_block(outside, note, quota_table(entity_rows(recommendations), shadow=True), tenants)


def promote(config_text: str) -> tuple[str, int]:
    """The config with the applied block's quotas made binding (and the tenant entries apply made
    shadow), and how many entries that made."""
    outside, applied = block_quotas(config_text)
    if applied is None:
        raise ValueError(f"no {BEGIN!r} block: run `quotagate pipeline apply` first")
    document, promoted = tomlkit.parse(outside), 0
    for name in shadow_tenants(config_text):
        entry = declared_tenants(document).get(name)
        if entry is not None and entry.get("shadow") is True:
            del entry["shadow"]
            promoted += 1
    table = QuotaTable(dict(applied.items()))
    return _with_block(tomlkit.dumps(document), " (promoted: enforced)", table), len(applied.shadow) + promoted


def _with_block(outside: str, note: str, table: QuotaTable, tenants: Iterable[str] = ()) -> str:
    named = sorted(set(tenants))
    record = [TENANTS_LINE + json.dumps(named)] if named else []  # ASCII, one line: never a marker
    block = [BEGIN + note, *record, *quota_entries(table)[1:], END]
    return outside.rstrip("\n") + "\n\n" + "\n".join(block) + "\n"


def shadow_tenants(config_text: str) -> list[str]:
    """The tenants whose entries the applied block says apply made shadow."""
    _, block = split_block(config_text)
    for line in (block or "").split("\n"):
        if line.startswith(TENANTS_LINE):
            return [str(name) for name in json.loads(line[len(TENANTS_LINE) :])]
    return []


def declared_tenants(document: tomlkit.TOMLDocument) -> dict[str, object]:
    """The file's [[tenants]] entries by name (tomlkit tables: edited in place, the rest kept as written)."""
    entries = document.get("tenants", [])
    return {str(entry["name"]): entry for entry in entries if isinstance(entry.get("name"), str)}


def tenant_skips(config_text: str, recommendations: pd.DataFrame) -> list[Skipped]:
    """The tenants' recommendations apply leaves out, with the reason."""
    return apply_tenants(config_text, recommendations)[2]


def apply_tenants(config_text: str, recommendations: pd.DataFrame) -> tuple[str, list[str], list[Skipped]]:
    """The file without the applied block, each tenant's recommended quotas written into its
    [[tenants]] entry with `shadow = true`; the tenants the block is to name as shadow (those of a
    previous apply still shadow, and these); and the recommendations left out, with the reason."""
    outside, _ = split_block(config_text)
    rows = tenant_rows(recommendations)
    previous = shadow_tenants(config_text)
    document = tomlkit.parse(outside)
    entries = declared_tenants(document)
    skipped: list[Skipped] = []
    wanted: dict[str, dict[str, float]] = {}
    for _, row in rows.iterrows():
        tenant, key = str(row["tenant"]), str(row["quota_key"])
        entry = entries.get(tenant)
        if entry is None:
            why = (
                "not declared in this file (no [[tenants]] entry has this name): declare the tenant, "
                "its name and members, then apply again"
            )
        elif _binding(entry, tenant in previous):
            why = "the tenant's entry has binding quotas in force; its shadow flag would lift them while tried"
        elif not row.get("met", True):
            why = "no candidate met the objective: nothing to try"
        else:
            wanted.setdefault(tenant, {})[key] = float(row["recommended"])
            continue
        skipped.append(Skipped(None, tenant, key, why))
    for tenant, values in wanted.items():
        entry = entries[tenant]
        for key, value in sorted(values.items()):
            entry[key] = int(value) if key in INTEGER_KEYS or value.is_integer() else value
        entry["shadow"] = True
    still_shadow = [name for name in previous if name in entries and entries[name].get("shadow") is True]
    return tomlkit.dumps(document), [*still_shadow, *wanted], skipped


def _binding(entry: object, applied_before: bool) -> bool:
    """Whether a tenant entry holds quotas that bind (a shadow entry apply wrote may be written again)."""
    has_quotas = any(key.value in entry for key in QuotaKey)
    return has_quotas and not (entry.get("shadow") is True and applied_before)


def block_quotas(config_text: str) -> tuple[str, QuotaTable | None]:
    """The file without the applied block, and what the block sets as the proxy reads the file
    (None if it has no block): the file's entities less those it has outside the block."""
    outside, block = split_block(config_text)
    if block is None:
        return outside, None
    whole = parse_config(config_text).quotas
    elsewhere = {entity for entity, _ in parse_config(outside).quotas.items()}
    mine = {entity: values for entity, values in whole.items() if entity not in elsewhere}
    return outside, QuotaTable(mine, frozenset(entity for entity in whole.shadow if entity in mine))


def applied_entities(config_text: str) -> dict[QuotaEntity, dict[QuotaKey, float]]:
    """What the block sets (for messages and tests)."""
    _, applied = block_quotas(config_text)
    return {} if applied is None else dict(applied.items())


def write_config(path: str | Path, text: str) -> None:
    """Checks `text` with the proxy's parser, then replaces the file by a rename (fsync'd)."""
    parse_config(text)  # a ConfigError names the key; the file is left as it was
    write_atomically(Path(path), text)
