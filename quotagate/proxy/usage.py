"""Usage records, collected off the hot path and written to Parquet or JSONL files or a Kafka topic.

Two kinds of record (schema: docs/usage-records.md):
- v2, the default: one aggregate per interval (1 s by default) per (user, client_id, api_key) and,
  for produce, per topic: at most `topics_per_entity` topics per entity, interval and flush, the
  others summed under OTHER_TOPICS, whatever names a client invents. The hot path updates one
  aggregate in a dict per request (per topic for a multi-topic produce): no encoding, no I/O, no
  allocation once the key exists.
- v1: one record per request, for debugging (`records = "request"`). The hot path appends its
  fields to one list per field; the flush writes them from those columns straight into the sink's
  format (JSON text, or an Arrow table), with no dict per record.

A background task takes what was collected every `flush_interval_seconds` and hands it to the sink:
encoded (columns, JSON or Arrow) SLICE_ROWS rows at a time on the loop, which serves other
connections between two slices; file writes run in a worker thread, Kafka sends through aiokafka.
Python run in a worker thread would hold the GIL as long and stall every connection's reads. A slow
or failing sink never slows forwarding: while a flush is under way collection goes on, and what does
not fit (`buffer_records` records, or distinct aggregate keys) is dropped and counted in
quotagate_usage_records_dropped_total. Files are whole or absent (ParquetSink, JsonlSink), and what
they lose is counted exactly.

Every row also says which quota was in force for each key its API is charged to, and whether that
entry was shadow (`quota_<key>`, `quota_<key>_shadow`): resolved when the rows are made, off the
hot path, from the quota table in force at the row's interval (the file's and the Admin API's
quotas alike: the server tells the recorder when the table changes), once per entity and interval;
so are the entity's tenant, the tenant's quotas and whether its entry was shadow (`tenant`,
`tenant_quota_<key>`, `tenant_quota_<key>_shadow`).

Files are partitioned as DIRECTORY/date=YYYY-MM-DD/hour=HH/usage-<writer>-<n>.{parquet,jsonl} (UTC),
the layout Spark reads as partition columns. Every row carries its writer (proxy, pid, start time)
and a sequence number, which the pipeline's ingest deduplicates on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from quotagate import compiled
from quotagate.config.quota_state import fsync_folder
from quotagate.config.settings import ConfigError
from quotagate.proxy import usage_parquet
from quotagate.proxy.usage_fields import (
    AGGREGATE_COUNTERS,
    AGGREGATE_SCHEMA_VERSION,
    BY_NAME,
    DOUBLE,
    REQUEST_SCHEMA_VERSION,
    RESOLVED_FIELDS,
    WINDOW_FIELDS,
    names_of,
)
from quotagate.quotas.apis import RECORDED_KEYS, quota_keys
from quotagate.quotas.engine import QuotaWindows
from quotagate.quotas.entities import QuotaKey, QuotaTable

if TYPE_CHECKING:
    from quotagate.config.settings import UsageConfig
    from quotagate.proxy.metrics import ProxyMetrics

log = logging.getLogger("quotagate.usage")

_collectors = compiled.load("quotagate.proxy.usage_collectors")
# json.dumps with separators makes an encoder per call; this one is made once.
_json_line = _collectors.json_text
UsageRecord = _collectors.UsageRecord
RequestCollector = _collectors.RequestCollector
AggregateCollector = _collectors.AggregateCollector
aggregate_columns = _collectors.aggregate_columns
quota_groups = _collectors.quota_groups
OTHER_TOPICS = _collectors.OTHER_TOPICS
request_lines = _collectors.request_lines
Row = _collectors.Row

# The quota in force for each key, and whether its entry was shadow: null for a key the row's API is
# not charged to; for a charged key, quota null means unlimited and the shadow flag is false.
# Then the windows that sized the quotas' bursts (Kafka's quota.window.* and controller.quota.window.*),
# so that a replay from the records alone gives a quota the burst the proxy gave it (usage_fields).
# Then the entity's tenant, the tenant's quotas and their shadow flags (null: in no tenant, or a key the
# row's API is not charged to; a tenant quota is also null where the tenant has none, its flag false).
NO_QUOTA_FIELDS: Row = dict.fromkeys(RESOLVED_FIELDS)
QUOTA_HISTORY_MS = 60_000  # how long a replaced quota table is kept for rows still to be made


class QuotasInForce:
    """The quota tables (and windows) in force over time (wall-clock epoch ms), so that rows made
    after a change still name the quota of their own interval. Read as rows are encoded; the
    tables and windows themselves are immutable."""

    def __init__(self, table: QuotaTable, windows: QuotaWindows | None = None, since_ms: int = 0) -> None:
        self._history: list[tuple[int, QuotaTable, QuotaWindows]] = [(since_ms, table, windows or QuotaWindows())]

    def changed(self, table: QuotaTable, at_ms: int, windows: QuotaWindows | None = None) -> None:
        windows = windows or self._history[-1][2]
        self._history = [*self._history, (at_ms, table, windows)]  # a new list: a reader's copy stays whole

    def history(self) -> list[tuple[int, QuotaTable, QuotaWindows]]:
        """(since epoch ms, table, windows), oldest first: what state_at reads."""
        return self._history

    def at(self, ts_ms: float) -> QuotaTable:
        return self.state_at(ts_ms)[0]

    def state_at(self, ts_ms: float) -> tuple[QuotaTable, QuotaWindows]:
        history = self._history
        for since_ms, table, windows in reversed(history):
            if since_ms <= ts_ms:
                return table, windows
        return history[0][1], history[0][2]

    def forget_before(self, ts_ms: float) -> None:
        """Drops the tables no row from `ts_ms` on can need (keeps the one in force then)."""
        history = self._history
        keep = next((i for i in range(len(history) - 1, -1, -1) if history[i][0] <= ts_ms), 0)
        if keep:
            self._history = history[keep:]


def quota_fields(
    table: QuotaTable, user: str, client_id: str, api_key: int, windows: QuotaWindows | None = None
) -> Row:
    """The `quota_*` fields of a row: what `table` gives (user, client_id) for the keys `api_key` is
    charged to, and the windows sizing their bursts; then its tenant and the tenant's quotas."""
    fields = dict(NO_QUOTA_FIELDS)
    windows = windows or QuotaWindows()
    for name in WINDOW_FIELDS:
        value = getattr(windows, name)
        fields[name] = float(value) if BY_NAME[name].type == DOUBLE else value
    for key in keys_charged(api_key):
        resolution = table.resolve(user, client_id, key)
        fields[f"quota_{key.value}"] = None if resolution is None else resolution.value
        fields[f"quota_{key.value}_shadow"] = resolution is not None and resolution.shadow
    tenant = table.tenants.tenant_of(user, client_id)
    if tenant is not None:
        fields["tenant"] = tenant.name
        for key in keys_charged(api_key):
            fields[f"tenant_quota_{key.value}"] = tenant.quotas.get(key)
            fields[f"tenant_quota_{key.value}_shadow"] = tenant.shadow and key in tenant.quotas
    return fields


