"""Kafka's sampled-rate quota rule (ClientQuotaManager), for comparison with the token bucket.

Kafka measures a rate over `samples` windows of `window_seconds` (quota.window.num = 11,
quota.window.size.seconds = 1) and throttles by throttle = (O − T) / T × W, where O is the
observed rate, T the quota and W the measured span (at least samples − 1 windows). Its flaw, the
seeds' argument for token buckets: one burst keeps O high until its window leaves the span, so a
client is throttled for up to samples × window seconds after a burst it has already paid for.
Pure: the caller passes the time.
"""

from __future__ import annotations

from collections.abc import Sequence


class SampledRate:
    def __init__(self, quota: float, samples: int = 11, window_seconds: float = 1.0) -> None:
        self.quota = quota
        self.samples = samples
        self.window = window_seconds
        # the windows still in the span after the last record: their starts and totals
        self._starts: list[float] = []
        self._totals: list[float] = []

    def record(self, amount: float, now: float) -> int:
        """Records `amount` at `now`; returns Kafka's throttle time in ms."""
        return self.record_all([amount], [now])[0]

    def record_all(self, amounts: Sequence[float], times: Sequence[float]) -> list[int]:
        """Records each amount at its time (in time order); returns Kafka's throttle (ms) after each.

        Vectorised, as the what-if replay runs it over millions of requests: after a record, the
        span starts at the oldest window holding a record that is at most samples − 1 windows
        before the record's own, and holds every record from there up to it (a cumulative sum)."""
        import numpy as np  # the pipeline's dependency (the proxy never records in bulk)

        window, samples, quota = self.window, self.samples, self.quota
        times_s = np.asarray(times, dtype=float)
        if not len(times_s):
            return []
        starts = times_s - times_s % window
        # the windows kept from earlier calls come first, each as one record of its total
        kept = len(self._starts)
        all_starts = np.concatenate([np.asarray(self._starts, dtype=float), starts])
        all_amounts = np.concatenate([np.asarray(self._totals, dtype=float), np.asarray(amounts, dtype=float)])
        summed = np.cumsum(all_amounts)
        oldest = np.searchsorted(all_starts, starts - (samples - 1) * window, side="left")
        total = summed[kept:] - np.where(oldest > 0, summed[oldest - 1], 0.0)
        # Rate.windowSize: the elapsed span, padded to samples − 1 whole windows, at least 1 ms
        span = times_s - all_starts[oldest]
        full_windows = span // window
        padded = np.where(full_windows < samples - 1, span + (samples - 1 - full_windows) * window, span)
        span = np.maximum(padded, 0.001)
        observed = total / span
        throttles = np.where(observed <= quota, 0.0, (observed - quota) / quota * span * 1000).astype(np.int64)
        in_span = all_starts[oldest[-1] :]
        first_of_each = np.flatnonzero(np.r_[True, in_span[1:] != in_span[:-1]])
        self._starts = in_span[first_of_each].tolist()
        self._totals = np.add.reduceat(all_amounts[oldest[-1] :], first_of_each).tolist()
        return throttles.tolist()
