"""The proxy's configuration file (TOML), parsed into frozen dataclasses.

Every problem is reported as a ConfigError that names the offending key (`proxy.port`) and says what
was wrong, so `quotagate check-config` can point an operator at the exact line to fix.

Each key is stated once, in its field: the type (the field's type), the default (the field's) and the
rules (the field's metadata), which one parser (`section_values`) applies to every section and
docs/configuration.md is generated from (`make docs`). The metadata:
- "doc": its meaning (required: a key without it fails the generator and the tests);
- "min" and "max" for an integer (or each integer of an array, whose "unit" names them in messages);
  "max" for a number, which is always > 0 (every number here is a duration);
- "choices" for a string that takes one of a few values; "file" for a path that must exist (when not
  empty); "check", a function that raises ValueError naming what is wrong with a string;
- "parse", for a value of its own shape ("host:port" strings, ...): a function from the TOML value
  to the field's, which raises ValueError naming the problem;
- "required", for a field without a default: what to give (an empty value counts as missing);
- "type" (the TOML type) and "default" (a computed default, in words), where the field's type and
  default do not say it.
Only the rules that span keys are written by hand, in the section's `_parse_*`. A new key is one field:

    new_key: int = field(default=5, metadata={"doc": "What it means.", "min": 1, "max": 100})
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from functools import cache
from pathlib import Path
from typing import Any, TypeVar, get_args, get_origin, get_type_hints

from quotagate.quotas import QuotaEntity, QuotaKey, QuotaTable, QuotaWindows
from quotagate.quotas.entities import (
    DEFAULT,
    MAX_NAME_CHARS,
    MAX_PREFIX_CHARS,
    IpQuotaKey,
    client_id_prefix_problem,
    connection_creation_rate_problem,
    ip_entity_name,
    quota_value_problem,
)
from quotagate.quotas.tenants import TENANT_LISTS, Tenant, Tenants, rule_text
from quotagate.quotas.topic_thresholds import TopicThresholds
from quotagate.security.tls_settings import ListenerTlsConfig, UpstreamTlsConfig

DEFAULT_PORT = 9192
DEFAULT_METRICS_PORT = 9190
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE = 512 * 1024  # Kafka's sasl.server.max.receive.size
DEFAULT_PARTIAL_FRAMES_MAX_BYTES = 256 * 1024 * 1024
CLIENT_SASL_MODES = ("auto", "required", "none")
# What the proxy decodes of one request it answers or changes (a decode is Python on the one loop).
DEFAULT_MAX_DECODED_ELEMENTS = 10_000
# Who may describe the proxy's quotas ([admin] describe_access).
DESCRIBE_ACCESS_BROKER = "broker"
DESCRIBE_ACCESS_ALTER_PRINCIPALS = "alter_principals"
DESCRIBE_ACCESS_ANYONE = "anyone"
DESCRIBE_ACCESS_MODES = (DESCRIBE_ACCESS_BROKER, DESCRIBE_ACCESS_ALTER_PRINCIPALS, DESCRIBE_ACCESS_ANYONE)
WILDCARD_HOSTS = {"0.0.0.0", "::", ""}
MAX_INT32 = 2**31 - 1  # Kafka's "no limit" for its connection limits
MAX_INT64 = 2**63 - 1
DEFAULT_BROKER_NODE_IDS = (0, 9)
# The longest time any *_seconds key may name (a week), and a quota sample window (an hour): every
# number read from the file is finite and in range, so nothing derived from it overflows.
SECONDS_MAX = 7 * 24 * 3600.0
PORT_RANGE = {"min": 1, "max": 65535}
SECONDS = {"max": SECONDS_MAX}
_Tls = TypeVar("_Tls", ListenerTlsConfig, UpstreamTlsConfig)


class ConfigError(ValueError):
    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


# ------------------------------------------------------------------------ values of their own shape
# Each takes the TOML value and raises ValueError naming the problem; the parser adds the key.


def _host_port(item: Any) -> tuple[str, int]:
    if not isinstance(item, str) or ":" not in item:
        raise ValueError(f'entry {item!r} is not a "host:port" string')
    host, _, port_text = item.rpartition(":")
    host = host.strip("[]")  # allow "[::1]:9092"
    if not host or not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f'entry {item!r} is not a "host:port" string with a port in 1..65535')
    return host, int(port_text)


def _host_ports(value: Any) -> tuple[tuple[str, int], ...]:
    if not isinstance(value, list):
        raise ValueError(f'must be a list of "host:port" strings, got {value!r}')
    return tuple(_host_port(item) for item in value)


def _host_port_strings(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(item, str) and ":" in item for item in value):
        raise ValueError('must be a list of "host:port" strings')
    return tuple(value)


def _per_ip_overrides(value: Any) -> tuple[tuple[str, int], ...]:
    # An array of "host:count" strings, as bootstrap_servers is written, or the broker's own
    # comma-separated string pasted from server.properties.
    if isinstance(value, str):
        value = value.split(",")
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValueError(f'must be an array of "host:count" strings, got {value!r}')
    overrides = []
    for entry in filter(None, (part.strip() for part in value)):
        host, _, count = entry.rpartition(":")
        if not host or not count.isdigit():
            raise ValueError(f'entry {entry!r} is not "host:count" (e.g. "127.0.0.1:200")')
        overrides.append((host.strip("[]"), int(count)))
    return tuple(overrides)


def _node_id_range(value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(item, int) and not isinstance(item, bool) for item in value)
    ):
        raise ValueError(f"must be an array of two integers [first, last], got {value!r}")
    first, last = value
    if not 0 <= first <= last:
        raise ValueError(f"must be [first, last] with 0 <= first <= last, got {value!r}")
    return first, last


def _user_names(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(name, str) and name for name in value):
        raise ValueError('must be a list of user names, e.g. ["admin"]')
    return tuple(value)


def _check_redis_url(url: str) -> None:
    if url and not url.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError(f"must start with redis://, rediss:// or unix://, got {url!r}")


def _check_key_prefix(prefix: str) -> None:
    if "{" in prefix or "}" in prefix:
        # A brace in the prefix would become every key's hash tag: one Redis Cluster slot for all.
        raise ValueError(f"must not contain {{ or }}, got {prefix!r}")


@dataclass(frozen=True)
class ProxyConfig:
    bootstrap_servers: tuple[tuple[str, int], ...] = field(
        metadata={
            "doc": "The real Kafka cluster: any subset of its brokers; the rest are learned through Metadata.",
            "type": 'array of "host:port" strings',
            "required": 'e.g. ["kafka-1:9092"]',
            "parse": _host_ports,
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
    port: int = field(
        default=DEFAULT_PORT, metadata={"doc": "Bootstrap listener: clients' bootstrap.servers.", **PORT_RANGE}
    )
    # The listener for broker node N is on broker_port_base + N (default: port + 1), so a broker's
    # proxy port is stable across restarts and easy to open in a firewall.
    broker_port_base: int = field(
        default=DEFAULT_PORT + 1,
        metadata={"doc": "Broker node N is served on broker_port_base + N.", "default": "port + 1", **PORT_RANGE},
    )
    max_frame_size: int = field(
        default=DEFAULT_MAX_FRAME_SIZE,
        metadata={
            "doc": "Largest request frame accepted from a client, in bytes (Kafka's socket.request.max.bytes).",
            "min": 1024,
            "max": MAX_INT32,
        },
    )
    sasl_server_max_receive_size: int = field(
        default=DEFAULT_SASL_SERVER_MAX_RECEIVE_SIZE,
        metadata={
            "doc": "Kafka's sasl.server.max.receive.size: on brokers that require SASL (client_sasl), the largest "
            "frame a client may send before its SASL authentication completes (and during a re-authentication); "
            "a larger size closes the connection as soon as its 4-byte prefix is read, as the broker does.",
            "min": 1,
            "max": MAX_INT32,
        },
    )
    client_sasl: str = field(
        default="auto",
        metadata={
            "doc": "Whether the brokers' listener behind the proxy requires SASL (SASL_PLAINTEXT, SASL_SSL): "
            '"required", "none" (PLAINTEXT, SSL), or "auto": learned from the brokers (a SASL listener closes '
            "the proxy's own Metadata request unanswered), and taken as required until then. Where required, "
            "sasl_server_max_receive_size applies until the first request that is not ApiVersions or SASL.",
            "choices": CLIENT_SASL_MODES,
        },
    )
    partial_frames_max_bytes: int = field(
        default=DEFAULT_PARTIAL_FRAMES_MAX_BYTES,
        metadata={
            "doc": "Bytes all client connections together may hold for requests that have not fully arrived. "
            "A connection whose next bytes would go over is closed (after the answers to its whole requests "
            "before), never paused: a pause could leave it waiting on memory that other slow senders hold. "
            "Plays the part of Kafka's queued.max.request.bytes.",
            "min": 1,
            "max": MAX_INT64,
        },
    )
    partial_frames_max_bytes_per_connection: int = field(
        default=DEFAULT_PARTIAL_FRAMES_MAX_BYTES // 2,
        metadata={
            "doc": "One connection's share of partial_frames_max_bytes: a frame announcing more closes its "
            "connection as soon as its size is read, so that no one connection's slow frame can take all the "
            "memory other clients' requests need.",
            "default": "partial_frames_max_bytes / 2",
            "min": 1,
            "max": MAX_INT64,
        },
    )
    max_decoded_elements: int = field(
        default=DEFAULT_MAX_DECODED_ELEMENTS,
        metadata={
            "doc": "The most array elements (quota entries and their parts, topics, partitions, configs) of one "
            "request that the proxy decodes to answer or change it: AlterClientQuotas from an alter_principals "
            "user, CreateTopics, CreatePartitions and DeleteTopics while a controller_mutation_rate applies, and "
            "the topics of a Produce whose topics the proxy names (per-topic thresholds, a producer_ids_rate "
            "refusal). A request with more closes its connection, as a frame over max_frame_size does, naming "
            "this key: decoding is the proxy's CPU, shared by every client. Requests forwarded as they are "
            "never count.",
            "min": 1,
            "max": MAX_INT32,
        },
    )
    connect_timeout_seconds: float = field(
        default=10.0, metadata={"doc": "Time allowed to open a connection to a broker.", **SECONDS}
    )
    metadata_refresh_seconds: float = field(
        default=30.0, metadata={"doc": "How often the proxy asks the cluster for its brokers (Metadata).", **SECONDS}
    )
    connections_max_idle_ms: int = field(
        default=600_000,
        metadata={
            "doc": "Kafka's connections.max.idle.ms: a client connection over which no byte has moved either way "
            "for this long is closed (a half-sent frame does not keep it open; a quota mute does).",
            "min": 1,
            "max": MAX_INT64,
        },
    )
    max_connections_per_ip: int = field(
        default=MAX_INT32,
        metadata={
            "doc": "Kafka's max.connections.per.ip: a connection from an address that already has this many is "
            "closed right after it is accepted, as the broker does.",
            "min": 0,
            "max": MAX_INT32,
        },
    )
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = field(
        default=(),
        metadata={
            "doc": 'Kafka\'s max.connections.per.ip.overrides: per-host limits as an array of "host:count" '
            'strings (["hostName:100", "127.0.0.1:200"]), or the broker\'s own "hostName:100,127.0.0.1:200".',
            "type": 'array of "host:count" strings',
            "parse": _per_ip_overrides,
        },
    )
    max_connection_creation_rate: int = field(
        default=MAX_INT32,
        metadata={
            "doc": "Kafka's max.connection.creation.rate (KIP-612): new connections per second over all "
            "listeners. Beyond it a new connection is accepted but not read until the rate allows, which is "
            "what a client sees of the broker's acceptor waiting.",
            "min": 1,
            "max": MAX_INT32,
        },
    )
    socket_listen_backlog_size: int = field(
        default=1024,
        metadata={
            "doc": "Kafka's socket.listen.backlog.size (KIP-764): pending connections the kernel queues per listener.",
            "min": 1,
            "max": 65535,
        },
    )
    shutdown_timeout_seconds: float = field(
        default=30.0,
        metadata={
            "doc": "On SIGTERM the proxy stops accepting and reading requests, and waits this long at most for "
            "the answers to requests already forwarded before it closes the connections and flushes usage.",
            **SECONDS,
        },
    )
    readiness_probe_seconds: float = field(
        default=2.0,
        metadata={
            "doc": "/readyz: how often the proxy asks the brokers for ApiVersions; when none answers within "
            "readiness_timeout_seconds (a frozen broker still accepts TCP connections) it reports not ready.",
            **SECONDS,
        },
    )
    readiness_timeout_seconds: float = field(
        default=2.0, metadata={"doc": "/readyz: how long a broker has to answer the readiness probe.", **SECONDS}
    )
    oauthbearer_principal_claim: str = field(
        default="sub",
        metadata={
            "doc": "The claim of an OAUTHBEARER token that names the user, as the broker's "
            "sasl.oauthbearer.sub.claim.name (set both alike)."
        },
    )
    workers: int = field(
        default=1,
        metadata={
            "doc": "Processes serving the same ports on this host (SO_REUSEPORT), one core each. Worker i serves "
            "its metrics on metrics.port + i (or metrics.worker_ports). With more than one, the quotas are shared "
            "through [cluster] redis_url, or each worker enforces 1/workers of them without it.",
            "min": 1,
            "max": 256,
        },
    )
    # The broker listeners' ports must be known before the cluster names its brokers, so that
    # check-config can keep them clear of the other ports and a firewall or Service can open them.
    broker_node_ids: tuple[int, int] = field(
        default=DEFAULT_BROKER_NODE_IDS,
        metadata={
            "doc": "The broker node ids the proxy expects, [first, last]: their listeners take ports "
            "broker_port_base + first .. broker_port_base + last, which no other port of the proxy may use. "
            "A broker outside the range is still served, with a warning naming this key.",
            "type": "array of two integers",
            "parse": _node_id_range,
        },
    )

    def broker_port(self, node_id: int) -> int:
        return self.broker_port_base + node_id

    def expects_node(self, node_id: int) -> bool:
        first, last = self.broker_node_ids
        return first <= node_id <= last


@dataclass(frozen=True)
class MetricsConfig:
    port: int = field(
        default=DEFAULT_METRICS_PORT,
        metadata={"doc": "Port of the HTTP server: /metrics, /healthz, /readyz, /quotas.", **PORT_RANGE},
    )
    host: str = field(
        default="127.0.0.1", metadata={"doc": "Address it binds to; 0.0.0.0 to let Prometheus on another host scrape."}
    )
    worker_ports: tuple[int, ...] = field(
        default=(),
        metadata={
            "doc": "The metrics port of each worker, worker 0 first, one per proxy.workers (worker 0's is then "
            "metrics.port's too). Empty: worker i uses metrics.port + i.",
            "type": "array of integers",
            "unit": "ports",
            **PORT_RANGE,
        },
    )
    # Entities (user, client-id) exported with series of their own; the rest fold into "other".
    max_entities: int = field(
        default=500,
        metadata={
            "doc": "Entities (user, client-id) exported with series of their own, the busiest first; the rest are "
            'summed into user="other" (about 15 series per entity).',
            "min": 1,
            "max": 100_000,
        },
    )

    def worker_port(self, worker: int) -> int:
        """The port of worker `worker`'s /metrics, /healthz, /readyz and /quotas."""
        return self.worker_ports[worker] if self.worker_ports else self.port + worker

    def worker_port_key(self, worker: int) -> str:
        """The key that sets worker `worker`'s metrics port, for messages."""
        return f"metrics.worker_ports[{worker}]" if self.worker_ports else "metrics.port"