@functools.lru_cache(maxsize=1024)  # one entry per API key seen
def keys_charged(api_key: int) -> tuple[QuotaKey, ...]:
    """The recorded quota keys an exchange of `api_key` is charged to (quotas/apis.py: the one place an
    API's charging is declared)."""
    return tuple(key for key in quota_keys(api_key) if key in RECORDED_KEYS)


def partition_of(ts_ms: int) -> str:
    return time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(ts_ms / 1000))


def by_partition(times_ms: list[int], items: list) -> dict[str, list]:
    """`items` (one per time in `times_ms`) by the hourly partition of their time, each partition's
    in their order, the partitions in the order of their first item."""
    if not times_ms:
        return {}
    first, last = min(times_ms) // 3_600_000, max(times_ms) // 3_600_000
    if first == last:  # nearly always: a flush spans a second
        return {partition_of(times_ms[0]): items}
    grouped: dict[str, list] = {}
    hours: dict[int, str] = {}  # hour -> its partition: strftime once per hour, not per item
    for ts_ms, item in zip(times_ms, items, strict=True):
        hour = ts_ms // 3_600_000
        partition = hours.get(hour)
        if partition is None:
            partition = hours[hour] = partition_of(ts_ms)
        grouped.setdefault(partition, []).append(item)
    return grouped


class RowsOf:
    """What a flush's rows add to what was collected: the proxy, the writer and its first sequence
    number, the quotas in force. Each batch gives its rows as `columns` (every field of its version,
    by name: usage_fields), which the sinks write."""

    version: int

    def __init__(self, proxy_id: str, writer: str, first_seq: int, quotas: QuotasInForce | None) -> None:
        self.proxy_id = proxy_id
        self.writer = writer
        self.first_seq = first_seq
        self.quotas = quotas

    def identity_columns(self, ts: list, user: list, client_id: list, api_key: list) -> dict[str, list]:
        """The columns both versions start with."""
        count = len(ts)
        return {
            "v": [self.version] * count,
            "ts": ts,
            "proxy": [self.proxy_id] * count,
            "writer": [self.writer] * count,
            "seq": list(range(self.first_seq, self.first_seq + count)),
            "user": user,
            "client_id": client_id,
            "api_key": api_key,
        }

    def quota_columns(self, at_ms: list, users: list[str], client_ids: list[str], api_keys: list[int]) -> dict:
        """The quota fields in force at each row's `at_ms`: made once per (quota state, user,
        client_id, api_key), taken per row."""
        history = [(0, None, None)] if self.quotas is None else self.quotas.history()
        group_of_row, groups = quota_groups(at_ms, users, client_ids, api_keys, [since for since, _, _ in history])
        found = []
        for state, user, client_id, api_key in groups:
            _, table, windows = history[state]
            found.append(NO_QUOTA_FIELDS if table is None else quota_fields(table, user, client_id, api_key, windows))
        return {name: [found[group][name] for group in group_of_row] for name in RESOLVED_FIELDS}

    def columns(self) -> dict[str, list]:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def rows(self) -> list[Row]:
        """The rows as dicts of every field of the version, in order."""
        columns = self.columns()
        names = names_of(self.version)
        return [
            dict(zip(names, values, strict=True)) for values in zip(*(columns[name] for name in names), strict=True)
        ]


