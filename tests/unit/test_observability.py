"""Per-entity metrics with bounded cardinality, usage records, and the admin HTTP endpoints."""

from __future__ import annotations

import json
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest

from quotagate.config.settings import UsageConfig, parse_config
from quotagate.protocol.apis import ApiKey
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.usage import (
    AggregateCollector,
    JsonlSink,
    ParquetSink,
    QuotasInForce,
    RequestCollector,
    SinkResult,
    UsageRecord,
    UsageRecorder,
)
from quotagate.proxy.usage_fields import QUOTA_FIELDS, RESOLVED_FIELDS
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from tests.support.usage import flushed, flushed_rows, record


def metrics_text(collector: EntityMetrics) -> str:
    registry = CollectorRegistry()
    registry.register(collector)
    return generate_latest(registry).decode()


def test_only_the_top_entities_by_traffic_get_series_and_the_rest_fold_into_other() -> None:
    engine = QuotaEngine(QuotaTable({QuotaEntity(None, "<default>"): {QuotaKey.PRODUCER_BYTE_RATE: 1000}}))
    collector = EntityMetrics(lambda: engine, lambda: 0.0, max_entities=2)
    for client, size in (("small", 10), ("big", 5000), ("mid", 300), ("tiny", 1)):
        count_exchange(collector.entity("u", client, 0.0), policy(ApiKey.PRODUCE), size, 20, 1.0, 0)
    text = metrics_text(collector)
    assert 'quotagate_produce_bytes_total{client_id="big",user="u"} 5000.0' in text
    assert 'quotagate_produce_bytes_total{client_id="mid",user="u"} 300.0' in text
    assert 'quotagate_produce_bytes_total{client_id="other",user="other"} 11.0' in text
    assert 'client_id="small"' not in text and 'client_id="tiny"' not in text
    assert "quotagate_entities_exported 2.0" in text and "quotagate_entities_folded 2.0" in text
    assert 'quotagate_quota_limit{client_id="big",quota="producer_byte_rate",user="u"} 1000.0' in text


def test_throttle_time_is_counted_under_the_group_of_the_api() -> None:
    collector = EntityMetrics(lambda: QuotaEngine(), lambda: 0.0, max_entities=10)
    count_exchange(collector.entity("u", "c", 0.0), policy(ApiKey.FETCH), 80, 5000, 0.0, 1500)
    count_exchange(collector.entity("u", "c", 0.0), policy(ApiKey.METADATA), 80, 500, 2.0, 250)
    text = metrics_text(collector)
    assert 'quotagate_fetch_throttle_time_seconds_total{client_id="c",user="u"} 1.5' in text
    assert 'quotagate_request_throttle_time_seconds_total{client_id="c",user="u"} 0.25' in text
    assert 'quotagate_throttled_responses_total{client_id="c",group="fetch",user="u"} 1.0' in text


def test_hot_path_counters_are_exported_as_prometheus_counters_and_a_histogram() -> None:
    metrics = ProxyMetrics()
    for api_key in (0, 0, 3):
        metrics.counters.count_request(api_key)
    for seconds in (0.0004, 0.0005, 0.003, 20.0):  # 0.0005 is at a bound: counted in that bucket
        metrics.counters.observe_latency(0, seconds)
    metrics.counters.bytes_in += 10
    metrics.counters.bytes_out += 7
    text = generate_latest(metrics.registry).decode()
    for line in (
        'quotagate_requests_total{api_key="0"} 2.0',
        'quotagate_requests_total{api_key="3"} 1.0',
        'quotagate_bytes_total{direction="in"} 10.0',
        'quotagate_bytes_total{direction="out"} 7.0',
        'quotagate_upstream_latency_seconds_bucket{api_key="0",le="0.0005"} 2.0',
        'quotagate_upstream_latency_seconds_bucket{api_key="0",le="0.0025"} 2.0',
        'quotagate_upstream_latency_seconds_bucket{api_key="0",le="0.005"} 3.0',
        'quotagate_upstream_latency_seconds_bucket{api_key="0",le="10.0"} 3.0',
        'quotagate_upstream_latency_seconds_bucket{api_key="0",le="+Inf"} 4.0',
        'quotagate_upstream_latency_seconds_count{api_key="0"} 4.0',
        'quotagate_upstream_latency_seconds_sum{api_key="0"} 20.0039',
    ):
        assert line in text, line