@dataclass(frozen=True)
class ClusterConfig:
    """Quotas shared by several proxy processes (workers, replicas) through Redis."""

    redis_url: str = field(
        default="",
        metadata={
            "doc": 'Redis holding the shared quota buckets, e.g. "redis://10.0.0.5:6379/0". Empty: each '
            "process enforces its share of the quotas alone (see processes).",
            "check": _check_redis_url,
        },
    )
    processes: int = field(
        default=0,
        metadata={
            "doc": "Proxy processes sharing the quotas, all hosts together. Without Redis (or while it is "
            "unreachable and before any process registered in it) each enforces 1/processes of every quota.",
            "default": "proxy.workers",
            "min": 0,
            "max": 10_000,
        },
    )
    lease_seconds: float = field(
        default=0.1,
        metadata={
            "doc": "A busy entity's lease lasts about this long at its recent rate before it is renewed.",
            **SECONDS,
        },
    )
    key_prefix: str = field(
        default="quotagate:",
        metadata={
            "doc": "Prefix of every Redis key; proxies sharing quotas must use the same one.",
            "check": _check_key_prefix,
        },
    )
    redis_timeout_seconds: float = field(
        default=0.5,
        metadata={"doc": "A Redis call slower than this counts as Redis being unavailable.", **SECONDS},
    )
    redis_cluster_nodes: tuple[tuple[str, int], ...] = field(
        default=(),
        metadata={
            "type": 'array of "host:port" strings',
            "doc": 'A Redis Cluster instead of redis_url: seed nodes, e.g. ["10.0.0.5:6379", "10.0.0.6:6379"]; '
            "the others are discovered. Each bucket is one key, hash-tagged by entity, so each script call "
            "stays in one slot; each tick's pipeline is split per primary.",
            "parse": _host_ports,
        },
    )
    redis_sentinels: tuple[tuple[str, int], ...] = field(
        default=(),
        metadata={
            "type": 'array of "host:port" strings',
            "doc": "A primary and its replicas under Sentinel instead of redis_url: the sentinels, e.g. "
            '["10.0.0.7:26379", "10.0.0.8:26379", "10.0.0.9:26379"]; the primary is asked of them at '
            "each (re)connection.",
            "parse": _host_ports,
        },
    )
    redis_sentinel_service: str = field(
        default="",
        metadata={"doc": "The name the sentinels monitor the primary under (required with redis_sentinels)."},
    )
    redis_sentinel_password_file: str = field(
        default="",
        metadata={
            "doc": "File holding the sentinels' own password (their requirepass), if they have one; the "
            "primary takes redis_username and redis_password_file.",
            "file": True,
        },
    )
    redis_username: str = field(
        default="",
        metadata={"doc": "ACL user the proxy authenticates as (Redis 6+), for every topology. Empty: default."},
    )
    redis_password_file: str = field(
        default="",
        metadata={
            "doc": "File holding that user's password (one line), read at start-up; kept out of this file so "
            "that check-config and the logs never show it. Empty: no password.",
            "file": True,
        },
    )
    redis_tls: bool = field(
        default=False,
        metadata={
            "doc": "TLS to the cluster nodes and to the sentinels and the primary they name. With redis_url "
            "the scheme decides (rediss://)."
        },
    )
    redis_tls_ca: str = field(
        default="",
        metadata={
            "doc": "PEM file of the CA that signed the Redis servers' certificates. Empty: the system's CAs.",
            "file": True,
        },
    )

    @property
    def uses_redis(self) -> bool:
        return bool(self.redis_url or self.redis_cluster_nodes or self.redis_sentinels)


