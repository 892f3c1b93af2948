"""A lone proxy process's quota buckets' levels, kept beside the state file so that a restart does
not forgive debts: restored at start, saved every LEVELS_SAVE_SECONDS and at stop, never per request.
(Buckets shared by several processes live in Redis, or hold 1/N each: they have no levels here.)

A file that cannot be read is forgiven as a lost one (every bucket starts full), logged and counted
in quotagate_bucket_levels_resets_total: never a failed start. A save that fails is logged; the next
one tries again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

from quotagate.config.quota_state import load_levels, save_levels
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.quotas import QuotaEngine

log = logging.getLogger("quotagate.proxy")

LEVELS_SAVE_SECONDS = 5.0  # a crash (no SIGTERM) forgives at most this much use


class BucketLevelStore:
    def __init__(self, path: Path, engine: QuotaEngine, metrics: ProxyMetrics, clock: Callable[[], float]) -> None:
        """`clock`: the engine's (the loop's time)."""
        self.path = path
        self.engine = engine
        self.metrics = metrics
        self.clock = clock
        self._saved = path.exists()  # a file is there to replace, even with no level to keep

    def restore(self) -> None:
        """Puts back the buckets' levels saved by the last process."""
        try:
            levels, saved_at = load_levels(self.path)
        except (OSError, ValueError) as exc:
            self.metrics.bucket_levels_resets_total.inc()
            log.warning("bucket levels not restored from %s, every bucket starts full: %s", self.path, exc)
            return
        if levels:
            elapsed = time.time() - saved_at
            restored = self.engine.restore(levels, elapsed, self.clock())
            log.info("restored %d of %d bucket levels saved %.0f s ago", restored, len(levels), elapsed)

    def save(self) -> None:
        """Writes the local buckets' levels (QuotaEngine.levels) for the next start; a failure is logged."""
        levels = self.engine.levels(self.clock())
        if not levels and not self._saved:
            return  # nothing to keep, and nothing kept to replace
        try:
            save_levels(self.path, levels, time.time())
        except OSError as exc:
            log.error("bucket levels not saved to %s: %s", self.path, exc)
            return
        self._saved = bool(levels)

    async def save_periodically(self) -> None:
        while True:
            await asyncio.sleep(LEVELS_SAVE_SECONDS)
            self.save()
