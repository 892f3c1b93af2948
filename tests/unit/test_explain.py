"""`explain`: which entry applies to a client for each key, at which level, from which source, who
shares the bucket, the bucket now, and why every other matching entry lost; checked against Kafka's
precedence table (8 levels) plus the client-id-prefix levels, and the /quotas/explain route."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from quotagate.proxy.admin_http import AdminHttpServer
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.admin import effective, source_of
from quotagate.quotas.explain import explain, explain_text
from tests.support.quota_ladder import KAFKA_PRECEDENCE_SCENARIO, LADDER, LADDER_CLIENT_ID, LADDER_USER, prefix

PRODUCE = QuotaKey.PRODUCER_BYTE_RATE
FETCH = QuotaKey.CONSUMER_BYTE_RATE


@pytest.mark.parametrize("top", range(len(LADDER)))
def test_explain_walks_kafkas_eight_levels_and_the_prefix_levels_in_order(top: int) -> None:
    table = QuotaTable({entity: {PRODUCE: 1000 + index} for index, (_, entity) in enumerate(LADDER) if index >= top})
    answer = explain(QuotaEngine(table), LADDER_USER, LADDER_CLIENT_ID, now=None)["quotas"]["producer_byte_rate"]
    level, entity = LADDER[top]
    assert (answer["applies"]["level"], answer["applies"]["matched"], answer["applies"]["value"]) == (
        level,
        str(entity),
        1000 + top,
    )
    assert [lost["level"] for lost in answer["lost"]] == [level for level, _ in LADDER[top + 1 :]]
    assert all(lost["why"] == f"level {level} ({entity}) comes first in the precedence" for lost in answer["lost"])


@pytest.mark.parametrize(
    ("user", "client_id", "value", "level", "shared_by"),
    [
        ("userA", "client1", 5000, "1", "only user userA with client id 'client1'"),
        ("userA", "client2", 4000, "3", "every client id of user userA"),
        ("userB", "client2", 8000, "2", "only user userB with client id 'client2'"),
        ("userD", "any", 3000, "5", "only user userD with client id 'any'"),
    ],
)
def test_explain_answers_kafkas_client_quota_manager_test_scenario(
    user: str, client_id: str, value: int, level: str, shared_by: str
) -> None:
    table = QuotaTable({entity: {PRODUCE: v} for entity, v in KAFKA_PRECEDENCE_SCENARIO.items()})
    applied = explain(QuotaEngine(table), user, client_id, now=None)["quotas"]["producer_byte_rate"]["applies"]
    assert (applied["value"], applied["level"], applied["shared_by"]) == (value, level, shared_by)


def test_explain_says_which_prefix_won_and_which_entries_set_no_value_for_the_key() -> None:
    table = QuotaTable(
        {
            prefix("fleet-"): {PRODUCE: 100, FETCH: 10},
            prefix("fleet-eu-"): {FETCH: 20},
            QuotaEntity("alice", None): {QuotaKey.REQUEST_PERCENTAGE: 5},
        }
    )
    answer = explain(QuotaEngine(table), "alice", "fleet-eu-1", now=None)["quotas"]
    fetch = answer["consumer_byte_rate"]
    assert fetch["applies"]["matched"] == "client-id-prefix=fleet-eu-"
    assert fetch["applies"]["shared_by"] == "every client id that starts with 'fleet-eu-', of every user"
    assert [(lost["matched"], lost["why"]) for lost in fetch["lost"]] == [
        ("user=alice", "sets no consumer_byte_rate: the precedence goes on"),
        ("client-id-prefix=fleet-", "a longer prefix of the same level applies ('fleet-eu-' is longer than 'fleet-')"),
    ]
    produce = answer["producer_byte_rate"]
    assert produce["applies"]["matched"] == "client-id-prefix=fleet-"
    assert answer["controller_mutation_rate"]["applies"] is None


def test_explain_gives_the_source_the_shadow_flag_and_the_buckets_state_now() -> None:
    file = QuotaTable(
        {QuotaEntity("alice", None): {PRODUCE: 100}, QuotaEntity(None, "tried"): {FETCH: 50}},
        shadow=frozenset({QuotaEntity(None, "tried")}),
    )
    api = {QuotaEntity("alice", None): {PRODUCE: 200.0}}
    engine = QuotaEngine(effective(file, api), QuotaWindows(quota_window_num=1))
    engine.charge("alice", "tried", PRODUCE, 600, now=10.0)  # 400 in debt at 200/s: 2 s
    engine.charge("alice", "tried", FETCH, 100, now=10.0)  # 50 in debt at 50/s: would be 1 s
    answer = explain(engine, "alice", "tried", 10.5, lambda entity, key: source_of(api, entity, key), ip="10.1.2.3")
    produce = answer["quotas"]["producer_byte_rate"]["applies"]
    assert (produce["source"], produce["shadow"]) == ("api", False)
    assert produce["bucket"] == {
        "id": ["producer_byte_rate", "user", "alice", None],
        "rate_per_second": 200.0,
        "burst": 200.0,
        "state": "in debt",
        "tokens": -300.0,
        "debt": 300.0,
        "throttle_ms": 1500,
    }
    fetch = answer["quotas"]["consumer_byte_rate"]["applies"]
    assert (fetch["source"], fetch["shadow"], fetch["bucket"]["throttle_ms"]) == ("file", True, 500)
    assert answer["ip"]["address"] == "10.1.2.3"
    text = explain_text(answer)
    assert "producer_byte_rate: 200 from user=alice (level 3, user; source api)" in text
    assert "shadow: never applied" in text and "throttle 1500 ms" in text


def test_explain_reads_without_resolving_through_the_engines_cache() -> None:
    table = QuotaTable({QuotaEntity("alice", None): {PRODUCE: 100}})
    explain(QuotaEngine(table), "alice", "x", now=0.0)
    assert table._cache == {}  # an explain from the HTTP thread leaves nothing behind


def http_route(engine: QuotaEngine, path: str) -> tuple[int, str]:
    # Only what /quotas/explain reads of the proxy: its engine, its clock and the quotas' sources.
    proxy = SimpleNamespace(
        engine=engine,
        loop=SimpleNamespace(time=lambda: 0.0),
        quota_admin=SimpleNamespace(source=lambda entity, key: "file"),
    )
    status, _content_type, body = AdminHttpServer(proxy).route("GET", path)  # type: ignore[arg-type]
    return status, body.decode()


def test_the_explain_route_answers_json_and_refuses_unknown_or_repeated_parameters() -> None:
    engine = QuotaEngine(QuotaTable({prefix("fleet-"): {PRODUCE: 100}}))
    status, body = http_route(engine, "/quotas/explain?user=bob&client_id=fleet-9")
    assert status == 200
    assert json.loads(body)["quotas"]["producer_byte_rate"]["applies"]["level"] == "7p"
    assert json.loads(http_route(engine, "/quotas/explain")[1])["user"] == "ANONYMOUS"
    assert http_route(engine, "/quotas/explain?usr=bob") == (
        400,
        "unknown parameter usr (known: user, client_id, ip)\n",
    )
    assert http_route(engine, "/quotas/explain?user=a&user=b")[0] == 400
