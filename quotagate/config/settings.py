"""The proxy's configuration file (TOML), parsed into frozen dataclasses.

Every problem is reported as a ConfigError that names the offending key (`proxy.port`) and says what
was wrong, so `quotagate check-config` can point an operator at the exact line to fix.

Each key is documented next to its field, in the field's metadata: "doc" (its meaning, required),
and where the field alone does not say it, "type" (the TOML type) and "default" (a computed default,
in words). docs/configuration.md is generated from them (`make docs`); a key without "doc" fails the
generator and the tests. A new key is one field:

    new_key: int = field(default=5, metadata={"doc": "What it means."})
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import INTEGER_KEYS
from quotagate.quotas.topic_thresholds import TopicThresholds

DEFAULT_PORT = 9192
DEFAULT_METRICS_PORT = 9190
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}


class ConfigError(ValueError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


@dataclass(frozen=True)
class ProxyConfig:
    bootstrap_servers: tuple[tuple[str, int], ...] = field(
        metadata={
            "doc": "The real Kafka cluster: any subset of its brokers; the rest are learned through Metadata.",
            "type": 'array of "host:port" strings',
        }
    )
    listen_host: str = field(default="127.0.0.1", metadata={"doc": "Address the proxy's listeners bind to."})
    # Host clients are told to connect to; defaults to listen_host unless that is a wildcard.
    advertised_host: str = field(
        default="127.0.0.1",
        metadata={
            "doc": "Host name clients are told to connect to (in Metadata and FindCoordinator answers). "
            "Required when listen_host is a wildcard (0.0.0.0, ::).",
            "default": "listen_host",
        },
    )
    port: int = field(default=DEFAULT_PORT, metadata={"doc": "Bootstrap listener: clients' bootstrap.servers."})
    # The listener for broker node N is on broker_port_base + N (default: port + 1), so a broker's
    # proxy port is stable across restarts and easy to open in a firewall.
    broker_port_base: int = field(
        default=DEFAULT_PORT + 1,
        metadata={"doc": "Broker node N is served on broker_port_base + N.", "default": "port + 1"},
    )
    max_frame_size: int = field(
        default=DEFAULT_MAX_FRAME_SIZE,
        metadata={"doc": "Largest request frame accepted from a client, in bytes (Kafka's socket.request.max.bytes)."},
    )
    connect_timeout_seconds: float = field(
        default=10.0, metadata={"doc": "Time allowed to open a connection to a broker."}
    )
    metadata_refresh_seconds: float = field(
        default=30.0, metadata={"doc": "How often the proxy asks the cluster for its brokers (Metadata)."}
    )
    workers: int = field(
        default=1,
        metadata={
            "doc": "Processes serving the same ports on this host (SO_REUSEPORT), one core each. Worker i serves "
            "its metrics on metrics.port + i. With more than one, the quotas are shared through [cluster] "
            "redis_url, or each worker enforces 1/workers of them without it.",
        },
    )

    def broker_port(self, node_id: int) -> int:
        return self.broker_port_base + node_id


@dataclass(frozen=True)
class MetricsConfig:
    port: int = field(
        default=DEFAULT_METRICS_PORT, metadata={"doc": "Port of the HTTP server: /metrics, /healthz, /readyz, /quotas."}
    )
    host: str = field(
        default="127.0.0.1", metadata={"doc": "Address it binds to; 0.0.0.0 to let Prometheus on another host scrape."}
    )
    # Entities (user, client-id) exported with series of their own; the rest fold into "other".
    max_entities: int = field(
        default=500,
        metadata={
            "doc": "Entities (user, client-id) exported with series of their own, the busiest first; the rest are "
            'summed into user="other" (about 15 series per entity).'
        },
    )


@dataclass(frozen=True)
class ClusterConfig:
    """Quotas shared by several proxy processes (workers, replicas) through Redis."""

    redis_url: str = field(
        default="",
        metadata={
            "doc": 'Redis holding the shared quota buckets, e.g. "redis://10.0.0.5:6379/0". Empty: each '
            "process enforces its share of the quotas alone (see processes)."
        },
    )
    processes: int = field(
        default=0,
        metadata={
            "doc": "Proxy processes sharing the quotas, all hosts together. Without Redis (or while it is "
            "unreachable and before any process registered in it) each enforces 1/processes of every quota.",
            "default": "proxy.workers",
        },
    )
    lease_seconds: float = field(
        default=0.1,
        metadata={"doc": "A busy entity's lease lasts about this long at its recent rate before it is renewed."},
    )
    key_prefix: str = field(
        default="quotagate:",
        metadata={"doc": "Prefix of every Redis key; proxies sharing quotas must use the same one."},
    )
    redis_timeout_seconds: float = field(
        default=0.5,
        metadata={"doc": "A Redis call slower than this counts as Redis being unavailable."},
    )


@dataclass(frozen=True)
class UsageConfig:
    """Usage records (one per request) for the analysis pipeline; off unless enabled."""

    enabled: bool = field(default=False, metadata={"doc": "Write one usage record per request."})
    sink: str = field(default="jsonl", metadata={"doc": '"jsonl": files under directory; "kafka": a topic.'})
    directory: str = field(
        default="usage", metadata={"doc": "Folder of the JSONL files (date=YYYY-MM-DD/hour=HH/ below it)."}
    )
    max_file_bytes: int = field(
        default=64 * 1024 * 1024, metadata={"doc": "A JSONL file is rotated at this size (and every hour)."}
    )
    buffer_records: int = field(
        default=100_000, metadata={"doc": "Records held in memory at most; beyond, they are dropped and counted."}
    )
    flush_interval_seconds: float = field(default=1.0, metadata={"doc": "How often buffered records are written."})
    kafka_bootstrap_servers: tuple[str, ...] = field(
        default=(),
        metadata={
            "doc": 'Cluster the "kafka" sink writes to.',
            "type": 'array of "host:port" strings',
            "default": "proxy.bootstrap_servers",
        },
    )
    kafka_topic: str = field(default="quotagate-usage", metadata={"doc": 'Topic of the "kafka" sink.'})
    proxy_id: str = field(
        default="",
        metadata={"doc": "Names this proxy in its records and file names.", "default": "the host name"},
    )


# The keys of one [[quotas]] entry: name -> (TOML type, meaning). parse_config accepts exactly these.
QUOTA_ENTRY_KEYS: dict[str, tuple[str, str]] = {
    "user": ("string", 'The user (SASL principal name; `ANONYMOUS` without SASL), or `"<default>"` for any user.'),
    "client_id": ("string", 'The client.id, or `"<default>"` for any client-id.'),
    QuotaKey.PRODUCER_BYTE_RATE: ("integer", "Produce bytes per second, for the whole cluster behind the proxy."),
    QuotaKey.CONSUMER_BYTE_RATE: ("integer", "Fetch bytes per second, for the whole cluster behind the proxy."),
    QuotaKey.REQUEST_PERCENTAGE: ("number", "Request time, in % of one thread: 1 = 10 ms of request time per second."),
    QuotaKey.CONTROLLER_MUTATION_RATE: (
        "number",
        "Partitions created or deleted per second (CreateTopics, CreatePartitions, DeleteTopics; KIP-599).",
    ),
}


@dataclass(frozen=True)
class Config:
    """The whole file. Each field is a section (docs/configuration.md is generated from these)."""

    proxy: ProxyConfig = field(metadata={"doc": "The listeners and the Kafka cluster behind them. Required."})
    metrics: MetricsConfig = field(metadata={"doc": "The HTTP server for Prometheus and health checks."})
    quotas: QuotaTable = field(
        default_factory=QuotaTable,
        metadata={
            "doc": "Quotas per (user, client-id), with Kafka's keys and its 8-level precedence. Each entry names "
            "one entity (user, client_id or both) and sets at least one quota. They hold for the whole cluster "
            "behind the proxy. Edit the file (or send SIGHUP) and they apply within a second.",
            "toml": "array of tables",
            "keys": QUOTA_ENTRY_KEYS,
        },
    )
    windows: QuotaWindows = field(
        default_factory=QuotaWindows,
        metadata={
            "doc": "Kafka's quota sample windows, at the top of the file (before any [section]); they size the "
            "bursts: burst = rate x window_num x window_size_seconds.",
            "toml": "top-level keys",
        },
    )
    topic_thresholds: TopicThresholds | None = field(
        default=None,
        metadata={
            "doc": "Per-topic bytes-in thresholds: a produce to a topic is refused only when the total and that "
            "topic are both over. Off unless given.",
        },
    )
    usage: UsageConfig = field(
        default_factory=UsageConfig,
        metadata={"doc": "Usage records (one per request) for the analysis pipeline; off unless enabled."},
    )
    cluster: ClusterConfig = field(
        default_factory=ClusterConfig,
        metadata={"doc": "Quotas shared by several proxy processes and hosts through Redis; off unless set."},
    )

    @property
    def shares_quotas(self) -> bool:
        """Whether several processes enforce these quotas together (workers or a Redis)."""
        return self.proxy.workers > 1 or bool(self.cluster.redis_url) or self.cluster.processes > 1

    @property
    def processes(self) -> int:
        """How many processes share the quotas when Redis cannot tell."""
        return self.cluster.processes or self.proxy.workers


def load_config(path: str | Path) -> Config:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("file", f"cannot read {path}: {exc.strerror}") from exc
    return parse_config(text)


def parse_config(text: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("file", f"not valid TOML: {exc}") from exc
    _reject_unknown("", data, {"proxy", "metrics", "quotas", "topic_thresholds", "usage", "cluster", *_WINDOW_KEYS})
    proxy = _section(data, "proxy", required=True)
    metrics = _section(data, "metrics", required=False)
    return Config(
        proxy=_parse_proxy(proxy),
        metrics=_parse_metrics(metrics),
        quotas=_parse_quotas(data.get("quotas", [])),
        windows=QuotaWindows(
            **{
                key: _positive(data, key, default)
                if key.endswith("_seconds")
                else _integer(data, key, default, 1, 3600)
                for key, default in _WINDOW_KEYS.items()
            }
        ),
        topic_thresholds=_parse_topic_thresholds(data.get("topic_thresholds")),
        usage=_parse_usage(_section(data, "usage", required=False)),
        cluster=_parse_cluster(_section(data, "cluster", required=False)),
    )


def _parse_cluster(table: dict[str, Any]) -> ClusterConfig:
    _reject_unknown("cluster.", table, {f.name for f in fields(ClusterConfig)})
    redis_url = _string(table, "cluster.redis_url", "")
    if redis_url and not redis_url.startswith(("redis://", "rediss://", "unix://")):
        raise ConfigError("cluster.redis_url", f"must start with redis://, rediss:// or unix://, got {redis_url!r}")
    return ClusterConfig(
        redis_url=redis_url,
        processes=_integer(table, "cluster.processes", 0, 0, 10_000),
        lease_seconds=_positive(table, "cluster.lease_seconds", 0.1),
        key_prefix=_string(table, "cluster.key_prefix", "quotagate:"),
        redis_timeout_seconds=_positive(table, "cluster.redis_timeout_seconds", 0.5),
    )


def _parse_usage(table: dict[str, Any]) -> UsageConfig:
    _reject_unknown("usage.", table, {f.name for f in fields(UsageConfig)})
    enabled = table.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ConfigError("usage.enabled", f"must be true or false, got {enabled!r}")
    sink = _string(table, "usage.sink", "jsonl")
    if sink not in ("jsonl", "kafka"):
        raise ConfigError("usage.sink", f'must be "jsonl" or "kafka", got {sink!r}')
    servers = table.get("kafka_bootstrap_servers", [])
    if not isinstance(servers, list) or not all(isinstance(s, str) and ":" in s for s in servers):
        raise ConfigError("usage.kafka_bootstrap_servers", 'must be a list of "host:port" strings')
    return UsageConfig(
        enabled=enabled,
        sink=sink,
        directory=_string(table, "usage.directory", "usage"),
        max_file_bytes=_integer(table, "usage.max_file_bytes", 64 * 1024 * 1024, 1024, 2**40),
        buffer_records=_integer(table, "usage.buffer_records", 100_000, 1, 10_000_000),
        flush_interval_seconds=_positive(table, "usage.flush_interval_seconds", 1.0),
        kafka_bootstrap_servers=tuple(servers),
        kafka_topic=_string(table, "usage.kafka_topic", "quotagate-usage"),
        proxy_id=_string(table, "usage.proxy_id", ""),
    )


def _parse_topic_thresholds(table: Any) -> TopicThresholds | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("topic_thresholds", "must be a table ([topic_thresholds])")
    _reject_unknown("topic_thresholds.", table, {"total_bytes_in_per_sec", "topics"})
    if "total_bytes_in_per_sec" not in table:
        raise ConfigError("topic_thresholds.total_bytes_in_per_sec", "is required when [topic_thresholds] is given")
    total = _integer(table, "topic_thresholds.total_bytes_in_per_sec", 0, 1, 2**53)
    topics = table.get("topics", {})
    if not isinstance(topics, dict):
        raise ConfigError("topic_thresholds.topics", "must be a table of topic = bytes per second")
    per_topic = {name: _integer(topics, f"topic_thresholds.topics.{name}", 0, 1, 2**53) for name in topics}
    if sum(per_topic.values()) > total:
        raise ConfigError(
            "topic_thresholds.topics",
            f"thresholds add up to {sum(per_topic.values())}, more than total_bytes_in_per_sec = {total}",
        )
    return TopicThresholds(total, per_topic)


# Named after the broker settings they mirror (quota.window.num, ...); they size the default bursts.
_WINDOW_KEYS = {f.name: f.default for f in fields(QuotaWindows)}
_ENTITY_KEYS = {"user", "client_id"}
_QUOTA_KEYS = {key.value for key in QuotaKey}


def _parse_quotas(entries: Any) -> QuotaTable:
    if not isinstance(entries, list):
        raise ConfigError("quotas", "must be an array of tables ([[quotas]])")
    table: dict[QuotaEntity, dict[QuotaKey, float]] = {}
    where: dict[QuotaEntity, int] = {}
    for index, entry in enumerate(entries):
        prefix = f"quotas[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(prefix, "must be a table ([[quotas]])")
        _reject_unknown(prefix + ".", entry, _ENTITY_KEYS | _QUOTA_KEYS)
        user = _entity_name(entry, prefix, "user")
        client_id = _entity_name(entry, prefix, "client_id")
        if user is None and client_id is None:
            raise ConfigError(prefix, 'needs user, client_id or both (use "<default>" for the default entity)')
        entity = QuotaEntity(user, client_id)
        if entity in where:
            raise ConfigError(prefix, f"{entity} is already given quotas in quotas[{where[entity]}]")
        where[entity] = index
        values = {}
        for name in sorted(_QUOTA_KEYS & entry.keys()):
            values[QuotaKey(name)] = _quota_value(entry[name], f"{prefix}.{name}", QuotaKey(name))
        if not values:
            raise ConfigError(prefix, f"sets no quota (one of: {', '.join(sorted(_QUOTA_KEYS))})")
        table[entity] = values
    return QuotaTable(table)


def _entity_name(entry: dict[str, Any], prefix: str, key: str) -> str | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{prefix}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _quota_value(value: Any, key: str, quota_key: QuotaKey) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(key, f"must be a number > 0, got {value!r}")
    if quota_key in INTEGER_KEYS and value != int(value):
        raise ConfigError(key, f"must be a whole number of bytes per second, got {value!r}")
    return float(value)


def _section(data: dict[str, Any], name: str, required: bool) -> dict[str, Any]:
    section = data.get(name)
    if section is None:
        if required:
            raise ConfigError(name, "section is missing")
        return {}
    if not isinstance(section, dict):
        raise ConfigError(name, "must be a table ([" + name + "])")
    return section


def _reject_unknown(prefix: str, table: dict[str, Any], known: set[str]) -> None:
    for key in table:
        if key not in known:
            choices = ", ".join(sorted(known))
            raise ConfigError(prefix + key, f"unknown key (known: {choices})")


def _parse_proxy(table: dict[str, Any]) -> ProxyConfig:
    _reject_unknown("proxy.", table, {f.name for f in fields(ProxyConfig)})
    if "bootstrap_servers" not in table:
        raise ConfigError("proxy.bootstrap_servers", 'is required, e.g. ["kafka-1:9092"]')
    servers = table["bootstrap_servers"]
    if not isinstance(servers, list) or not servers:
        raise ConfigError("proxy.bootstrap_servers", 'must be a non-empty list of "host:port" strings')
    bootstrap = tuple(_host_port("proxy.bootstrap_servers", item) for item in servers)
    listen_host = _string(table, "proxy.listen_host", "127.0.0.1")
    if "advertised_host" in table:
        advertised_host = _string(table, "proxy.advertised_host", "")
        if advertised_host in WILDCARD_HOSTS:
            raise ConfigError("proxy.advertised_host", "must be a host name or address clients can reach")
    elif listen_host in WILDCARD_HOSTS:
        raise ConfigError("proxy.advertised_host", f"is required when listen_host is {listen_host!r}")
    else:
        advertised_host = listen_host
    port = _port(table, "proxy.port", DEFAULT_PORT)
    broker_port_base = _integer(table, "proxy.broker_port_base", port + 1, 1, 65535)
    return ProxyConfig(
        bootstrap_servers=bootstrap,
        listen_host=listen_host,
        advertised_host=advertised_host,
        port=port,
        broker_port_base=broker_port_base,
        max_frame_size=_integer(table, "proxy.max_frame_size", DEFAULT_MAX_FRAME_SIZE, 1024, 2**31 - 1),
        connect_timeout_seconds=_positive(table, "proxy.connect_timeout_seconds", 10.0),
        metadata_refresh_seconds=_positive(table, "proxy.metadata_refresh_seconds", 30.0),
        workers=_integer(table, "proxy.workers", 1, 1, 256),
    )


def _parse_metrics(table: dict[str, Any]) -> MetricsConfig:
    _reject_unknown("metrics.", table, {f.name for f in fields(MetricsConfig)})
    return MetricsConfig(
        port=_port(table, "metrics.port", DEFAULT_METRICS_PORT),
        host=_string(table, "metrics.host", "127.0.0.1"),
        max_entities=_integer(table, "metrics.max_entities", 500, 1, 100_000),
    )


def _host_port(key: str, item: Any) -> tuple[str, int]:
    if not isinstance(item, str) or ":" not in item:
        raise ConfigError(key, f'entry {item!r} is not a "host:port" string')
    host, _, port_text = item.rpartition(":")
    host = host.strip("[]")  # allow "[::1]:9092"
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ConfigError(key, f'entry {item!r} is not a "host:port" string with a port in 1..65535')
    return host, int(port_text)


def _string(table: dict[str, Any], key: str, default: str) -> str:
    value = table.get(key.rpartition(".")[2], default)
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {value!r}")
    return value


def _integer(table: dict[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = table.get(key.rpartition(".")[2], default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, f"must be an integer in {low}..{high}, got {value!r}")
    return value


def _port(table: dict[str, Any], key: str, default: int) -> int:
    return _integer(table, key, default, 1, 65535)


def _positive(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key.rpartition(".")[2], default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ConfigError(key, f"must be a number > 0, got {value!r}")
    return float(value)
