"""The proxy's own usage files, of both versions, as Parquet (written by proxy/usage_parquet.py, not
pyarrow) and JSONL, read by the pipeline's ingest with Spark: every field of the usage table comes
out as the proxy wrote it."""

from __future__ import annotations

from pathlib import Path

from quotagate.pipeline.ingest import ingest, read_usage_files
from quotagate.pipeline.schema import TABLE_COLUMNS
from quotagate.proxy.usage import AggregateCollector, JsonlSink, ParquetSink, RequestCollector
from quotagate.proxy.usage_fields import RESOLVED_FIELDS
from tests.support.usage import FIRST_SEQ, PROXY, flushed, quotas, records


async def write(directory: Path, sink_kind: str, version: int, writer: str) -> list[dict]:
    collector = RequestCollector(100) if version == 1 else AggregateCollector(100, 1000)
    for r in records():
        collector.add(r)
    batch = flushed(collector, quotas(), PROXY, writer, FIRST_SEQ)[1]
    sink = (
        ParquetSink(directory, writer, 1 << 20, 60.0)
        if sink_kind == "parquet"
        else JsonlSink(directory, writer, 1 << 20)
    )
    await sink.write(batch)
    await sink.close()
    return batch.rows()


async def test_ingest_reads_every_field_of_the_proxys_own_files(spark, tmp_path: Path) -> None:
    # Both formats under one directory, each version under a writer of its own: one read by Spark.
    written = {
        sink_kind: (
            await write(tmp_path / sink_kind, sink_kind, 1, f"w1-{n}-1"),
            await write(tmp_path / sink_kind, sink_kind, 2, f"w2-{n}-1"),
        )
        for n, sink_kind in enumerate(["parquet", "jsonl"], start=1)
    }
    found = read_usage_files(spark, [str(tmp_path)])
    assert not found.problems
    # One Spark job: a record refused or a file skipped shows as rows missing below.
    table = {(row["writer"], row["seq"], row["topic"]): row.asDict() for row in ingest(found.raw).collect()}
    v1_rows = [row for v1, _ in written.values() for row in v1]
    v2_rows = [row for _, v2 in written.values() for row in v2]
    assert len(table) == len(v2_rows) + sum(max(len(row["topics"]), 1) if row["api_key"] == 0 else 1 for row in v1_rows)
    for row in v2_rows:  # a v2 row is a table row as it is
        got = table[(row["writer"], row["seq"], row["topic"])]
        assert {name: got[name] for name in TABLE_COLUMNS if name != "date"} == row, row["seq"]
    for row in v1_rows:  # a v1 record is one row per produce topic, the request on the first
        topics = row["topics"] if row["api_key"] == 0 and row["topics"] else [""]
        got = [table[(row["writer"], row["seq"], topic)] for topic in topics]
        first = got[0]
        assert sum(g["requests"] for g in got) == 1 and first["requests"] == 1
        assert sum(g["bytes_in"] for g in got) == row["bytes_in"]
        assert (first["shadow_throttle_ms"], first["throttle_ms"], first["bytes_out"]) == (
            row["shadow_throttle_ms"], row["throttle_ms"], row["bytes_out"],
        )  # fmt: skip
        assert sum(g["throttled_bytes"] for g in got) == row["throttled_bytes"]
        assert {name: first[name] for name in RESOLVED_FIELDS} == {name: row[name] for name in RESOLVED_FIELDS}
    assert {row["tenant"] for row in table.values()} == {None, "team"}  # bob's rows after the change
