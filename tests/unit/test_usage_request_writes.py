"""v1 records are written from the collector's columns (usage.RequestBatch): the JSON lines made
straight from them (usage_collectors.request_lines) must be the JSON of the batch's rows, and every
sink must write exactly what it writes for the same rows handed to it as rows (RowBatch), field for
field, in the same order, partitions and files. (tests/unit/test_usage_formats.py reads every
documented field back from each format.)"""

from __future__ import annotations

import importlib
import importlib.util
import json
import random
from pathlib import Path

import pytest

from quotagate.proxy.usage import (
    JsonlSink,
    ParquetSink,
    QuotasInForce,
    RequestBatch,
    RequestCollector,
    UsageRecord,
    _encode_for_kafka,
)
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable, QuotaWindows

HOUR_MS = 3_600_000
START_MS = 1_700_002_000_000  # 22:06 UTC: a flush of these crosses into hour 23


def varied_records(seed: int, count: int = 400) -> list[UsageRecord]:
    """Records with what JSON and Arrow could spell differently: names to escape, empty and
    multi-topic lists, latencies to round, a local answer's −1, times across an hour, out of order."""
    rng = random.Random(seed)
    users = ["alice", "bob", 'q"uote\\d', "ünï ✓", ""]
    clients = ["c", "", "client-with-a-long-name-" * 3, "tab\there"]
    topics = [(), ("orders",), ("orders", "audit"), ("ä-topic",)]
    decisions = ["ok", "throttled", "refused", "partially_refused"]
    records = []
    for i in range(count):
        api_key = rng.choice([0, 0, 0, 1, 3, 19])
        latency = rng.choice([-1.0, 0.0, 1.5, rng.random() * 50, rng.random() / 1000, 123456.78949, 2.0005])
        records.append(
            UsageRecord(
                START_MS + i * 20_000 - rng.randrange(0, 30_000),  # through 22:59 into 23:xx, not in order
                rng.choice(users),
                rng.choice(clients),
                api_key,
                rng.randrange(0, 13),
                rng.choice(topics),
                rng.randrange(0, 2_000_000),
                rng.randrange(0, 500),
                rng.randrange(0, 4),
                latency,
                rng.choice([0, 0, 0, 30, 1500]),
                rng.choice(decisions),
                rng.choice([0, 0, 250]),
                rng.random() < 0.3,
            )
        )
    return records


def quotas_changing_mid_flush() -> QuotasInForce:
    alice, everyone = QuotaEntity("alice", None), QuotaEntity(None, "<default>")
    quotas = QuotasInForce(QuotaTable({alice: {QuotaKey.PRODUCER_BYTE_RATE: 300_000}}))
    quotas.changed(
        QuotaTable(
            {alice: {QuotaKey.PRODUCER_BYTE_RATE: 500_000.5}, everyone: {QuotaKey.REQUEST_PERCENTAGE: 50}},
            frozenset({everyone}),
        ),
        START_MS + 2_000_000,
        QuotaWindows(quota_window_num=2),
    )
    return quotas


QUOTAS = {"no quotas": lambda: None, "quotas changing mid-flush": quotas_changing_mid_flush}


def rows_and_batch(records: list[UsageRecord], quotas: QuotasInForce | None) -> tuple[list[dict], RequestBatch]:
    """The same records as rows and as a batch of columns."""
    collector = RequestCollector(len(records))
    for r in records:
        collector.add(r)
    batch = RequestBatch(collector.take_columns(), "proxy-1", "proxy-1-7-1", 40, quotas)
    return batch.rows(), batch


