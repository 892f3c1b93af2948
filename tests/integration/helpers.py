"""Helpers shared by the integration tests: unique topics, socket ownership, produce/consume checks."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from kafka.admin import KafkaAdminClient, NewTopic

ESTABLISHED = "01"


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def create_topic(bootstrap: str, name: str, partitions: int = 3, replication: int = 1, **configs: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, partitions, replication, topic_configs=configs)])
    finally:
        admin.close()


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
    """(client-side local port, owning pid) of every established TCP connection to `port` on loopback."""
    owners = socket_owners()
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
            if state == ESTABLISHED and int(remote.rsplit(":", 1)[1], 16) == port:
                found.append((int(local.rsplit(":", 1)[1], 16), owners.get(inode)))
    return found
