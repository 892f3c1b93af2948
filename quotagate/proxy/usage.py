"""Usage records: one per request, batched off the hot path to JSONL files or a Kafka topic.

The hot path only appends a tuple to a bounded buffer (or counts a drop when it is full). A
background task flushes the buffer every `flush_interval_seconds`: JSON encoding and file writes
run in a worker thread, Kafka sends through aiokafka. A slow or failing sink never slows
forwarding: while a flush is under way the buffer fills, and what does not fit is dropped and
counted in quotagate_usage_records_dropped_total. Memory is bounded by `buffer_records`.

Schema: docs/usage-records.md (version USAGE_SCHEMA_VERSION). Files are partitioned as
DIRECTORY/date=YYYY-MM-DD/hour=HH/usage-<proxy>-<pid>-<n>.jsonl (UTC), rotated every hour and at
`max_file_bytes`, which is the layout Spark reads as partition columns.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from quotagate.config.settings import UsageConfig
    from quotagate.proxy.metrics import ProxyMetrics

log = logging.getLogger("quotagate.usage")

USAGE_SCHEMA_VERSION = 1


class UsageRecord(NamedTuple):
    ts_ms: int  # wall-clock time of the response (of the request when none comes), epoch ms
    user: str
    client_id: str
    api_key: int
    api_version: int
    topics: tuple[str, ...]  # where cheap: produce and topic mutations
    bytes_in: int  # request size
    bytes_out: int  # response size (0 when none)
    partitions_mutated: int
    upstream_latency_ms: float  # −1 when the proxy answered itself
    throttle_ms: int
    decision: str  # ok | throttled | refused | partially_refused
    shadow_throttle_ms: int = 0  # the throttle shadow quotas would have added (never applied)


def record_to_json(record: UsageRecord, proxy_id: str) -> dict[str, Any]:
    return {
        "v": USAGE_SCHEMA_VERSION,
        "ts": record.ts_ms,
        "proxy": proxy_id,
        "user": record.user,
        "client_id": record.client_id,
        "api_key": record.api_key,
        "api_version": record.api_version,
        "topics": list(record.topics),
        "bytes_in": record.bytes_in,
        "bytes_out": record.bytes_out,
        "partitions_mutated": record.partitions_mutated,
        "upstream_latency_ms": round(record.upstream_latency_ms, 3),
        "throttle_ms": record.throttle_ms,
        "decision": record.decision,
        "shadow_throttle_ms": record.shadow_throttle_ms,
    }


class UsageSink(Protocol):
    async def write(self, records: list[UsageRecord]) -> None: ...

    async def close(self) -> None: ...


class JsonlSink:
    """Appends records to hourly-partitioned JSONL files; encoding and I/O run in a worker thread."""

    def __init__(self, directory: str | Path, proxy_id: str, max_file_bytes: int) -> None:
        self.directory = Path(directory)
        self.proxy_id = proxy_id
        self.max_file_bytes = max_file_bytes
        self._sequence = 0
        self._current: tuple[str, Path] | None = None  # (partition, file)

    async def write(self, records: list[UsageRecord]) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._write_blocking, records)

    async def close(self) -> None:
        return None

    def _write_blocking(self, records: list[UsageRecord]) -> None:
        by_partition: dict[str, list[str]] = {}
        for record in records:
            partition = time.strftime("date=%Y-%m-%d/hour=%H", time.gmtime(record.ts_ms / 1000))
            line = json.dumps(record_to_json(record, self.proxy_id), separators=(",", ":"))
            by_partition.setdefault(partition, []).append(line)
        for partition, lines in by_partition.items():
            path = self._file_for(partition)
            with path.open("a", encoding="utf-8") as out:
                out.write("\n".join(lines) + "\n")

    def _file_for(self, partition: str) -> Path:
        current = self._current
        if current is not None and current[0] == partition:
            try:
                if current[1].stat().st_size < self.max_file_bytes:
                    return current[1]
            except FileNotFoundError:
                pass
        folder = self.directory / partition
        folder.mkdir(parents=True, exist_ok=True)
        self._sequence += 1
        path = folder / f"usage-{self.proxy_id}-{os.getpid()}-{self._sequence:06d}.jsonl"
        self._current = (partition, path)
        return path


class KafkaSink:
    """Sends records as JSON to a Kafka topic (directly to the cluster, not through the proxy)."""

    def __init__(self, bootstrap_servers: list[str], topic: str, proxy_id: str) -> None:
        try:
            from aiokafka import AIOKafkaProducer
        except ImportError as exc:  # an optional dependency
            raise RuntimeError("usage.sink = \"kafka\" needs aiokafka: pip install 'quotagate[kafka-sink]'") from exc
        self.topic = topic
        self.proxy_id = proxy_id
        self._producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap_servers, client_id=f"quotagate-usage-{proxy_id}", linger_ms=50
        )
        self._started = False

    async def write(self, records: list[UsageRecord]) -> None:
        if not self._started:
            await self._producer.start()
            self._started = True
        sends = [
            await self._producer.send(
                self.topic,
                value=json.dumps(record_to_json(r, self.proxy_id), separators=(",", ":")).encode(),
                key=r.client_id.encode(),
            )
            for r in records
        ]
        await asyncio.gather(*sends)

    async def close(self) -> None:
        if self._started:
            await self._producer.stop()


class UsageRecorder:
    def __init__(self, config: UsageConfig, metrics: ProxyMetrics, sink: UsageSink) -> None:
        self.config = config
        self.metrics = metrics
        self.sink = sink
        self.buffer: deque[UsageRecord] = deque()
        self._failures_logged = 0

    def add(self, record: UsageRecord) -> None:
        """Hot path: keep the record if there is room, else count it as dropped."""
        if len(self.buffer) >= self.config.buffer_records:
            self.metrics.usage_dropped_total.inc()
            return
        self.buffer.append(record)

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.config.flush_interval_seconds)
                await self.flush()
        finally:
            await self.flush()
            await self.sink.close()

    async def flush(self) -> None:
        if not self.buffer:
            return
        batch = list(self.buffer)
        self.buffer.clear()
        try:
            await self.sink.write(batch)
        except Exception as exc:  # a failing sink must not take the proxy down
            self.metrics.usage_dropped_total.inc(len(batch))
            if self._failures_logged < 10:  # do not flood the log while the sink stays down
                self._failures_logged += 1
                log.warning("usage sink failed, %d records dropped: %s", len(batch), exc)
            return
        self.metrics.usage_written_total.inc(len(batch))


def make_sink(config: UsageConfig, proxy_id: str, default_bootstrap: list[str]) -> UsageSink:
    if config.sink == "kafka":
        return KafkaSink(config.kafka_bootstrap_servers or default_bootstrap, config.kafka_topic, proxy_id)
    return JsonlSink(config.directory, proxy_id, config.max_file_bytes)
