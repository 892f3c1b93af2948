"""Kafka's sampled-rate quota rule (ClientQuotaManager), for comparison with the token bucket.

Kafka measures a rate over `samples` windows of `window_seconds` (quota.window.num = 11,
quota.window.size.seconds = 1) and throttles by throttle = (O − T) / T × W, where O is the
observed rate, T the quota and W the measured span (at least samples − 1 windows). Its flaw, the
seeds' argument for token buckets: one burst keeps O high until its window leaves the span, so a
client is throttled for up to samples × window seconds after a burst it has already paid for.
Pure: the caller passes the time.
"""

from __future__ import annotations

from collections import deque


class SampledRate:
    def __init__(self, quota: float, samples: int = 11, window_seconds: float = 1.0) -> None:
        self.quota = quota
        self.samples = samples
        self.window = window_seconds
        self._windows: deque[list[float]] = deque()  # [start, total]
        self._total = 0.0

    def record(self, amount: float, now: float) -> int:
        """Records `amount` at `now`; returns Kafka's throttle time in ms."""
        return self.record_all([amount], [now])[0]

    def record_all(self, amounts: list[float], times: list[float]) -> list[int]:
        """Records each amount at its time (in time order); returns Kafka's throttle (ms) after each.
        One loop with its state in locals: the what-if replay runs it over millions of requests."""
        window, samples, quota = self.window, self.samples, self.quota
        windows = self._windows
        total = self._total
        kept_span = (samples - 1) * window
        throttles = []
        for amount, now in zip(amounts, times, strict=True):
            start = now - now % window
            if windows and windows[-1][0] == start:
                windows[-1][1] += amount
            else:
                windows.append([start, amount])
            total += amount
            oldest_kept = start - kept_span
            while windows[0][0] < oldest_kept:
                total -= windows.popleft()[1]
            # Rate.windowSize: the elapsed span, padded to samples − 1 whole windows, at least 1 ms
            span = now - windows[0][0]
            full_windows = int(span // window)
            if full_windows < samples - 1:
                span += (samples - 1 - full_windows) * window
            span = max(span, 0.001)
            observed = total / span
            throttles.append(0 if observed <= quota else int((observed - quota) / quota * span * 1000))
        self._total = total
        return throttles