@dataclass(frozen=True)
class UsageConfig:
    """Usage records for the analysis pipeline (docs/usage-records.md); off unless enabled."""

    enabled: bool = field(default=False, metadata={"doc": "Write usage records for the pipeline."})
    sink: str = field(
        default="parquet",
        metadata={
            "doc": 'Where records go: "parquet" or "jsonl" files under directory, or a "kafka" topic.',
            "choices": ("parquet", "jsonl", "kafka"),
        },
    )
    records: str = field(
        default="aggregate",
        metadata={
            "doc": '"aggregate": one v2 record per interval and (user, client_id, api_key[, topic]); '
            '"request": one v1 record per request (verbose: for debugging).',
            "choices": ("aggregate", "request"),
        },
    )
    interval_seconds: float = field(
        default=1.0, metadata={"doc": 'The span one aggregate record covers (records = "aggregate").', **SECONDS}
    )
    directory: str = field(
        default="usage",
        metadata={
            "doc": 'Root of the date=YYYY-MM-DD/hour=HH/ partitioned files (sink = "parquet" or "jsonl"); '
            "relative to the config file's folder. Created if missing; the proxy refuses to start (exit 2) "
            "when it cannot write there."
        },
    )
    max_file_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "doc": "A file is closed and a new one started at this size (and every hour).",
            "min": 1024,
            "max": 2**40,
        },
    )
    max_file_seconds: float = field(
        default=60.0, metadata={"doc": "A Parquet file is closed (and readable) at least this often.", **SECONDS}
    )
    buffer_records: int = field(
        default=100_000,
        metadata={
            "doc": "Records (or aggregate keys) held between flushes at most; beyond, they are dropped and counted.",
            "min": 1,
            "max": 10_000_000,
        },
    )
    buffer_records_per_user: int = field(
        default=50_000,
        metadata={
            "doc": "One user's share of buffer_records: beyond it, that user's records (or new aggregate keys) are "
            "dropped and counted, so that a tenant inventing client ids cannot take the buffer the others' "
            "records need.",
            "default": "buffer_records / 2",
            "min": 1,
            "max": 10_000_000,
        },
    )
    topics_per_entity: int = field(
        default=1000,
        metadata={
            "doc": "Produce topics given a row of their own per (user, client_id), interval and flush (v2 aggregates); "
            'the others (and names over 249 characters) are summed in one row whose topic is "<other topics>" '
            "and counted in quotagate_usage_topics_folded_total. Bounds what a client inventing topic names costs.",
            "min": 1,
            "max": 1_000_000,
        },
    )
    flush_interval_seconds: float = field(
        default=1.0, metadata={"doc": "How often collected records are handed to the sink.", **SECONDS}
    )
    kafka_bootstrap_servers: tuple[str, ...] = field(
        default=(),
        metadata={
            "doc": 'Cluster the "kafka" sink writes to (directly, not through the proxy), with '
            "kafka_security_protocol.",
            "type": 'array of "host:port" strings',
            "default": "proxy.bootstrap_servers",
            "parse": _host_port_strings,
        },
    )
    kafka_topic: str = field(default="quotagate-usage", metadata={"doc": 'Topic of the "kafka" sink.'})
    proxy_id: str = field(
        default="",
        metadata={"doc": "Names this proxy in its records and file names.", "default": "the host name"},
    )
    kafka_security_protocol: str = field(
        default="",
        metadata={
            "doc": 'How the "kafka" sink connects: "PLAINTEXT", "SSL", "SASL_PLAINTEXT" or "SASL_SSL". TLS uses '
            "[upstream.tls] (its CAs and client certificate) when set, else the system's CAs.",
            "default": '"SSL" when [upstream.tls] is set, else "PLAINTEXT"',
            "choices": ("", "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
        },
    )
    kafka_sasl_mechanism: str = field(
        default="PLAIN",
        metadata={
            "doc": 'SASL mechanism of the "kafka" sink: "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512".',
            "choices": ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"),
        },
    )
    kafka_sasl_username: str = field(default="", metadata={"doc": 'SASL user of the "kafka" sink.'})
    kafka_sasl_password: str = field(
        default="",
        repr=False,  # never in a log line
        metadata={"doc": "Its password; prefer kafka_sasl_password_env, which keeps it out of this file."},
    )
    kafka_sasl_password_env: str = field(
        default="",
        metadata={"doc": "An environment variable holding the SASL password (read when the proxy starts)."},
    )

    @property
    def kafka_sasl(self) -> bool:
        return self.kafka_security_protocol.startswith("SASL_")

    @property
    def interval_ms(self) -> int:
        return round(self.interval_seconds * 1000)


@dataclass(frozen=True)
class AdminConfig:
    """Kafka's quota admin APIs (kafka-configs.sh, Admin.describeClientQuotas/alterClientQuotas)."""

    quota_api: str = field(
        default="proxy",
        metadata={
            "doc": '"proxy": the proxy answers DescribeClientQuotas and AlterClientQuotas from its own quotas '
            '(this file plus the state file); "forward": they pass to the cluster unchanged and set the '
            "brokers' own quotas.",
            "choices": ("proxy", "forward"),
        },
    )
    alter_principals: tuple[str, ...] = field(
        default=(),
        metadata={
            "doc": 'Who may alter the proxy\'s quotas: SASL user names ("admin" or "User:admin"). Anyone else '
            "gets CLUSTER_AUTHORIZATION_FAILED (describe_access says who may describe them). Without SASL every "
            'client is "ANONYMOUS": listing it lets anyone who can reach the proxy alter quotas. Empty: nobody may.',
            "type": "array of strings",
            "parse": _user_names,
        },
    )
    describe_access: str = field(
        default=DESCRIBE_ACCESS_BROKER,
        metadata={
            "doc": 'Who may describe the proxy\'s quotas (DescribeClientQuotas). "broker": whom the broker lets '
            "describe its own, as the broker decides it (DESCRIBE_CONFIGS on the cluster where an authorizer is "
            "set, anyone where none is): the request goes to the broker on the client's own connection first, and "
            "the proxy answers with its quotas unless the broker refused it (CLUSTER_AUTHORIZATION_FAILED is passed "
            'on as the broker sent it). "alter_principals": only the users listed there, answered by the proxy '
            'alone. "anyone": every client, authenticated or not on a listener without SASL.',
            "choices": DESCRIBE_ACCESS_MODES,
        },
    )
    state_file: str = field(
        default="",
        metadata={
            "doc": "Where quotas set through the API are kept (JSON, written atomically); relative to the config "
            "file's folder. Per entity and key, a value set through the API wins over this file's; a key the API "
            "removed stays removed while this file sets it; /quotas shows which source each quota came from. "
            "Beside it (quotas.json -> quotas.buckets.json) a process that shares no quota keeps its buckets' "
            "levels across restarts. When it writes there (those levels, or alter_principals not empty) the proxy "
            "refuses to start (exit 2) if it cannot write the folder.",
            "default": "the config file's path + .quotas.json",
        },
    )


# The keys of one [[quotas]] entry: name -> (TOML type, meaning). parse_config accepts exactly these.
QUOTA_ENTRY_KEYS: dict[str, tuple[str, str]] = {
    "user": ("string", 'The user (SASL principal name; `ANONYMOUS` without SASL), or `"<default>"` for any user.'),
    "client_id": ("string", 'The client.id, or `"<default>"` for any client-id.'),
    "ip": (
        "string",
        'Instead of user and client_id: a client address, or `"<default>"` for any address (Kafka\'s ip entity, '
        "KIP-612); such an entry sets connection_creation_rate only.",
    ),
    IpQuotaKey.CONNECTION_CREATION_RATE: (
        "integer",
        "With ip: new connections per second from that address, for the whole proxy; a connection over the rate "
        "is closed after the time the rate calls for (at most one quota window), as the broker does.",
    ),
    "client_id_prefix": (
        "string",
        "Instead of client_id: every client.id that starts with it (Redpanda's `client-id-prefix`), sharing one "
        "bucket; just below an exact client_id entry of the same shape, longest prefix first (docs/quotas.md).",
    ),
    QuotaKey.PRODUCER_BYTE_RATE: ("integer", "Produce bytes per second, for the whole cluster behind the proxy."),
    QuotaKey.CONSUMER_BYTE_RATE: ("integer", "Fetch bytes per second, for the whole cluster behind the proxy."),
    QuotaKey.REQUEST_PERCENTAGE: ("number", "Request time, in % of one thread: 1 = 10 ms of request time per second."),
    QuotaKey.CONTROLLER_MUTATION_RATE: (
        "number",
        "Partitions created or deleted per second (CreateTopics, CreatePartitions, DeleteTopics; KIP-599).",
    ),
    QuotaKey.PRODUCER_IDS_RATE: (
        "number",
        "New idempotent producer IDs per second (KIP-936): a Produce whose producer ID the entity has not used "
        "within producer_id_window_seconds, over the rate, is refused (THROTTLING_QUOTA_EXCEEDED, retriable) "
        "with a throttle; IDs already seen pass (docs/quotas.md).",
    ),
    "shadow": (
        "boolean",
        "Try this entry's quotas without applying them: clients are charged and the time they would be held is "
        "reported (/metrics quotagate_shadow_*, usage records' shadow_throttle_ms), but never applied. Default false; "
        "set false (or remove) to make them binding: the debt run up meanwhile is kept (in one process: a "
        "shared quota's binding bucket starts from the shared level, docs/quotas.md).",
    ),
}


# The keys of one [[tenants]] entry (docs/quotas.md, "Tenants"). parse_config accepts exactly these.
TENANT_ENTRY_KEYS: dict[str, tuple[str, str]] = {
    "name": (
        "string",
        "The tenant's name (unique; at most 128 characters): its label in metrics, usage records and explain, and the "
        "name the pipeline's apply writes its quotas by.",
    ),
    "users": ("array of strings", "Members by principal: these user names exactly (`ANONYMOUS` without SASL)."),
    "user_rules": (
        "array of strings",
        "Members by principal rule, in the form of Kafka's principal mapping rules, `RULE:pattern/replacement/` "
        "(optionally `/L` or `/U`): a user is a member when a rule's pattern matches the whole user name and the "
        'result is the tenant\'s name, e.g. `"RULE:^svc-payments-.*$/payments/"` in tenant "payments".',
    ),
    "client_ids": ("array of strings", "Members by client.id, exactly."),
    "client_id_prefixes": (
        "array of strings",
        f"Members by client.id: every client.id that starts with one of these (each at most {MAX_PREFIX_CHARS} "
        "characters, as a `[[quotas]]` prefix).",
    ),
    **{str(key): QUOTA_ENTRY_KEYS[key] for key in QuotaKey},
    "shadow": (
        "boolean",
        "Try the tenant's quotas without applying them: charged and reported, never throttling. Default false.",
    ),
}


@dataclass(frozen=True)
class Config:
    """The whole file. Each field is a section (docs/configuration.md is generated from these)."""

    proxy: ProxyConfig = field(metadata={"doc": "The listeners and the Kafka cluster behind them. Required."})
    metrics: MetricsConfig = field(metadata={"doc": "The HTTP server for Prometheus and health checks."})
    proxy_tls: ListenerTlsConfig | None = field(
        default=None,
        metadata={
            "doc": "TLS to the clients, on every listener. Off unless given. Certificate files are read again "
            "when they change and on SIGHUP: new connections get the new certificates.",
            "toml_name": "proxy.tls",
        },
    )
    upstream_tls: UpstreamTlsConfig | None = field(
        default=None,
        metadata={
            "doc": "TLS to the brokers, for every connection the proxy opens to them. Off unless given; its "
            "files are read again as [proxy.tls]'s are.",
            "toml_name": "upstream.tls",
        },
    )
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
    tenants: Tenants = field(
        default_factory=Tenants,
        metadata={
            "doc": "Tenants: named groups of entities (by user, user rule, client.id or client.id prefix) with one "
            "quota per key shared by all their members, held together with each member's own quota: whichever binds "
            'first holds it (docs/quotas.md, "Tenants"). An entity two tenants match is in the first that takes it '
            "by its user, else in the first that takes it by its client id. Each "
            "entry needs a name and at least one member rule; quotas are optional (a tenant without any only labels "
            "its members' usage and metrics).",
            "toml": "array of tables",
            "keys": TENANT_ENTRY_KEYS,
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
    admin: AdminConfig = field(
        default_factory=AdminConfig,
        metadata={
            "doc": "Kafka's quota admin APIs, answered by the proxy (kafka-configs.sh --bootstrap-server <proxy>)."
        },
    )
    cluster: ClusterConfig = field(
        default_factory=ClusterConfig,
        metadata={"doc": "Quotas shared by several proxy processes and hosts through Redis; off unless set."},
    )

    @property
    def shares_quotas(self) -> bool:
        """Whether several processes enforce these quotas together (workers or a Redis)."""
        return self.proxy.workers > 1 or self.cluster.uses_redis or self.cluster.processes > 1

    @property
    def processes(self) -> int:
        """How many processes share the quotas when Redis cannot tell."""
        return self.cluster.processes or self.proxy.workers


def load_config(path: str | Path) -> Config:
    """The file's configuration, with the paths the proxy writes made absolute."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("file", f"cannot read {path}: {exc.strerror}") from exc
    return _with_absolute_paths(parse_config(text), Path(path).absolute())


def _with_absolute_paths(config: Config, path: Path) -> Config:
    """[admin] state_file and [usage] directory taken from the config file's folder when relative
    (never from wherever the process was started); the state file defaults to FILE.quotas.json."""
    state_file = path.parent / config.admin.state_file if config.admin.state_file else Path(f"{path}.quotas.json")
    directory = path.parent / config.usage.directory
    return replace(
        config,
        admin=replace(config.admin, state_file=str(state_file)),
        usage=replace(config.usage, directory=str(directory)),
    )


def parse_config(text: str) -> Config:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError("file", f"not valid TOML: {exc}") from exc
    _reject_unknown(
        "",
        data,
        {
            "proxy", "upstream", "metrics", "quotas", "tenants", "topic_thresholds", "usage", "admin", "cluster",
            *_WINDOW_KEYS,
        },
    )  # fmt: skip
    proxy = dict(_section(data, "proxy", required=True))
    proxy_tls = proxy.pop("tls", None)
    upstream = _section(data, "upstream", required=False)
    _reject_unknown("upstream.", upstream, {"tls"})
    proxy_config = _parse_proxy(proxy)
    metrics_config = _parse_metrics(_section(data, "metrics", required=False), proxy_config.workers)
    _check_ports(proxy_config, metrics_config)
    tenants = _parse_tenants(data.get("tenants", []))
    return Config(
        proxy=proxy_config,
        metrics=metrics_config,
        proxy_tls=_parse_tls("proxy.tls", ListenerTlsConfig, proxy_tls),
        upstream_tls=_parse_tls("upstream.tls", UpstreamTlsConfig, upstream.get("tls")),
        quotas=_parse_quotas(data.get("quotas", []), tenants),
        tenants=tenants,
        windows=QuotaWindows(**_key_values("", QuotaWindows, data)),
        topic_thresholds=_parse_topic_thresholds(data.get("topic_thresholds")),
        usage=_parse_usage(_section(data, "usage", required=False)),
        admin=AdminConfig(**section_values("admin.", AdminConfig, _section(data, "admin", required=False))),
        cluster=_parse_cluster(_section(data, "cluster", required=False)),
    )


def _parse_cluster(table: dict[str, Any]) -> ClusterConfig:
    cluster = ClusterConfig(**section_values("cluster.", ClusterConfig, table))
    given = [key for key in ("redis_url", "redis_cluster_nodes", "redis_sentinels") if getattr(cluster, key)]
    if len(given) > 1:
        raise ConfigError(
            f"cluster.{given[1]}",
            f"give one of redis_url, redis_cluster_nodes, redis_sentinels, not {' and '.join(given)}",
        )
    service, sentinels = cluster.redis_sentinel_service, cluster.redis_sentinels
    if sentinels and not service:
        raise ConfigError(
            "cluster.redis_sentinel_service", "is required with redis_sentinels: the monitored primary's name"
        )
    if service and not sentinels:
        raise ConfigError("cluster.redis_sentinel_service", "is only used with redis_sentinels")
    if cluster.redis_tls and cluster.redis_url:
        raise ConfigError(
            "cluster.redis_tls", "is for redis_cluster_nodes and redis_sentinels; with redis_url write rediss://"
        )
    if cluster.redis_tls_ca and not (cluster.redis_tls or cluster.redis_url.startswith("rediss://")):
        raise ConfigError("cluster.redis_tls_ca", "is only used with TLS: redis_tls = true, or a rediss:// redis_url")
    if cluster.redis_sentinel_password_file and not sentinels:
        raise ConfigError("cluster.redis_sentinel_password_file", "is only used with redis_sentinels")
    return cluster


def _parse_tls(name: str, section: type[_Tls], table: Any) -> _Tls | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError(name, f"must be a table ([{name}])")
    tls = section(**section_values(name + ".", section, table))
    problem = tls.problem()
    if problem is not None:
        key, what = problem
        raise ConfigError(f"{name}.{key}", what)
    return tls


def _parse_usage(table: dict[str, Any]) -> UsageConfig:
    usage_values = section_values("usage.", UsageConfig, table)
    if "buffer_records_per_user" not in table:  # half the buffer, as if the file gave it
        usage_values["buffer_records_per_user"] = max(1, usage_values["buffer_records"] // 2)
    usage = UsageConfig(**usage_values)
    interval = usage.interval_seconds
    if interval * 1000 != int(interval * 1000) or interval < 0.001:
        raise ConfigError("usage.interval_seconds", f"must be a whole number of milliseconds, got {interval!r}")
    protocol = usage.kafka_security_protocol
    if protocol.startswith("SASL_"):
        if not usage.kafka_sasl_username:
            raise ConfigError("usage.kafka_sasl_username", f"is required with kafka_security_protocol = {protocol!r}")
        if not usage.kafka_sasl_password and not usage.kafka_sasl_password_env:
            raise ConfigError(
                "usage.kafka_sasl_password", f"(or kafka_sasl_password_env) is required with {protocol!r}"
            )
    elif usage.kafka_sasl_username or usage.kafka_sasl_password or usage.kafka_sasl_password_env:
        raise ConfigError(
            "usage.kafka_security_protocol", 'must be "SASL_PLAINTEXT" or "SASL_SSL" when SASL credentials are given'
        )
    return usage


def _parse_topic_thresholds(table: Any) -> TopicThresholds | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ConfigError("topic_thresholds", "must be a table ([topic_thresholds])")
    _reject_unknown("topic_thresholds.", table, {"total_bytes_in_per_sec", "topics"})
    if "total_bytes_in_per_sec" not in table:
        raise ConfigError("topic_thresholds.total_bytes_in_per_sec", "is required when [topic_thresholds] is given")
    total = _checked_integer("topic_thresholds.total_bytes_in_per_sec", table["total_bytes_in_per_sec"], 1, 2**53)
    topics = table.get("topics", {})
    if not isinstance(topics, dict):
        raise ConfigError("topic_thresholds.topics", "must be a table of topic = bytes per second")
    for name, value in topics.items():
        if isinstance(value, dict):  # TOML reads an unquoted orders.v1 = 5 as a table orders = {v1 = 5}
            raise ConfigError(
                f"topic_thresholds.topics.{name}",
                "is a table, not bytes per second; quote a topic name that holds dots: "
                f'"{name}.{next(iter(value), "")}" = ...',
            )
    # Looked up by name, not by splitting a dotted key: topic names may hold dots.
    per_topic = {
        name: _checked_integer(f"topic_thresholds.topics.{name}", value, 1, 2**53) for name, value in topics.items()
    }
    if sum(per_topic.values()) > total:
        raise ConfigError(
            "topic_thresholds.topics",
            f"thresholds add up to {sum(per_topic.values())}, more than total_bytes_in_per_sec = {total}",
        )
    return TopicThresholds(total, per_topic)


# Named after the broker settings they mirror (quota.window.num, ...); they size the default bursts.
_WINDOW_KEYS = {f.name: f.default for f in fields(QuotaWindows)}
_ENTITY_KEYS = {"user", "client_id", "client_id_prefix", "ip"}
_QUOTA_KEYS = {key.value for key in QuotaKey}
_IP_KEY = IpQuotaKey.CONNECTION_CREATION_RATE.value


def _parse_quotas(entries: Any, tenants: Tenants | None = None) -> QuotaTable:
    if not isinstance(entries, list):
        raise ConfigError("quotas", "must be an array of tables ([[quotas]])")
    table: dict[QuotaEntity, dict[QuotaKey, float]] = {}
    where: dict[QuotaEntity, int] = {}
    shadow: set[QuotaEntity] = set()
    for index, entry in enumerate(entries):
        prefix = f"quotas[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(prefix, "must be a table ([[quotas]])")
        _reject_unknown(prefix + ".", entry, _ENTITY_KEYS | _QUOTA_KEYS | {_IP_KEY, "shadow"})
        if "ip" in entry:
            entity, values = _parse_ip_quota(entry, prefix)
            if entity in where:
                raise ConfigError(prefix, f"{entity} is already given quotas in quotas[{where[entity]}]")
            where[entity] = index
            table[entity] = values  # type: ignore[assignment]
            continue
        if _IP_KEY in entry:
            raise ConfigError(f"{prefix}.{_IP_KEY}", 'is a quota of the ip entity: give it with ip = "<address>"')
        user = _entity_name(entry, prefix, "user")
        client_id = _entity_name(entry, prefix, "client_id")
        client_id_prefix = _entity_name(entry, prefix, "client_id_prefix")
        if client_id_prefix is not None:
            if client_id is not None:
                raise ConfigError(f"{prefix}.client_id_prefix", "cannot be given with client_id (one or the other)")
            problem = client_id_prefix_problem(client_id_prefix)
            if problem is not None:
                raise ConfigError(f"{prefix}.client_id_prefix", problem)
        if user is None and client_id is None and client_id_prefix is None:
            raise ConfigError(
                prefix,
                'needs user, client_id or both (or client_id_prefix for client_id; "<default>" names the default)',
            )
        entity = QuotaEntity(user, client_id, client_id_prefix)
        if entity in where:
            raise ConfigError(prefix, f"{entity} is already given quotas in quotas[{where[entity]}]")
        where[entity] = index
        values = {}
        for name in sorted(_QUOTA_KEYS & entry.keys()):
            values[QuotaKey(name)] = _quota_value(entry[name], f"{prefix}.{name}", QuotaKey(name))
        if not values:
            raise ConfigError(prefix, f"sets no quota (one of: {', '.join(sorted(_QUOTA_KEYS))})")
        table[entity] = values
        shadow_flag = entry.get("shadow", False)
        if not isinstance(shadow_flag, bool):
            raise ConfigError(f"{prefix}.shadow", f"must be true or false, got {shadow_flag!r}")
        if shadow_flag:
            shadow.add(entity)
    return QuotaTable(table, frozenset(shadow), tenants)


def _parse_tenants(entries: Any) -> Tenants:
    """[[tenants]]: each a name, member rules, optional quotas (the keys of [[quotas]]) and shadow. An
    exact user, client id or prefix named by two tenants is refused (an entity two tenants match is in
    the first by its user, else the first by its client id: docs/quotas.md)."""
    if not isinstance(entries, list):
        raise ConfigError("tenants", "must be an array of tables ([[tenants]])")
    tenants: list[Tenant] = []
    named: dict[tuple[str, str], str] = {}  # (list, member) -> the tenant naming it
    for index, entry in enumerate(entries):
        prefix = f"tenants[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(prefix, "must be a table ([[tenants]])")
        _reject_unknown(prefix + ".", entry, set(TENANT_ENTRY_KEYS))
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{prefix}.name", f"must be a non-empty string, got {name!r}")
        if len(name) > MAX_NAME_CHARS:
            raise ConfigError(f"{prefix}.name", f"must be at most {MAX_NAME_CHARS} characters, got {len(name)}")
        if any(tenant.name == name for tenant in tenants):
            raise ConfigError(f"{prefix}.name", f"{name!r} is already a tenant's name")
        members: dict[str, tuple[str, ...]] = {}
        for key in TENANT_LISTS:
            values = entry.get(key, [])
            if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
                raise ConfigError(f"{prefix}.{key}", f"must be an array of non-empty strings, got {values!r}")
            for value in values:
                if len(value) > MAX_NAME_CHARS and key != "user_rules":
                    raise ConfigError(f"{prefix}.{key}", f"must be at most {MAX_NAME_CHARS} characters: {value!r}")
                if value == DEFAULT and key != "user_rules":  # [[quotas]]' default entity, not a name
                    raise ConfigError(
                        f"{prefix}.{key}",
                        f"{DEFAULT} is no one's name here (in [[quotas]] it is the default entity); to make "
                        f'every user a member write user_rules = ["RULE:^.*$/{name}/"]',
                    )
                if key == "client_id_prefixes" and (problem := client_id_prefix_problem(value)) is not None:
                    raise ConfigError(f"{prefix}.{key}", f"{value!r} {problem}")
                other = named.setdefault((key, value), name)
                if other != name:
                    raise ConfigError(f"{prefix}.{key}", f"{value!r} is already a member rule of tenant {other!r}")
                shadowing = _earlier_tenant_matching(tenants, key, value)
                if shadowing is not None:
                    raise ConfigError(
                        f"{prefix}.{key}",
                        f"{value!r} can never make anyone a member of {name!r}: tenant {shadowing[0]!r}, earlier in "
                        f"the file, takes every entity it names (by {shadowing[1]}; an entity is in the first tenant "
                        "that takes it by this kind of rule)",
                    )
            members[key] = tuple(values)
        if not any(members.values()):
            raise ConfigError(prefix, f"has no members (give one of: {', '.join(TENANT_LISTS)})")
        quotas = {
            QuotaKey(key): _quota_value(entry[key], f"{prefix}.{key}", QuotaKey(key))
            for key in sorted(_QUOTA_KEYS & entry.keys())
        }
        shadow_flag = entry.get("shadow", False)
        if not isinstance(shadow_flag, bool):
            raise ConfigError(f"{prefix}.shadow", f"must be true or false, got {shadow_flag!r}")
        try:
            tenants.append(Tenant(name, **members, quotas=quotas, shadow=shadow_flag))
        except ValueError as exc:  # a user rule that is not one
            raise ConfigError(f"{prefix}.user_rules", str(exc)) from exc
    return Tenants(tuple(tenants))


def _earlier_tenant_matching(tenants: list[Tenant], key: str, value: str) -> tuple[str, str] | None:
    """The earlier tenant, and its rule, that takes every entity an exact user, client id or prefix
    names (making it a dead rule), or None. A user rule's users cannot be listed, so it is not checked."""
    for tenant in tenants:
        if key == "users":
            rule = tenant.matches_user(value)
        elif key == "client_ids":
            rule = tenant.matches_client_id(value)
        elif key == "client_id_prefixes":  # every id with `value` also starts with an earlier, shorter prefix
            shorter = (prefix for prefix in tenant.client_id_prefixes if value.startswith(prefix))
            rule = next((rule_text("client_id_prefix", prefix) for prefix in shorter), None)
        else:
            rule = None
        if rule is not None:
            return tenant.name, rule
    return None


def _parse_ip_quota(entry: dict[str, Any], prefix: str) -> tuple[QuotaEntity, dict[IpQuotaKey, float]]:
    """An [[quotas]] entry for the ip entity (KIP-612): ip and connection_creation_rate, nothing else."""
    others = sorted(entry.keys() - {"ip", _IP_KEY})
    if others:
        raise ConfigError(
            f"{prefix}.{others[0]}", "cannot be given with ip (an ip entry sets connection_creation_rate only)"
        )
    name = _entity_name(entry, prefix, "ip")
    address = None if name is None else ip_entity_name(name)
    if address is None:
        raise ConfigError(f"{prefix}.ip", f'must be an IP address or "<default>", got {name!r}')
    if _IP_KEY not in entry:
        raise ConfigError(prefix, f"sets no quota (an ip entry sets {_IP_KEY})")
    value = entry[_IP_KEY]
    problem = (
        f"must be a number, got {value!r}"
        if isinstance(value, bool) or not isinstance(value, int | float)
        else connection_creation_rate_problem(value)
    )
    if problem is not None:
        raise ConfigError(f"{prefix}.{_IP_KEY}", problem)
    return QuotaEntity(ip=address), {IpQuotaKey.CONNECTION_CREATION_RATE: float(value)}


def _entity_name(entry: dict[str, Any], prefix: str, key: str) -> str | None:
    value = entry.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"{prefix}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _quota_value(value: Any, key: str, quota_key: QuotaKey) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(key, f"must be a number > 0, got {value!r}")
    problem = quota_value_problem(quota_key, value)
    if problem is not None:
        raise ConfigError(key, problem)
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
    values = section_values("proxy.", ProxyConfig, table)
    listen_host = values["listen_host"]
    if "advertised_host" in table:
        if values["advertised_host"] in WILDCARD_HOSTS:
            raise ConfigError("proxy.advertised_host", "must be a host name or address clients can reach")
    elif listen_host in WILDCARD_HOSTS:
        raise ConfigError("proxy.advertised_host", f"is required when listen_host is {listen_host!r}")
    else:
        values["advertised_host"] = listen_host
    if "partial_frames_max_bytes_per_connection" not in table:  # half the pool, as if the file gave it
        values["partial_frames_max_bytes_per_connection"] = _computed_value(
            "proxy.",
            ProxyConfig,
            "partial_frames_max_bytes_per_connection",
            max(1, values["partial_frames_max_bytes"] // 2),
        )
    if "broker_port_base" not in table:  # port + 1, in range as if the file gave it
        values["broker_port_base"] = _computed_value("proxy.", ProxyConfig, "broker_port_base", values["port"] + 1)
    last = values["broker_node_ids"][1]
    if values["broker_port_base"] + last > 65535:
        raise ConfigError(
            "proxy.broker_node_ids",
            f"broker {last} would be served on port {values['broker_port_base'] + last}, above 65535: "
            "lower proxy.broker_port_base or the last node id",
        )
    values["oauthbearer_principal_claim"] = values["oauthbearer_principal_claim"] or "sub"
    return ProxyConfig(**values)


def _check_ports(proxy: ProxyConfig, metrics: MetricsConfig) -> None:
    """Refuses two listeners on one port, naming both keys: the bootstrap port, the broker range and
    every worker's metrics port. Whatever the hosts they bind: one port, one purpose, which is what
    firewall rules, load balancers and Services are written for."""
    first, last = proxy.broker_node_ids
    low, high = proxy.broker_port(first), proxy.broker_port(last)
    claims = [
        (proxy.port, proxy.port, "proxy.port", "the bootstrap listener"),
        (low, high, "proxy.broker_port_base", f"brokers {first}..{last} (proxy.broker_node_ids) on {low}..{high}"),
    ]
    for worker in range(proxy.workers):
        port = metrics.worker_port(worker)
        what = f"port {port}"
        if worker and not metrics.worker_ports:
            what = f"worker {worker}'s metrics port {port} (metrics.port + {worker})"
        if port > 65535:
            raise ConfigError(metrics.worker_port_key(worker), f"{what} is above 65535")
        claims.append((port, port, metrics.worker_port_key(worker), what))
    for index, (low, high, key, what) in enumerate(claims):
        for other_low, other_high, other_key, other_what in claims[:index]:
            if low <= other_high and other_low <= high:
                raise ConfigError(
                    key, f"{what} overlaps {other_key} ({other_what}): every listener needs a port of its own"
                )


def _parse_metrics(table: dict[str, Any], workers: int) -> MetricsConfig:
    values = section_values("metrics.", MetricsConfig, table)
    worker_ports, port = values["worker_ports"], values["port"]
    if worker_ports and len(worker_ports) != workers:
        raise ConfigError(
            "metrics.worker_ports",
            f"gives {len(worker_ports)} ports for proxy.workers = {workers}: give one per worker",
        )
    if worker_ports and "port" in table and port != worker_ports[0]:
        raise ConfigError(
            "metrics.worker_ports", f"worker 0's port {worker_ports[0]} is not metrics.port = {port}: leave one out"
        )
    if worker_ports:
        values["port"] = worker_ports[0]
    return MetricsConfig(**values)


# ------------------------------------------------------------------------ one parser for every section


def section_values(prefix: str, section: type, table: dict[str, Any]) -> dict[str, Any]:
    """The section's fields as keyword arguments: each key the table gives, checked by its field, or
    its default. `prefix` (`proxy.`) starts the key named in an error."""
    _reject_unknown(prefix, table, {key.name for key in fields(section)})
    return _key_values(prefix, section, table)


def _key_values(prefix: str, section: type, table: dict[str, Any]) -> dict[str, Any]:
    """The fields of `section` read from `table` (other keys left alone)."""
    hints = _type_hints(section)
    return {
        key.name: _key_value(prefix + key.name, key, hints[key.name], key.metadata, table) for key in fields(section)
    }


def _computed_value(prefix: str, section: type, name: str, value: Any) -> Any:
    """A default computed from other keys, checked by its field as if the file gave it."""
    (spec,) = (key for key in fields(section) if key.name == name)
    return _key_value(prefix + name, spec, _type_hints(section)[name], spec.metadata, {name: value})


@cache
def _type_hints(section: type) -> dict[str, Any]:
    return get_type_hints(section)


def _key_value(key: str, spec: Field[Any], hint: Any, rules: Mapping[str, Any], table: dict[str, Any]) -> Any:
    required = spec.default is MISSING and spec.default_factory is MISSING
    value = table.get(spec.name)
    if value is None or (required and value in ("", [])):
        if required:
            raise ConfigError(key, "is required" + (f": {rules['required']}" if "required" in rules else ""))
        value = spec.default if spec.default is not MISSING else spec.default_factory()
        return float(value) if hint is float else value
    if "parse" in rules:
        return _checked(key, rules["parse"], value)
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"must be true or false, got {value!r}")
        return value
    if hint is int:
        return _checked_integer(key, value, rules["min"], rules["max"])
    if hint is float:
        return _checked_number(key, value, rules["max"])
    if hint is str:
        return _checked_string(key, value, rules)
    if get_origin(hint) is tuple and get_args(hint) == (int, Ellipsis):
        if not isinstance(value, list):
            raise ConfigError(
                key,
                f"must be an array of {rules.get('unit', 'integers')} in {rules['min']}..{rules['max']}, got {value!r}",
            )
        return tuple(
            _checked_integer(f"{key}[{index}]", item, rules["min"], rules["max"]) for index, item in enumerate(value)
        )
    raise TypeError(f'{key}: no parser for {hint!r}: give its field metadata a "parse"')


def _checked_string(key: str, value: Any, rules: Mapping[str, Any]) -> str:
    if not isinstance(value, str):
        raise ConfigError(key, f"must be a string, got {value!r}")
    if "choices" in rules and value not in rules["choices"]:
        raise ConfigError(key, f"must be one of {', '.join(rules['choices'])}, got {value!r}")
    if rules.get("file") and value and not Path(value).is_file():
        raise ConfigError(key, f"{value}: no such file")
    if "check" in rules:
        _checked(key, rules["check"], value)
    return value


def _checked(key: str, parse: Callable[[Any], Any], value: Any) -> Any:
    """What `parse` makes of the value; its ValueError becomes a ConfigError naming the key."""
    try:
        return parse(value)
    except ValueError as exc:
        raise ConfigError(key, str(exc)) from exc


def _checked_integer(key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(key, f"must be an integer in {low}..{high}, got {value!r}")
    return value


def _checked_number(key: str, value: Any, high: float) -> float:
    # Compared before float(): NaN fails both bounds, and an integer too large for a float fails the upper.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= high:
        raise ConfigError(key, f"must be a number > 0 and at most {high:g}, got {value!r}")
    return float(value)