class RequestBatch(RowsOf):
    """One flush's v1 records: RequestCollector's columns (UsageRecord's fields), and what their rows
    add. The sinks write them from the columns (`json_lines`, `columns`), with no dict per row."""

    version = REQUEST_SCHEMA_VERSION

    def __init__(
        self, columns: tuple[list, ...], proxy_id: str, writer: str, first_seq: int, quotas: QuotasInForce | None
    ) -> None:
        super().__init__(proxy_id, writer, first_seq, quotas)
        self.collected = columns

    def __len__(self) -> int:
        return len(self.collected[0])

    def slice(self, start: int, stop: int) -> RequestBatch:
        """Rows start..stop-1, as their own batch (their sequence numbers kept)."""
        columns = tuple(column[start:stop] for column in self.collected)
        return RequestBatch(columns, self.proxy_id, self.writer, self.first_seq + start, self.quotas)

    @property
    def times_ms(self) -> list[int]:
        return self.collected[0]

    @property
    def client_ids(self) -> list[str]:
        return self.collected[2]

    def requests(self) -> list[int] | None:
        """The requests each row counts; None: one each."""
        return None

    def json_lines(self) -> list[str]:
        """Each row's JSON text, as the sinks' encoder writes rows() (usage_collectors.request_lines)."""
        states = [(0, None, None)] if self.quotas is None else self.quotas.history()

        def quota_suffix(state: int, user: str, client_id: str, api_key: int) -> str:
            _, table, windows = states[state]
            fields = NO_QUOTA_FIELDS if table is None else quota_fields(table, user, client_id, api_key, windows)
            return "," + _json_line(fields)[1:-1]

        since = [state[0] for state in states]
        return request_lines(self.collected, self.proxy_id, self.writer, self.first_seq, since, quota_suffix)

    def columns(self) -> dict[str, list]:
        (ts, user, client_id, api_key, api_version, topics, bytes_in, bytes_out, partitions_mutated, latency,
         throttle, decision, shadow, over_quota) = self.collected  # fmt: skip
        return {
            **self.identity_columns(ts, user, client_id, api_key),
            "api_version": api_version,
            "topics": [list(names) for names in topics],
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "upstream_latency_ms": [round(ms, 3) for ms in latency],
            "throttle_ms": throttle,
            "partitions_mutated": partitions_mutated,
            "decision": decision,
            "throttled_bytes": [size if over else 0 for size, over in zip(bytes_in, over_quota, strict=True)],
            "shadow_throttle_ms": shadow,
            **self.quota_columns(ts, user, client_id, api_key),
        }


class AggregateBatch(RowsOf):
    """One flush's v2 records: AggregateCollector.take_aggregates' items, and what their rows add
    (as RequestBatch)."""

    version = AGGREGATE_SCHEMA_VERSION

    def __init__(
        self, items: list, interval_ms: int, proxy_id: str, writer: str, first_seq: int, quotas: QuotasInForce | None
    ) -> None:
        super().__init__(proxy_id, writer, first_seq, quotas)
        self.items = items
        self.interval_ms = interval_ms

    def __len__(self) -> int:
        return len(self.items)

    def slice(self, start: int, stop: int) -> AggregateBatch:
        items = self.items[start:stop]
        return AggregateBatch(items, self.interval_ms, self.proxy_id, self.writer, self.first_seq + start, self.quotas)

    @property
    def times_ms(self) -> list[int]:
        interval_ms = self.interval_ms
        return [key[0] * interval_ms for key, _ in self.items]

    @property
    def client_ids(self) -> list[str]:
        return [key[2] for key, _ in self.items]

    def requests(self) -> list[int]:
        return [counters.requests for _, counters in self.items]

    def json_lines(self) -> list[str]:
        return [_json_line(row) for row in self.rows()]

    def columns(self) -> dict[str, list]:
        ts, user, client_id, api_key, topic, counters = aggregate_columns(self.items, self.interval_ms)
        values = dict(zip(AGGREGATE_COUNTERS, counters, strict=True))
        return {
            **self.identity_columns(ts, user, client_id, api_key),
            "interval_ms": [self.interval_ms] * len(ts),
            "topic": topic,
            **values,
            # The quota in force at a row's last charge.
            **self.quota_columns(values["last_ms"], user, client_id, api_key),
        }