def files_of(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("quotas", QUOTAS.values(), ids=QUOTAS.keys())
@pytest.mark.parametrize("seed", range(3))
def test_request_lines_are_the_json_of_the_rows_byte_for_byte(seed: int, quotas) -> None:
    rows, batch = rows_and_batch(varied_records(seed), quotas())
    expected = [json.dumps(row, separators=(",", ":")) for row in rows]
    lines = batch.json_lines()
    assert len(lines) == len(expected)
    for i, (line, want) in enumerate(zip(lines, expected, strict=True)):
        assert line == want, f"row {i}: {line!r} != {want!r}"


def test_both_builds_of_request_lines_write_the_same_text() -> None:
    builds = ["quotagate.proxy.usage_collectors"]
    if importlib.util.find_spec("quotagate.proxy.usage_collectors_c") is not None:
        builds.append("quotagate.proxy.usage_collectors_c")
    _, batch = rows_and_batch(varied_records(7), quotas_changing_mid_flush())
    expected = batch.json_lines()
    states = quotas_changing_mid_flush().history()
    since = [state[0] for state in states]

    def suffix(state: int, user: str, client_id: str, api_key: int) -> str:
        return "," + json.dumps({"s": state, "u": user}, separators=(",", ":"))[1:-1]

    texts = {
        name: importlib.import_module(name).request_lines(batch.collected, "p", "w", 3, since, suffix)
        for name in builds
    }
    assert len({tuple(t) for t in texts.values()}) == 1, "the compiled and interpreted builds differ"
    assert len(expected) == len(next(iter(texts.values())))


@pytest.mark.parametrize("quotas", QUOTAS.values(), ids=QUOTAS.keys())
async def test_jsonl_files_from_columns_are_the_files_from_rows(tmp_path: Path, quotas) -> None:
    in_force = quotas()
    rows_sink = JsonlSink(tmp_path / "rows", "w", max_file_bytes=60_000)
    columns_sink = JsonlSink(tmp_path / "columns", "w", max_file_bytes=60_000)
    for flush in range(3):  # appends to the same files, then rotates at max_file_bytes
        rows, batch = rows_and_batch(varied_records(flush), in_force)
        await rows_sink.write(rows)
        await columns_sink.write(batch)
    written = files_of(tmp_path / "rows")
    assert len(written) >= 3, "the flushes span two hours and rotate"
    assert files_of(tmp_path / "columns") == written


@pytest.mark.parametrize("quotas", QUOTAS.values(), ids=QUOTAS.keys())
async def test_parquet_files_from_columns_are_the_files_from_rows(tmp_path: Path, quotas) -> None:
    import pyarrow.parquet as pq

    in_force = quotas()
    rows_sink = ParquetSink(tmp_path / "rows", "w", max_file_bytes=1 << 20, max_file_seconds=60)
    columns_sink = ParquetSink(tmp_path / "columns", "w", max_file_bytes=1 << 20, max_file_seconds=60)
    for flush in range(2):
        rows, batch = rows_and_batch(varied_records(flush), in_force)
        await rows_sink.write(rows)
        await columns_sink.write(batch)
    await rows_sink.close()
    await columns_sink.close()
    expected = {p.relative_to(tmp_path / "rows").as_posix(): p for p in sorted((tmp_path / "rows").rglob("*.parquet"))}
    got = {p.relative_to(tmp_path / "columns").as_posix(): p for p in sorted((tmp_path / "columns").rglob("*.parquet"))}
    assert list(got) == list(expected) and len(expected) >= 2  # the flushes span hours
    for name, path in expected.items():
        want, have = pq.read_table(path), pq.read_table(got[name])
        assert have.schema.equals(want.schema, check_metadata=True), name
        assert have.to_pylist() == want.to_pylist(), name
        assert pq.ParquetFile(got[name]).metadata.num_row_groups == pq.ParquetFile(path).metadata.num_row_groups


def test_kafka_messages_from_columns_are_the_messages_from_rows() -> None:
    rows, batch = rows_and_batch(varied_records(5), quotas_changing_mid_flush())
    assert _encode_for_kafka(batch) == _encode_for_kafka(rows)


def test_a_flush_of_request_records_hands_the_sink_columns_with_their_sequence_numbers() -> None:
    from prometheus_client import CollectorRegistry

    from quotagate.config.settings import UsageConfig
    from quotagate.proxy.metrics import ProxyMetrics
    from quotagate.proxy.usage import UsageRecorder

    recorder = UsageRecorder(
        UsageConfig(enabled=True, records="request", buffer_records=3),
        ProxyMetrics(CollectorRegistry()),
        JsonlSink("/nonexistent", "w", 1),
        "p",
        "p-1-1",
    )
    for r in varied_records(1, 4):
        recorder.add(r)
    requests, row_count, first = recorder.take_records()
    assert (requests, row_count, len(first), first.first_seq) == (3, 3, 3, 0)  # the 4th was dropped
    recorder.add(varied_records(2, 1)[0])
    assert recorder.take_records()[2].first_seq == 3
    assert not len(recorder.collector)


def test_a_latency_is_written_as_the_encoder_writes_it_rounded_to_the_microsecond() -> None:
    """milliseconds_text skips round()'s trip through decimal text; on both builds it must give
    json(round(ms, 3)) for every value, ties and their neighbours, −1, 0, huge and not finite."""
    rng = random.Random(11)
    values = [0.0, -0.0, -1.0, 1e-9, 0.0005, 0.0015, 0.0025, 2.0005, 999_999.9995, 1e6, 1e16, -5.5, 0.1, 7]
    values += [float("nan"), float("inf"), -float("inf")]
    for _ in range(20_000):
        values.append(rng.randrange(0, 10**7) / 1000 + rng.choice([0.0, 5e-4, -5e-4, 1e-12, -1e-12]))
        values.append(rng.random() * 10 ** rng.randint(-4, 7))
    builds = ["quotagate.proxy.usage_collectors"]
    if importlib.util.find_spec("quotagate.proxy.usage_collectors_c") is not None:
        builds.append("quotagate.proxy.usage_collectors_c")
    for name in builds:
        text = importlib.import_module(name).milliseconds_text
        wrong = [(v, text(v)) for v in values if text(v) != json.dumps(round(v, 3))]
        assert not wrong, f"{name}: {wrong[:5]}"


@pytest.mark.parametrize("quotas", QUOTAS.values(), ids=QUOTAS.keys())
def test_v2_parquet_pages_from_columns_are_the_pages_of_the_rows(quotas) -> None:
    """v2 aggregates are written to Parquet from the batch's columns; slice by slice, the pages must
    be those of its rows (with their quota fields) handed to the sink as rows."""
    from quotagate.proxy import usage_parquet
    from quotagate.proxy.usage import AggregateBatch, AggregateCollector, RowBatch

    in_force = quotas()
    collector = AggregateCollector(10_000, 1000, topics_per_entity=3)
    for r in varied_records(3, 600):
        collector.add(r)
    _, items = collector.take_aggregates()
    batch = AggregateBatch(items, 1000, "proxy-1", "proxy-1-7-1", 40, in_force)
    for start in (0, 7, 100):
        part = batch.slice(start, start + 150)
        rows = RowBatch(part.rows())
        assert usage_parquet.encode(2, part.columns(), len(part)) == usage_parquet.encode(2, rows.columns(), len(rows))
