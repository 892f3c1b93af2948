"""Helpers shared by the integration tests: unique topics, socket ownership, produce/consume checks."""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer
from kafka.admin import KafkaAdminClient, NewTopic

ESTABLISHED = "01"


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 3, replication: int = 1, **configs: str) -> None:
    """Creates the topic and waits until Metadata shows every partition with a leader.

    A KRaft broker answers CreateTopics once the controller has committed the topic, and learns of
    it a moment later; a consumer group formed in that moment can be assigned nothing (Kafka's own
    tests wait the same way, TestUtils.waitForAllPartitionsMetadata).
    """
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication, topic_configs=configs)])
        wait_until(
            lambda: _all_partitions_led(admin.describe_topics([name]), partitions),
            30,
            f"topic {name}'s {partitions} partitions to have leaders",
            interval=0.05,
        )
    finally:
        admin.close()


def _all_partitions_led(topics: list[dict], partitions: int) -> bool:
    return any(
        topic["error_code"] == 0
        and len(topic["partitions"]) == partitions
        and all(p["error_code"] == 0 and p["leader_id"] >= 0 for p in topic["partitions"])
        for topic in topics
    )


def wait_until(condition: Callable[[], object], seconds: float, what: str, interval: float = 0.1) -> None:
    """Polls `condition` until it is true; fails naming `what` after `seconds` (a loaded machine
    takes its time: tests wait on the condition, never a fixed time that happens to suffice)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(interval)


def produce_usage_records(bootstrap: str, usage_topic: str, client_id: str, seconds: float = 20) -> list[dict]:
    """The per-request usage records (JSON) read from `usage_topic` from its start, until a produce
    record of `client_id` is among them or `seconds` pass: no fixed wait for the proxy's flush."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"}
    )
    consumer.subscribe([usage_topic])
    records: list[dict] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not any(r["client_id"] == client_id and r["api_key"] == 0 for r in records):
        records += [json.loads(m.value()) for m in consumer.consume(500, timeout=0.5) if m.error() is None]
    consumer.close()
    return records


def payloads(tag: str, count: int) -> list[tuple[bytes, bytes]]:
    """(key, value) pairs; keys spread records over partitions, values are unique and sized unevenly."""
    return [(f"k{i % 17}".encode(), f"{tag}-{i}-".encode() + os.urandom(i % 300)) for i in range(count)]


def by_partition(records: list[tuple[int, bytes, bytes]]) -> dict[int, list[tuple[bytes, bytes]]]:
    """Groups (partition, key, value) records by partition, keeping their order."""
    grouped: dict[int, list[tuple[bytes, bytes]]] = {}
    for partition, key, value in records:
        grouped.setdefault(partition, []).append((key, value))
    return grouped


def socket_owners() -> dict[str, int]:
    """Socket inode -> pid, for every process we may look at."""
    owners: dict[str, int] = {}
    for pid_dir in Path("/proc").iterdir():
        if not pid_dir.name.isdigit():
            continue
        try:
            for fd in (pid_dir / "fd").iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    owners[target[8:-1]] = int(pid_dir.name)
        except OSError:
            continue
    return owners


def established_connections_to(port: int) -> list[tuple[int, int | None]]:
    """(client-side local port, owning pid) of every established TCP connection to `port` on loopback.

    The socket table is read before the processes' descriptors, so a connection opened meanwhile
    cannot look ownerless; one closed meanwhile is left out if it is gone from a second reading.
    The pid is None only for a socket that is still established and that no process we can see holds.
    """
    sockets = _established_sockets_to(port)
    owners = socket_owners()
    unowned = {inode for _, inode in sockets if inode not in owners}
    if unowned:
        still_open = {inode for _, inode in _established_sockets_to(port)}
        sockets = [(local, inode) for local, inode in sockets if inode not in unowned or inode in still_open]
    return [(local, owners.get(inode)) for local, inode in sockets]


def _established_sockets_to(port: int) -> list[tuple[int, str]]:
    """(client-side local port, socket inode) of every established TCP connection to `port`."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == ESTABLISHED and int(remote.rsplit(":", 1)[1], 16) == port:
                found.append((int(local.rsplit(":", 1)[1], 16), inode))
    return found


def round_trip(port: int, frame: bytes, host: str = "127.0.0.1") -> bytes:
    """One request on a fresh connection to `port`: its response, without the size prefix."""
    with socket.create_connection((host, port), timeout=30) as sock:
        sock.sendall(frame)
        received = b""
        while len(received) < 4 or len(received) < 4 + int.from_bytes(received[:4], "big"):
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(received)} bytes")
            received += chunk
    return received[4:]