def request_rows(*records: UsageRecord) -> list[dict]:
    collector = RequestCollector(100)
    for r in records:
        collector.add(r)
    return flushed_rows(collector, None, "proxy-1", "proxy-1-7-1")


async def test_usage_records_land_in_hourly_partitions_as_versioned_json(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path, "proxy-1", max_file_bytes=1 << 20)
    await sink.write(request_rows(record(1_700_000_000_000), record(1_700_003_600_000)))  # two different hours
    files = sorted(p.relative_to(tmp_path).parent.as_posix() for p in tmp_path.rglob("*.jsonl"))
    assert files == ["date=2023-11-14/hour=22", "date=2023-11-14/hour=23"]
    line = json.loads(next((tmp_path / "date=2023-11-14" / "hour=22").glob("*.jsonl")).read_text().splitlines()[0])
    assert line == {
        "v": 1,
        "ts": 1_700_000_000_000,
        "proxy": "proxy-1",
        "writer": "proxy-1-7-1",
        "seq": 0,
        "user": "alice",
        "client_id": "c",
        "api_key": 0,
        "api_version": 9,
        "topics": ["orders"],
        "bytes_in": 1200,
        "bytes_out": 60,
        "partitions_mutated": 0,
        "upstream_latency_ms": 1.5,
        "throttle_ms": 0,
        "decision": "ok",
        "shadow_throttle_ms": 0,
        "throttled_bytes": 0,
        **dict.fromkeys(RESOLVED_FIELDS),  # no quotas (nor tenants) known to this flush
    }


def test_aggregates_sum_requests_per_interval_entity_api_and_produce_topic() -> None:
    collector = AggregateCollector(limit=100, interval_ms=1000)
    collector.add(UsageRecord(5_010, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 2.0, 0, "ok"))
    collector.add(UsageRecord(5_999, "alice", "c", 0, 9, ("orders",), 500, 60, 0, 4.0, 30, "throttled"))
    collector.add(UsageRecord(5_500, "alice", "c", 0, 9, ("orders", "audit"), 300, 60, 0, 1.0, 0, "ok"))
    collector.add(UsageRecord(6_002, "alice", "c", 0, 9, ("orders",), 100, 60, 0, 1.0, 0, "ok"))  # read next second
    collector.add(UsageRecord(5_100, "alice", "c", 19, 7, ("t",), 90, 40, 3, -1.0, 0, "refused"))
    requests, batch = flushed(collector, first_seq=10)
    rows = {(r["ts"], r["api_key"], r["topic"]): r for r in batch.rows()}
    assert (requests, len(batch)) == (5, 4) and not len(collector)
    orders = rows[(5000, 0, "orders")]
    assert {k: orders[k] for k in ("v", "interval_ms", "requests", "bytes_in", "bytes_out")} == {
        "v": 2,
        "interval_ms": 1000,
        "requests": 3,  # the two-topic request counts on its first topic's row
        "bytes_in": 1650,  # 1000 + 500 + half of 300
        "bytes_out": 180,
    }
    assert (orders["request_time_ms"], orders["throttle_ms"], orders["throttle_ms_max"]) == (7.0, 30, 30)
    assert (orders["throttled_requests"], orders["refusals"]) == (1, 0)
    assert (rows[(5000, 0, "audit")]["requests"], rows[(5000, 0, "audit")]["bytes_in"]) == (0, 150)
    assert rows[(6000, 0, "orders")]["requests"] == 1
    mutation = rows[(5000, 19, "")]  # only produce is kept per topic
    assert (mutation["partitions_mutated"], mutation["refusals"], mutation["request_time_ms"]) == (3, 1, 0.0)
    assert sorted(r["seq"] for r in rows.values()) == [10, 11, 12, 13]


