"""docs/metrics.md is generated from the collectors and current; every series a proxy exports is in
it, and every metric name the docs, the alerts and the dashboard use is one the proxy exports."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from quotagate.config import parse_config
from quotagate.proxy.metrics_reference import metric_docs, metrics_markdown
from quotagate.proxy.server import Proxy
from tests.support.ops_assets import KNOWN_METRICS

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "metrics.md"


def test_the_metrics_reference_is_up_to_date() -> None:
    expected = metrics_markdown()
    written = REFERENCE.read_text(encoding="utf-8") if REFERENCE.exists() else ""
    if written != expected:
        diff = "".join(
            difflib.unified_diff(written.splitlines(True), expected.splitlines(True), "written", "generated")
        )
        pytest.fail(f"docs/metrics.md is stale: run `make docs` and commit it.\n{diff[:3000]}", pytrace=False)


async def test_every_family_a_proxy_registers_is_documented_with_its_type() -> None:
    proxy = Proxy(parse_config('[proxy]\nbootstrap_servers = ["k:1"]\n'))
    documented = {doc.name: doc.kind for doc in metric_docs()}
    registered = {family.name: family.type for family in proxy.metrics.registry.collect()}
    assert registered.items() <= documented.items(), sorted(registered.items() - documented.items())


def test_every_metric_the_docs_alerts_and_dashboard_name_is_exported() -> None:
    docs = metric_docs()
    series = {name for doc in docs for name in doc.series}
    assert KNOWN_METRICS - {"up"} <= series, sorted(KNOWN_METRICS - {"up"} - series)
    names = series | {doc.name for doc in docs}
    unknown = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "ops" / "README.md"]
        # a name followed by * stands for several (quotagate_shadow_*)
        for name in re.findall(r"\bquotagate_[a-z_]*[a-z](?![a-z_]*\*)", path.read_text(encoding="utf-8"))
        if name not in names
    }
    assert not unknown, sorted(unknown)
