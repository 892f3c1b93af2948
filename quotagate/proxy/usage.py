"""Usage records, collected off the hot path and written to Parquet or JSONL files or a Kafka topic.

Two kinds of record (schema: docs/usage-records.md):
- v2, the default: one aggregate per interval (1 s by default) per (user, client_id, api_key) and,
  for produce, per topic. The hot path updates one list in a dict per request (per topic for a
  multi-topic produce): no encoding, no I/O, no allocation once the key exists.
- v1: one record per request, for debugging (`records = "request"`). The hot path appends its
  fields to one list per field; the flush writes them from those columns straight into the sink's
  format (JSON text, or an Arrow table), with no dict per record.

A background task takes what was collected every `flush_interval_seconds` and hands it to the sink:
turning it into rows, encoding (JSON or Arrow) and file writes run in a worker thread, Kafka sends
through aiokafka. A slow or failing sink never slows forwarding: while a flush is under way
collection goes on, and what does not fit (`buffer_records` records, or distinct aggregate keys) is
dropped and counted in quotagate_usage_records_dropped_total.

Every row also says which quota was in force for each key its API is charged to, and whether that
entry was shadow (`quota_<key>`, `quota_<key>_shadow`): resolved when the rows are made, off the
hot path, from the quota table in force at the row's interval (the file's and the Admin API's
quotas alike: the server tells the recorder when the table changes), once per entity and interval.

Files are partitioned as DIRECTORY/date=YYYY-MM-DD/hour=HH/usage-<writer>-<n>.{parquet,jsonl} (UTC),
the layout Spark reads as partition columns. Every row carries its writer (proxy, pid, start time)
and a sequence number, which the pipeline's ingest deduplicates on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from quotagate import compiled
from quotagate.config.settings import ConfigError
from quotagate.quotas.engine import QuotaWindows
from quotagate.quotas.entities import RECORDED_KEYS, QuotaKey, QuotaTable

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
request_row = _collectors.request_row
request_lines = _collectors.request_lines
Row = _collectors.Row
REQUEST_SCHEMA_VERSION = _collectors.REQUEST_SCHEMA_VERSION
AGGREGATE_SCHEMA_VERSION = _collectors.AGGREGATE_SCHEMA_VERSION
AGGREGATE_COUNTERS = _collectors.AGGREGATE_COUNTERS
FLOAT_COUNTERS = _collectors.FLOAT_COUNTERS

# The quota in force for each key, and whether its entry was shadow: null for a key the row's API is
# not charged to; for a charged key, quota null means unlimited and the shadow flag is false.
# Then the windows that sized the quotas' bursts (Kafka's quota.window.* and controller.quota.window.*),
# so that a replay from the records alone gives a quota the burst the proxy gave it.
WINDOW_FIELDS = (
    "quota_window_num",
    "quota_window_size_seconds",
    "controller_quota_window_num",
    "controller_quota_window_size_seconds",
)
QUOTA_FIELDS = (
    *(name for key in RECORDED_KEYS for name in (f"quota_{key.value}", f"quota_{key.value}_shadow")),
    *WINDOW_FIELDS,
)
QUOTA_VALUE_FIELDS = frozenset(f"quota_{key.value}" for key in RECORDED_KEYS)
NO_QUOTA_FIELDS: Row = dict.fromkeys(QUOTA_FIELDS)
QUOTA_HISTORY_MS = 60_000  # how long a replaced quota table is kept for rows still to be made


class QuotasInForce:
    """The quota tables (and windows) in force over time (wall-clock epoch ms), so that rows made
    after a change still name the quota of their own interval. Read in the worker thread that makes
    rows; the tables and windows themselves are immutable."""

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
    charged to, and the windows sizing their bursts."""
    fields = dict(NO_QUOTA_FIELDS)
    windows = windows or QuotaWindows()
    for name in WINDOW_FIELDS:
        value = getattr(windows, name)
        fields[name] = float(value) if name.endswith("_seconds") else value
    for key in keys_charged(api_key):
        resolution = table.resolve(user, client_id, key)
        fields[f"quota_{key.value}"] = None if resolution is None else resolution.value
        fields[f"quota_{key.value}_shadow"] = resolution is not None and resolution.shadow
    return fields


class QuotaFieldCache:
    """quota_fields once per (table, entity, API): a flush's rows share an interval's table."""

    def __init__(self, quotas: QuotasInForce | None) -> None:
        self.quotas = quotas
        self._cache: dict[tuple[int, int, str, str, int], Row] = {}

    def fields(self, ts_ms: float, user: str, client_id: str, api_key: int) -> Row:
        if self.quotas is None:
            return NO_QUOTA_FIELDS
        table, windows = self.quotas.state_at(ts_ms)
        key = (id(table), id(windows), user, client_id, api_key)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = quota_fields(table, user, client_id, api_key, windows)
        return found


