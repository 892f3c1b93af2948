"""Chaos: 3 KRaft brokers behind quotagate, two brokers killed with SIGKILL and restarted while an
idempotent acks=all producer keeps writing through the proxy; then every acknowledged record must
be read back through the proxy.

    python -m bench.chaos [--phase-seconds 20] [--port-base 25000] [--out bench/results/chaos.json]

The cluster: 3 combined broker+controller nodes (kafka_rig), topic "chaos" with 6
partitions, replication factor 3, min.insync.replicas 2. The producer: confluent-kafka,
enable.idempotence, acks=all, 1 000 records/s of 200 bytes, keys are sequence numbers; it writes the
sequence numbers that were acknowledged to a file (bench/run_client.py).

Timeline, each step one phase long: produce; kill -9 the leader of the most partitions that is not
the active controller; restart it and wait until every partition has its 3 replicas in sync; produce;
kill -9 the active controller (the KRaft quorum leader, which leads partitions too); restart it,
wait for the ISRs again; produce; stop the producer (it flushes, 120 s at most). Then a consumer
reads the whole topic through the proxy and compares.

Reported: acknowledged records lost (must be 0), records read that were never acknowledged (the
producer gave up or was stopped before their ack: allowed), duplicates and reorders within a
partition (0 expected from an idempotent producer), the producer's errors, the longest stretch
without an acknowledgement around each kill, and the proxy's view (upstream connect failures,
protocol errors, RSS).

Ports (loopback, < 32768): port base + 592..594 (brokers), + 692..694 (controllers), + 800
(proxy bootstrap; broker N on + 800 + N), + 809 (proxy metrics). Every process is started here
and stopped by its pid, also on failure.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench import harness
from bench.harness import HOST, PROXY_READY_SECONDS, BenchError, Child, rss_mb
from kafka_rig import Cluster, fresh_cluster
from tests.support.kafka_helpers import create_topic

REPO_ROOT = harness.REPO_ROOT
BENCH_DIR = Path(__file__).resolve().parent


TOPIC = "chaos"
PARTITIONS = 6
RATE = 1000  # records/s
RECORD_SIZE = 200
FLUSH_SECONDS = 120.0
ISR_WAIT_SECONDS = 120.0


def ports_of(base: int) -> dict[str, int]:
    return {"broker": base + 592, "controller": base + 692, "proxy": base + 800, "metrics": base + 809}


def active_controller(cluster: Cluster) -> int:
    """The KRaft quorum leader (Metadata's controller id is any broker in KRaft, not this), from
    DescribeQuorum sent to the brokers by kafka-python: kafka-metadata-quorum.sh's answer, without
    its JVM's start (5-50 s on a loaded machine)."""
    from kafka.admin import KafkaAdminClient

    alive = [f"{HOST}:{node.port}" for node in cluster.nodes if node.alive]
    admin = KafkaAdminClient(bootstrap_servers=alive, client_id="chaos-quorum", request_timeout_ms=30000)
    try:
        quorum = admin.describe_metadata_quorum()
    finally:
        admin.close()
    (partition,) = [p for topic in quorum["topics"] for p in topic["partitions"]]
    if partition["error"] is not None or partition["leader_id"] < 0:
        raise BenchError(f"no quorum leader in DescribeQuorum's answer: {quorum}")
    return int(partition["leader_id"])


def partition_state(cluster: Cluster) -> dict[int, tuple[int, list[int]]]:
    """partition -> (leader, in-sync replicas), asked of the brokers directly."""
    from confluent_kafka.admin import AdminClient

    alive = ",".join(f"{HOST}:{node.port}" for node in cluster.nodes if node.alive)
    metadata = AdminClient({"bootstrap.servers": alive}).list_topics(TOPIC, timeout=20)
    return {p.id: (p.leader, sorted(p.isrs)) for p in metadata.topics[TOPIC].partitions.values()}


def wait_for_full_isr(cluster: Cluster) -> float:
    """Seconds until every partition has all 3 replicas in sync again."""
    started = time.monotonic()
    while time.monotonic() - started < ISR_WAIT_SECONDS:
        state = partition_state(cluster)
        if len(state) == PARTITIONS and all(len(isr) == 3 for _, isr in state.values()):
            return time.monotonic() - started
        time.sleep(1)
    raise BenchError(f"ISRs not full {ISR_WAIT_SECONDS:.0f} s after the restart: {partition_state(cluster)}")


def kill_and_restart(
    cluster: Cluster, node_id: int, down_seconds: float, events: list[dict[str, object]], t0: float
) -> None:
    node = cluster.node(node_id)
    assert node.pid is not None and node.proc is not None
    os.kill(node.pid, signal.SIGKILL)
    node.proc.wait(30)
    events.append({"t": round(time.monotonic() - t0, 2), "event": f"kill -9 node {node_id}"})
    time.sleep(down_seconds)
    cluster.start_node(node_id, wait=180)
    events.append({"t": round(time.monotonic() - t0, 2), "event": f"node {node_id} restarted, in the cluster"})
    took = wait_for_full_isr(cluster)
    events.append({"t": round(time.monotonic() - t0, 2), "event": f"all ISRs full again ({took:.1f} s)"})


def leader_of_most_partitions(cluster: Cluster, besides: int) -> int:
    counts: dict[int, int] = {}
    for leader, _ in partition_state(cluster).values():
        if leader != besides:
            counts[leader] = counts.get(leader, 0) + 1
    if not counts:  # the controller leads everything: take any other node
        return next(node.node_id for node in cluster.nodes if node.node_id != besides)
    return max(counts, key=lambda leader: counts[leader])


def read_back(bootstrap: str) -> dict[int, list[int]]:
    """Every record of the topic, through the proxy: partition -> sequence numbers in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-read-back", "enable.auto.commit": False})
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=20)[1] for p in range(PARTITIONS)}
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seqs: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        positions = dict.fromkeys(range(PARTITIONS), 0)
        deadline = time.monotonic() + 300
        while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
            for msg in consumer.consume(5000, timeout=1):
                if msg.error() is not None:
                    raise BenchError(f"read-back: {msg.error()}")
                seqs[msg.partition()].append(int(msg.key()))
                positions[msg.partition()] = msg.offset() + 1
        if any(positions[p] < ends[p] for p in ends):
            raise BenchError(f"read-back stopped at {positions}, the ends are {ends}")
        return seqs
    finally:
        consumer.close()


def compare(acked_ranges: list[list[int]], seqs: dict[int, list[int]]) -> dict[str, object]:
    acked = {n for first, last in acked_ranges for n in range(first, last + 1)}
    read = [n for partition in seqs.values() for n in partition]
    unique = set(read)
    reorders = sum(1 for partition in seqs.values() for a, b in itertools.pairwise(partition) if b < a)
    lost = sorted(acked - unique)
    return {
        "acknowledged": len(acked),
        "read_back": len(read),
        "lost_acknowledged": len(lost),
        "lost_examples": lost[:20],
        "read_not_acknowledged": len(unique - acked),
        "duplicates": len(read) - len(unique),
        "reorders_within_partition": reorders,
    }


def ack_gaps(progress: list[tuple[float, int]], events: list[dict[str, object]]) -> list[dict[str, object]]:
    """The longest stretch with no new acknowledgement after each kill (from the producer's 1-s lines)."""
    gaps = []
    kills = [float(e["t"]) for e in events if str(e["event"]).startswith("kill")]  # type: ignore[arg-type]
    for index, killed in enumerate(kills):
        until = kills[index + 1] if index + 1 < len(kills) else float("inf")
        window = [(t, n) for t, n in progress if killed - 1 <= t < until]
        longest, stalled_since = 0.0, None
        for (_, previous), (t, n) in itertools.pairwise(window):
            if n == previous:
                stalled_since = stalled_since if stalled_since is not None else t - 1
                longest = max(longest, t - stalled_since)
            else:
                stalled_since = None
        gaps.append({"kill_at_s": killed, "longest_without_ack_s": round(longest, 1)})
    return gaps


def producer_progress(log: Path, started_offset: float) -> list[tuple[float, int]]:
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [(float(line["t"]) + started_offset, int(line["records"])) for line in lines]


def run(phase: float, base: int, workdir: Path, say: Callable[[str], None]) -> dict[str, object]:
    ports = ports_of(base)
    cluster: Cluster | None = None
    proxy: Child | None = None
    producer: Child | None = None
    events: list[dict[str, object]] = []
    try:
        cluster = fresh_cluster(f"chaos-{base}", 3, ports["broker"], controller_base_port=ports["controller"])
        create_topic(cluster.bootstrap, TOPIC, partitions=PARTITIONS, replication=3, **{"min.insync.replicas": "2"})
        servers = ", ".join(f'"{HOST}:{node.port}"' for node in cluster.nodes)
        config = (
            f'[proxy]\nbootstrap_servers = [{servers}]\nlisten_host = "{HOST}"\nadvertised_host = "{HOST}"\n'
            f"port = {ports['proxy']}\nbroker_port_base = {ports['proxy']}\n"
            "broker_node_ids = [1, 8]\nmetadata_refresh_seconds = 5\n"
            f'[metrics]\nhost = "{HOST}"\nport = {ports["metrics"]}\n'
        )
        proxy = harness.launch_quotagate(
            workdir, "quotagate-chaos", config, ports["metrics"], ports["proxy"] + 1, ready_seconds=PROXY_READY_SECONDS
        )
        bootstrap = f"{HOST}:{ports['proxy']}"
        acked_file = workdir / "acked.json"
        cmd = [
            sys.executable, str(BENCH_DIR / "run_client.py"), "confluent-producer", "--bootstrap", bootstrap,
            "--topic", TOPIC, "--client-id", "chaos-producer", "--acks", "all", "--idempotent",
            "--rate", str(RATE), "--record-size", str(RECORD_SIZE), "--flush-seconds", str(FLUSH_SECONDS),
            "--acked-file", str(acked_file),
        ]  # fmt: skip
        t0 = time.monotonic()
        producer = Child("producer", cmd, workdir / "producer.log", env={**os.environ, "PYTHONUNBUFFERED": "1"})
        events.append({"t": 0.0, "event": "producer started"})
        time.sleep(phase)
        first = leader_of_most_partitions(cluster, besides=active_controller(cluster))
        say(f"killing node {first} (partition leader, not the controller)")
        kill_and_restart(cluster, first, phase, events, t0)
        time.sleep(phase)
        second = active_controller(cluster)
        leads = sum(1 for leader, _ in partition_state(cluster).values() if leader == second)
        say(f"killing node {second} (the active controller, leader of {leads} partitions)")
        kill_and_restart(cluster, second, phase, events, t0)
        time.sleep(phase)
        producer.stop(FLUSH_SECONDS + 30)
        events.append(
            {"t": round(time.monotonic() - t0, 2), "event": f"producer stopped (exit {producer.proc.returncode})"}
        )
        final = json.loads([line for line in producer.log_path.read_text().splitlines() if line.startswith("{")][-1])
        say("reading the topic back through the proxy")
        seqs = read_back(bootstrap)
        comparison = compare(json.loads(acked_file.read_text()), seqs)
        metrics = harness.scrape(ports["metrics"])
        result: dict[str, object] = {
            "phase_seconds": phase,
            "events": events,
            "victims": {"partition_leader": first, "active_controller": second},
            "producer": {
                "records_acked": final["records"],
                "errors": final["errors"],
                "error_samples": final["error_samples"],
                "exit_code": producer.proc.returncode,
            },
            "ack_gaps": ack_gaps(producer_progress(producer.log_path, 0.0), events),
            "comparison": comparison,
            "proxy": {
                "rss_mb": round(rss_mb(proxy.pid), 1),
                "upstream_connect_failures": metrics.get("quotagate_upstream_connect_failures_total", 0.0),
                "protocol_errors": sum(
                    v for k, v in metrics.items() if k.startswith("quotagate_protocol_errors_total")
                ),
                "alive": proxy.proc.poll() is None,
            },
            "load_average": os.getloadavg(),
        }
        checks = {
            "zero_acknowledged_records_lost": comparison["lost_acknowledged"] == 0,
            "zero_producer_errors": final["errors"] == 0,
            "zero_duplicates": comparison["duplicates"] == 0,
            "zero_reorders": comparison["reorders_within_partition"] == 0,
            "proxy_alive": proxy.proc.poll() is None,
        }
        result["checks"] = checks
        result["passed"] = all(checks.values())
        return result
    finally:
        if producer is not None:
            producer.stop(10)
        if proxy is not None:
            proxy.stop()
        if cluster is not None:
            cluster.stop()


def print_summary(result: dict[str, object]) -> None:
    print(f"{'t s':>7}  event")
    for event in result["events"]:  # type: ignore[attr-defined]
        print(f"{event['t']:7.1f}  {event['event']}")
    print(f"producer: {result['producer']}")
    print(f"longest stretch without an ack after each kill: {result['ack_gaps']}")
    print(f"read back: {result['comparison']}")
    print(f"proxy: {result['proxy']}; load average {result['load_average']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--phase-seconds", type=float, default=20.0)
    parser.add_argument("--port-base", type=int, default=25000)
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "chaos.json")
    args = parser.parse_args(argv)
    ports = ports_of(args.port_base)
    wanted = [ports["broker"] + i for i in range(3)] + [ports["controller"] + i for i in range(3)]
    wanted += [ports["proxy"] + i for i in range(4)] + [ports["metrics"]]
    return harness.run_in_workdir(
        "chaos",
        wanted,
        args.out,
        lambda workdir: run(args.phase_seconds, args.port_base, workdir, lambda text: print(text, flush=True)),
        print_summary,
    )


if __name__ == "__main__":
    sys.exit(main())