def test_aggregates_count_a_produce_when_it_was_charged_and_say_when_their_requests_were() -> None:
    collector = AggregateCollector(limit=100, interval_ms=1000)
    # read at 5 990 (answered at 6 010): counted in [5 000, 6 000), when it was charged
    collector.add(UsageRecord(6_010, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 20.0, 0, "ok", 0, True))
    collector.add(UsageRecord(5_300, "alice", "c", 0, 9, ("orders", "audit"), 600, 60, 0, 100.0, 0, "ok", 0, True))
    collector.add(UsageRecord(5_500, "alice", "c", 0, 9, ("orders",), 400, 60, 0, 2.0, 0, "ok"))
    collector.add(UsageRecord(6_010, "alice", "c", 1, 12, (), 90, 5000, 0, 400.0, 0, "ok"))  # fetch: at its answer
    rows = {(r["ts"], r["api_key"], r["topic"]): r for r in flushed_rows(collector)}
    orders = rows[(5000, 0, "orders")]
    assert (orders["requests"], orders["bytes_in"]) == (3, 1700)
    assert (orders["first_ms"], orders["last_ms"]) == (5200, 5990)  # read times, epoch ms
    assert orders["charge_offset_ms"] == 990 + 200 + 498  # from the interval's start
    # the bytes whose charge left alice over quota; a two-topic produce splits them as bytes_in
    assert (orders["throttled_bytes"], rows[(5000, 0, "audit")]["throttled_bytes"]) == (1300, 300)
    assert rows[(6000, 1, "")]["first_ms"] == 6010 and (5000, 1, "") not in rows


def test_aggregates_carry_what_shadow_quotas_would_have_throttled() -> None:
    collector = AggregateCollector(limit=100, interval_ms=1000)
    collector.add(UsageRecord(5_010, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 2.0, 0, "ok", 900))
    collector.add(UsageRecord(5_400, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 2.0, 0, "ok", 1100))
    (row,) = flushed_rows(collector)
    assert (row["shadow_throttle_ms"], row["throttle_ms"]) == (2000, 0)


def test_aggregates_name_the_quota_in_force_in_their_interval_per_charged_key_and_its_shadow_flag() -> None:
    alice, everyone = QuotaEntity("alice", None), QuotaEntity(None, "<default>")
    before = QuotaTable({alice: {QuotaKey.PRODUCER_BYTE_RATE: 300_000}})
    after = QuotaTable(
        {alice: {QuotaKey.PRODUCER_BYTE_RATE: 500_000}, everyone: {QuotaKey.REQUEST_PERCENTAGE: 50}},
        frozenset({everyone}),
    )
    quotas = QuotasInForce(before)
    quotas.changed(after, 6_500, QuotaWindows(quota_window_num=2))  # a reload, half way through second 6
    collector = AggregateCollector(limit=100, interval_ms=1000)
    collector.add(UsageRecord(5_010, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 2.0, 0, "ok"))
    collector.add(UsageRecord(6_900, "alice", "c", 0, 9, ("orders",), 1000, 60, 0, 2.0, 0, "ok"))
    collector.add(UsageRecord(6_900, "alice", "c", 1, 12, (), 90, 5000, 0, 2.0, 0, "ok"))
    rows = {(r["ts"], r["api_key"]): r for r in flushed_rows(collector, quotas)}
    assert {k: rows[(5000, 0)][k] for k in QUOTA_FIELDS} == {
        "quota_producer_byte_rate": 300_000,
        "quota_producer_byte_rate_shadow": False,
        "quota_consumer_byte_rate": None,  # not charged by a produce
        "quota_consumer_byte_rate_shadow": None,
        "quota_request_percentage": None,  # charged, and unlimited
        "quota_request_percentage_shadow": False,
        "quota_controller_mutation_rate": None,
        "quota_controller_mutation_rate_shadow": None,
        # the windows sizing the bursts, so that a replay from the records gives the proxy's burst
        "quota_window_num": 11,
        "quota_window_size_seconds": 1.0,
        "controller_quota_window_num": 11,
        "controller_quota_window_size_seconds": 1.0,
        # alice is in no tenant
        "tenant_quota_producer_byte_rate": None,
        "tenant_quota_producer_byte_rate_shadow": None,
        "tenant_quota_consumer_byte_rate": None,
        "tenant_quota_consumer_byte_rate_shadow": None,
        "tenant_quota_request_percentage": None,
        "tenant_quota_request_percentage_shadow": None,
        "tenant_quota_controller_mutation_rate": None,
        "tenant_quota_controller_mutation_rate_shadow": None,
    }
    second_6 = rows[(6000, 0)]
    assert second_6["quota_window_num"] == 2
    assert (second_6["quota_producer_byte_rate"], second_6["quota_request_percentage"]) == (500_000, 50)
    assert (second_6["quota_producer_byte_rate_shadow"], second_6["quota_request_percentage_shadow"]) == (False, True)
    fetch = rows[(6000, 1)]
    assert (fetch["quota_consumer_byte_rate"], fetch["quota_consumer_byte_rate_shadow"]) == (None, False)
    assert fetch["quota_producer_byte_rate"] is None and fetch["quota_producer_byte_rate_shadow"] is None