@functools.lru_cache(maxsize=1024)  # one entry per API key seen
def keys_charged(api_key: int) -> tuple[QuotaKey, ...]:
    """The quota keys an exchange of `api_key` is charged to, read off the session core's policy
    table (session_core.POLICIES: the one place an API's charging is declared)."""
    from quotagate.proxy import session_core as core

    policy = core.POLICIES.get(api_key, 0)
    keys = []
    if policy & core.CHARGE_BYTES_IN:
        keys.append(QuotaKey.PRODUCER_BYTE_RATE)
    if policy & core.FETCH_WAIT:
        keys.append(QuotaKey.CONSUMER_BYTE_RATE)
    if policy & core.MUTATION:
        keys.append(QuotaKey.CONTROLLER_MUTATION_RATE)
    if not policy & core.EXEMPT:
        keys.append(QuotaKey.REQUEST_PERCENTAGE)
    return tuple(keys)


def add_quota_fields(rows: list[Row], quotas: QuotasInForce | None) -> list[Row]:
    """Adds to each row made by a collector the quota in force at its interval (v2: at its last
    charge) or its time (v1), per charged key, and the windows; null fields when `quotas` is None."""
    cache = QuotaFieldCache(quotas)
    for row in rows:
        at = row.get("last_ms", row["ts"])
        row.update(cache.fields(at, row["user"], row["client_id"], row["api_key"]))
    return rows


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


class RequestBatch:
    """One flush's v1 records: RequestCollector's columns, and what their rows add (the proxy, the
    writer and its first sequence number, the quotas in force). The sinks write them from the
    columns (`json_lines`, `arrow_table`) exactly as they would write the collector's rows
    (RequestCollector.take) with their quota fields, without making them."""

    def __init__(
        self, columns: tuple[list, ...], proxy_id: str, writer: str, first_seq: int, quotas: QuotasInForce | None
    ) -> None:
        self.columns = columns
        self.proxy_id = proxy_id
        self.writer = writer
        self.first_seq = first_seq
        self.quotas = quotas

    def __len__(self) -> int:
        return len(self.columns[0])

    @property
    def times_ms(self) -> list[int]:
        return self.columns[0]

    @property
    def client_ids(self) -> list[str]:
        return self.columns[2]

    def _quota_states(self) -> list[tuple[int, QuotaTable | None, QuotaWindows | None]]:
        return [(0, None, None)] if self.quotas is None else self.quotas.history()

    def json_lines(self) -> list[str]:
        """Each row's JSON text, as the sinks' encoder writes rows() (usage_collectors.request_lines)."""
        states = self._quota_states()

        def quota_suffix(state: int, user: str, client_id: str, api_key: int) -> str:
            _, table, windows = states[state]
            fields = NO_QUOTA_FIELDS if table is None else quota_fields(table, user, client_id, api_key, windows)
            return "," + _json_line(fields)[1:-1]

        since = [state[0] for state in states]
        return request_lines(self.columns, self.proxy_id, self.writer, self.first_seq, since, quota_suffix)

    def arrow_table(self) -> Any:
        """The rows as an Arrow table of the v1 schema, made column by column; the quota fields once
        per (quota state, user, client_id, api_key) and taken from there per row."""
        import pyarrow as pa

        (ts, user, client_id, api_key, api_version, topics, bytes_in, bytes_out, partitions_mutated, latency,
         throttle, decision, _shadow, over_quota) = self.columns  # fmt: skip
        count = len(ts)
        cache = QuotaFieldCache(self.quotas)
        groups: dict[int, int] = {}  # id of a row's quota fields -> their index in `fields`
        fields: list[Row] = []
        group_of_row = []
        for row_ts, row_user, row_client_id, row_api_key in zip(ts, user, client_id, api_key, strict=True):
            found = cache.fields(row_ts, row_user, row_client_id, row_api_key)
            group = groups.get(id(found))
            if group is None:
                group = groups[id(found)] = len(fields)
                fields.append(found)
            group_of_row.append(group)
        schema = _arrow_schema(REQUEST_SCHEMA_VERSION)
        values = {
            "v": [REQUEST_SCHEMA_VERSION] * count,
            "ts": ts,
            "proxy": [self.proxy_id] * count,
            "writer": [self.writer] * count,
            "seq": range(self.first_seq, self.first_seq + count),
            "user": user,
            "client_id": client_id,
            "api_key": api_key,
            "api_version": api_version,
            "topics": topics,
            "bytes_in": bytes_in,
            "bytes_out": bytes_out,
            "partitions_mutated": partitions_mutated,
            "upstream_latency_ms": [round(ms, 3) for ms in latency],
            "throttle_ms": throttle,
            "decision": decision,
            "throttled_bytes": [size if over else 0 for size, over in zip(bytes_in, over_quota, strict=True)],
        }
        rows_group = pa.array(group_of_row, pa.int32())
        arrays = []
        for field in schema:
            if field.name in values:
                arrays.append(pa.array(values[field.name], field.type))
            else:  # a quota field: once per group
                arrays.append(pa.array([found[field.name] for found in fields], field.type).take(rows_group))
        return pa.Table.from_arrays(arrays, schema=schema)


