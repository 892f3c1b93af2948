"""Every format usage records are written in (JSONL files, Parquet files, the Kafka sink's messages),
of both versions, read back: each row holds exactly the fields docs/usage-records.md lists for its
version, of the documented type, valued as worked out here from the records the proxy collected.

The v1 Parquet schema once lacked `shadow_throttle_ms`, which the JSON rows and the docs carried, and
the test comparing two writers shared that schema, so could not see it: here nothing is compared with
another writer, only with the docs and the records."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from quotagate.proxy import usage_fields
from quotagate.proxy.usage import (
    AggregateCollector,
    JsonlSink,
    ParquetSink,
    QuotasInForce,
    RequestCollector,
    _encode_for_kafka,
    quota_fields,
)
from tests.support.usage import FIRST_SEQ, PROXY, WRITER, flushed, quotas, records

DOCS = Path(__file__).resolve().parents[2] / "docs" / "usage-records.md"
INTERVAL_MS = 1000
# The documented type words, and what each is in Arrow and in JSON.
ARROW = {"int": pa.int32(), "int64": pa.int64(), "double": pa.float64(), "string": pa.string(), "bool": pa.bool_()}
JSON = {"int": (int,), "int64": (int,), "double": (int, float), "string": (str,), "bool": (bool,), "string[]": (list,)}


def documented(version: int) -> dict[str, set[str]]:
    """Field -> the type words of its row in the docs' table of `version`'s fields."""
    text = DOCS.read_text()
    start = text.index(f"## v{version} fields")
    table = text[start : text.index("\n## ", start + 1)]
    fields: dict[str, set[str]] = {}
    for line in table.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        for name in re.findall(r"`([^`]+)`", cells[0]):
            fields[name] = {word.strip() for word in cells[1].split(",")}
    assert fields, f"no field table under '## v{version} fields' in {DOCS}"
    return fields


def expected_v1(in_force: QuotasInForce) -> list[dict]:
    rows = []
    for seq, r in enumerate(records(), FIRST_SEQ):
        table, windows = in_force.state_at(r.ts_ms)
        rows.append(
            {
                "v": 1, "ts": r.ts_ms, "proxy": PROXY, "writer": WRITER, "seq": seq, "user": r.user,
                "client_id": r.client_id, "api_key": r.api_key, "api_version": r.api_version,
                "topics": list(r.topics), "bytes_in": r.bytes_in, "bytes_out": r.bytes_out,
                "partitions_mutated": r.partitions_mutated, "upstream_latency_ms": round(r.upstream_latency_ms, 3),
                "throttle_ms": r.throttle_ms, "decision": r.decision, "shadow_throttle_ms": r.shadow_throttle_ms,
                "throttled_bytes": r.bytes_in if r.over_quota else 0,
                **quota_fields(table, r.user, r.client_id, r.api_key, windows),
            }
        )  # fmt: skip
    return rows


def expected_v2(in_force: QuotasInForce) -> list[dict]:
    """The aggregates, summed here: a produce counts when it was read (its answer's time less its
    latency), its bytes split over its topics, its request on the first topic's row."""
    rows: dict[tuple, dict] = {}
    for r in records():
        charged = r.ts_ms - r.upstream_latency_ms if r.api_key == 0 and r.upstream_latency_ms > 0 else r.ts_ms
        interval = int(charged // INTERVAL_MS)
        topics = r.topics if r.api_key == 0 and r.topics else ("",)
        for index, topic in enumerate(topics):
            key = (interval, r.user, r.client_id, r.api_key, topic)
            row = rows.setdefault(key, {"first_ms": charged, "last_ms": charged, "requests": 0, "bytes_in": 0.0})
            row["bytes_in"] += r.bytes_in / len(topics)
            row["throttled_bytes"] = row.get("throttled_bytes", 0.0) + (r.bytes_in / len(topics) if r.over_quota else 0)
            counted = index == 0
            sums = {
                "requests": 1, "bytes_out": r.bytes_out, "request_time_ms": max(r.upstream_latency_ms, 0.0),
                "throttle_ms": r.throttle_ms, "throttled_requests": int(r.throttle_ms > 0),
                "refusals": int(r.decision in ("refused", "partially_refused")),
                "partitions_mutated": r.partitions_mutated, "shadow_throttle_ms": r.shadow_throttle_ms,
                "charge_offset_ms": charged - interval * INTERVAL_MS,
            }  # fmt: skip
            for name, value in sums.items():
                row[name] = row.get(name, 0) + (value if counted else 0)
            row["throttle_ms_max"] = max(row.get("throttle_ms_max", 0), r.throttle_ms if counted else 0)
            row["first_ms"], row["last_ms"] = min(row["first_ms"], charged), max(row["last_ms"], charged)
    out = []
    for seq, ((interval, user, client_id, api_key, topic), sums) in enumerate(rows.items(), FIRST_SEQ):
        table, windows = in_force.state_at(round(sums["last_ms"]))
        out.append(
            {
                "v": 2, "ts": interval * INTERVAL_MS, "interval_ms": INTERVAL_MS, "proxy": PROXY, "writer": WRITER,
                "seq": seq, "user": user, "client_id": client_id, "api_key": api_key, "topic": topic,
                **{name: round(value) if name in ("bytes_in", "throttled_bytes", "first_ms", "last_ms") else value
                   for name, value in sums.items()},
                "request_time_ms": round(sums["request_time_ms"], 3),
                "charge_offset_ms": round(sums["charge_offset_ms"], 3),
                **quota_fields(table, user, client_id, api_key, windows),
            }
        )  # fmt: skip
    return out


def batch_of(version: int, in_force: QuotasInForce):
    collector = RequestCollector(100) if version == 1 else AggregateCollector(100, INTERVAL_MS)
    for r in records():
        assert collector.add(r)
    return flushed(collector, in_force, PROXY, WRITER, FIRST_SEQ)[1]


async def written(fmt: str, version: int, tmp_path: Path) -> tuple[list[dict], dict[str, object] | None]:
    """The rows as read back from `fmt`, and their Arrow types (Parquet) by field."""
    batch = batch_of(version, quotas())
    if fmt == "kafka":
        messages = _encode_for_kafka(batch)
        assert [key.decode() for key, _ in messages] == [row["client_id"] for row in batch.rows()]
        return [json.loads(value) for _, value in messages], None
    if fmt == "jsonl":
        await JsonlSink(tmp_path, WRITER, 1 << 20).write(batch)
        (path,) = tmp_path.rglob("*.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()], None
    sink = ParquetSink(tmp_path, WRITER, 1 << 20, 60.0)
    await sink.write(batch)
    assert (await sink.close()).written == len(batch)
    (path,) = tmp_path.rglob("*.parquet")
    table = pq.read_table(path)
    return table.to_pylist(), {field.name: field.type for field in table.schema}


@pytest.mark.parametrize("version", [1, 2])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet", "kafka"])
async def test_every_documented_field_is_read_back_from_every_format(fmt: str, version: int, tmp_path: Path) -> None:
    docs = documented(version)
    rows, arrow_types = await written(fmt, version, tmp_path)
    want = expected_v1(quotas()) if version == 1 else expected_v2(quotas())
    assert len(rows) == len(want) > 0
    for row, expected in zip(rows, want, strict=True):
        assert list(row) == list(usage_fields.names_of(version)), f"{fmt} v{version}: fields or order"
        assert set(row) == set(docs), (
            f"{fmt} v{version}: undocumented {set(row) - set(docs)}, missing {set(docs) - set(row)}"
        )
        for name, value in row.items():
            assert value == expected[name], (
                f"{fmt} v{version} seq {row['seq']}: {name} is {value!r}, not {expected[name]!r}"
            )
            if value is not None and fmt != "parquet":
                kinds = tuple(kind for word in docs[name] for kind in JSON[word])
                assert isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds), (
                    f"{fmt} v{version}: {name} = {value!r} is not {docs[name]}"
                )
    if arrow_types is not None:
        for name, arrow_type in arrow_types.items():
            allowed = [ARROW[word] for word in docs[name] if word in ARROW] or [pa.list_(pa.string())]
            assert any(arrow_type.equals(kind) for kind in allowed) or (
                pa.types.is_list(arrow_type) and arrow_type.value_type == pa.string() and "string[]" in docs[name]
            ), f"parquet v{version}: {name} is {arrow_type}, documented {docs[name]}"


def test_the_docs_field_tables_and_the_collectors_generated_code_are_fresh() -> None:
    stale = usage_fields.stale_sections()
    assert not stale, f"generated sections out of date in {stale}: run `make docs` and commit them"