class RowBatch:
    """Rows already made (v1 or v2, with their quota fields; fields they lack are null), as the
    batches above."""

    def __init__(self, rows: list[Row]) -> None:
        self.rows_given = rows
        self.version = rows[0]["v"] if rows else AGGREGATE_SCHEMA_VERSION

    def __len__(self) -> int:
        return len(self.rows_given)

    def slice(self, start: int, stop: int) -> RowBatch:
        return RowBatch(self.rows_given[start:stop])

    @property
    def times_ms(self) -> list[int]:
        return [row["ts"] for row in self.rows_given]

    @property
    def client_ids(self) -> list[str]:
        return [row["client_id"] for row in self.rows_given]

    def requests(self) -> list[int] | None:
        rows = self.rows_given
        return [row["requests"] for row in rows] if rows and "requests" in rows[0] else None

    def rows(self) -> list[Row]:
        return self.rows_given

    def json_lines(self) -> list[str]:
        return [_json_line(row) for row in self.rows_given]

    def columns(self) -> dict[str, list]:
        return {name: [row.get(name) for row in self.rows_given] for name in names_of(self.version)}


UsageBatch = RequestBatch | AggregateBatch | RowBatch


def as_batch(records: list[Row] | UsageBatch) -> UsageBatch:
    return RowBatch(records) if isinstance(records, list) else records


class Piece(NamedTuple):
    """Part of a flush, encoded for a sink: rows of one partition (files) or their messages (Kafka)."""

    partition: str
    payload: Any  # an Arrow table (Parquet), bytes (JSONL), [(key, value)] (Kafka)
    rows: int
    requests: int  # the requests the rows count: what is lost with them


@dataclass
class SinkResult:
    """What a write did: rows now readable (or sent), requests whose rows were lost, and why."""

    written: int = 0
    lost_requests: int = 0
    problems: list[str] = field(default_factory=list)

    def lost(self, requests: int, problem: BaseException | str) -> None:
        self.lost_requests += requests
        self.problems.append(str(problem))


class UsageSink(Protocol):
    def encode(self, records: list[Row] | UsageBatch) -> list[Piece]: ...

    async def write_encoded(self, pieces: list[list[Piece]]) -> SinkResult: ...

    def pending(self) -> bool: ...

    async def prepare(self) -> None: ...

    async def close(self) -> SinkResult: ...


def _pieces(batch: UsageBatch, encode: Callable[[list[int] | None], Any]) -> list[Piece]:
    """The batch's rows by hourly partition, each partition's encoded by `encode(row indexes, or
    None for all)`, with the requests they count."""
    count = len(batch)
    if not count:
        return []
    requests = batch.requests()
    pieces = []
    for partition, indices in by_partition(batch.times_ms, list(range(count))).items():
        whole = len(indices) == count
        counted = len(indices) if requests is None else sum(requests[i] for i in indices)
        pieces.append(Piece(partition, encode(None if whole else indices), len(indices), counted))
    return pieces


class Sink:
    """What every sink does unless it says otherwise (UsageSink). The recorder encodes a flush slice
    by slice on the loop (`encode`), then hands the pieces to `write_encoded`; `write` does both at
    once (tests, tools)."""

    async def write(self, records: list[Row] | UsageBatch) -> SinkResult:
        return await self.write_encoded([self.encode(records)])

    def encode(self, records: list[Row] | UsageBatch) -> list[Piece]:
        raise NotImplementedError

    async def write_encoded(self, pieces: list[list[Piece]]) -> SinkResult:
        raise NotImplementedError

    def pending(self) -> bool:
        """Something is held that a write with no rows would finish (open files to close)."""
        return False

    async def prepare(self) -> None:
        """Before the first flush (leftovers of earlier runs)."""

    async def close(self) -> SinkResult:
        return SinkResult()


class FileSink(Sink):
    """The file sinks: the pieces are written in a worker thread (`write_blocking`)."""

    async def write_encoded(self, pieces: list[list[Piece]]) -> SinkResult:
        return await asyncio.get_running_loop().run_in_executor(None, self.write_blocking, pieces)

    def write_blocking(self, pieces: list[list[Piece]]) -> SinkResult:
        raise NotImplementedError


class RotatingFiles:
    """Names the files of hourly partitions; a new file per partition, at max_file_bytes or age."""

    def __init__(self, directory: str | Path, writer: str, suffix: str) -> None:
        self.directory = Path(directory)
        self.writer = writer
        self.suffix = suffix
        self._sequence = 0

    def new_path(self, partition: str) -> Path:
        folder = self.directory / partition
        folder.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        return folder / f"usage-{self.writer}-{self._sequence:06d}{self.suffix}"


