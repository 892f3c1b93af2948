"""Prometheus metrics of the proxy itself (connections, requests, bytes).

What is counted per request or per read (requests by API, bytes, upstream latency) is kept in the
session core's `ExchangeCounters` (C fields and arrays, compiled) and turned into metric families
only when scraped, like the per-entity metrics: the event loop is the only writer, so the hot path
takes no lock and makes no prometheus_client call. The rarer events use prometheus_client's own counters.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

from quotagate import compiled
from quotagate.protocol.apis import api_key_label
from quotagate.protocol.limits import DECODED_ELEMENTS_KEY

# Upstream service times on loopback are ~0.2-2 ms; long polls reach the fetch max wait (500 ms).
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# Why a client's frame closed its connection (quotagate_frames_refused_total's reasons: the settings).
SASL_RECEIVE_LIMIT = "sasl_server_max_receive_size"
PARTIAL_FRAMES_LIMIT = "partial_frames_max_bytes"
PARTIAL_FRAME_SHARE = "partial_frames_max_bytes_per_connection"
BEFORE_AUTHENTICATION = "before_sasl_authentication"
DECODED_ELEMENTS_LIMIT = DECODED_ELEMENTS_KEY
REFUSAL_REASONS = (
    SASL_RECEIVE_LIMIT,
    PARTIAL_FRAMES_LIMIT,
    PARTIAL_FRAME_SHARE,
    BEFORE_AUTHENTICATION,
    DECODED_ELEMENTS_LIMIT,
)


class ProxyMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.connections = Gauge(
            "quotagate_client_connections_open", "Client connections open now", ["listener"], registry=self.registry
        )
        self.connections_total = Counter(
            "quotagate_client_connections", "Client connections accepted", ["listener"], registry=self.registry
        )
        self.protocol_errors_total = Counter(
            "quotagate_protocol_errors",
            "Connections closed because a peer sent bytes that are not valid Kafka",
            ["side"],
            registry=self.registry,
        )
        self.connections_refused_total = Counter(
            "quotagate_connections_refused",
            "Client connections closed at accept by a connection limit, by the limit",
            ["reason"],
            registry=self.registry,
        )
        self.connections_delayed_total = Counter(
            "quotagate_connections_delayed",
            "Client connections held unread for a while by max_connection_creation_rate",
            registry=self.registry,
        )
        self.connections_idle_closed_total = Counter(
            "quotagate_connections_idle_closed",
            "Client connections closed after connections_max_idle_ms with no byte either way",
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
        self.producer_id_refusals_total = Counter(
            "quotagate_producer_id_refusals",
            "Produce requests answered THROTTLING_QUOTA_EXCEEDED for a new producer ID over producer_ids_rate",
            registry=self.registry,
        )
        self.throttled_fetches_total = Counter(
            "quotagate_throttled_fetches",
            "Fetches that arrived while their client was throttled, answered with no data and the throttle (KIP-219): "
            "by the proxy (session: full, sessionless) or with the broker's answer emptied (incremental)",
            ["session"],
            registry=self.registry,
        )
        self.tls_handshake_failures_total = Counter(
            "quotagate_tls_handshake_failures",
            "Client TLS handshakes that failed, by reason (OpenSSL's, or timeout, closed_by_client)",
            ["reason"],
            registry=self.registry,
        )
        self.background_task_failures_total = Counter(
            "quotagate_background_task_failures",
            "Background tasks (and event-loop callbacks) that raised, by task; each is logged and started again",
            ["task"],
            registry=self.registry,
        )
        self.config_reloads_total = Counter(
            "quotagate_config_reloads", "Configuration reloads, by result", ["result"], registry=self.registry
        )
        self.bucket_levels_resets_total = Counter(
            "quotagate_bucket_levels_resets",
            "Starts at which the saved bucket levels (beside the state file) could not be read: every bucket "
            "started full, as after a lost file (the log says what was wrong)",
            registry=self.registry,
        )
        self.config_restart_pending_keys = Gauge(
            "quotagate_config_restart_pending_keys",
            "Keys changed in the configuration file since the start that take effect only at a restart",
            registry=self.registry,
        )
        self.frames_refused_total = Counter(
            "quotagate_frames_refused",
            "Client connections closed for a request the proxy refuses before reading it whole, by reason: "
            "sasl_server_max_receive_size (a frame over it before SASL authentication completes), "
            "partial_frames_max_bytes (all connections' partial frames), partial_frames_max_bytes_per_connection "
            "(one connection's), before_sasl_authentication (a request other than ApiVersions or SASL before "
            "authentication completes: unanswered before a SaslHandshake, the broker's ILLEGAL_SASL_STATE after "
            "it), max_decoded_elements (a request the proxy must decode, too large)",
            ["reason"],
            registry=self.registry,
        )
        self.partial_frame_bytes = Gauge(
            "quotagate_partial_frame_bytes",
            "Bytes held for client requests that have not fully arrived, all connections (partial_frames_max_bytes)",
            registry=self.registry,
        )
        self.delay_queue_size = Gauge(
            "quotagate_delay_queue_size", "Connections waiting in the delay queue to be unmuted", registry=self.registry
        )
        self.muted_connections = Gauge(
            "quotagate_muted_connections", "Client connections muted for a quota now", registry=self.registry
        )
        self.cluster_fallback = Gauge(
            "quotagate_cluster_fallback",
            "1 while Redis is unreachable and this process enforces 1/N of every quota alone",
            registry=self.registry,
        )
        self.cluster_processes = Gauge(
            "quotagate_cluster_processes",
            "Processes sharing the quotas (N): live in the Redis registry, or as configured",
            registry=self.registry,
        )
        self.cluster_fallbacks_total = Counter(
            "quotagate_cluster_fallbacks",
            "Times this process lost Redis and fell back to 1/N of every quota alone",
            registry=self.registry,
        )
        self.cluster_rejoins_total = Counter(
            "quotagate_cluster_rejoins",
            "Times this process reached Redis again after a fallback and rejoined the shared buckets",
            registry=self.registry,
        )
        self.cluster_redis_calls_total = Counter(
            "quotagate_cluster_redis_calls", "Redis commands sent for the shared quotas", registry=self.registry
        )
        self.upstream_up = Gauge(
            "quotagate_upstream_up",
            "1 if the proxy's last metadata refresh reached a broker, else 0",
            registry=self.registry,
        )
        self.usage_written_total = Counter(
            "quotagate_usage_records_written",
            "Usage records (rows) written: Parquet rows once their file is closed and renamed into place, "
            "JSONL lines and Kafka messages once written",
            registry=self.registry,
        )
        self.usage_dropped_total = Counter(
            "quotagate_usage_records_dropped",
            "Requests whose usage records were lost: the buffer was full, or the sink failed (a Parquet file "
            "that could not be completed loses all its requests)",
            registry=self.registry,
        )
        self.usage_topics_folded_total = Counter(
            "quotagate_usage_topics_folded",
            'Produce topics counted in the "<other topics>" row of their entity and interval, beyond '
            "usage.topics_per_entity (each topic of each request)",
            registry=self.registry,
        )
        # Series that alerts take increase() of exist from the start, so the first event counts.
        for result in ("applied", "rejected"):
            self.config_reloads_total.labels(result)
        for side in ("client", "broker"):
            self.protocol_errors_total.labels(side)
        self.connections_refused_total.labels("max_connections_per_ip")
        self.connections_refused_total.labels("connection_creation_rate")
        for reason in REFUSAL_REASONS:
            self.frames_refused_total.labels(reason)
        # The hot path's counters (see the module docstring), exported by collect(): the session
        # core's own type (C fields compiled), imported here as session_core imports this module.
        self.counters = compiled.load("quotagate.proxy.session_core").ExchangeCounters()
        self.registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        # Read while the event loop counts (a scrape renders in a worker thread): each of the
        # counters' dicts is made in one call, which the loop does not interleave with.
        requests = CounterMetricFamily("quotagate_requests", "Requests forwarded, by Kafka API key", labels=["api_key"])
        request_counts: dict[str, int] = {}
        for api_key, count in self.counters.requests_by_key().items():
            label = api_key_label(api_key)
            request_counts[label] = request_counts.get(label, 0) + count
        for label, count in request_counts.items():
            requests.add_metric([label], count)
        yield requests
        forwarded = CounterMetricFamily(
            "quotagate_bytes", "Bytes forwarded: in = client to broker, out = broker to client", labels=["direction"]
        )
        forwarded.add_metric(["in"], self.counters.bytes_in)
        forwarded.add_metric(["out"], self.counters.bytes_out)
        yield forwarded
        latency = HistogramMetricFamily(
            "quotagate_upstream_latency_seconds",
            "Time from forwarding a request to receiving its response, by Kafka API key",
            labels=["api_key"],
        )
        bounds = [*(str(bound) for bound in LATENCY_BUCKETS), "+Inf"]
        folded: dict[str, tuple[list[int], float]] = {}
        for api_key, (counts, total) in sorted(self.counters.latency_by_key().items()):
            label = api_key_label(api_key)
            into = folded.setdefault(label, ([0] * len(counts), 0.0))
            folded[label] = ([a + b for a, b in zip(into[0], counts, strict=True)], into[1] + total)
        for label, (counts, total_seconds) in folded.items():
            cumulative, buckets = 0, []
            for bound, count in zip(bounds, counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([label], buckets, sum_value=total_seconds)
        yield latency

    def describe(self) -> list[CounterMetricFamily]:
        return []  # collect() only when scraped: registering must not run it
