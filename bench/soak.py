"""Soak: one broker, quotagate with mixed quotas, mixed real clients at once, for a bounded time.

    python -m bench.soak [--seconds 600] [--port-base 25000] [--byte-rate 262144] [--window-num 11]
                         [--request-percentage 10] [--sample-seconds 10] [--warmup-seconds 20]
                         [--out bench/results/soak.json]

Tenants (all SASL/PLAIN users; the proxy's upstream is the broker's SASL_PLAINTEXT listener):

- alice, producer_byte_rate 256 KiB/s for the user (her client ids share it): Kafka's Java
  ProducerPerformance and a kafka-python producer, both unpaced, into soak-alice.
- bob, consumer_byte_rate 256 KiB/s: an aiokafka consumer (64 KiB fetches, a quarter second of
  quota each) of soak-bob, written before the clients start with 1.5 × what his quota lets him read.
- carol, request_percentage 10 (100 ms of request time per second): a confluent-kafka consumer of
  soak-feed polling with fetch.wait.max.ms=0, the KIP-124 busy poller.
- admin, no quota: the Java ProducerPerformance at 400 records/s and a confluent-kafka producer at
  200 records/s (1 KiB each) feed soak-feed; a confluent-kafka consumer reads both topics to the
  end (the check that every record written was consumed).

Every sample interval (10 s) it samples the proxy's /metrics (per-user bytes and request time, throttled
responses, connections, protocol errors), the clients' own counts, the proxy's RSS and CPU and the
load average. It prints a table and the pass/fail criteria, and writes everything to the JSON file.

Criteria: RSS growth after the first quarter of the run ≤ RSS_GROWTH_LIMIT_MB; each throttled
tenant's rate from its first throttle (and the 20-s warm-up) to the end, when its bucket's burst is
spent and the quota's steady rate holds, within ±10 % of its quota; zero client errors; every
record in both topics consumed by the unlimited consumer, and at least as many records in the
topics as the producers had acknowledged.

Ports (loopback, < 32768, clear of the tests' 29092-29999 + offsets, the bench's 39xxx and the
demo's 19xxx): port base + 92 (broker), + 93 (controller), + 94 (SASL listener), + 100 (proxy
bootstrap; broker 1 on + 101), + 109 (proxy metrics). Every process is started here and stopped
by its pid, also on failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import harness
from bench.harness import HOST, PROXY_READY_SECONDS, BenchError, Child, cpu_seconds, rss_mb
from kafka_rig import DEFAULT_SASL_USERS, Cluster, fresh_cluster, tool_command
from tests.support.kafka_helpers import create_topic

REPO_ROOT = harness.REPO_ROOT
BENCH_DIR = Path(__file__).resolve().parent


RSS_GROWTH_LIMIT_MB = 20.0
ACCURACY_TOLERANCE = 0.10
CATCH_UP_SECONDS = 90.0
RECORD_SIZE = 1024
FEED_TOPIC = "soak-feed"
ALICE_TOPIC = "soak-alice"
# bob reads a topic written before the clients start, with more than he can read at his quota: his
# demand never falls below it (the live feed, slowed by a loaded machine, might).
BOB_TOPIC = "soak-bob"
BOB_BACKLOG = 1.5  # seconds of the run × quota, in bytes
BACKLOG_BATCH_BYTES = 16384  # a quarter of bob's fetch
JAVA_FEED_RATE = 400  # records/s
CONFLUENT_FEED_RATE = 200


@dataclass(frozen=True)
class SoakQuotas:
    """alice's producer_byte_rate and bob's consumer_byte_rate (bytes/s), carol's request_percentage,
    and quota_window_num (the burst is byte_rate × window_num seconds). The quick mode of the test
    lowers the rate and the burst: on a machine shared with other suites, alice's two producers
    were seen to push only ~95 KB/s, not enough to spend an 11-s burst of 256 KiB/s in a minute."""

    byte_rate: int = 262144
    request_percentage: float = 10.0
    window_num: int = 11

    def toml(self) -> str:
        """Top-level keys first (TOML puts a key after a [section] in that section), then the tables."""
        return (
            f"quota_window_num = {self.window_num}\n"
            "[[quotas]]\n"
            f'user = "alice"\nproducer_byte_rate = {self.byte_rate}\n'
            f'[[quotas]]\nuser = "bob"\nconsumer_byte_rate = {self.byte_rate}\n'
            f'[[quotas]]\nuser = "carol"\nrequest_percentage = {self.request_percentage}\n'
        )

    def throttled(self) -> tuple[tuple[str, str, float], ...]:
        """(user, counter summed over the user's client ids, quota in the counter's unit per second)."""
        return (
            ("alice", "quotagate_produce_bytes_total", float(self.byte_rate)),
            ("bob", "quotagate_fetch_bytes_total", float(self.byte_rate)),
            ("carol", "quotagate_request_time_seconds_total", self.request_percentage / 100),
        )


_SERIES = re.compile(r"^(?P<name>\w+)\{(?P<labels>[^}]*)\}$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
# ProducerPerformance's 5-s window lines (its final summary adds percentiles, and is parsed apart).
_JAVA_WINDOW = re.compile(
    r"^(\d+) records sent, [\d.]+ records/sec \([\d.]+ MB/sec\), [\d.]+ ms avg latency, [\d.]+ ms max latency\.$"
)
_JAVA_SUMMARY = re.compile(r"^(\d+) records sent, .* ms 99\.9th\.$")
_JAVA_ERROR = re.compile(r"^\S*(Exception|Error)\b")


@dataclass(frozen=True)
class Pacing:
    """How often the run samples /metrics, and from when a throttled tenant's rate counts. The quick mode
    of the test samples every 5 s from 8 s: its quotas' bursts (2 s at 64 KiB/s) are spent within the
    first seconds, so the steady part still spans 4+ sample windows of 10 quota windows each."""

    sample_seconds: float = 10.0
    warmup_seconds: float = 20.0


@dataclass(frozen=True)
class Ports:
    base: int

    @property
    def broker(self) -> int:
        return self.base + 92

    @property
    def controller(self) -> int:
        return self.base + 93

    @property
    def sasl(self) -> int:
        return self.base + 94

    @property
    def proxy(self) -> int:
        return self.base + 100

    @property
    def metrics(self) -> int:
        return self.base + 109

    def all(self) -> list[int]:
        return [self.broker, self.controller, self.sasl, self.proxy, self.proxy + 1, self.metrics]


def per_user(metrics: dict[str, float], name: str) -> dict[str, float]:
    """A per-entity counter of /metrics summed by user."""
    totals: dict[str, float] = {}
    for key, value in metrics.items():
        found = _SERIES.match(key)
        if found and found["name"] == name:
            user = dict(_LABEL.findall(found["labels"])).get("user", "")
            totals[user] = totals.get(user, 0.0) + value
    return totals


def summed(metrics: dict[str, float], name: str) -> float:
    return sum(value for key, value in metrics.items() if key == name or key.startswith(name + "{"))


@dataclass
class Client:
    """A client process and what it reported last."""

    name: str
    user: str
    role: str  # "producer" or "consumer"
    topic: str
    child: Child
    java: bool = False
    last: dict[str, object] = field(default_factory=dict)

    def read(self) -> dict[str, object]:
        text = self.child.log_path.read_text(errors="replace")
        if self.java:
            self.last = java_report(text)
        else:
            lines = [line for line in text.splitlines() if line.startswith("{")]
            if lines:
                self.last = json.loads(lines[-1])
        return self.last

    @property
    def records(self) -> int:
        return int(self.last.get("records", 0))  # type: ignore[call-overload]

    @property
    def errors(self) -> int:
        return int(self.last.get("errors", 0))  # type: ignore[call-overload]


def java_report(text: str) -> dict[str, object]:
    """ProducerPerformance's counts so far: acknowledged records (its window lines, or its final
    summary once it has finished), payload bytes, and exception lines (it prints a stack trace
    for every failed send, and counts only successful ones)."""
    lines = text.splitlines()
    summary = [int(found[1]) for line in lines if (found := _JAVA_SUMMARY.match(line))]
    records = summary[-1] if summary else sum(int(found[1]) for line in lines if (found := _JAVA_WINDOW.match(line)))
    errors = [line for line in lines if _JAVA_ERROR.match(line)]
    return {
        "records": records,
        "bytes": records * RECORD_SIZE,
        "errors": len(errors),
        "error_samples": errors[:5],
        "final": bool(summary),
    }


def start_java_producer(
    workdir: Path, name: str, user: str, bootstrap: str, topic: str, records: int, rate: int
) -> Client:
    """ProducerPerformance as `user` (its --command-property cannot carry a JAAS line: it splits on
    every "="), acks=all, with a 1 MiB buffer so that a throttled one holds little when stopped."""
    password = DEFAULT_SASL_USERS[user]
    jaas = f'org.apache.kafka.common.security.plain.PlainLoginModule required username="{user}" password="{password}";'
    properties = workdir / f"{name}.properties"
    properties.write_text(
        f"bootstrap.servers={bootstrap}\nclient.id={name}\nacks=all\nbuffer.memory=1048576\n"
        f"security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.jaas.config={jaas}\n"
    )
    args = [
        "--topic", topic, "--num-records", str(records), "--record-size", str(RECORD_SIZE),
        "--throughput", str(rate), "--producer.config", str(properties),
    ]  # fmt: skip
    child = Child(name, tool_command("producer-perf", *args), workdir / f"{name}.log")
    return Client(name, user, "producer", topic, child, java=True)


def start_python_client(
    workdir: Path, name: str, user: str, kind: str, bootstrap: str, topic: str, *extra: str
) -> Client:
    cmd = [
        sys.executable, str(BENCH_DIR / "run_client.py"), kind, "--bootstrap", bootstrap, "--topic", topic,
        "--client-id", name, "--group", name, "--user", user, "--password", DEFAULT_SASL_USERS[user], *extra,
    ]  # fmt: skip
    child = Child(name, cmd, workdir / f"{name}.log", env={**os.environ, "PYTHONUNBUFFERED": "1"})
    role = "producer" if kind.endswith("producer") else "consumer"
    return Client(name, user, role, topic, child)


def log_end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    """Records in each topic (sum of its partitions' high watermarks; nothing is deleted here)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "soak-offsets"})
    try:
        totals = {}
        metadata = consumer.list_topics(timeout=10)
        for topic in topics:
            partitions = metadata.topics[topic].partitions
            totals[topic] = sum(
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in partitions
            )
        return totals
    finally:
        consumer.close()


def write_backlog(bootstrap: str, topic: str, records: int) -> None:
    """`records` records of RECORD_SIZE bytes, acks=1, straight to the broker (in this process: a JVM
    tool's start costs 5-20 s on a loaded machine, the records themselves well under one).

    Batches of at most BACKLOG_BATCH_BYTES: a fetch returns whole batches, at least one even past its
    max_bytes, so librdkafka's default 1 MB batches made bob's 64 KiB fetches 1 MB responses (16 s of
    the quick soak's 64 KiB/s quota each), and his rate over a minute swung 0.79-1.21x with the count
    of responses that fell in it."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 20, "batch.size": BACKLOG_BATCH_BYTES})
    failures: list[str] = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    value = os.urandom(RECORD_SIZE)
    for _ in range(records):
        while True:
            try:
                producer.produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
        producer.poll(0)
    left = producer.flush(120)
    if left or failures:
        raise BenchError(f"backlog of {topic}: {left} records unsent, failures {failures[:3]}")


def stop_client(client: Client, grace: float = 90.0) -> int | None:
    """SIGTERM and wait (producers flush first); the exit code (-15/143 for a JVM stopped by it)."""
    client.child.stop(grace)
    client.read()
    return client.child.proc.returncode


@dataclass
class Sample:
    t: float
    rss_mb: float
    cpu_s: float
    load1: float
    connections: float
    protocol_errors: float
    upstream_failures: float
    throttled: dict[str, float]
    counters: dict[str, dict[str, float]]
    clients: dict[str, dict[str, float]]


def take_sample(started: float, proxy: Child, ports: Ports, clients: list[Client]) -> Sample:
    metrics = harness.scrape(ports.metrics)
    counters = {
        name: per_user(metrics, name)
        for name in (
            "quotagate_produce_bytes_total",
            "quotagate_fetch_bytes_total",
            "quotagate_request_time_seconds_total",
        )
    }
    for client in clients:
        client.read()
    return Sample(
        t=round(time.monotonic() - started, 2),
        rss_mb=round(rss_mb(proxy.pid), 2),
        cpu_s=round(cpu_seconds(proxy.pid), 2),
        load1=os.getloadavg()[0],
        connections=summed(metrics, "quotagate_client_connections_open"),
        protocol_errors=summed(metrics, "quotagate_protocol_errors_total"),
        upstream_failures=summed(metrics, "quotagate_upstream_connect_failures_total"),
        throttled=per_user(metrics, "quotagate_throttled_responses_total"),
        counters=counters,
        clients={
            c.name: {"records": c.records, "bytes": float(c.last.get("bytes", 0)), "errors": c.errors} for c in clients
        },  # type: ignore[arg-type]
    )


def rate_between(first: Sample, last: Sample, counter: str, user: str) -> float:
    elapsed = last.t - first.t
    if elapsed <= 0:
        return 0.0
    return (last.counters[counter].get(user, 0.0) - first.counters[counter].get(user, 0.0)) / elapsed


def client_rate(first: Sample, last: Sample, clients: list[Client], user: str, role: str) -> float:
    """Payload bytes per second the user's clients of that role counted themselves."""
    elapsed = last.t - first.t
    names = [c.name for c in clients if c.user == user and c.role == role]
    moved = sum(last.clients[n]["bytes"] - first.clients[n]["bytes"] for n in names)
    return moved / elapsed if elapsed > 0 else 0.0


def print_row(sample: Sample, previous: Sample | None) -> None:
    if previous is None:
        print(f"{'t s':>6} {'alice KB/s':>10} {'bob KB/s':>9} {'carol ms/s':>10} {'admin in/out KB/s':>17} "
              f"{'RSS MB':>7} {'CPU %':>6} {'conns':>5} {'load':>5}")  # fmt: skip
        return
    span = sample.t - previous.t

    def kb(counter: str, user: str) -> float:
        return rate_between(previous, sample, counter, user) / 1000

    cpu = (sample.cpu_s - previous.cpu_s) / span * 100
    print(
        f"{sample.t:6.0f} {kb('quotagate_produce_bytes_total', 'alice'):10.1f} "
        f"{kb('quotagate_fetch_bytes_total', 'bob'):9.1f} "
        f"{rate_between(previous, sample, 'quotagate_request_time_seconds_total', 'carol') * 1000:10.1f} "
        f"{kb('quotagate_produce_bytes_total', 'admin'):8.1f}/{kb('quotagate_fetch_bytes_total', 'admin'):<8.1f} "
        f"{sample.rss_mb:7.1f} {cpu:6.1f} {sample.connections:5.0f} {sample.load1:5.1f}",
        flush=True,
    )


def evaluate(
    samples: list[Sample],
    clients: list[Client],
    consumed_check: dict[str, object],
    exits: dict[str, object],
    quotas: SoakQuotas,
    pacing: Pacing,
) -> dict[str, object]:
    first, last = samples[0], samples[-1]
    rss_from = next((s for s in samples if s.t >= max(pacing.warmup_seconds, last.t / 4)), first)
    accuracy: dict[str, dict[str, object]] = {}
    for user, counter, quota in quotas.throttled():
        # From the first sample after the tenant's first throttle (and the warm-up): its bucket's
        # burst is spent by then, so what follows is the quota's steady rate.
        steady_from = next(
            (s for s in samples if s.t >= pacing.warmup_seconds and s.throttled.get(user, 0) > 0 and s is not last),
            last,
        )
        rate = rate_between(steady_from, last, counter, user)
        pairs = [(a, b) for a, b in itertools.pairwise(samples) if a.t >= steady_from.t]
        windows = [rate_between(a, b, counter, user) / quota for a, b in pairs]
        role = "producer" if counter == "quotagate_produce_bytes_total" else "consumer"
        client = client_rate(steady_from, last, clients, user, role) if user != "carol" else None
        accuracy[user] = {
            "counter": counter,
            "quota_per_s": quota,
            "proxy_rate_per_s": round(rate, 3),
            "ratio": round(rate / quota, 4) if steady_from is not last else None,
            "ratio_per_window_min": round(min(windows), 3) if windows else None,
            "ratio_per_window_max": round(max(windows), 3) if windows else None,
            "client_payload_rate_per_s": None if client is None else round(client, 1),
            "from_s": steady_from.t,
            "to_s": last.t,
        }
    accuracy["alice"]["client_payload_rate_per_s"] = round(
        client_rate(steady_from, last, clients, "alice", "producer"), 1
    )
    accuracy["bob"]["client_payload_rate_per_s"] = round(client_rate(steady_from, last, clients, "bob", "consumer"), 1)
    client_errors = {c.name: c.errors for c in clients if c.errors}
    rss_growth = last.rss_mb - rss_from.rss_mb
    checks = {
        "rss_growth_bounded": rss_growth <= RSS_GROWTH_LIMIT_MB,
        "accuracy_within_10pct": all(
            a["ratio"] is not None and abs(a["ratio"] - 1) <= ACCURACY_TOLERANCE  # type: ignore[operator]
            for a in accuracy.values()
        ),
        "zero_client_errors": not client_errors and all(code in (0, -15, 143) for code in exits.values()),
        "zero_proxy_errors": last.protocol_errors == 0,
        "all_produced_records_consumed": bool(consumed_check["ok"]),
    }
    return {
        "checks": checks,
        "passed": all(checks.values()),
        "accuracy": accuracy,
        "rss_mb": {
            "from_s": rss_from.t,
            "at_from": rss_from.rss_mb,
            "end": last.rss_mb,
            "growth": round(rss_growth, 2),
            "max": max(s.rss_mb for s in samples),
            "limit_growth": RSS_GROWTH_LIMIT_MB,
        },
        "proxy_cpu_percent": round((last.cpu_s - first.cpu_s) / (last.t - first.t) * 100, 1) if last.t > first.t else 0,
        "client_errors": client_errors,
        "client_exit_codes": exits,
        "proxy_protocol_errors": last.protocol_errors,
        "proxy_upstream_connect_failures": last.upstream_failures,
        "throttled_responses": last.throttled,
        "connections_max": max(s.connections for s in samples),
        "load_average": {
            "min": min(s.load1 for s in samples),
            "max": max(s.load1 for s in samples),
            "mean": round(sum(s.load1 for s in samples) / len(samples), 2),
        },
        "consumed": consumed_check,
    }


def run(seconds: float, ports: Ports, workdir: Path, quotas: SoakQuotas, pacing: Pacing) -> dict[str, object]:
    cluster: Cluster | None = None
    proxy: Child | None = None
    clients: list[Client] = []
    try:
        cluster = fresh_cluster(
            f"soak-{ports.base}", 1, ports.broker, controller_base_port=ports.controller,
            sasl_users=DEFAULT_SASL_USERS, sasl_base_port=ports.sasl,
        )  # fmt: skip
        for topic in (FEED_TOPIC, ALICE_TOPIC, BOB_TOPIC):
            create_topic(cluster.bootstrap, topic, partitions=3)
        write_backlog(cluster.bootstrap, BOB_TOPIC, int(quotas.byte_rate * seconds * BOB_BACKLOG / RECORD_SIZE) + 1)
        config = (
            quotas.toml() + f'[proxy]\nbootstrap_servers = ["{HOST}:{ports.sasl}"]\nlisten_host = "{HOST}"\n'
            f'advertised_host = "{HOST}"\nport = {ports.proxy}\nbroker_port_base = {ports.proxy}\n'
            "broker_node_ids = [1, 8]\n"
            f'[metrics]\nhost = "{HOST}"\nport = {ports.metrics}\n'
        )
        proxy = harness.launch_quotagate(
            workdir, "quotagate-soak", config, ports.metrics, None, log_level="INFO", ready_seconds=PROXY_READY_SECONDS
        )
        bootstrap = f"{HOST}:{ports.proxy}"
        feed_java_records = int(JAVA_FEED_RATE * seconds)
        clients = [
            start_python_client(
                workdir, "verify", "admin", "confluent-consumer", bootstrap, f"{FEED_TOPIC},{ALICE_TOPIC}"
            ),
            start_python_client(
                workdir,
                "bob-aiokafka",
                "bob",
                "aiokafka-consumer",
                bootstrap,
                BOB_TOPIC,
                "--max-partition-fetch-bytes",
                "65536",
            ),
            start_python_client(
                workdir,
                "carol-busy-poller",
                "carol",
                "confluent-consumer",
                bootstrap,
                FEED_TOPIC,
                "--fetch-max-wait-ms",
                "0",
            ),
            start_java_producer(
                workdir, "feed-java", "admin", bootstrap, FEED_TOPIC, feed_java_records, JAVA_FEED_RATE
            ),
            start_python_client(
                workdir,
                "feed-confluent",
                "admin",
                "confluent-producer",
                bootstrap,
                FEED_TOPIC,
                "--rate",
                str(CONFLUENT_FEED_RATE),
                "--idempotent",
            ),
            start_java_producer(workdir, "alice-java", "alice", bootstrap, ALICE_TOPIC, 10**9, -1),
            start_python_client(
                workdir, "alice-kafka-python", "alice", "kafka-python-producer", bootstrap, ALICE_TOPIC
            ),
        ]
        started = time.monotonic()
        samples = [take_sample(started, proxy, ports, clients)]
        print_row(samples[0], None)
        while time.monotonic() - started < seconds:
            time.sleep(max(0.0, min(pacing.sample_seconds, seconds - (time.monotonic() - started))))
            proxy.check_alive()
            samples.append(take_sample(started, proxy, ports, clients))
            print_row(samples[-1], samples[-2])
        # Producers first (they flush); then the unlimited consumer must reach the end of both topics.
        exits: dict[str, object] = {}
        for client in clients:
            if client.role == "producer":
                exits[client.name] = stop_client(client)
        in_topics = log_end_offsets(cluster.bootstrap, [FEED_TOPIC, ALICE_TOPIC])
        acked = {
            topic: sum(c.records for c in clients if c.role == "producer" and c.topic == topic) for topic in in_topics
        }
        verify = clients[0]
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while time.monotonic() < deadline:
            verify.read()
            if all(dict(verify.last.get("per_topic", {})).get(t, 0) >= n for t, n in in_topics.items()):  # type: ignore[call-overload]
                break
            time.sleep(1)
        for client in clients:
            if client.role == "consumer":
                exits[client.name] = stop_client(client)
        consumed = dict(verify.last.get("per_topic", {}))  # type: ignore[call-overload]
        consumed_check = {
            "in_topics": in_topics,
            "acked_by_producers": acked,
            "consumed_by_verify": consumed,
            "consumed_by_carol": dict(clients[2].last.get("per_topic", {})),  # type: ignore[call-overload]
            "consumed_by_bob": dict(clients[1].last.get("per_topic", {})),  # type: ignore[call-overload]
            "ok": all(consumed.get(t, 0) == n and n >= acked[t] for t, n in in_topics.items()),
        }
        result = evaluate(samples, clients, consumed_check, exits, quotas, pacing)
        result["seconds"] = seconds
        result["pacing"] = pacing.__dict__
        result["quotas"] = quotas.__dict__
        result["port_base"] = ports.base
        result["samples"] = [sample.__dict__ for sample in samples]
        result["clients"] = {c.name: c.last for c in clients}
        return result
    finally:
        for client in clients:
            client.child.stop(10)
        if proxy is not None:
            proxy.stop()
        if cluster is not None:
            cluster.stop()


def print_summary(result: dict[str, object]) -> None:
    accuracy = result["accuracy"]
    assert isinstance(accuracy, dict)
    sample_seconds = result["pacing"]["sample_seconds"]  # type: ignore[index]
    print("\nquota accuracy over the steady part (proxy's count / quota):")
    for user, figures in accuracy.items():
        client = figures.get("client_payload_rate_per_s")
        extra = f", clients' own payload count {client / figures['quota_per_s']:.3f}x" if client is not None else ""
        windows = f"{figures['ratio_per_window_min']}..{figures['ratio_per_window_max']}"
        ratio = "never throttled" if figures["ratio"] is None else f"{figures['ratio']:.3f}x"
        print(
            f"  {user:6} {figures['counter']:37} {ratio} from {figures['from_s']:.0f} s "
            f"({sample_seconds:.0f}-s windows {windows}){extra}"
        )
    print(f"proxy RSS: {result['rss_mb']}; CPU {result['proxy_cpu_percent']} %; load average {result['load_average']}")
    print(f"consumed: {result['consumed']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--port-base", type=int, default=25000)
    parser.add_argument("--byte-rate", type=int, default=SoakQuotas.byte_rate, help="alice's and bob's quota, B/s")
    parser.add_argument("--window-num", type=int, default=SoakQuotas.window_num, help="quota_window_num")
    parser.add_argument(
        "--request-percentage", type=float, default=SoakQuotas.request_percentage, help="carol's quota, %% of a thread"
    )
    parser.add_argument("--sample-seconds", type=float, default=Pacing.sample_seconds, help="between /metrics samples")
    parser.add_argument(
        "--warmup-seconds", type=float, default=Pacing.warmup_seconds, help="before a tenant's rate counts"
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "soak.json")
    args = parser.parse_args(argv)
    ports = Ports(args.port_base)
    quotas = SoakQuotas(
        byte_rate=args.byte_rate, request_percentage=args.request_percentage, window_num=args.window_num
    )
    pacing = Pacing(sample_seconds=args.sample_seconds, warmup_seconds=args.warmup_seconds)
    return harness.run_in_workdir(
        "soak", ports.all(), args.out, lambda workdir: run(args.seconds, ports, workdir, quotas, pacing), print_summary
    )


if __name__ == "__main__":
    sys.exit(main())