class JsonlSink(FileSink):
    """Appends whole lines to hourly-partitioned JSONL files, in a worker thread. A write that fails
    (ENOSPC...) is cut back to the file's size before it, so no partial line is left to glue to the
    next; its rows are counted lost."""

    def __init__(self, directory: str | Path, writer: str, max_file_bytes: int) -> None:
        self.files = RotatingFiles(directory, writer, ".jsonl")
        self.max_file_bytes = max_file_bytes
        self._current: tuple[str, Path] | None = None  # (partition, file)

    def encode(self, records: list[Row] | UsageBatch) -> list[Piece]:
        batch = as_batch(records)
        lines = batch.json_lines()

        def text(indices: list[int] | None) -> bytes:
            chosen = lines if indices is None else [lines[i] for i in indices]
            return ("\n".join(chosen) + "\n").encode()

        return _pieces(batch, text)

    def write_blocking(self, pieces: list[list[Piece]]) -> SinkResult:
        result = SinkResult()
        for piece in (piece for encoded in pieces for piece in encoded):
            try:
                self._append(self._file_for(piece.partition), piece.payload)
            except OSError as exc:
                result.lost(piece.requests, exc)
            else:
                result.written += piece.rows
        return result

    def _append(self, path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            view = memoryview(data)
            try:
                while view:
                    view = view[os.write(fd, view) :]
            except OSError:
                try:
                    os.ftruncate(fd, size)  # whole lines only: what this write added goes
                except OSError:
                    self._current = None  # cannot cut it back: the next write starts a new file
                raise
        finally:
            os.close(fd)

    def _file_for(self, partition: str) -> Path:
        current = self._current
        if current is not None and current[0] == partition:
            try:
                if current[1].stat().st_size < self.max_file_bytes:
                    return current[1]
            except FileNotFoundError:
                pass
        path = self.files.new_path(partition)
        self._current = (partition, path)
        return path


class OpenParquet(NamedTuple):
    file: usage_parquet.ParquetFile | None  # written under its hidden name
    path: Path  # where it goes once whole
    opened: float  # time.monotonic()
    rows: int
    requests: int


HIDDEN_PREFIX, HIDDEN_SUFFIX = ".usage-", ".parquet.open"
LEFTOVER_GRACE_SECONDS = 60.0  # beyond max_file_seconds: a hidden file untouched that long has no writer


class ParquetSink(FileSink):
    """Writes rows to hourly-partitioned Parquet files (usage_parquet.py), one row group per flush,
    in a worker thread.

    A file is written under a hidden name (`.usage-...parquet.open`, which Spark and pyarrow skip)
    and renamed into place only when whole: its footer written and fsync'd, then read back from the
    disk as it was written; then its folder is fsync'd. It is closed at the hour, at max_file_bytes,
    after max_file_seconds (traffic or not) and on shutdown. A file that fails on the way (ENOSPC...)
    is removed and the requests of all its rows counted lost; a crash loses the file being written,
    and the next start removes it (`prepare`)."""

    def __init__(self, directory: str | Path, writer: str, max_file_bytes: int, max_file_seconds: float) -> None:
        self.files = RotatingFiles(directory, writer, ".parquet")
        self.writer = writer
        self.max_file_bytes = max_file_bytes
        self.max_file_seconds = max_file_seconds
        self._open: dict[str, OpenParquet] = {}  # partition -> its open file

    def encode(self, records: list[Row] | UsageBatch) -> list[Piece]:
        """The batch's Parquet pages, per partition (made on the loop; written by write_blocking)."""
        batch = as_batch(records)
        if not len(batch):
            return []
        columns = batch.columns()

        def pages(indices: list[int] | None) -> usage_parquet.EncodedRows:
            if indices is None:
                return usage_parquet.encode(batch.version, columns, len(batch))
            chosen = {name: [values[i] for i in indices] for name, values in columns.items()}
            return usage_parquet.encode(batch.version, chosen, len(indices))

        return _pieces(batch, pages)

    def pending(self) -> bool:
        return bool(self._open)

    async def prepare(self) -> None:
        removed = await asyncio.get_running_loop().run_in_executor(None, self.remove_leftovers)
        if removed:
            log.warning("removed %d unfinished usage files of earlier runs from %s", removed, self.files.directory)

    async def close(self) -> SinkResult:
        return await asyncio.get_running_loop().run_in_executor(None, self._close_all)

    def write_blocking(self, pieces: list[list[Piece]]) -> SinkResult:
        result = SinkResult()
        by_partition: dict[str, list[Piece]] = {}
        for piece in (piece for encoded in pieces for piece in encoded):
            by_partition.setdefault(piece.partition, []).append(piece)
        now = time.monotonic()
        # Close what is old, or of an hour no longer written, before writing (an hour's last flush
        # lands first). A flush with no rows closes only what is old: sparse traffic, few files.
        for partition, open_file in list(self._open.items()):
            if (
                (by_partition and partition not in by_partition)
                or now - open_file.opened >= self.max_file_seconds
                or (open_file.file is not None and open_file.file.size >= self.max_file_bytes)
                or self._other_version(open_file, by_partition.get(partition))
            ):
                self._close(partition, result)
        for partition, parts in by_partition.items():
            rows = sum(part.rows for part in parts)
            requests = sum(part.requests for part in parts)
            open_file = self._open.get(partition)
            try:
                if open_file is None:  # registered first: a file that fails to start is removed too
                    path = self.files.new_path(partition)
                    open_file = self._open[partition] = OpenParquet(None, path, now, 0, 0)
                    file = usage_parquet.ParquetFile(self._hidden(path), parts[0].payload.version)
                    open_file = self._open[partition] = open_file._replace(file=file)
                assert open_file.file is not None
                open_file.file.write_row_group([part.payload for part in parts])
            except Exception as exc:  # ENOSPC, EIO...: the file may hold part of it, so all of it goes
                result.lost(requests, exc)
                self._abandon(partition, result)
                continue
            added = open_file._replace(rows=open_file.rows + rows, requests=open_file.requests + requests)
            self._open[partition] = added
        return result

    @staticmethod
    def _other_version(open_file: OpenParquet, parts: list[Piece] | None) -> bool:
        """Rows of the other version go to a file of their own (a file has one schema)."""
        return bool(parts) and open_file.file is not None and open_file.file.version != parts[0].payload.version

    def _close_all(self) -> SinkResult:
        result = SinkResult()
        for partition in list(self._open):
            self._close(partition, result)
        return result

    def _close(self, partition: str, result: SinkResult) -> None:
        """Renames the partition's file into place if it is whole and readable; else removes it."""
        open_file = self._open.pop(partition)
        hidden = self._hidden(open_file.path)
        try:
            assert open_file.file is not None
            open_file.file.close()  # the footer written and fsync'd
            if not usage_parquet.footer_matches(hidden, open_file.file.footer):
                raise OSError(f"{hidden} does not end with the footer written to it")
            if open_file.file.rows != open_file.rows:
                raise OSError(f"{hidden} holds {open_file.file.rows} rows, {open_file.rows} were written to it")
            os.rename(hidden, open_file.path)
        except Exception as exc:
            hidden.unlink(missing_ok=True)
            result.lost(open_file.requests, exc)
            return
        result.written += open_file.rows
        with contextlib.suppress(OSError):  # the file is whole either way; this makes its name durable
            fsync_folder(open_file.path.parent)

    def _abandon(self, partition: str, result: SinkResult) -> None:
        """The partition's file failed: closed as it is, removed, the requests of its rows lost."""
        open_file = self._open.pop(partition)
        try:
            if open_file.file is not None:
                open_file.file.abandon()
        except Exception:  # the file is removed either way
            pass
        self._hidden(open_file.path).unlink(missing_ok=True)
        if open_file.requests:
            result.lost(open_file.requests, f"{open_file.path.name} removed unfinished")

    def remove_leftovers(self) -> int:
        """Removes hidden files no live writer will finish: of an earlier run of this proxy (its pid,
        or a pid no longer running), or untouched for longer than a writer keeps a file open."""
        proxy_id, pid, _ = self.writer.rsplit("-", 2)
        stale_before = time.time() - self.max_file_seconds - LEFTOVER_GRACE_SECONDS
        removed = 0
        for hidden in self.files.directory.glob(f"date=*/hour=*/{HIDDEN_PREFIX}*{HIDDEN_SUFFIX}"):
            name = hidden.name[len(HIDDEN_PREFIX) : -len(HIDDEN_SUFFIX)]
            parts = name.rsplit("-", 3)  # proxy id, pid, start ms, file number
            if name.startswith(self.writer + "-") or len(parts) != 4:
                continue
            try:
                earlier_run = parts[0] == proxy_id and (parts[1] == pid or not _running(int(parts[1])))
                if earlier_run or hidden.stat().st_mtime < stale_before:
                    hidden.unlink()
                    removed += 1
            except (OSError, ValueError):
                continue
        return removed

    @staticmethod
    def _hidden(path: Path) -> Path:
        return path.with_name(f".{path.name}.open")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class KafkaSink(Sink):
    """Sends rows as JSON to a Kafka topic (directly to the cluster, not through the proxy), over the
    cluster's own security: TLS ([upstream.tls], else the system's CAs) and SASL PLAIN or SCRAM."""

    def __init__(
        self,
        bootstrap_servers: list[str],
        topic: str,
        writer: str,
        ssl_context: ssl.SSLContext | None = None,
        security_protocol: str = "",
        sasl: tuple[str, str, str] | None = None,  # (mechanism, user, password)
    ) -> None:
        from aiokafka import AIOKafkaProducer  # a dependency of quotagate; imported only when used

        protocol = security_protocol or ("SSL" if ssl_context is not None else "PLAINTEXT")
        if protocol in ("SSL", "SASL_SSL") and ssl_context is None:
            ssl_context = ssl.create_default_context()
        self.topic = topic
        self.where = f"topic {topic} at {','.join(bootstrap_servers)} ({protocol})"
        mechanism, user, password = sasl or ("PLAIN", None, None)
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id=f"quotagate-usage-{writer}",
            linger_ms=50,
            security_protocol=protocol,
            ssl_context=ssl_context if protocol in ("SSL", "SASL_SSL") else None,
            sasl_mechanism=mechanism,
            sasl_plain_username=user,
            sasl_plain_password=password,
        )
        self._started = False

    def encode(self, records: list[Row] | UsageBatch) -> list[Piece]:
        """One piece: the rows' (key, JSON value) messages, keyed by client id."""
        batch = as_batch(records)
        if not len(batch):
            return []
        requests = batch.requests()
        return [Piece("", _encode_for_kafka(batch), len(batch), len(batch) if requests is None else sum(requests))]

    async def write_encoded(self, pieces: list[list[Piece]]) -> SinkResult:
        """Sends every piece's messages; raises (all of them lost) if the cluster cannot be reached."""
        if not self._started:
            try:
                await self._producer.start()
            except Exception as exc:
                raise RuntimeError(
                    f"the usage sink cannot reach {self.where}: {exc!r}; check usage.kafka_bootstrap_servers, "
                    "usage.kafka_security_protocol and the SASL user and password (usage.kafka_sasl_*)"
                ) from exc
            self._started = True
        result = SinkResult()
        for piece in (piece for encoded in pieces for piece in encoded):
            sends = [await self._producer.send(self.topic, value=value, key=key) for key, value in piece.payload]
            await asyncio.gather(*sends)
            result.written += piece.rows
        return result

    async def close(self) -> SinkResult:
        if self._started:
            await self._producer.stop()
        return SinkResult()


