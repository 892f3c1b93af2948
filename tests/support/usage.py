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
from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.tenants import Tenant, Tenants

START_MS = 1_700_000_000_000  # 22:13:20 UTC
PROXY, WRITER, FIRST_SEQ = "proxy-1", "proxy-1-7-1", 5


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


def records() -> list[UsageRecord]:
    """Requests that fill every field with something a format could get wrong: a name to escape,
    non-ASCII, an empty topic list and two topics, −1 and fractional latencies, throttles, refusals,
    shadow throttles, over-quota produces, a mutation, a fetch; two on one v2 key (summed)."""
    at = START_MS
    return [
        UsageRecord(at + 10, "alice", "app", 0, 9, ("orders",), 1000, 60, 0, 2.5, 0, "ok", 0, False),
        UsageRecord(at + 500, "alice", "app", 0, 9, ("orders",), 3000, 60, 0, 1.25, 40, "throttled", 120, True),
        UsageRecord(at + 1200, 'q"uote\\d', "ünï ✓", 1, 12, (), 90, 52_000, 0, 333.3337, 0, "ok", 0, False),
        UsageRecord(at + 2100, "bob", "", 19, 7, ("t1", "t2"), 700, 40, 6, 12.0, 0, "partially_refused", 0, False),
        UsageRecord(at + 3000, "bob", "admin", 49, 1, (), 50, 30, 0, -1.0, 0, "refused", 0, False),
    ]


def quotas() -> QuotasInForce:
    alice, everyone = QuotaEntity("alice", None), QuotaEntity(None, "<default>")
    in_force = QuotasInForce(QuotaTable({alice: {QuotaKey.PRODUCER_BYTE_RATE: 300_000}}))
    table = QuotaTable(
        {alice: {QuotaKey.PRODUCER_BYTE_RATE: 250_000.5}, everyone: {QuotaKey.REQUEST_PERCENTAGE: 50}},
        frozenset({everyone}),
        Tenants((Tenant("team", users=("bob",), quotas={QuotaKey.REQUEST_PERCENTAGE: 80}),)),  # bob's rows
    )
    in_force.changed(table, START_MS + 1500, QuotaWindows(quota_window_num=5))
    return in_force
