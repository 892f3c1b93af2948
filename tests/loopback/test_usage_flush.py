"""A usage flush under way when the proxy shuts down ends before the last flush starts: one write at a
time, so that the sink's files are never written by two threads and every request is counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from quotagate.config.settings import UsageConfig
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.usage import SLICE_ROWS, ParquetSink, UsageRecorder
from tests.support.usage import record

NOW_MS = 1_700_000_000_000


async def test_a_shutdown_during_a_flush_lets_it_end_before_the_last_flush(tmp_path: Path) -> None:
    metrics = ProxyMetrics(CollectorRegistry())
    recorder = UsageRecorder(
        UsageConfig(enabled=True, records="request", flush_interval_seconds=0.001),
        metrics,
        ParquetSink(tmp_path, "p-1-1", 1 << 26, 60.0),
        "p",
        "p-1-1",
    )
    for i in range(SLICE_ROWS * 3):
        recorder.add(record(NOW_MS + i))
    task = asyncio.ensure_future(recorder.run())
    while recorder._flushing is None:
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert metrics.registry.get_sample_value("quotagate_usage_records_written_total") == SLICE_ROWS * 3
    assert [p.name for p in tmp_path.rglob(".*") if p.is_file()] == []
