"""The canary harness (tests/support/canary.py) against a small server on loopback that answers
every frame with its correlation id and can be told to stall: the canary's figures say what a
stall did to it."""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator

import pytest

from tests.support.canary import Canary, RoundTrips, side_by_side, under_attack


class StallingServer:
    """Answers each request frame with (its correlation id, a byte), unless stalled: then answers
    nothing until the stall ends (as a peer busy with someone else's request)."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()[:2]
        self.resume_at = 0.0
        self.frames = 0
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)
        self._accepting.start()

    def stall(self, seconds: float) -> None:
        self.resume_at = time.monotonic() + seconds

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            buffer = b""
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    return
                if not chunk:
                    return
                buffer += chunk
                while len(buffer) >= 4 and len(buffer) >= 4 + struct.unpack_from(">i", buffer)[0]:
                    size = struct.unpack_from(">i", buffer)[0]
                    frame, buffer = buffer[: 4 + size], buffer[4 + size :]
                    self.frames += 1
                    while time.monotonic() < self.resume_at:
                        time.sleep(0.001)
                    correlation_id = frame[8:12]
                    try:
                        conn.sendall(struct.pack(">i", 5) + correlation_id + b"\x00")
                    except OSError:  # the canary went away
                        return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture
def server() -> Iterator[StallingServer]:
    server = StallingServer()
    yield server
    server.close()


def test_round_trips_give_nearest_rank_percentiles() -> None:
    trips = RoundTrips(tuple(i / 1000 for i in range(1, 101)))
    assert (trips.p50_ms, trips.p99_ms, trips.worst_ms) == pytest.approx((50.0, 99.0, 100.0))
    assert "p99 99.0 ms" in str(trips)


def test_a_quiet_peer_gives_small_round_trips_every_10_to_20_ms(server: StallingServer) -> None:
    with Canary(server.address) as canary:
        time.sleep(1.0)
    trips = canary.stop()
    assert 45 <= len(trips.seconds) <= 105, trips
    assert trips.unanswered == 0 and not trips.closed
    assert trips.p50_ms < 20, trips


def test_a_stall_shows_in_every_request_sent_during_it(server: StallingServer) -> None:
    """Pipelined on a schedule: a 300 ms stall delays the ~20 requests sent during it, so the p99
    and the worst both say so (one request at a time would show it in one sample only)."""
    trips, _ = under_attack(server.address, lambda: (server.stall(0.3), time.sleep(0.35)), after=0.2)
    assert trips.worst_ms >= 250, trips
    assert trips.p99_ms >= 200, trips
    slow = [t for t in trips.seconds if t >= 0.1]
    assert len(slow) >= 8, trips


def test_an_unanswered_request_counts_the_time_it_waited(server: StallingServer) -> None:
    with Canary(server.address) as canary:
        time.sleep(0.2)
        server.stall(1.0)
        time.sleep(0.3)
        trips = canary.stop(drain=0.1)
    assert trips.unanswered >= 1, trips
    assert trips.worst_ms >= 250, trips


def test_side_by_side_says_what_the_second_address_added(server: StallingServer) -> None:
    other = StallingServer()
    try:

        def attack(address: tuple[str, int]) -> None:
            if address == other.address:
                other.stall(0.2)
            time.sleep(0.3)

        both = side_by_side(server.address, other.address, attack)
    finally:
        other.close()
    assert both.direct.worst_ms < 100, both
    assert both.proxied.worst_ms >= 150, both
    assert both.added_p99_ms >= 100, both
