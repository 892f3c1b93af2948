"""A proxy whose quotas are set through Kafka's Admin API (kafka-configs.sh, the Java Admin client), in
front of the session broker's SASL listener, and its /quotas view."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP
from tests.support.proxy_fixtures import ProxyProcess


def admin_proxy(proxy_factory, tmp_path: Path) -> ProxyProcess:  # type: ignore[no-untyped-def]
    """User:admin may alter quotas; they are kept in a state file under tmp_path."""
    state = tmp_path / "admin-quotas.json"
    return proxy_factory(
        KAFKA_SASL_BOOTSTRAP,
        f'quota_window_num = 1\n\n[admin]\nalter_principals = ["User:admin"]\nstate_file = "{state}"\n',
    )


def quotas_view(metrics_port: int) -> dict:
    """The proxy's GET /quotas: configured entries, entities and their buckets."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/quotas", timeout=10) as response:
        return json.loads(response.read())
