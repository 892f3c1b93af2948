"""Usage records, collected off the hot path and written to Parquet or JSONL files or a Kafka topic.

Two kinds of record (schema: docs/usage-records.md):
- v2, the default: one aggregate per interval (1 s by default) per (user, client_id, api_key) and,
  for produce, per topic. The hot path updates one list in a dict per request (per topic for a
  multi-topic produce): no encoding, no I/O, no allocation once the key exists.
- v1: one record per request, for debugging (`records = "request"`). The hot path appends a tuple.

A background task takes what was collected every `flush_interval_seconds` and hands it to the sink:
turning it into rows, encoding (JSON or Arrow) and file writes run in a worker thread, Kafka sends
through aiokafka. A slow or failing sink never slows forwarding: while a flush is under way
collection goes on, and what does not fit (`buffer_records` records, or distinct aggregate keys) is
dropped and counted in quotagate_usage_records_dropped_total.

Files are partitioned as DIRECTORY/date=YYYY-MM-DD/hour=HH/usage-<writer>-<n>.{parquet,jsonl} (UTC),
the layout Spark reads as partition columns. Every row carries its writer (proxy, pid, start time)
and a sequence number, which the pipeline's ingest deduplicates on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import ssl
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from quotagate import compiled

if TYPE_CHECKING:
    from quotagate.config.settings import UsageConfig
    from quotagate.proxy.metrics import ProxyMetrics

log = logging.getLogger("quotagate.usage")

# json.dumps with separators makes an encoder per call; this one is made once.
_json_line = json.JSONEncoder(separators=(",", ":")).encode

_collectors = compiled.load("quotagate.proxy.usage_collectors")
UsageRecord = _collectors.UsageRecord
RequestCollector = _collectors.RequestCollector
AggregateCollector = _collectors.AggregateCollector
request_row = _collectors.request_row
Row = _collectors.Row
REQUEST_SCHEMA_VERSION = _collectors.REQUEST_SCHEMA_VERSION
AGGREGATE_SCHEMA_VERSION = _collectors.AGGREGATE_SCHEMA_VERSION
AGGREGATE_COUNTERS = _collectors.AGGREGATE_COUNTERS
FLOAT_COUNTERS = _collectors.FLOAT_COUNTERS


def partition_of(ts_ms: int) -> str:
    return time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(ts_ms / 1000))


class UsageSink(Protocol):
    async def write(self, rows: list[Row]) -> None: ...

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

    async def write(self, rows: list[Row]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write_blocking, rows)

    async def close(self) -> None:
        return None

    def _write_blocking(self, rows: list[Row]) -> None:
        by_partition: dict[str, list[str]] = {}
        hours: dict[int, str] = {}  # hour -> its partition: strftime once per hour, not per row
        for row in rows:
            hour = row["ts"] // 3_600_000
            partition = hours.get(hour)
            if partition is None:
                partition = hours[hour] = partition_of(row["ts"])
            by_partition.setdefault(partition, []).append(_json_line(row))
        for partition, lines in by_partition.items():
            with self._file_for(partition).open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")

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

    async def write(self, rows: list[Row]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write_blocking, rows)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._close_blocking, list(self._open))

    def _write_blocking(self, rows: list[Row]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        by_partition: dict[str, list[Row]] = {}
        for row in rows:
            by_partition.setdefault(partition_of(row["ts"]), []).append(row)
        now = time.monotonic()
        # Close what is old or from another hour before writing (an hour's last flush lands first).
        self._close_blocking(
            [
                partition
                for partition, (_, path, opened) in self._open.items()
                if partition not in by_partition
                or now - opened >= self.max_file_seconds
                or self._hidden(path).stat().st_size >= self.max_file_bytes
            ]
        )
        for partition, partition_rows in by_partition.items():
            table = pa.Table.from_pylist(partition_rows, schema=_arrow_schema(partition_rows[0]["v"]))
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
    return pa.schema(fields)


class KafkaSink:
    """Sends rows as JSON to a Kafka topic (directly to the cluster, not through the proxy)."""

    def __init__(
        self, bootstrap_servers: list[str], topic: str, writer: str, ssl_context: ssl.SSLContext | None = None
    ) -> None:
        try:
            from aiokafka import AIOKafkaProducer
        except ImportError as exc:  # an optional dependency
            raise RuntimeError("usage.sink = \"kafka\" needs aiokafka: pip install 'quotagate[kafka-sink]'") from exc
        self.topic = topic
        # TLS as the proxy's own connections to the brokers ([upstream.tls]): same CAs, same client
        # certificate, so a cluster reachable only over SSL takes the usage records too.
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers,
            client_id=f"quotagate-usage-{writer}",
            linger_ms=50,
            security_protocol="SSL" if ssl_context is not None else "PLAINTEXT",
            ssl_context=ssl_context,
        )
        self._started = False

    async def write(self, rows: list[Row]) -> None:
        if not self._started:
            await self._producer.start()
            self._started = True
        encoded = await asyncio.get_running_loop().run_in_executor(None, _encode_for_kafka, rows)
        sends = [await self._producer.send(self.topic, value=value, key=key) for key, value in encoded]
        await asyncio.gather(*sends)

    async def close(self) -> None:
        if self._started:
            await self._producer.stop()


def _encode_for_kafka(rows: list[Row]) -> list[tuple[bytes, bytes]]:
    return [(row["client_id"].encode(), json.dumps(row, separators=(",", ":")).encode()) for row in rows]


class UsageRecorder:
    def __init__(
        self, config: UsageConfig, metrics: ProxyMetrics, sink: UsageSink, proxy_id: str = "", writer: str = ""
    ) -> None:
        self.config = config
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

    async def flush(self) -> None:
        if not len(self.collector):
            return
        requests, row_count, make_rows = self.collector.take(self.proxy_id, self.writer, self._seq)
        self._seq += row_count
        try:
            rows = await asyncio.get_running_loop().run_in_executor(None, make_rows)
            await self.sink.write(rows)
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


def make_sink(
    config: UsageConfig, writer: str, default_bootstrap: list[str], ssl_context: ssl.SSLContext | None = None
) -> UsageSink:
    if config.sink == "kafka":
        return KafkaSink(config.kafka_bootstrap_servers or default_bootstrap, config.kafka_topic, writer, ssl_context)
    if config.sink == "jsonl":
        return JsonlSink(config.directory, writer, config.max_file_bytes)
    return ParquetSink(config.directory, writer, config.max_file_bytes, config.max_file_seconds)