def _encode_for_kafka(records: list[Row] | UsageBatch) -> list[tuple[bytes, bytes]]:
    batch = as_batch(records)
    return [(key.encode(), line.encode()) for key, line in zip(batch.client_ids, batch.json_lines(), strict=True)]


# Rows a flush turns into the sink's format at a time on the loop, before it lets other callbacks
# run: a slice costs ~1-3 ms (columns, quota fields, Arrow or JSON), so a flush of 100 000 rows never
# holds the loop longer than that at once. (Made in a worker thread instead, the same Python held the
# GIL and every other connection's read waited for it: issue 34 item 4.)
SLICE_ROWS = 1000
WARN_EVERY_SECONDS = 30.0  # a failing sink logs at once, then this often while it keeps failing


class SinkTrouble:
    """Warnings about a failing sink for as long as it fails: the first failure at once, then one
    line every WARN_EVERY_SECONDS with what was lost meanwhile, and one when it works again."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.failing_since: float | None = None
        self._warned_at = 0.0
        self._lost = self._failures = 0  # since the last warning

    def failed(self, lost_requests: int, problems: list[str]) -> None:
        now = self.clock()
        self._lost += lost_requests
        self._failures += 1
        if self.failing_since is None:
            self.failing_since = now
        elif now - self._warned_at < WARN_EVERY_SECONDS:
            return
        log.warning(
            "usage sink failing (for %.0f s): the records of %d requests lost in %d failed writes since the last "
            "warning; latest: %s",
            now - self.failing_since,
            self._lost,
            self._failures,
            problems[-1] if problems else "?",
        )
        self._warned_at = now
        self._lost = self._failures = 0

    def succeeded(self) -> None:
        if self.failing_since is None:
            return
        log.warning(
            "usage sink writing again after %.0f s; the records of %d requests lost since the last warning",
            self.clock() - self.failing_since,
            self._lost,
        )
        self.failing_since = None
        self._lost = self._failures = 0


class UsageRecorder:
    def __init__(
        self,
        config: UsageConfig,
        metrics: ProxyMetrics,
        sink: UsageSink,
        proxy_id: str = "",
        writer: str = "",
        quotas: QuotasInForce | None = None,
    ) -> None:
        self.config = config
        # The quota tables in force (None: rows carry null quota fields, as for an unknown quota).
        self.quotas = quotas
        self.metrics = metrics
        self.sink = sink
        self.proxy_id = proxy_id
        self.writer = writer or writer_id(proxy_id)
        self.collector: RequestCollector | AggregateCollector = (
            RequestCollector(config.buffer_records, config.buffer_records_per_user)
            if config.records == "request"
            else AggregateCollector(
                config.buffer_records, config.interval_ms, config.topics_per_entity, config.buffer_records_per_user
            )
        )
        self._seq = 0
        self._folded_counted = 0
        self.trouble = SinkTrouble()
        self._prepared = False
        self._flushing: asyncio.Future[None] | None = None

    def add(self, record: UsageRecord) -> None:
        """Counts the record in, or counts it as dropped when the collector is full. (The session
        core adds its exchanges to the collector itself, and calls `dropped` when it is full.)"""
        if not self.collector.add(record):
            self.dropped()

    def dropped(self) -> None:
        self.metrics.usage_dropped_total.inc()

    async def run(self) -> None:
        """Flushes every flush_interval_seconds; at shutdown (cancelled), lets a flush under way end,
        flushes and closes the sink. A failure leaves the sink open: the supervisor starts this again
        and records keep going."""
        try:
            if not self._prepared:
                await self.sink.prepare()
                self._prepared = True
            while True:
                await asyncio.sleep(self.config.flush_interval_seconds)
                self._flushing = asyncio.ensure_future(self.flush())
                await asyncio.shield(self._flushing)
        except asyncio.CancelledError:
            if self._flushing is not None and not self._flushing.done():
                with contextlib.suppress(Exception):
                    await self._flushing  # one write at a time: the sink's files are not shared
            await self.flush()
            self._account(await self.sink.close(), 0)
            raise

    def quotas_changed(self, table: QuotaTable, at_ms: int, windows: QuotaWindows | None = None) -> None:
        """The quotas in force changed (a file reload, AlterClientQuotas): rows from `at_ms` name them."""
        if self.quotas is not None:
            self.quotas.changed(table, at_ms, windows)

    def take_records(self) -> tuple[int, int, RequestBatch | AggregateBatch]:
        """Empties the collector: (requests, rows, the batch the sink encodes, slice by slice)."""
        quotas = self.quotas
        first_seq = self._seq
        collector = self.collector
        if isinstance(collector, RequestCollector):
            requests = len(collector)
            batch: RequestBatch | AggregateBatch = RequestBatch(
                collector.take_columns(), self.proxy_id, self.writer, first_seq, quotas
            )
        else:
            requests, items = collector.take_aggregates()
            batch = AggregateBatch(items, collector.interval_ms, self.proxy_id, self.writer, first_seq, quotas)
        self._seq += len(batch)
        return requests, len(batch), batch

    async def flush(self) -> None:
        """Hands what was collected to the sink: encoded SLICE_ROWS rows at a time on the loop (other
        connections are served between two slices), written in a worker thread."""
        if self.quotas is not None:  # no row to come is older than a minute (a request's latency)
            self.quotas.forget_before(time.time() * 1000 - QUOTA_HISTORY_MS)
        self._count_folded()
        if not len(self.collector):
            if self.sink.pending():  # files to close (aged, or their hour over) though nothing came
                await self._write([], 0)
            return
        requests, _rows, batch = self.take_records()
        try:
            pieces = []
            for start in range(0, len(batch), SLICE_ROWS):
                pieces.append(self.sink.encode(batch.slice(start, start + SLICE_ROWS)))
                await asyncio.sleep(0)
        except Exception as exc:  # a failing encoder must not take the proxy down
            self._account(SinkResult(0, requests, [repr(exc)]), requests)
            return
        await self._write(pieces, requests)

    async def _write(self, pieces: list[list[Piece]], requests: int) -> None:
        try:
            result = await self.sink.write_encoded(pieces)
        except Exception as exc:  # a failing sink must not take the proxy down
            result = SinkResult(0, requests, [str(exc)])
        self._account(result, requests)

    def _account(self, result: SinkResult, requests: int) -> None:
        """Counts what a write made readable and what it lost; warns while the sink fails."""
        if result.written:
            self.metrics.usage_written_total.inc(result.written)
        if result.lost_requests:
            self.metrics.usage_dropped_total.inc(result.lost_requests)
        if result.problems:
            self.trouble.failed(result.lost_requests, result.problems)
        elif requests:
            self.trouble.succeeded()

    def _count_folded(self) -> None:
        folded = getattr(self.collector, "topics_folded", 0)
        if folded > self._folded_counted:
            self.metrics.usage_topics_folded_total.inc(folded - self._folded_counted)
            self._folded_counted = folded


def writer_id(proxy_id: str) -> str:
    """Names one proxy process's records: rows are unique by (writer, seq)."""
    return f"{proxy_id}-{os.getpid()}-{time.time_ns() // 1_000_000}"


def sasl_credentials(config: UsageConfig) -> tuple[str, str, str] | None:
    """(mechanism, user, password) of the "kafka" sink, the password read from its environment
    variable when named there; None without SASL."""
    if not config.kafka_sasl:
        return None
    password = config.kafka_sasl_password
    if config.kafka_sasl_password_env:
        password = os.environ.get(config.kafka_sasl_password_env, "")
        if not password:
            raise ConfigError(
                "usage.kafka_sasl_password_env",
                f"names {config.kafka_sasl_password_env}, which is not set in the proxy's environment",
            )
    return config.kafka_sasl_mechanism, config.kafka_sasl_username, password


def make_sink(
    config: UsageConfig, writer: str, default_bootstrap: list[str], ssl_context: ssl.SSLContext | None = None
) -> UsageSink:
    if config.sink == "kafka":
        return KafkaSink(
            list(config.kafka_bootstrap_servers) or default_bootstrap,
            config.kafka_topic,
            writer,
            ssl_context,
            config.kafka_security_protocol,
            sasl_credentials(config),
        )
    if config.sink == "jsonl":
        return JsonlSink(config.directory, writer, config.max_file_bytes)
    return ParquetSink(config.directory, writer, config.max_file_bytes, config.max_file_seconds)