class UsageSink(Protocol):
    async def write(self, rows: list[Row] | RequestBatch) -> None: ...

    async def close(self) -> None: ...


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


class JsonlSink:
    """Appends rows to hourly-partitioned JSONL files, in a worker thread."""

    def __init__(self, directory: str | Path, writer: str, max_file_bytes: int) -> None:
        self.files = RotatingFiles(directory, writer, ".jsonl")
        self.max_file_bytes = max_file_bytes
        self._current: tuple[str, Path] | None = None  # (partition, file)

    async def write(self, rows: list[Row] | RequestBatch) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write_blocking, rows)

    async def close(self) -> None:
        return None

    def _write_blocking(self, rows: list[Row] | RequestBatch) -> None:
        if isinstance(rows, RequestBatch):
            lines, times_ms = rows.json_lines(), rows.times_ms
        else:
            lines, times_ms = [_json_line(row) for row in rows], [row["ts"] for row in rows]
        for partition, partition_lines in by_partition(times_ms, lines).items():
            with self._file_for(partition).open("a", encoding="utf-8") as out:
                out.write("\n".join(partition_lines))  # not + "\n": a second copy of megabytes
                out.write("\n")

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


class ParquetSink:
    """Writes rows to hourly-partitioned Parquet files, one row group per flush, in a worker thread.

    A file is written under a hidden name (`.usage-...parquet.open`, which Spark and pyarrow skip) and
    renamed when closed: at the hour, at max_file_bytes, after max_file_seconds and on shutdown, so
    a reader never sees a file without its footer. A crash loses the file being written."""

    def __init__(self, directory: str | Path, writer: str, max_file_bytes: int, max_file_seconds: float) -> None:
        self.files = RotatingFiles(directory, writer, ".parquet")
        self.max_file_bytes = max_file_bytes
        self.max_file_seconds = max_file_seconds
        self._open: dict[str, tuple[Any, Path, float]] = {}  # partition -> (ParquetWriter, final path, opened)

    async def write(self, rows: list[Row] | RequestBatch) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write_blocking, rows)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close_blocking, list(self._open))

    def _write_blocking(self, rows: list[Row] | RequestBatch) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if isinstance(rows, RequestBatch):
            whole = rows.arrow_table()
            tables = {
                partition: whole if len(indices) == len(whole) else whole.take(indices)
                for partition, indices in by_partition(rows.times_ms, list(range(len(rows)))).items()
            }
        else:
            tables = {
                partition: pa.Table.from_pylist(partition_rows, schema=_arrow_schema(partition_rows[0]["v"]))
                for partition, partition_rows in by_partition([row["ts"] for row in rows], rows).items()
            }
        now = time.monotonic()
        # Close what is old or from another hour before writing (an hour's last flush lands first).
        self._close_blocking(
            [
                partition
                for partition, (_, path, opened) in self._open.items()
                if partition not in tables
                or now - opened >= self.max_file_seconds
                or self._hidden(path).stat().st_size >= self.max_file_bytes
            ]
        )
        for partition, table in tables.items():
            if partition not in self._open:
                path = self.files.new_path(partition)
                self._open[partition] = (pq.ParquetWriter(self._hidden(path), table.schema), path, now)
            self._open[partition][0].write_table(table)

    def _close_blocking(self, partitions: list[str]) -> None:
        for partition in partitions:
            parquet_writer, path, _ = self._open.pop(partition)
            parquet_writer.close()
            self._hidden(path).rename(path)

    @staticmethod
    def _hidden(path: Path) -> Path:
        return path.with_name(f".{path.name}.open")


def _quota_field_type(name: str) -> Any:
    import pyarrow as pa

    if name in QUOTA_VALUE_FIELDS or name.endswith("_seconds"):
        return pa.float64()
    return pa.int32() if name.endswith("_num") else pa.bool_()