def test_a_request_record_names_the_quota_in_force_when_it_was_made_and_old_tables_are_let_go() -> None:
    quotas = QuotasInForce(QuotaTable({QuotaEntity("alice", None): {QuotaKey.PRODUCER_BYTE_RATE: 1000}}))
    quotas.changed(QuotaTable(), 2_000)
    collector = RequestCollector(100)
    collector.add(record(1_500))
    collector.add(record(2_500))
    early, late = flushed_rows(collector, quotas)
    assert (early["quota_producer_byte_rate"], late["quota_producer_byte_rate"]) == (1000, None)
    assert late["quota_producer_byte_rate_shadow"] is False  # known: unlimited
    quotas.forget_before(2_100)
    assert not quotas.at(1_500)  # only the table in force from 2 000 on is kept


async def test_aggregates_with_their_quotas_land_in_parquet_typed(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    quotas = QuotasInForce(QuotaTable({QuotaEntity("alice", None): {QuotaKey.PRODUCER_BYTE_RATE: 500_000}}))
    collector = AggregateCollector(limit=100, interval_ms=1000)
    collector.add(record(1_700_000_000_002))
    sink = ParquetSink(tmp_path, "p-1-1", max_file_bytes=1 << 20, max_file_seconds=60)
    await sink.write(flushed_rows(collector, quotas))
    await sink.close()
    (file,) = tmp_path.rglob("*.parquet")
    table = pq.read_table(file)
    assert str(table.schema.field("quota_producer_byte_rate").type) == "double"
    assert str(table.schema.field("quota_producer_byte_rate_shadow").type) == "bool"
    assert table.to_pylist()[0]["quota_producer_byte_rate"] == 500_000.0


def test_aggregates_stop_at_the_key_limit_and_say_so() -> None:
    collector = AggregateCollector(limit=2, interval_ms=1000)
    assert collector.add(record(1002, "a")) and collector.add(record(1002, "b")) and collector.add(record(1500, "a"))
    assert not collector.add(record(1002, "c")) and len(collector) == 3


async def test_aggregates_land_in_hourly_parquet_files_readable_once_closed(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    collector = AggregateCollector(limit=100, interval_ms=1000)
    for ts in (1_700_000_000_002, 1_700_000_000_400, 1_700_003_600_002):  # read 1.5 ms before
        collector.add(record(ts))
    sink = ParquetSink(tmp_path, "p-1-1", max_file_bytes=1 << 20, max_file_seconds=60)
    await sink.write(flushed_rows(collector))
    assert not list(tmp_path.rglob("*.parquet")), "a file being written is hidden from readers"
    await sink.close()
    files = sorted(tmp_path.rglob("*.parquet"))
    assert [f.parent.relative_to(tmp_path).as_posix() for f in files] == [
        "date=2023-11-14/hour=22",
        "date=2023-11-14/hour=23",
    ]
    first = pq.read_table(files[0]).to_pylist()
    assert [(r["v"], r["requests"], r["bytes_in"], r["topic"]) for r in first] == [(2, 2, 2400, "orders")]


class BrokenSink(JsonlSink):
    """Encodes as the JSONL sink does; every write fails."""

    def __init__(self) -> None:
        super().__init__("/nonexistent", "w", 1)

    async def write_encoded(self, pieces: list) -> SinkResult:  # type: ignore[type-arg]
        raise OSError("disk full")


async def test_a_failing_sink_drops_the_batch_and_keeps_going() -> None:
    metrics = ProxyMetrics()
    recorder = UsageRecorder(UsageConfig(enabled=True), metrics, BrokenSink())
    recorder.add(record(1))
    await recorder.flush()
    assert metrics.usage_dropped_total._value.get() == 1 and not len(recorder.collector)
    assert recorder.trouble.failing_since is not None


def test_usage_config_is_validated_with_the_key_named() -> None:
    config = parse_config('[proxy]\nbootstrap_servers = ["k:1"]\n[usage]\nenabled = true\ndirectory = "/tmp/u"\n')
    usage = config.usage
    assert usage.enabled and (usage.sink, usage.records, usage.interval_ms) == ("parquet", "aggregate", 1000)
    assert usage.directory == "/tmp/u"
    import pytest

    from quotagate.config import ConfigError

    with pytest.raises(ConfigError, match=r"usage\.sink"):
        parse_config('[proxy]\nbootstrap_servers = ["k:1"]\n[usage]\nsink = "s3"\n')
    with pytest.raises(ConfigError, match=r"usage\.records"):
        parse_config('[proxy]\nbootstrap_servers = ["k:1"]\n[usage]\nrecords = "all"\n')


def test_the_kafka_sinks_sasl_settings_are_checked_and_its_password_can_come_from_the_environment(
    monkeypatch,
) -> None:
    import pytest

    from quotagate.config import ConfigError
    from quotagate.proxy.usage import sasl_credentials

    head = '[proxy]\nbootstrap_servers = ["k:1"]\n[usage]\nsink = "kafka"\n'
    sasl = 'kafka_security_protocol = "SASL_SSL"\nkafka_sasl_mechanism = "SCRAM-SHA-512"\n'
    with pytest.raises(ConfigError, match=r"usage\.kafka_sasl_username: is required"):
        parse_config(head + sasl)
    with pytest.raises(ConfigError, match=r"usage\.kafka_sasl_password: \(or kafka_sasl_password_env\)"):
        parse_config(head + sasl + 'kafka_sasl_username = "usage-writer"\n')
    with pytest.raises(ConfigError, match=r"usage\.kafka_security_protocol: must be"):
        parse_config(head + 'kafka_sasl_username = "usage-writer"\n')
    with pytest.raises(ConfigError, match=r"usage\.kafka_sasl_mechanism"):
        parse_config(head + 'kafka_security_protocol = "SASL_SSL"\nkafka_sasl_mechanism = "GSSAPI"\n')
    config = parse_config(
        head + sasl + 'kafka_sasl_username = "usage-writer"\nkafka_sasl_password_env = "QG_TEST_USAGE_PASSWORD"\n'
    ).usage
    with pytest.raises(ConfigError, match=r"usage\.kafka_sasl_password_env: names QG_TEST_USAGE_PASSWORD"):
        sasl_credentials(config)
    monkeypatch.setenv("QG_TEST_USAGE_PASSWORD", "s3cret")
    assert sasl_credentials(config) == ("SCRAM-SHA-512", "usage-writer", "s3cret")
    plain = parse_config(head + 'kafka_security_protocol = "SASL_PLAINTEXT"\nkafka_sasl_username = "u"\n'
                         'kafka_sasl_password = "p"\n').usage  # fmt: skip
    assert sasl_credentials(plain) == ("PLAIN", "u", "p") and "'p'" not in repr(plain)
