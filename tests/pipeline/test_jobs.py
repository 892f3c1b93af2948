"""The pipeline's jobs on small DataFrames whose answers are known by construction."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from quotagate.pipeline.ingest import ingest_files
from quotagate.pipeline.recommend import recommend, to_kafka_configs, to_toml, with_current
from quotagate.pipeline.report import OTHER_TOPICS_LABEL, render_report, report_data
from quotagate.pipeline.rollup import per_entity_topic_second, release, rollup
from quotagate.pipeline.synthetic import START_MS, SyntheticEntity, synthetic_aggregates, synthetic_requests
from quotagate.pipeline.table import read_table
from quotagate.pipeline.whatif import whatif
from quotagate.proxy.usage_collectors import OTHER_TOPICS
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import RECORDED_KEYS

QUOTA = 100_000.0  # bytes/s
HEAVY = SyntheticEntity("alice", "heavy", 2 * QUOTA, requests_per_second=20)
LIGHT = SyntheticEntity("bob", "light", 0.5 * QUOTA, requests_per_second=20)
SECONDS = 60
CANDIDATE = pd.DataFrame({"quota_key": ["producer_byte_rate"], "quota": [QUOTA]})


def by_entity(frame) -> dict[str, dict]:
    return {row["client_id"]: row.asDict() for row in frame.collect()}


@pytest.mark.parametrize("make", [synthetic_requests, synthetic_aggregates], ids=["per_request", "aggregates"])
def test_an_entity_at_twice_a_quota_is_throttled_and_one_at_half_is_not(spark, make) -> None:
    table = make(spark, [HEAVY, LIGHT], SECONDS)
    results = by_entity(whatif(table, CANDIDATE))
    heavy, light = results["heavy"], results["light"]
    assert light["seconds_throttled"] == 0 and light["total_delay_ms"] == 0 and light["kafka_seconds_throttled"] == 0
    # the 11 s burst (1.1 MB) absorbs 1.1 MB / 100 kB/s of excess = 11 s; throttled from there on
    assert heavy["active_seconds"] == SECONDS
    assert 47 <= heavy["seconds_throttled"] <= 50, heavy
    assert heavy["p99_delay_ms"] > 1000 and heavy["amount_delayed"] > 0.7 * 2 * QUOTA * SECONDS
    assert heavy["kafka_seconds_throttled"] > 0


def test_share_fetch_bytes_count_for_consumer_byte_rate_as_fetch_bytes_do(spark) -> None:
    # The proxy charges ShareFetch responses (api 78, share groups) to consumer_byte_rate like Fetch's.
    fetcher = SyntheticEntity("dave", "fetcher", 2 * QUOTA, requests_per_second=20, api_key=1)
    sharer = SyntheticEntity("erin", "sharer", 2 * QUOTA, requests_per_second=20, api_key=78)
    table = synthetic_requests(spark, [fetcher, sharer], SECONDS)
    candidate = pd.DataFrame({"quota_key": ["consumer_byte_rate"], "quota": [QUOTA]})
    results = by_entity(whatif(table, candidate))
    assert results["fetcher"]["seconds_throttled"] > 0
    assert results["sharer"]["seconds_throttled"] == results["fetcher"]["seconds_throttled"], results


def test_kafka_sampled_rate_keeps_throttling_after_a_burst_the_token_bucket_has_absorbed(spark) -> None:
    # 2 s at 5× the quota every 30 s, 0.5× between: 1.45 MB over Kafka's 11 windows, ~1.4× the quota
    bursty = SyntheticEntity(
        "carol", "bursty", 0.5 * QUOTA, 10, burst_every_seconds=30, burst_seconds=2, burst_factor=10
    )
    row = by_entity(whatif(synthetic_requests(spark, [bursty], 120), CANDIDATE))["bursty"]
    assert row["seconds_throttled"] == 0, "2 s at 5× (0.8 MB over the quota) fits an 11 s bucket (1.1 MB)"
    assert row["kafka_seconds_throttled"] >= 4, row


def test_a_recommendation_brackets_the_generated_rate(spark) -> None:
    steady = SyntheticEntity("dave", "steady", 250_000, 25)
    recommendations = recommend(whatif(synthetic_aggregates(spark, [steady], 120)), objective=0.01, headroom=0.2)
    row = by_entity(recommendations.where("quota_key = 'producer_byte_rate'"))["steady"]
    assert row["met"]
    assert 250_000 * 0.8 <= row["meets_at"] <= 250_000 * 1.2, row
    assert 250_000 <= row["recommended"] <= 250_000 * 1.5, row
    frame = with_current(recommendations.where("quota_key = 'producer_byte_rate'").toPandas(), None)
    toml = to_toml(frame)
    assert 'user = "dave"\nclient_id = "steady"\nproducer_byte_rate = ' in toml
    assert "--entity-type users --entity-name dave --entity-type clients --entity-name steady" in to_kafka_configs(
        frame
    )


def test_rollup_per_second_and_minute_with_percentiles_and_throttled_share(spark) -> None:
    bursty = SyntheticEntity(
        "erin", "rolled", 10_000, 10, burst_every_seconds=60, burst_seconds=6, burst_factor=3, tenant="team"
    )
    steady = SyntheticEntity("frank", "member", 10_000, 10, tenant="team")  # the tenant's other member
    tables = rollup(synthetic_requests(spark, [bursty, steady], 120))
    seconds = tables["entity_second"].where("second % 60 = 10").collect()
    assert {(r["requests"], r["bytes_in"]) for r in seconds} == {(10, 10_000)}
    minutes = sorted(tables["entity_minute"].where("client_id = 'rolled'").collect(), key=lambda r: r["minute"])
    assert len(minutes) == 2 and all(m["active_seconds"] == 60 for m in minutes)
    assert [(m["bytes_in"], m["bytes_in_p50"], m["bytes_in_max"]) for m in minutes] == [(720_000, 10_000, 30_000)] * 2
    assert minutes[0]["bytes_in_p95"] == 30_000 and minutes[0]["throttled_share"] == 0
    topics = tables["topic_minute"].collect()
    assert {r["topic"] for r in topics} == {"synthetic"}
    # the tenant: its two members summed each second, their peaks per key from those sums
    tenant = sorted(tables["tenant_minute"].collect(), key=lambda r: r["minute"])
    assert [(t["tenant"], t["members"], t["active_seconds"]) for t in tenant] == [("team", 2, 60)] * 2
    assert [(t["bytes_in"], t["bytes_in_p50"], t["bytes_in_max"]) for t in tenant] == [(1_320_000, 20_000, 40_000)] * 2
    assert tenant[0]["requests"] == 1200 and tenant[0]["requests_max"] == 20 and tenant[0]["bytes_out_max"] == 1200


def test_rollup_aggregates_the_records_once_for_all_its_tables_and_release_drops_that(spark) -> None:
    table = synthetic_requests(spark, [SyntheticEntity("erin", "cached", 10_000, 10)], 5)
    tables = rollup(table)
    assert per_entity_topic_second(table).storageLevel.useMemory, "the shared aggregation is cached"
    assert tables["entity_second"].count() == 5 and tables["topic_second"].count() == 5
    release(table)
    assert not per_entity_topic_second(table).storageLevel.useMemory, "release left it cached"


def test_the_topics_a_proxy_did_not_name_are_labelled_so_and_still_sum_into_the_entity(spark) -> None:
    # One entity's produce: 30 kB/s to "orders", and 20 kB/s to topics beyond the proxy's
    # usage.topics_per_entity, which its records sum in rows whose topic is "<other topics>".
    rows = [SyntheticEntity("alice", "many", 30_000, 10, topic="orders")]
    rows.append(SyntheticEntity("alice", "many", 20_000, 5, topic=OTHER_TOPICS))
    table = synthetic_aggregates(spark, rows[:1], SECONDS).unionByName(synthetic_aggregates(spark, rows[1:], SECONDS))
    tables = rollup(table)
    by_topic = {(r["topic"], r["other_topics"]): r["bytes_in"] for r in tables["topic_minute"].collect()}
    assert by_topic == {("orders", False): 30_000 * SECONDS, (None, True): 20_000 * SECONDS}, "no topic is named so"
    seconds = tables["topic_second"].where("other_topics").collect()
    assert len(seconds) == SECONDS and {r["topic"] for r in seconds} == {None}
    (minute,) = tables["entity_minute"].collect()
    assert (minute["bytes_in"], minute["requests"]) == (50_000 * SECONDS, 15 * SECONDS), "the entity's sums are whole"
    release(table)

    results = whatif(table, CANDIDATE)
    page = render_report(report_data(table, results, with_current(recommend(results).toPandas(), None)))
    topics = page.split("Produce by topic")[1]
    assert "<td>orders</td><td>1,800,000</td><td>60.0%</td>" in topics, topics
    assert f"<td>{OTHER_TOPICS_LABEL}</td><td>1,200,000</td><td>40.0%</td>" in topics, topics
    assert "other topics&gt;" not in topics


def write_jsonl(path: Path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def v1(seq: int, **fields) -> str:
    record = {
        "v": 1,
        "ts": START_MS + seq,
        "proxy": "p",
        "writer": "w",
        "seq": seq,
        "user": "u",
        "client_id": "c",
        "api_key": 0,
        "api_version": 9,
        "topics": ["a", "b"],
        "bytes_in": 1000,
        "bytes_out": 50,
        "partitions_mutated": 0,
        "upstream_latency_ms": 2.0,
        "throttle_ms": 5,
        "decision": "throttled",
    }
    return json.dumps({**record, **fields})


def test_ingest_reads_v1_and_v2_merges_each_row_once_and_names_each_bad_input(spark, tmp_path: Path) -> None:
    write_jsonl(tmp_path / "in" / "good.jsonl", [v1(1), v1(2), v1(1)])  # seq 1 twice: one kept
    write_jsonl(tmp_path / "in" / "bad.jsonl", [v1(3), "{not json", json.dumps({"v": 9, "ts": 1}), v1(4)])
    # from before writer and seq: named by file and content, the same again on every read
    legacy = [json.loads(v1(s)) for s in (5, 6, 6)]
    write_jsonl(tmp_path / "in" / "legacy v1.jsonl", [json.dumps({**r, "writer": None, "seq": None}) for r in legacy])
    synthetic_aggregates(spark, [SyntheticEntity("u", "agg", 1000, 2)], 3).drop("date").write.parquet(
        str(tmp_path / "in" / "agg")
    )
    (tmp_path / "in" / "cut.parquet").write_bytes(b"PAR1" + bytes(200))  # renamed into place without its footer
    (tmp_path / "in" / "empty.jsonl").write_text("")
    (tmp_path / "empty").mkdir()
    inputs = [str(tmp_path / "in"), str(tmp_path / "missing"), str(tmp_path / "empty")]
    table = str(tmp_path / "table")
    first = ingest_files(spark, inputs, table)
    text = "\n".join(map(str, first.problems))
    assert f"{tmp_path / 'missing'}: no such file or directory" in text
    assert f"{tmp_path / 'empty'}: no usage files" in text
    assert f"{tmp_path / 'in' / 'bad.jsonl'}: 1 × malformed record" in text
    assert f"{tmp_path / 'in' / 'bad.jsonl'}: 1 × unknown schema version 9" in text
    assert f"{tmp_path / 'in' / 'cut.parquet'}: not a readable Parquet file" in text
    assert len(first.problems) == 5, text
    assert first.inserted == 4 * 2 + 3 * 2 + 3, "a v1 produce naming two topics is a row each; 3 aggregates"
    again = ingest_files(spark, inputs, table)
    assert again.inserted == 0, "the same input again changes nothing"
    rows = read_table(spark, table).collect()
    v1_rows = sorted((r["seq"], r["topic"], r["requests"], r["bytes_in"]) for r in rows if r["writer"] == "w")
    assert v1_rows == [(s, t, int(t == "a"), 500) for s in (1, 2, 3, 4) for t in ("a", "b")]
    assert sum(1 for r in rows if r["writer"].startswith("v1:")) == 3 * 2, "identical legacy records stay two"
    assert sum(r["requests"] for r in rows if r["v"] == 2) == 6
    assert sum(r["throttled_requests"] for r in rows if r["v"] == 1) == 7


def test_replay_uses_the_configured_windows(spark) -> None:
    table = synthetic_requests(spark, [HEAVY], 30)
    one_window = by_entity(whatif(table, CANDIDATE, QuotaWindows(quota_window_num=1)))["heavy"]
    eleven = by_entity(whatif(table, CANDIDATE))["heavy"]
    assert one_window["seconds_throttled"] > eleven["seconds_throttled"]


def test_the_quota_the_records_name_is_the_current_quota_and_always_a_candidate(spark) -> None:
    # `held` had 350 000 B/s (its records say so); the grid alone (x 2^(i/4)) has no row there.
    held = SyntheticEntity("alice", "held", 300_000, 20, quota=350_000)
    unknown = SyntheticEntity("bob", "unknown", 300_000, 20)  # records from before the quota fields
    stand_in = QuotaTable(
        {
            QuotaEntity("alice", None): {QuotaKey.PRODUCER_BYTE_RATE: 123_000},  # the records win
            QuotaEntity("bob", None): {QuotaKey.PRODUCER_BYTE_RATE: 200_000},
        }
    )
    results = whatif(synthetic_aggregates(spark, [held, unknown], 30), stand_in=stand_in, keys=["producer_byte_rate"])
    rows = results.toPandas()
    for client_id, quota, source in (("held", 350_000.0, "records"), ("unknown", 200_000.0, "config")):
        mine = rows[rows["client_id"] == client_id]
        current = mine[mine["is_current"]]
        assert current["quota"].tolist() == [quota], (client_id, sorted(mine["quota"]))
        assert set(mine["current_source"]) == {source} and set(mine["current_quota"]) == {quota}
        assert len(mine) == 22, "the grid's 21 candidates and the current quota"
    found = with_current(recommend(results).toPandas(), stand_in)
    held_row = found[found["client_id"] == "held"].iloc[0]
    assert (held_row["current"], held_row["current_source"]) == (350_000.0, "records")
    assert held_row["current_seconds_throttled"] == 0, "300 000 B/s fits a 350 000 B/s quota"


def test_a_quota_changed_mid_run_shows_as_changed(spark) -> None:
    before = synthetic_aggregates(spark, [SyntheticEntity("alice", "moved", 100_000, 10, quota=300_000)], 20)
    after = synthetic_aggregates(
        spark, [SyntheticEntity("alice", "moved", 100_000, 10, quota=500_000)], 20, start_ms=START_MS + 20_000
    )
    after = after.withColumn("writer", F.lit("later"))
    rows = whatif(before.unionByName(after), keys=["producer_byte_rate"]).toPandas()
    assert set(rows["current_quota"]) == {500_000.0}
    history = json.loads(rows["quota_history"].iloc[0])
    assert history == [[START_MS, 300_000.0, False], [START_MS + 20_000, 500_000.0, False]]


def test_request_percentage_rows_are_in_percent_throughout(spark) -> None:
    # 20 requests a second of 2 ms each (synthetic): 40 ms of request time a second, 4 % of a thread
    table = synthetic_aggregates(spark, [SyntheticEntity("carol", "timed", 10_000, 20)], 30)
    rows = whatif(table, keys=["request_percentage"]).toPandas()
    assert set(rows["peak_second"]) == {4.0} and rows["mean_rate"].iloc[0] == pytest.approx(4.0)
    assert rows["quota"].max() == 8.0, "the grid reaches 2 × the peak second, in percent"


def test_the_windows_the_records_carry_size_the_replayed_burst(spark) -> None:
    # At twice the quota: an 11 s burst (Kafka's default) lasts 11 s, a 2 s one (the proxy's, as its
    # records say) 2 s, and the replay must give the burst the proxy gave.
    table = synthetic_aggregates(spark, [SyntheticEntity("alice", "windowed", 2 * QUOTA, 20, quota=QUOTA)], 20)
    recorded = table.withColumn("quota_window_num", F.lit(2)).withColumn("quota_window_size_seconds", F.lit(1.0))
    recorded = recorded.withColumn("controller_quota_window_num", F.lit(11))
    recorded = recorded.withColumn("controller_quota_window_size_seconds", F.lit(1.0))
    default, held = (by_entity(whatif(frame, CANDIDATE).where("is_current"))["windowed"] for frame in (table, recorded))
    assert default["seconds_throttled"] <= 10 and held["seconds_throttled"] >= 17, (default, held)


# Three members of one tenant at 150 + 100 + 50 kB/s under a tenant quota of 200 kB/s (their records
# say so), and an entity in no tenant.
TEAM = [
    SyntheticEntity(f"user-{i}", f"team-{i}", rate, 20, tenant="team", tenant_quota=2 * QUOTA)
    for i, rate in enumerate((1.5 * QUOTA, QUOTA, 0.5 * QUOTA))
]
SOLO = SyntheticEntity("dave", "solo", QUOTA, 20)
# A tenant whose records say its quota was shadow, and one whose records predate that flag.
TRIAL = SyntheticEntity("erin", "trial-0", 0.5 * QUOTA, 20, tenant="trial", tenant_quota=QUOTA)
LEGACY = SyntheticEntity("fay", "legacy-0", 0.5 * QUOTA, 20, tenant="legacy", tenant_quota=QUOTA)
# A tenant of two members at 150 + 100 kB/s under 200 kB/s, the first with its own quota of 60 kB/s
# too (both bind), and an entity whose records put it in that tenant for its last 30 s only.
PAIR = [
    SyntheticEntity("gus", "pair-0", 1.5 * QUOTA, 20, quota=0.6 * QUOTA, tenant="pair", tenant_quota=2 * QUOTA),
    SyntheticEntity("hal", "pair-1", QUOTA, 20, tenant="pair", tenant_quota=2 * QUOTA),
]
MOVER = SyntheticEntity("ida", "mover", 0.5 * QUOTA, 20)
ENTITIES = {"team-0", "team-1", "team-2", "solo", "trial-0", "legacy-0", "pair-0", "pair-1", "mover"}


def with_tenant_shadow_flags(table: DataFrame) -> DataFrame:
    """The synthetic records (binding tenants), trial's saying shadow, legacy's without the flag."""
    for key in RECORDED_KEYS:
        name = f"tenant_quota_{key.value}_shadow"
        trial = F.when(F.col(name).isNotNull(), F.lit(True))  # null stays null: a key not charged
        legacy = F.lit(None).cast("boolean")
        tenant = F.col("tenant")
        table = table.withColumn(
            name, F.when(tenant == "legacy", legacy).when(tenant == "trial", trial).otherwise(F.col(name))
        )
    return table


def tenants_table(spark) -> DataFrame:  # type: ignore[no-untyped-def]
    half = SECONDS // 2
    moved = synthetic_aggregates(
        spark, [replace(MOVER, tenant="pair", tenant_quota=2 * QUOTA)], half, START_MS + half * 1000
    )
    everyone = synthetic_aggregates(spark, [*TEAM, SOLO, TRIAL, LEGACY, *PAIR], SECONDS)
    everyone = everyone.unionByName(synthetic_aggregates(spark, [MOVER], half))
    return with_tenant_shadow_flags(everyone.unionByName(moved.withColumn("writer", F.lit("later"))))


def test_a_tenant_and_its_members_are_replayed_together_and_recommended(spark) -> None:
    results = whatif(tenants_table(spark), keys=["producer_byte_rate"]).toPandas()
    found = with_current(recommend(spark.createDataFrame(results)).toPandas(), None)
    assert_a_tenant_is_replayed_and_recommended_as_its_members_summed(results, found)
    assert_a_members_own_quota_and_its_tenants_are_replayed_together(results, found)


def assert_a_tenant_is_replayed_and_recommended_as_its_members_summed(
    results: pd.DataFrame, found: pd.DataFrame
) -> None:
    tenant = results[results["tenant"] == "team"]
    assert tenant["user"].isna().all() and set(tenant["members"]) == {3}
    assert set(results[results["tenant"].isna()]["client_id"]) == ENTITIES
    at_current = tenant[tenant["is_current"]].iloc[0]
    assert (at_current["quota"], at_current["current_source"]) == (2 * QUOTA, "records")
    # whether a tenant's quota was shadow, as its records say; null where they predate the flag
    shadows = {name: results[results["tenant"] == name]["current_shadow"] for name in ("team", "trial", "legacy")}
    assert [set(shadows[name]) for name in ("team", "trial")] == [{False}, {True}]
    assert shadows["legacy"].isna().all(), "records without the flag do not say"
    assert at_current["peak_second"] == 3 * QUOTA
    # 300 kB/s against 200 kB/s: the tenant's 11 s burst (2.2 MB) absorbs 22 s of the excess
    assert 36 <= at_current["seconds_throttled"] <= 40, at_current.to_dict()
    # no member has an own quota: each one's row at none is what the tenant did to it
    held = results[(results["client_id"] == "team-0") & results["quota"].isna()].iloc[0]
    assert held["is_current"] and 0 < held["seconds_throttled"] <= at_current["seconds_throttled"]

    team = found[found["tenant"] == "team"].iloc[0]
    assert team["met"] and team["meets_at"] == 3 * QUOTA and team["recommended"] == 3.6 * QUOTA, team.to_dict()
    assert team["current"] == 2 * QUOTA and team["current_seconds_throttled"] == at_current["seconds_throttled"]
    assert pd.isna(team["throttled_share_without"]), "no member has an own quota"
    assert set(found[found["tenant"].isna()]["client_id"]) == ENTITIES
    shadow = {row["tenant"]: row["current_shadow"] for _, row in found[found["tenant"].notna()].iterrows()}
    assert shadow == {"team": False, "trial": True, "legacy": False, "pair": False}, "from the records alone"
    toml = to_toml(found)
    assert '# tenant "team": producer_byte_rate = 360000' in toml and 'name = "team"' not in toml, toml
    assert "team" not in to_kafka_configs(found).replace("team-", ""), "Kafka has no tenants"


def assert_a_members_own_quota_and_its_tenants_are_replayed_together(
    results: pd.DataFrame, found: pd.DataFrame
) -> None:
    entities = results[results["tenant"].isna()]
    assert not entities.duplicated(["user", "client_id", "quota"]).any(), "each entity replayed once"
    mover = entities[entities["client_id"] == "mover"]
    assert set(mover["active_seconds"]) == {SECONDS} and mover["quota"].notna().all(), "in and out: alone"

    def at(client_id: str | None, quota: float | None, tenant: str | None = None) -> dict:
        rows = results[(results["client_id"] == client_id) if tenant is None else (results["tenant"] == tenant)]
        rows = rows[rows["quota"].isna()] if quota is None else rows[rows["quota"] == quota]
        (row,) = [row.to_dict() for _, row in rows.iterrows()]
        return row

    team, own, held = at(None, 2 * QUOTA, "pair"), at("pair-0", 0.6 * QUOTA), at("pair-1", None)
    assert team["is_current"] and own["is_current"] and held["is_current"], "as the proxy held them"
    # the mover's last 30 s are the tenant's too (its rows are its own: it was in no tenant before)
    assert team["amount_delayed"] >= own["amount_delayed"] + held["amount_delayed"] > 0
    assert held["seconds_throttled"] >= 15, "the tenant holds the member with no own quota"
    top = entities[entities["client_id"] == "pair-0"]["quota"].max()
    assert at("pair-0", top)["seconds_throttled"] == at("pair-0", None)["seconds_throttled"] >= 15, "the tenant's"

    rows = {(row["tenant"], row["client_id"]): row for _, row in found.iterrows()}
    member, tenant = rows[(None, "pair-0")], rows[("pair", None)]
    # judged by what each adds to the other's throttle: both can be met
    assert member["met"] and member["throttled_share_without"] > 0.25, member.to_dict()
    assert QUOTA <= member["meets_at"] <= 1.5 * QUOTA, member.to_dict()
    assert tenant["met"] and tenant["throttled_share_without"] > 0.5, tenant.to_dict()
    assert pd.isna(rows[(None, "mover")]["throttled_share_without"])
