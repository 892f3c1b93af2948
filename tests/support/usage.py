"""Usage records for the tests of the usage recorder and its sinks."""

from __future__ import annotations

from quotagate.proxy.usage import UsageRecord


def record(ts_ms: int, client_id: str = "c") -> UsageRecord:
    return UsageRecord(ts_ms, "alice", client_id, 0, 9, ("orders",), 1200, 60, 0, 1.5, 0, "ok")
