"""Usage records bounded whatever a tenant invents, and their files whole or absent (issue 34 items 4
and 7): the parts that need no broker or mount. The real proofs are tests/integration's topic flood
(a canary beside the broker's) and full-disk tests."""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from prometheus_client import CollectorRegistry

from quotagate.config.settings import UsageConfig
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.usage import (
    OTHER_TOPICS,
    SLICE_ROWS,
    WARN_EVERY_SECONDS,
    AggregateCollector,
    JsonlSink,
    ParquetSink,
    RequestCollector,
    SinkTrouble,
    UsageRecord,
    UsageRecorder,
)
from tests.support.usage import flushed_rows, record

NOW_MS = 1_700_000_000_000


def produce(collector: AggregateCollector, client_id: str, topics: tuple[str, ...], size: int = 400) -> None:
    assert collector.add_exchange(
        NOW_MS, "alice", client_id, 0, 9, topics, size, 50, 0, 1.0, 0, "ok", 0, False
    )  # fmt: skip


def test_a_client_inventing_topic_names_gets_at_most_topics_per_entity_rows_the_rest_summed_in_one() -> None:
    collector = AggregateCollector(100_000, 1000, topics_per_entity=10)
    for i in range(25):  # 100 made-up topics, 4 a request
        produce(collector, "flood", tuple(f"made-up-{4 * i + j}" for j in range(4)))
    produce(collector, "flood", ("x" * 250,))  # longer than any Kafka topic name: never a row of its own
    produce(collector, "quiet", ("orders", "audit", "made-up-0"))
    rows = flushed_rows(collector)
    flood = {row["topic"]: row for row in rows if row["client_id"] == "flood"}
    assert len(flood) == 11 and OTHER_TOPICS in flood, sorted(flood)
    assert flood[OTHER_TOPICS]["bytes_in"] == 90 * 100 + 400  # 90 topics' shares of 400-byte requests, and one
    assert sum(row["bytes_in"] for row in flood.values()) == 26 * 400, "a sum over an entity's topics stays exact"
    assert sum(row["requests"] for row in flood.values()) == 26
    assert collector.topics_folded == 91
    assert {row["topic"] for row in rows if row["client_id"] == "quiet"} == {"orders", "audit", "made-up-0"}


def test_the_cap_counts_per_interval_and_the_collector_forgets_it_at_each_flush() -> None:
    collector = AggregateCollector(100_000, 1000, topics_per_entity=2)
    produce(collector, "c", ("a", "b", "c"))
    collector.take_aggregates()
    produce(collector, "c", ("d", "e"))
    _, items = collector.take_aggregates()
    assert sorted(key[4] for key, _ in items) == ["d", "e"]


async def test_the_recorder_counts_folded_topics_and_encodes_a_flush_in_slices_on_the_loop(tmp_path: Path) -> None:
    metrics = ProxyMetrics(CollectorRegistry())
    sink = ParquetSink(tmp_path, "p-1-1", 1 << 26, 60.0)
    slices: list[tuple[int, int]] = []
    encode = sink.encode

    def recording_encode(batch):  # type: ignore[no-untyped-def]
        slices.append((len(batch), threading.get_ident()))
        return encode(batch)

    sink.encode = recording_encode  # type: ignore[method-assign]
    recorder = UsageRecorder(UsageConfig(enabled=True, topics_per_entity=SLICE_ROWS * 3), metrics, sink, "p", "p-1-1")
    for i in range(SLICE_ROWS * 4):  # one topic a request: SLICE_ROWS * 3 rows and one row for the rest
        recorder.collector.add_exchange(NOW_MS, "u", "c", 0, 9, (f"t{i}",), 100, 10, 0, 1.0, 0, "ok", 0, False)
    await recorder.flush()
    assert [size for size, _ in slices] == [SLICE_ROWS, SLICE_ROWS, SLICE_ROWS, 1]
    assert {thread for _, thread in slices} == {threading.get_ident()}, "encoded off the loop, holding the GIL"
    assert metrics.registry.get_sample_value("quotagate_usage_topics_folded_total") == SLICE_ROWS
    recorder._account(await sink.close(), 0)
    assert metrics.registry.get_sample_value("quotagate_usage_records_written_total") == SLICE_ROWS * 3 + 1
    (path,) = tmp_path.rglob("*.parquet")
    assert sum(pq.read_table(path).column("requests").to_pylist()) == SLICE_ROWS * 4


