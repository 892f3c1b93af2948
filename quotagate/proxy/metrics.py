"""Prometheus metrics of the proxy itself (connections, requests, bytes).

Label children are created once and cached, so counting a request costs one dict lookup and one
increment on the hot path.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


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
        self.bytes_in = self.bytes_total.labels("in")
        self.bytes_out = self.bytes_total.labels("out")
        self._requests_by_key: dict[int, Counter] = {}

    def count_request(self, api_key: int) -> None:
        child = self._requests_by_key.get(api_key)
        if child is None:
            child = self._requests_by_key[api_key] = self.requests_total.labels(str(api_key))
        child.inc()
