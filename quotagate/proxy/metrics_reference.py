"""docs/metrics.md: every series the proxy exports, with its type, labels and meaning, read from the
collectors themselves (ProxyMetrics and EntityMetrics) rather than written by hand, so a new metric
cannot reach /metrics undocumented. `quotagate metrics-reference` prints it (`make docs`); a test
fails when the file is stale or when a label has no meaning in LABEL_MEANINGS. Never used while
serving.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.quotas import QuotaEngine, QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.apis import policy
from quotagate.quotas.charging import count_exchange
from quotagate.quotas.engine import local_bucket
from quotagate.quotas.tenants import Tenant, Tenants

# Every label any series carries, and what its values are.
LABEL_MEANINGS: dict[str, str] = {
    "listener": "`bootstrap` or `broker-N` (the listener serving broker node N)",
    "task": 'The background task (docs/architecture.md, "Background tasks"): `metadata-refresh`, `usage-records`, '
    "`config-watch`, ...",
    "api_key": "The Kafka API by name (`Produce`, `Fetch`, `Metadata`, ...)",
    "direction": "`in` (client to broker) or `out` (broker to client)",
    "side": "`client` or `broker`: which peer sent bytes that are not valid Kafka",
    "reason": "The limit that closed the connection: `max_connections_per_ip`, `connection_creation_rate` (an ip "
    "quota; closed after its throttle), `sasl_server_max_receive_size`, `partial_frames_max_bytes`",
    "result": "`applied` or `rejected`",
    "user": "The user (SASL or certificate principal, `ANONYMOUS` without either), or `other` for the entities "
    "beyond metrics.max_entities",
    "client_id": "The client.id (or `other`)",
    "group": "The quota group: `produce`, `fetch`, `request`, `controller_mutation`",
    "quota": "The quota key: " + ", ".join(f"`{key.value}`" for key in QuotaKey),
    "tenant": "The tenant (`[[tenants]]` name, docs/quotas.md): one series per configured tenant",
    "session": "The fetch's session (KIP-227): `full` (a full or sessionless fetch, answered by the proxy) or "
    "`incremental` (sent to the broker, whose session takes it, and its answer emptied)",
}


@dataclass(frozen=True)
class MetricDoc:
    name: str  # the family's name, as /metrics writes it in # HELP
    kind: str  # counter, gauge, histogram
    series: tuple[str, ...]  # the names its samples have (_total, _bucket, _created, ...)
    labels: tuple[str, ...]
    meaning: str


def metric_docs() -> list[MetricDoc]:
    """Every metric family of a proxy, from collectors that have seen one event of each kind (a
    family with no sample would not show its labels)."""
    metrics = ProxyMetrics(CollectorRegistry())
    entity = QuotaEntity("u", "c")
    tenants = Tenants((Tenant("t", users=("u",), quotas={key: 1000.0 for key in QuotaKey}),))
    engine = QuotaEngine(
        QuotaTable({entity: {key: 1000.0 for key in QuotaKey}}, frozenset({entity}), tenants),
        QuotaWindows(),
        local_bucket,
    )
    entities = EntityMetrics(lambda: engine, lambda: 0.0, 10)
    metrics.registry.register(entities)
    metrics.counters.count_request(0)
    metrics.counters.observe_latency(0, 0.001)
    count_exchange(entities.entity("u", "c", 0.0), policy(0), 100, 10, 1.0, 5)
    for attribute in vars(metrics).values():
        if isinstance(attribute, MetricWrapperBase) and attribute._labelnames:  # one child shows the labels
            attribute.labels(*("x" for _ in attribute._labelnames))
    docs = []
    for family in metrics.registry.collect():
        labels = tuple(dict.fromkeys(name for sample in family.samples for name in sample.labels if name != "le"))
        series = tuple(dict.fromkeys(sample.name for sample in family.samples))
        docs.append(MetricDoc(family.name, family.type, series, labels, family.documentation))
    return sorted(docs, key=lambda doc: doc.name)


def metrics_markdown() -> str:
    docs = metric_docs()
    labels = sorted({label for doc in docs for label in doc.labels})
    missing = [label for label in labels if label not in LABEL_MEANINGS]
    if missing:
        raise KeyError(f"labels without a meaning: {missing}: add them to LABEL_MEANINGS ({__name__})")
    lines = [
        "# Metrics reference",
        "",
        "<!-- Generated from the collectors (quotagate/proxy/metrics.py, entity_metrics.py) by",
        "     `quotagate metrics-reference` (`make docs`). Do not edit: a test fails when it is stale. -->",
        "",
        "Served on `/metrics` of the `[metrics]` port (one per worker: `metrics.port + i` or",
        "`metrics.worker_ports`). Counters end in `_total`; those of rare events also have a `_created`",
        "series (when the counter started, written by prometheus_client). The per-entity series (labels `user` and",
        "`client_id`) exist for the busiest `metrics.max_entities` entities; the rest are summed into",
        '`user="other", client_id="other"`. The per-tenant series (label `tenant`, `quotagate_tenant_*`) exist for',
        "every configured tenant (`[[tenants]]`): its members' counters summed, and its shared bucket.",
        "The alerts in [ops/prometheus/alerts.yml](../ops/prometheus/alerts.yml)",
        "and the dashboard in [ops/grafana](../ops/grafana) use these names.",
        "",
        f"{len(docs)} metric families, {sum(len(doc.series) for doc in docs)} series names.",
        "",
        "| series | type | labels | meaning |",
        "| --- | --- | --- | --- |",
    ]
    for doc in docs:
        series = "<br>".join(f"`{name}`" for name in doc.series)
        cells = (series, doc.kind, ", ".join(f"`{label}`" for label in doc.labels) or "–", doc.meaning)
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    lines += ["", "## Labels", "", "| label | values |", "| --- | --- |"]
    lines += [f"| `{label}` | {LABEL_MEANINGS[label]} |" for label in labels]
    return "\n".join(lines) + "\n"