def test_a_failing_sink_warns_for_as_long_as_it_fails_with_what_was_lost(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    trouble = SinkTrouble(lambda: now[0])
    with caplog.at_level(logging.WARNING, "quotagate.usage"):
        for second in range(0, 100, 2):  # a write every 2 s fails for 100 s
            now[0] = float(second)
            trouble.failed(5, ["[Errno 28] No space left on device"])
        now[0] = 101.0
        trouble.succeeded()
        trouble.succeeded()
    lines = [r.getMessage() for r in caplog.records]
    failing = [line for line in lines if "usage sink failing" in line]
    assert len(failing) == 1 + 98 // WARN_EVERY_SECONDS, lines  # at once, then every WARN_EVERY_SECONDS
    assert "records of 5 requests lost in 1 failed writes" in failing[0]
    assert f"records of {5 * int(WARN_EVERY_SECONDS // 2)} requests" in failing[1]
    assert sum(1 for line in lines if "writing again" in line) == 1


def test_a_parquet_file_that_fails_is_removed_and_all_its_requests_counted_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = ParquetSink(tmp_path, "p-1-1", 1 << 26, 60.0)
    first = sink.write_blocking([sink.encode([dict(row) for row in rows_of(3)])])
    assert (first.written, first.lost_requests) == (0, 0)  # open, not readable yet: nothing counted
    file = next(iter(sink._open.values())).file

    def full(_slices: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(file, "write_row_group", full)
    second = sink.write_blocking([sink.encode(rows_of(2))])
    assert second.lost_requests == 5 and second.written == 0 and second.problems
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [], "the unfinished file was left"
    third = sink.write_blocking([sink.encode(rows_of(4))])
    closed = sink._close_all()
    assert (third.lost_requests, closed.written, closed.lost_requests) == (0, 4, 0)
    (path,) = tmp_path.rglob("*.parquet")
    assert pq.read_table(path).num_rows == 4


def rows_of(count: int) -> list[dict]:
    from quotagate.proxy.usage import RequestCollector

    collector = RequestCollector(100)
    for i in range(count):
        collector.add(record(NOW_MS + i))
    return flushed_rows(collector)


def test_a_jsonl_write_that_fails_midway_is_cut_back_to_whole_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = JsonlSink(tmp_path, "p-1-1", 1 << 20)
    assert sink.write_blocking([sink.encode(rows_of(3))]).written == 3
    real_write = os.write

    def half_then_full(fd: int, data: bytes) -> int:
        real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    failed = sink.write_blocking([sink.encode(rows_of(5))])
    monkeypatch.undo()
    assert (failed.written, failed.lost_requests) == (0, 5)
    assert sink.write_blocking([sink.encode(rows_of(2))]).written == 2
    (path,) = tmp_path.rglob("*.jsonl")
    lines = path.read_text().splitlines()
    assert len(lines) == 5 and all(json.loads(line)["v"] == 1 for line in lines), "a partial line was left"


def test_hidden_files_no_live_writer_will_finish_are_removed_at_start(tmp_path: Path) -> None:
    dead_pid = next(pid for pid in range(4_000_000, 1, -1) if not Path(f"/proc/{pid}").exists())
    me, parent = os.getpid(), os.getppid()
    folder = tmp_path / "date=2026-11-27/hour=01"
    folder.mkdir(parents=True)

    def hidden(writer: str, age: float = 0.0) -> Path:
        path = folder / f".usage-{writer}-000001.parquet.open"
        path.write_bytes(b"PAR1")
        os.utime(path, (time.time() - age, time.time() - age))
        return path

    ours = hidden(f"host-a-{me}-2000")
    earlier_run_same_pid = hidden(f"host-a-{me}-1000")  # a restarted container's pid 1
    dead = hidden(f"host-a-{dead_pid}-1000")
    sibling = hidden(f"host-a-{parent}-1500")  # another worker of this proxy, alive
    other_host = hidden("host-b-77-1000")
    other_host_stale = hidden("host-b-78-1000", age=3600)
    sink = ParquetSink(tmp_path, f"host-a-{me}-2000", 1 << 20, 60.0)
    assert sink.remove_leftovers() == 3
    assert {p.name for p in folder.iterdir()} == {p.name for p in (ours, sibling, other_host)}
    assert not earlier_run_same_pid.exists() and not dead.exists() and not other_host_stale.exists()


def test_a_flush_with_no_rows_closes_only_files_past_max_file_seconds(tmp_path: Path) -> None:
    sink = ParquetSink(tmp_path, "p-1-1", 1 << 26, 60.0)
    assert sink.write_blocking([sink.encode(rows_of(2))]).written == 0
    assert sink.write_blocking([]).written == 0 and sink.pending(), "sparse traffic: a file per flush"
    ((partition, open_file),) = sink._open.items()
    sink._open[partition] = open_file._replace(opened=open_file.opened - 61.0)
    assert sink.write_blocking([]).written == 2 and not sink.pending()
    (path,) = tmp_path.rglob("*.parquet")
    assert pq.read_table(path).num_rows == 2


@pytest.mark.parametrize("kind", ["aggregates", "requests"])
def test_a_user_inventing_client_ids_fills_its_share_of_the_buffer_not_the_others(kind: str) -> None:
    """usage.buffer_records_per_user: past its share, the inventing user's records are dropped (the
    recorder counts them); the other users' are kept until the buffer itself is full."""
    if kind == "aggregates":
        collector = AggregateCollector(100, 1000, user_limit=40)
    else:
        collector = RequestCollector(100, user_limit=40)
    invented = [
        collector.add(UsageRecord(NOW_MS, "mallory", f"made-up-{i}", 0, 9, ("t",), 10, 0, 0, 1.0, 0, "ok"))
        for i in range(1000)
    ]
    assert sum(invented) == 40 and not any(invented[40:]), "the inventing user holds only its share"
    others = [
        collector.add(UsageRecord(NOW_MS, user, f"app-{i}", 0, 9, ("t",), 10, 0, 0, 1.0, 0, "ok"))
        for user in ("alice", "bob")
        for i in range(30)
    ]
    assert all(others), "the other users' records still fit"
    if kind == "aggregates":
        collector.take_aggregates()
    else:
        collector.take_columns()
    assert collector.add(UsageRecord(NOW_MS, "mallory", "again", 0, 9, ("t",), 10, 0, 0, 1.0, 0, "ok")), (
        "a flush gives the share back"
    )


def test_buffer_records_per_user_is_half_the_buffer_unless_set() -> None:
    from quotagate.config import parse_config

    head = '[proxy]\nbootstrap_servers = ["k:1"]\n[usage]\nbuffer_records = 1000\n'
    assert parse_config(head).usage.buffer_records_per_user == 500
    assert parse_config(head + "buffer_records_per_user = 1000\n").usage.buffer_records_per_user == 1000
