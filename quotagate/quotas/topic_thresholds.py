"""Per-topic bytes-in thresholds (seed 002, the first broker-side quota design).

A total threshold T for all produced bytes, and per-topic thresholds for some topics; the sum of
the explicit ones may not exceed T. Every other topic gets an equal share of what is left:
(T − Σ explicit) / (number of topics without one), counted over the topics seen producing recently.
A produce to a topic is refused only when BOTH the total and that topic are over their thresholds,
so a busy topic is only held back when the cluster as a whole is busy too.

Rates are token buckets like every other quota here (rate = threshold, burst = threshold × the
quota window span); "over" means the bucket is in debt. Only accepted bytes are recorded: what is
refused never reaches the log and must not count against anyone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from quotagate.quotas.engine import Bucket, BucketFactory, local_bucket

# A topic that has not produced for this long no longer takes a share of the remainder.
ACTIVE_TOPIC_SECONDS = 60.0


@dataclass(frozen=True)
class TopicThresholds:
    total_bytes_in_per_sec: int = field(
        metadata={"doc": "Threshold for all produced bytes per second, every topic together. Required."}
    )
    topics: Mapping[str, int] = field(
        default_factory=dict,
        metadata={
            "doc": "[topic_thresholds.topics]: topic = bytes per second, adding up to at most the total. "
            'Every other topic gets an equal share of what is left. Quote names with dots: "orders.v1" = 1000.',
            "type": "table of topic = integer",
        },
    )


class TopicThresholdGuard:
    def __init__(
        self, thresholds: TopicThresholds | None, burst_seconds: float, bucket_factory: BucketFactory = local_bucket
    ) -> None:
        self.bucket_factory = bucket_factory
        self.thresholds = thresholds
        self.burst_seconds = burst_seconds
        self._total: Bucket | None = None
        self._topics: dict[str, Bucket] = {}
        self._last_seen: dict[str, float] = {}

    def __bool__(self) -> bool:
        return self.thresholds is not None

    def update(self, thresholds: TopicThresholds | None, burst_seconds: float, now: float) -> None:
        """New thresholds apply live; the buckets keep what they have used."""
        self.thresholds = thresholds
        self.burst_seconds = burst_seconds
        if thresholds is None:
            self._total = None
            self._topics.clear()
            return
        self._bucket_for_total(now)
        for topic in list(self._topics):
            self._bucket_for_topic(topic, now)

    def threshold(self, topic: str, now: float) -> float:
        """The topic's threshold in bytes/s: its own, or its share of the remainder."""
        assert self.thresholds is not None
        explicit = self.thresholds.topics.get(topic)
        if explicit is not None:
            return float(explicit)
        active = {t for t, seen in self._last_seen.items() if now - seen < ACTIVE_TOPIC_SECONDS}
        active.add(topic)
        sharing = sum(1 for t in active if t not in self.thresholds.topics)
        remainder = self.thresholds.total_bytes_in_per_sec - sum(self.thresholds.topics.values())
        # Explicit thresholds may take all of the total; a topic without one then gets a token rate.
        return max(remainder / sharing, 1.0)

    def refused(self, topics: Iterable[str], now: float) -> set[str]:
        """The topics of a produce request that must be refused now."""
        total = self._bucket_for_total(now)
        total.refill(now)
        if total.tokens >= 0:
            return set()
        refused = set()
        for topic in topics:
            bucket = self._bucket_for_topic(topic, now)
            bucket.refill(now)
            if bucket.tokens < 0:
                refused.add(topic)
        return refused

    def retry_after_ms(self, topics: Iterable[str], now: float) -> int:
        """How long until one of the refused `topics` would be accepted again: a topic is accepted
        once either the total or its own bucket is out of debt. The proxy sends this as the
        refusal's throttle_time_ms and mutes the client for it, so a refused client backs off
        instead of retrying in a tight loop."""
        total = self._bucket_for_total(now)
        waits = [min(total.throttle_ms(now), self._bucket_for_topic(t, now).throttle_ms(now)) for t in topics]
        return min(waits, default=0)

    def record(self, topic_bytes: Mapping[str, int], now: float) -> None:
        """Counts bytes that were accepted, per topic."""
        total = self._bucket_for_total(now)
        for topic, size in topic_bytes.items():
            self._last_seen[topic] = now
            self._bucket_for_topic(topic, now).record(size, now)
            total.record(size, now)
        if len(self._last_seen) > 10_000:  # forget topics idle for long
            for topic in [t for t, seen in self._last_seen.items() if now - seen >= ACTIVE_TOPIC_SECONDS]:
                del self._last_seen[topic]
                self._topics.pop(topic, None)

    def _bucket_for_total(self, now: float) -> Bucket:
        assert self.thresholds is not None
        rate = float(self.thresholds.total_bytes_in_per_sec)
        if self._total is None:
            self._total = self.bucket_factory(("topic_total",), rate, rate * self.burst_seconds, now)
        elif self._total.rate != rate:
            self._total.reconfigure(rate, rate * self.burst_seconds, now)
        return self._total

    def _bucket_for_topic(self, topic: str, now: float) -> Bucket:
        rate = self.threshold(topic, now)
        bucket = self._topics.get(topic)
        if bucket is None:
            bucket = self._topics[topic] = self.bucket_factory(("topic", topic), rate, rate * self.burst_seconds, now)
        elif bucket.rate != rate:
            bucket.reconfigure(rate, rate * self.burst_seconds, now)
        return bucket
