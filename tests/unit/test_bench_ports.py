"""The benchmarks' fixed ports stay out of Linux's ephemeral range (issue 26): one there can be held
by any outgoing connection of a busy machine, and `make bench-quick` then fails with "address
already in use". They were 39092-39479."""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"
EPHEMERAL = range(32768, 61000)  # Linux's default net.ipv4.ip_local_port_range
# A port constant (KAFKA_PORT = 16092), a table of bases ({"a": 16310}, (16400, 1, False)) or a
# --port-base default.
PORT_LINE = re.compile(r"(PORT|BASE|port-base)|\"[a-z_0-9]+\": \(?\d{5}")


def test_no_bench_port_is_in_the_ephemeral_range() -> None:
    found = {}
    for path in sorted(BENCH.glob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if PORT_LINE.search(line):
                for port in map(int, re.findall(r"\b\d{5}\b", line)):
                    found[f"{path.name}:{number}"] = port
    assert len(found) >= 15, found  # harness, ab, shared, tls, soak, chaos
    inside = {where: port for where, port in found.items() if port in EPHEMERAL}
    assert not inside, f"bench ports inside the ephemeral range 32768-60999: {inside}"
