"""Prometheus metrics of the proxy itself (connections, requests, bytes).

Label children are created once and cached, so counting a request costs one dict lookup and one
increment on the hot path.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Upstream service times on loopback are ~0.2-2 ms; long polls reach the fetch max wait (500 ms).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.connections = Gauge(
            "quotagate_client_connections_open", "Client connections open now", ["listener"], registry=self.registry
        )
        self.connections_total = Counter(
            "quotagate_client_connections", "Client connections accepted", ["listener"], registry=self.registry
        )
        self.requests_total = Counter(
            "quotagate_requests", "Requests forwarded, by Kafka API key", ["api_key"], registry=self.registry
        )
        self.bytes_total = Counter(
            "quotagate_bytes",
            "Bytes forwarded: in = client to broker, out = broker to client",
            ["direction"],
            registry=self.registry,
        )
        self.protocol_errors_total = Counter(
            "quotagate_protocol_errors",
            "Connections closed because a peer sent bytes that are not valid Kafka",
            ["side"],
            registry=self.registry,
        )
        self.upstream_connect_failures_total = Counter(
            "quotagate_upstream_connect_failures", "Failed connections to brokers", registry=self.registry
        )
        self.mutes_total = Counter(
            "quotagate_client_mutes",
            "Times a client connection was muted (reading paused) for a quota",
            registry=self.registry,
        )
        self.topic_refusals_total = Counter(
            "quotagate_topic_threshold_refusals",
            "Topics refused from produce requests by per-topic bytes-in thresholds",
            registry=self.registry,
        )
        self.mutation_refusals_total = Counter(
            "quotagate_mutation_refusals",
            "Topics answered THROTTLING_QUOTA_EXCEEDED by the controller mutation quota (strict mode)",
            registry=self.registry,
        )
        self.config_reloads_total = Counter(
            "quotagate_config_reloads", "Configuration reloads, by result", ["result"], registry=self.registry
        )
        self.upstream_latency = Histogram(
            "quotagate_upstream_latency_seconds",
            "Time from forwarding a request to receiving its response, by Kafka API key",
            ["api_key"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.delay_queue_size = Gauge(
            "quotagate_delay_queue_size", "Connections waiting in the delay queue to be unmuted", registry=self.registry
        )
        self.muted_connections = Gauge(
            "quotagate_muted_connections", "Client connections muted for a quota now", registry=self.registry
        )
        self.upstream_up = Gauge(
            "quotagate_upstream_up",
            "1 if the proxy's last metadata refresh reached a broker, else 0",
            registry=self.registry,
        )
        self.usage_written_total = Counter(
            "quotagate_usage_records_written", "Usage records written to the sink", registry=self.registry
        )
        self.usage_dropped_total = Counter(
            "quotagate_usage_records_dropped",
            "Usage records dropped because the buffer was full or the sink failed",
            registry=self.registry,
        )
        # Series that alerts take increase() of exist from the start, so the first event counts.
        for result in ("applied", "rejected"):
            self.config_reloads_total.labels(result)
        for side in ("client", "broker"):
            self.protocol_errors_total.labels(side)
        self.bytes_in = self.bytes_total.labels("in")
        self.bytes_out = self.bytes_total.labels("out")
        self._requests_by_key: dict[int, Counter] = {}
        self._latency_by_key: dict[int, Histogram] = {}

    def count_request(self, api_key: int) -> None:
        child = self._requests_by_key.get(api_key)
        if child is None:
            child = self._requests_by_key[api_key] = self.requests_total.labels(str(api_key))
        child.inc()

    def observe_latency(self, api_key: int, seconds: float) -> None:
        child = self._latency_by_key.get(api_key)
        if child is None:
            child = self._latency_by_key[api_key] = self.upstream_latency.labels(str(api_key))
        child.observe(seconds)
