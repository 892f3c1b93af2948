"""A tenant that invents topic names: connections producing to thousands of made-up topics, paced to
a byte rate, and a second tenant producing to a real topic one request at a time (its rate is what
the flood does to everyone else). Issue 34 item 4: with usage records on, every made-up name was a
new aggregate row.

Run as a process of its own (`python -m tests.support.topic_flood HOST:PORT --seconds S`), so that
its Python does not share the GIL of the process measuring a canary: it prints one JSON line, what
it sent and how many answers came back. The broker answers a produce to an unknown topic at once
with UNKNOWN_TOPIC_OR_PARTITION and creates nothing (only Metadata creates topics).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
import time

from kafka.protocol.producer import ProduceRequest

from tests.support.canary import _read_frame as read_frame  # one whole frame (the canary's reader)

# A RecordBatch v2 header and 39 bytes standing for its records: 100 bytes (as bench/hot_path.py).
RECORD_BATCH = struct.pack(">qiibIhiqqqhii", 0, 88, 0, 2, 0, 0, 0, 0, 0, -1, -1, -1, 1) + b"r" * 39
IN_FLIGHT = 8  # requests a flood connection keeps unanswered at most


def produce_frame(topics: list[str], correlation_id: int, client_id: str, acks: int = 1) -> bytes:
    """A Produce v7 request writing RECORD_BATCH to partition 0 of each of `topics`."""
    request = ProduceRequest(
        version=7,
        transactional_id=None,
        acks=acks,
        timeout_ms=5000,
        topic_data=[(topic, [(0, RECORD_BATCH)]) for topic in topics],
    )
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def flood_frames(connection: int, topics: int, per_request: int, client_id: str) -> list[bytes]:
    """The requests one flood connection cycles through: `topics` made-up names, `per_request` a
    request (correlation ids are rewritten as they are sent)."""
    names = [f"made-up-{connection}-{i:06d}" for i in range(topics)]
    return [produce_frame(names[i : i + per_request], 0, client_id) for i in range(0, len(names), per_request)]


class FloodConnection:
    """One connection sending `frames` in a cycle at `bytes_per_second`, up to IN_FLIGHT unanswered."""

    def __init__(self, address: tuple[str, int], frames: list[bytes], bytes_per_second: float) -> None:
        self.sock = socket.create_connection(address, timeout=30)
        self.frames = frames
        self.bytes_per_second = bytes_per_second
        self.sent_requests = self.sent_bytes = self.answers = 0
        self.error: str | None = None
        self._window = threading.Semaphore(IN_FLIGHT)

    def run(self, seconds: float) -> None:
        reader = threading.Thread(target=self._read, daemon=True)
        reader.start()
        started = time.monotonic()
        deadline = started + seconds
        correlation_id = 0
        try:
            while time.monotonic() < deadline:
                frame = self.frames[correlation_id % len(self.frames)]
                due = started + self.sent_bytes / self.bytes_per_second
                if due > time.monotonic():
                    time.sleep(due - time.monotonic())
                if not self._window.acquire(timeout=max(0.0, deadline - time.monotonic())):
                    break
                correlation_id += 1
                self.sock.sendall(frame[:8] + struct.pack(">i", correlation_id) + frame[12:])
                self.sent_requests += 1
                self.sent_bytes += len(frame)
        except OSError as exc:
            self.error = repr(exc)
        wait_until = time.monotonic() + 10
        while self.answers < self.sent_requests and time.monotonic() < wait_until and self.error is None:
            time.sleep(0.01)
        self.sock.close()
        reader.join(5)

    def _read(self) -> None:
        try:
            while True:
                read_frame(self.sock)
                self.answers += 1
                self._window.release()
        except (OSError, struct.error):
            return


def flood(
    address: tuple[str, int],
    seconds: float,
    connections: int = 2,
    topics: int = 25_000,
    per_request: int = 50,
    bytes_per_second: float = 2.9e6,
    client_id: str = "flood",
) -> dict:
    """`connections` connections producing to `topics` made-up names each, `bytes_per_second`
    together, for `seconds`: what was sent and answered."""
    floods = [
        FloodConnection(address, flood_frames(c, topics, per_request, client_id), bytes_per_second / connections)
        for c in range(connections)
    ]
    threads = [threading.Thread(target=f.run, args=(seconds,)) for f in floods]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {
        "requests": sum(f.sent_requests for f in floods),
        "bytes": sum(f.sent_bytes for f in floods),
        "answers": sum(f.answers for f in floods),
        "errors": [f.error for f in floods if f.error],
    }


def produce_rate(address: tuple[str, int], topic: str, seconds: float, client_id: str = "other-tenant") -> float:
    """Produce requests answered per second for a client writing one record batch to `topic`,
    partition 0, acks=1, sending the next request when the last is answered."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        frame = produce_frame([topic], 0, client_id)
        answered = 0
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            sock.sendall(frame[:8] + struct.pack(">i", answered + 1) + frame[12:])
            read_frame(sock)
            answered += 1
        return answered / (time.monotonic() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("address", help="HOST:PORT of the broker or the proxy")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--topics", type=int, default=25_000, help="made-up topic names per connection")
    parser.add_argument("--per-request", type=int, default=50, help="topics named per produce request")
    parser.add_argument("--bytes-per-second", type=float, default=2.9e6, help="all connections together")
    parser.add_argument("--other-tenant", metavar="TOPIC", help="also measure produce_rate to this (real) topic")
    args = parser.parse_args()
    host, port = args.address.rsplit(":", 1)
    address = (host, int(port))
    rates: list[float] = []
    if args.other_tenant:  # from a second after the flood starts to a second before it ends
        seconds = max(1.0, args.seconds - 2)
        tenant = threading.Timer(1.0, lambda: rates.append(produce_rate(address, args.other_tenant, seconds)))
        tenant.start()
    result = flood(address, args.seconds, args.connections, args.topics, args.per_request, args.bytes_per_second)
    if args.other_tenant:
        tenant.join()
        result["other_tenant_per_second"] = round(rates[0], 1) if rates else None
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
