"""Usage records for the tests of the usage recorder and its sinks."""

from __future__ import annotations

from quotagate.proxy.usage import (
    AggregateBatch,
    AggregateCollector,
    QuotasInForce,
    RequestBatch,
    RequestCollector,
    UsageRecord,
)


def record(ts_ms: int, client_id: str = "c") -> UsageRecord:
    return UsageRecord(ts_ms, "alice", client_id, 0, 9, ("orders",), 1200, 60, 0, 1.5, 0, "ok")


def flushed(
    collector: RequestCollector | AggregateCollector,
    quotas: QuotasInForce | None = None,
    proxy_id: str = "p",
    writer: str = "p-1-1",
    first_seq: int = 0,
) -> tuple[int, RequestBatch | AggregateBatch]:
    """Empties the collector as the recorder's flush does: (requests, the batch the sinks write)."""
    if isinstance(collector, RequestCollector):
        requests = len(collector)
        return requests, RequestBatch(collector.take_columns(), proxy_id, writer, first_seq, quotas)
    requests, items = collector.take_aggregates()
    return requests, AggregateBatch(items, collector.interval_ms, proxy_id, writer, first_seq, quotas)


def flushed_rows(collector: RequestCollector | AggregateCollector, *args, **kwargs) -> list[dict]:
    """The rows (dicts of every field of the version, quota fields included) of `flushed`'s batch."""
    return flushed(collector, *args, **kwargs)[1].rows()