def _arrow_schema(version: int) -> Any:
    import pyarrow as pa

    # Who and what, common to both versions (v2 has interval_ms after ts).
    identity = [
        ("proxy", pa.string()),
        ("writer", pa.string()),
        ("seq", pa.int64()),
        ("user", pa.string()),
        ("client_id", pa.string()),
        ("api_key", pa.int32()),
    ]
    head = [("v", pa.int32()), ("ts", pa.int64())]
    if version == AGGREGATE_SCHEMA_VERSION:
        counters = [(name, pa.float64() if name in FLOAT_COUNTERS else pa.int64()) for name in AGGREGATE_COUNTERS]
        fields = [*head, ("interval_ms", pa.int32()), *identity, ("topic", pa.string()), *counters]
    else:
        fields = [
            *head,
            *identity,
            ("api_version", pa.int32()),
            ("topics", pa.list_(pa.string())),
            ("bytes_in", pa.int64()),
            ("bytes_out", pa.int64()),
            ("partitions_mutated", pa.int64()),
            ("upstream_latency_ms", pa.float64()),
            ("throttle_ms", pa.int64()),
            ("decision", pa.string()),
            ("throttled_bytes", pa.int64()),
        ]
    quotas = [(name, _quota_field_type(name)) for name in QUOTA_FIELDS]
    return pa.schema([*fields, *quotas])


class KafkaSink:
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

    async def write(self, rows: list[Row] | RequestBatch) -> None:
        if not self._started:
            try:
                await self._producer.start()
            except Exception as exc:
                raise RuntimeError(
                    f"the usage sink cannot reach {self.where}: {exc!r}; check usage.kafka_bootstrap_servers, "
                    "usage.kafka_security_protocol and the SASL user and password (usage.kafka_sasl_*)"
                ) from exc
            self._started = True
        encoded = await asyncio.get_running_loop().run_in_executor(None, _encode_for_kafka, rows)
        sends = [await self._producer.send(self.topic, value=value, key=key) for key, value in encoded]
        await asyncio.gather(*sends)

    async def close(self) -> None:
        if self._started:
            await self._producer.stop()


def _encode_for_kafka(rows: list[Row] | RequestBatch) -> list[tuple[bytes, bytes]]:
    if isinstance(rows, RequestBatch):
        return [(key.encode(), line.encode()) for key, line in zip(rows.client_ids, rows.json_lines(), strict=True)]
    return [(row["client_id"].encode(), _json_line(row).encode()) for row in rows]


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
            RequestCollector(config.buffer_records)
            if config.records == "request"
            else AggregateCollector(config.buffer_records, config.interval_ms)
        )
        self._seq = 0
        self._failures_logged = 0

    def add(self, record: UsageRecord) -> None:
        """Counts the record in, or counts it as dropped when the collector is full. (The session
        core adds its exchanges to the collector itself, and calls `dropped` when it is full.)"""
        if not self.collector.add(record):
            self.dropped()

    def dropped(self) -> None:
        self.metrics.usage_dropped_total.inc()

    async def run(self) -> None:
        """Flushes every flush_interval_seconds; at shutdown (cancelled), flushes and closes the sink.
        A failure leaves the sink open: the supervisor starts this again and records keep going."""
        try:
            while True:
                await asyncio.sleep(self.config.flush_interval_seconds)
                await self.flush()
        except asyncio.CancelledError:
            await self.flush()
            await self.sink.close()
            raise

    def quotas_changed(self, table: QuotaTable, at_ms: int, windows: QuotaWindows | None = None) -> None:
        """The quotas in force changed (a file reload, AlterClientQuotas): rows from `at_ms` name them."""
        if self.quotas is not None:
            self.quotas.changed(table, at_ms, windows)

    def take_records(self) -> tuple[int, int, Callable[[], list[Row] | RequestBatch]]:
        """Empties the collector: (requests, rows, what makes the records for the sink, to be run
        off the loop). v1 records go as their columns (the sink writes them), v2 as rows."""
        quotas = self.quotas
        first_seq = self._seq
        if isinstance(self.collector, RequestCollector):
            requests = len(self.collector)
            batch = RequestBatch(self.collector.take_columns(), self.proxy_id, self.writer, first_seq, quotas)
            self._seq += requests
            return requests, requests, lambda: batch
        requests, row_count, make_rows = self.collector.take(self.proxy_id, self.writer, first_seq)
        self._seq += row_count
        return requests, row_count, lambda: add_quota_fields(make_rows(), quotas)

    async def flush(self) -> None:
        if self.quotas is not None:  # no row to come is older than a minute (a request's latency)
            self.quotas.forget_before(time.time() * 1000 - QUOTA_HISTORY_MS)
        if not len(self.collector):
            return
        requests, row_count, make_records = self.take_records()
        try:
            records = await asyncio.get_running_loop().run_in_executor(None, make_records)
            await self.sink.write(records)
        except Exception as exc:  # a failing sink must not take the proxy down
            self.metrics.usage_dropped_total.inc(requests)
            if self._failures_logged < 10:  # do not flood the log while the sink stays down
                self._failures_logged += 1
                log.warning("usage sink failed, %d records dropped: %s", requests, exc)
            return
        self.metrics.usage_written_total.inc(row_count)


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
