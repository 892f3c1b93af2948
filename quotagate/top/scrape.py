"""One reading of one proxy for `quotagate top`: its per-entity counters (/metrics) and the quota
state of every entity it tracks (/quotas), taken together and stamped with a monotonic time.

`parse_scrape` is pure (text and JSON in, a `Scrape` out); `scrape` does the two GETs. Nothing
here computes a rate: that takes two scrapes (`quotagate.top.rows`). The counters read are the
ones `COUNTERS` names, so a column added to the view is one line there.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from prometheus_client.parser import text_string_to_metric_families

from quotagate.quotas import QuotaKey

Entity = tuple[str, str]  # (user, client id), as the proxy's metrics label them


class TenantKey(NamedTuple):
    """A tenant's row, beside the entities' (never equal to an entity's (user, client id))."""

    name: str


RowKey = Entity | TenantKey

# The per-entity counters the view reads (Prometheus sample names, docs/metrics.md).
PRODUCE_BYTES = "quotagate_produce_bytes_total"
FETCH_BYTES = "quotagate_fetch_bytes_total"
REQUEST_SECONDS = "quotagate_request_time_seconds_total"
COUNTERS = frozenset({PRODUCE_BYTES, FETCH_BYTES, REQUEST_SECONDS})
# The same counters summed per tenant (label `tenant`), read as the entity counter they sum.
TENANT_COUNTERS = {name.replace("quotagate_", "quotagate_tenant_", 1): name for name in COUNTERS}
CLUSTER_PROCESSES = "quotagate_cluster_processes"
KNOWN_KEYS = frozenset(key.value for key in QuotaKey)


class ProxyUnreachable(Exception):
    """A proxy's metrics port did not answer, or answered something that is not a proxy's."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"cannot read {url}: {reason}")
        self.url = url
        self.reason = reason


@dataclass(frozen=True, slots=True)
class QuotaState:
    """One quota key of one entity as /quotas shows it."""

    quota: float
    level: int
    matched: str
    tokens: float
    throttle_ms: int
    shadow: bool


@dataclass(slots=True)
class Scrape:
    """What one proxy said at `at` (time.monotonic()): counters, quotas, mutes, by entity."""

    url: str
    at: float
    counters: dict[RowKey, dict[str, float]] = field(default_factory=dict)
    quotas: dict[RowKey, dict[QuotaKey, QuotaState]] = field(default_factory=dict)
    muted: dict[RowKey, int] = field(default_factory=dict)
    # Processes sharing the quotas (quotagate_cluster_processes): 0 for a proxy alone.
    cluster_processes: int = 0


def base_url(url: str) -> str:
    """The metrics port's address, from what a user types: `host:port`, `http://host:port` or
    `http://host:port/metrics` all name it."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    return url.removesuffix("/metrics")


def parse_scrape(url: str, at: float, metrics_text: str, quotas: dict[str, Any]) -> Scrape:
    reading = Scrape(url, at)
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name in COUNTERS:
                entity = (sample.labels.get("user", ""), sample.labels.get("client_id", ""))
                reading.counters.setdefault(entity, {})[sample.name] = sample.value
            elif sample.name in TENANT_COUNTERS:
                tenant = TenantKey(sample.labels.get("tenant", ""))
                reading.counters.setdefault(tenant, {})[TENANT_COUNTERS[sample.name]] = sample.value
            elif sample.name == CLUSTER_PROCESSES:
                reading.cluster_processes = int(sample.value)
    items = [((item["user"], item["client_id"]), item) for item in quotas.get("entities", [])]
    items += [(TenantKey(item["tenant"]), item) for item in quotas.get("tenants", [])]  # proxies before tenants: none
    for entity, item in items:
        reading.quotas[entity] = {
            QuotaKey(key): QuotaState(
                float(state["quota"]),
                int(state["level"]),
                str(state["matched"]),
                float(state["tokens"]),
                int(state["throttle_ms"]),
                bool(state.get("shadow", False)),
            )
            for key, state in item.get("quotas", {}).items()
            if key in KNOWN_KEYS  # a key this version does not know is left out
        }
        if item.get("muted_connections"):
            reading.muted[entity] = int(item["muted_connections"])
    return reading


def scrape(url: str, timeout: float = 3.0) -> Scrape:
    """GETs `url`'s /metrics and /quotas; raises ProxyUnreachable naming the address and why."""
    base = base_url(url)
    at = time.monotonic()
    metrics_text = _get(f"{base}/metrics", timeout)
    quotas_text = _get(f"{base}/quotas", timeout)
    try:
        quotas = json.loads(quotas_text)
        return parse_scrape(base, at, metrics_text, quotas)
    except (ValueError, KeyError, TypeError) as exc:  # a port that is not a quotagate's metrics port
        raise ProxyUnreachable(base, f"not a quotagate metrics port ({type(exc).__name__}: {exc})") from exc


def scrape_all(urls: Sequence[str], timeout: float = 3.0) -> dict[str, Scrape | ProxyUnreachable]:
    """Every proxy at once (one thread each: a slow one does not delay the others' readings)."""
    with ThreadPoolExecutor(max_workers=max(len(urls), 1), thread_name_prefix="quotagate-top") as pool:
        futures = {url: pool.submit(scrape, url, timeout) for url in urls}
    return {url: _outcome(future) for url, future in futures.items()}


def _outcome(future: Future[Scrape]) -> Scrape | ProxyUnreachable:
    try:
        return future.result()
    except ProxyUnreachable as exc:
        return exc


def _get(url: str, timeout: float) -> str:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        raise ProxyUnreachable(url, f"HTTP {exc.code} {exc.reason}") from exc
    except urllib.error.URLError as exc:  # refused, unknown host, ...
        raise ProxyUnreachable(url, str(exc.reason)) from exc
    except (OSError, ValueError) as exc:  # timed out, reset, a malformed address
        raise ProxyUnreachable(url, str(exc) or type(exc).__name__) from exc
