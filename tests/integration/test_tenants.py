"""A tenant's quota through two quotagate processes sharing it through one Redis (issue 38 item 1).

Three SASL principals of tenant "team" (alice and bob by name, carol by a principal rule) produce
with librdkafka through two proxies, spread over both; the tenant's one producer_byte_rate holds the
three together. A fourth principal (admin), in no tenant, has a user quota of its own equal to the
tenant's: it gets all of it, untouched by the tenant's debt. Rates are measured from the clients'
side after a warm-up that spends the bursts (one second: quota_window_num = 1). Usage records,
metrics and /quotas name the tenant.

About half a minute with the proxies' start: long_only (make test-long); the composition and the
sharing arithmetic are unit-tested in tests/unit/test_tenants.py, which make test runs.
"""

from __future__ import annotations

import json
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.kafka_clients import (
    QUOTA,
    WINDOWS,
    Acked,
    confluent_producer_loop,
    librdkafka_sasl_plain,
    quota_config,
    rate_between,
    run_threads,
)
from tests.support.kafka_helpers import create_topic, unique_topic
from tests.support.proxy_fixtures import metric

pytestmark = pytest.mark.long_only

TENANT = f"""
[[tenants]]
name = "team"
users = ["alice", "bob"]
user_rules = ["RULE:^car.*$/team/"]
producer_byte_rate = {QUOTA}
"""


def quotas_json(proxy) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/quotas", timeout=5) as response:
        return json.loads(response.read())


def usage_rows(directory: Path) -> list[dict]:
    return [json.loads(line) for path in directory.rglob("*.jsonl") for line in path.read_text().splitlines()]


def test_three_principals_of_a_tenant_share_its_quota_across_two_proxies_and_a_fourth_keeps_its_own(
    proxy_factory, kafka, redis_server, tmp_path: Path
) -> None:
    from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP

    proxies = []
    for index in range(2):
        usage = tmp_path / f"usage-{index}"
        proxies.append(
            proxy_factory(
                KAFKA_SASL_BOOTSTRAP,
                WINDOWS
                + quota_config(f'user = "admin"\nproducer_byte_rate = {QUOTA}')
                + TENANT
                + f'\n[cluster]\nredis_url = "{redis_server.url}"\n'
                + f'\n[usage]\nenabled = true\nsink = "jsonl"\ndirectory = "{usage}"\nflush_interval_seconds = 0.5\n',
            )
        )
    topic = unique_topic("tenant")
    create_topic(kafka.bootstrap, topic, partitions=3)
    # (user, proxy): the tenant's three spread over both proxies, alice on both; admin on both too
    clients = [("alice", 0), ("alice", 1), ("bob", 1), ("carol", 0), ("admin", 0), ("admin", 1)]
    logs = {client: Acked() for client in clients}
    seconds = 14.0
    started = time.monotonic()
    run_threads(
        *(
            (lambda user=user, index=index: confluent_producer_loop(
                proxies[index].bootstrap, topic, f"{user}-{index}", seconds, logs[(user, index)],
                librdkafka_sasl_plain(user),
            ))
            for user, index in clients
        )
    )  # fmt: skip
    rates = {client: rate_between(log.events, started + 4, started + seconds) for client, log in logs.items()}
    team = sum(rate for (user, _), rate in rates.items() if user != "admin")
    admin = rates[("admin", 0)] + rates[("admin", 1)]
    print(
        f"tenant {team / QUOTA:.3f}x of its quota (alice {(rates[('alice', 0)] + rates[('alice', 1)]) / QUOTA:.3f}x, "
        f"bob {rates[('bob', 1)] / QUOTA:.3f}x, carol {rates[('carol', 0)] / QUOTA:.3f}x); "
        f"admin {admin / QUOTA:.3f}x of its own; {time.monotonic() - started:.1f} s"
    )
    assert team == pytest.approx(QUOTA, rel=0.10), f"the tenant's three principals together: {team:.0f} B/s"
    assert all(rates[client] > QUOTA * 0.05 for client in clients), f"a member was starved: {rates}"
    assert admin == pytest.approx(QUOTA, rel=0.10), f"admin, outside the tenant, got {admin:.0f} B/s"

    for proxy in proxies:
        assert metric(proxy, "quotagate_cluster_processes") == 2
        assert metric(proxy, "quotagate_cluster_fallback") == 0
        assert metric(proxy, 'quotagate_tenant_quota_limit{quota="producer_byte_rate",tenant="team"}') == QUOTA
        assert metric(proxy, 'quotagate_tenant_produce_bytes_total{tenant="team"}') > 0
        state = quotas_json(proxy)
        (tenant,) = state["tenants"]
        assert (tenant["tenant"], tenant["quotas"]["producer_byte_rate"]["quota"]) == ("team", QUOTA)
        assert {item["user"]: item["tenant"] for item in state["entities"]}.get("admin", None) is None
    time.sleep(1.0)  # the last flush of the usage records
    rows = usage_rows(tmp_path / "usage-0") + usage_rows(tmp_path / "usage-1")
    produce = [row for row in rows if row["api_key"] == 0]
    tenant_fields = ("tenant", "tenant_quota_producer_byte_rate", "tenant_quota_producer_byte_rate_shadow")
    tenants = {(row["user"], *(row[name] for name in tenant_fields)) for row in produce}
    assert tenants == {
        ("alice", "team", QUOTA, False),
        ("bob", "team", QUOTA, False),
        ("carol", "team", QUOTA, False),
        ("admin", None, None, None),
    }
