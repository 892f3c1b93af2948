"""apply and promote: recommendations into a running proxy's quota file, first as shadow quotas.

The proxy reloads its configuration file when it changes (and on SIGHUP), and only the file can mark
a quota shadow (`shadow = true`: charged and reported, never applied; docs/quotas.md). So `apply`
writes the recommendations as `[[quotas]]` entries with `shadow = true` in one block of that file,
between two marker lines, replacing the block a previous apply wrote; `promote` drops the shadow
flags in that block, making the same quotas binding (the debt run up while shadow is kept). The
next pipeline run reads the shadow quotas from the usage records and reports, for each, what the
replay predicts beside what the shadow quota observed on live traffic.

Safely: a shadow entry stands in for its entity's whole quota while it is tried, so an entity (and
key) that has a binding quota in force is left out, and so is an entity the file already gives an
entry of its own outside the block (edit those by hand, or with kafka-configs.sh at the proxy). The
new file is checked with the proxy's own parser before it is written, and written by a rename, so
the proxy never reads half of it. Pure text in, text out, but for `write_config`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from quotagate.config.settings import parse_config
from quotagate.pipeline.recommend import to_toml
from quotagate.quotas import ANONYMOUS, QuotaEntity, QuotaKey

BEGIN = "# BEGIN quotagate pipeline apply"
END = "# END quotagate pipeline apply"
SHADOW_LINE = "shadow = true"


@dataclass(frozen=True)
class Skipped:
    user: str
    client_id: str
    quota_key: str
    why: str

    def __str__(self) -> str:
        return f"{self.user} / {self.client_id} {self.quota_key}: {self.why}"


def entity_of(user: str, client_id: str) -> QuotaEntity:
    """The entity a recommendation is written for (to_toml: an ANONYMOUS user gets a client-id quota)."""
    return QuotaEntity(None if user == ANONYMOUS else user, client_id)


def split_block(text: str) -> tuple[str, str | None]:
    """The file without the applied block, and the block (None if the file has none)."""
    start = text.find(BEGIN)
    if start < 0:
        return text, None
    end = text.find(END, start)
    if end < 0:
        raise ValueError(f"the file has {BEGIN!r} without {END!r}: fix it by hand")
    end += len(END)
    return text[:start].rstrip("\n") + "\n" + text[end:].lstrip("\n"), text[start:end]


def shadow_recommendations(recommendations: pd.DataFrame, config_text: str) -> tuple[pd.DataFrame, list[Skipped]]:
    """The recommendations that can be tried as shadow quotas, and the rest with the reason."""
    outside, _ = split_block(config_text)
    in_file = {entity for entity, _ in parse_config(outside).quotas.items()}
    keep, skipped = [], []
    for index, row in recommendations.iterrows():
        current, shadow = row.get("current"), row.get("current_shadow")
        held = current is not None and not (isinstance(current, float) and math.isnan(current))
        tried = shadow is not None and not (isinstance(shadow, float) and math.isnan(shadow)) and bool(shadow)
        if entity_of(row["user"], row["client_id"]) in in_file:
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
    """The config with `recommendations` as the shadow block (replacing a previous one)."""
    outside, _ = split_block(config_text)
    entries = to_toml(recommendations).split("\n", 1)[1] if len(recommendations) else ""
    lines = [BEGIN + " (shadow: tried, never applied, until `quotagate pipeline promote`)"]
    for line in entries.strip("\n").splitlines():
        lines.append(line)
        if line.startswith("client_id = "):  # every entry names its client_id, after its user
            lines.append(SHADOW_LINE)
    lines.append(END)
    return outside.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"


def promote(config_text: str) -> tuple[str, int]:
    """The config with the applied block's quotas made binding, and how many entries that made."""
    outside, block = split_block(config_text)
    if block is None:
        raise ValueError(f"no {BEGIN!r} block: run `quotagate pipeline apply` first")
    lines = block.splitlines()
    promoted = sum(1 for line in lines if line.strip() == SHADOW_LINE)
    lines = [line for line in lines if line.strip() != SHADOW_LINE]
    lines[0] = BEGIN + " (promoted: enforced)"
    return outside.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n", promoted


def applied_entities(config_text: str) -> dict[QuotaEntity, dict[QuotaKey, float]]:
    """What the block sets (for messages and tests)."""
    _, block = split_block(config_text)
    if block is None:
        return {}
    return dict(parse_config(block).quotas.items())


def write_config(path: str | Path, text: str) -> None:
    """Checks `text` with the proxy's parser, then replaces the file by a rename."""
    parse_config(text)  # a ConfigError names the key; the file is left as it was
    target = Path(path)
    staging = target.with_name(f".{target.name}.apply-{os.getpid()}")
    staging.write_text(text, encoding="utf-8")
    os.replace(staging, target)
