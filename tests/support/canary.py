"""A canary: one Kafka client on its own connection, sending Metadata every 10-20 ms and recording
each round trip, to measure what another client's attack does to everyone else.

The proxy is shared by every tenant, so a request that stalls it stalls them all; the broker has its
own threads. The fair question is therefore "what does the proxy add": run the same attack against
the broker directly and through the proxy, each with its own canary on the address the attack
targets, and compare the canary's p99 (`side_by_side`).

    with Canary(("127.0.0.1", 9092)) as canary:
        ...                                   # anything
    print(canary.round_trips())               # p50, p99, worst (ms) of what it sent

    trips = under_attack(("127.0.0.1", 9092), lambda: send_big_frame())
    both = side_by_side(broker, proxy, lambda address: send_big_frame(address))
    assert both.added_p99_ms <= 50, both

The canary's requests are pipelined on a fixed schedule, not sent one after the other: a request
sent while the peer is stalled waits as any client's would, so a stall of S ms shows up in every
request sent during it, not in one sample. A request still unanswered when the canary stops counts
with the time it waited so far (and in `unanswered`).

The canary shares its process's GIL with the attack: build the attack's bytes before, and let the
attack callable only send them (socket calls release the GIL). Standard library only: this module
is meant to be copied into other branches as it is.
"""

from __future__ import annotations

import contextlib
import random
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

Address = tuple[str, int]
_T = TypeVar("_T")

METADATA = 3
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
# Metadata v1, no topics (an empty array; null would ask for all): the brokers, the controller, no
# topic. v1 is what every broker since 0.10 answers, and the answer is small and always the same.
METADATA_VERSION = 1
DEFAULT_INTERVAL = (0.010, 0.020)
# How long `stop` waits for the answers still due before it counts them as unanswered.
DRAIN_SECONDS = 5.0


def _frame(api_key: int, version: int, correlation_id: int, client_id: bytes, body: bytes) -> bytes:
    """A request with header v1 (api key, version, correlation id, int16-length client id)."""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    """One whole frame's payload (after its size); ConnectionError when the peer closes."""
    size = struct.unpack(">i", _read_exactly(sock, 4))[0]
    return _read_exactly(sock, size)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed by the peer")
        data += chunk
    return bytes(data)


def sasl_plain_login(sock: socket.socket, user: str, password: str, client_id: bytes = b"canary") -> None:
    """Authenticates `sock` with SASL/PLAIN (SaslHandshake v1, SaslAuthenticate v0); raises
    ConnectionError if the broker refuses."""
    mechanism = b"PLAIN"
    sock.sendall(_frame(SASL_HANDSHAKE, 1, 1, client_id, struct.pack(">h", len(mechanism)) + mechanism))
    answer = _read_frame(sock)
    if struct.unpack_from(">h", answer, 4)[0] != 0:
        raise ConnectionError(f"SaslHandshake refused: error {struct.unpack_from('>h', answer, 4)[0]}")
    token = b"\0" + user.encode() + b"\0" + password.encode()
    sock.sendall(_frame(SASL_AUTHENTICATE, 0, 2, client_id, struct.pack(">i", len(token)) + token))
    answer = _read_frame(sock)
    if struct.unpack_from(">h", answer, 4)[0] != 0:
        raise ConnectionError(f"SaslAuthenticate refused: error {struct.unpack_from('>h', answer, 4)[0]}")


@dataclass(frozen=True)
class RoundTrips:
    """A canary's round trips, in seconds, in the order they were sent."""

    seconds: tuple[float, ...]
    unanswered: int = 0  # sent, and not answered when the canary stopped (counted in `seconds` so far)
    closed: bool = False  # the peer closed the canary's connection

    def percentile_ms(self, fraction: float) -> float:
        """The round trip below which `fraction` of them lie (nearest rank), in ms; nan when none."""
        if not self.seconds:
            return float("nan")
        ordered = sorted(self.seconds)
        rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))  # ceil
        return ordered[rank - 1] * 1000

    @property
    def p50_ms(self) -> float:
        return self.percentile_ms(0.50)

    @property
    def p99_ms(self) -> float:
        return self.percentile_ms(0.99)

    @property
    def worst_ms(self) -> float:
        return max(self.seconds) * 1000 if self.seconds else float("nan")

    def __str__(self) -> str:
        extra = (f", {self.unanswered} unanswered" if self.unanswered else "") + (", closed" if self.closed else "")
        return (
            f"p50 {self.p50_ms:.1f} ms, p99 {self.p99_ms:.1f} ms, worst {self.worst_ms:.1f} ms "
            f"({len(self.seconds)} round trips{extra})"
        )


class Canary:
    """A client on its own connection to `address`, sending Metadata every `interval` seconds (a
    random time between the two bounds) until stopped, and timing each answer.

    Use as a context manager, or `start()` and `stop()`. `sasl_plain=(user, password)` logs in
    first (for a listener that requires SASL). `round_trips(since)` gives what was sent from
    `since` (a `time.monotonic()`) on, at any time; `stop()` waits for the answers still due."""

    def __init__(
        self,
        address: Address,
        *,
        interval: tuple[float, float] = DEFAULT_INTERVAL,
        sasl_plain: tuple[str, str] | None = None,
        client_id: str = "canary",
        connect_timeout: float = 10.0,
    ) -> None:
        self.address = address
        self.interval = interval
        self.sasl_plain = sasl_plain
        self.client_id = client_id.encode()
        self.connect_timeout = connect_timeout
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._sent: dict[int, float] = {}  # correlation id -> monotonic time sent, until answered
        self._trips: list[tuple[float, float]] = []  # (sent at, round trip), as answers came
        self._stopping = threading.Event()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stopped_at: float | None = None
        self._result: RoundTrips | None = None  # what stop() found

    def start(self) -> Canary:
        sock = socket.create_connection(self.address, timeout=self.connect_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.sasl_plain is not None:
            sasl_plain_login(sock, *self.sasl_plain, client_id=self.client_id)
        sock.settimeout(None)
        self._sock = sock
        self._threads = [
            threading.Thread(target=self._send_loop, name="canary-send", daemon=True),
            threading.Thread(target=self._read_loop, name="canary-read", daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        return self

    def __enter__(self) -> Canary:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def _send_loop(self) -> None:
        assert self._sock is not None
        correlation_id = 1000
        body = struct.pack(">i", 0)  # no topics
        low, high = self.interval
        while not self._stopping.wait(random.uniform(low, high)) and not self._closed.is_set():
            correlation_id += 1
            frame = _frame(METADATA, METADATA_VERSION, correlation_id, self.client_id, body)
            with self._lock:
                self._sent[correlation_id] = time.monotonic()
            try:
                self._sock.sendall(frame)
            except OSError:
                self._closed.set()
                return

    def _read_loop(self) -> None:
        assert self._sock is not None
        while True:
            try:
                payload = _read_frame(self._sock)
            except (OSError, struct.error):  # ConnectionError, or the socket closed by stop()
                self._closed.set()
                return
            now = time.monotonic()
            correlation_id = struct.unpack_from(">i", payload, 0)[0]
            with self._lock:
                sent = self._sent.pop(correlation_id, None)
                if sent is not None:
                    self._trips.append((sent, now - sent))

    def round_trips(self, since: float = 0.0, until: float = float("inf")) -> RoundTrips:
        """The round trips of the requests sent between `since` and `until` (time.monotonic()),
        answered or not (an unanswered one counts the time it has waited so far)."""
        now = self._stopped_at if self._stopped_at is not None else time.monotonic()
        with self._lock:
            answered = [(sent, trip) for sent, trip in self._trips if since <= sent < until]
            waiting = [(sent, now - sent) for sent in self._sent.values() if since <= sent < until]
        ordered = sorted(answered + waiting)
        return RoundTrips(
            tuple(trip for _sent, trip in ordered), len(waiting), self._closed.is_set() and not self._stopping.is_set()
        )

    def stop(self, drain: float = DRAIN_SECONDS) -> RoundTrips:
        """Stops sending, waits up to `drain` s for the answers still due, closes; returns every round trip."""
        if self._sock is None:
            return RoundTrips(())
        if self._result is not None:
            return self._result
        closed_by_peer = self._closed.is_set()
        self._stopping.set()
        deadline = time.monotonic() + drain
        while time.monotonic() < deadline and not self._closed.is_set():
            with self._lock:
                if not self._sent:
                    break
            time.sleep(0.005)
        self._stopped_at = time.monotonic()
        closed_by_peer = closed_by_peer or self._closed.is_set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reader (close alone leaves it in recv)
        self._sock.close()
        for thread in self._threads:
            thread.join(5)
        trips = self.round_trips()
        self._result = RoundTrips(trips.seconds, trips.unanswered, closed_by_peer)
        return self._result


def under_attack(
    address: Address,
    attack: Callable[[], _T],
    *,
    settle: float = 0.3,
    after: float = 0.3,
    **canary_options: object,
) -> tuple[RoundTrips, _T]:
    """Runs `attack()` in this thread while a canary on `address` measures; returns the canary's
    round trips of the requests it sent from the attack's start until `after` s after its end, and
    what the attack returned. The canary runs `settle` s first (its connection warm)."""
    canary = Canary(address, **canary_options)  # type: ignore[arg-type]
    with canary:
        time.sleep(settle)
        started = time.monotonic()
        result = attack()
        ended = time.monotonic()
        time.sleep(after)
        trips = canary.stop()
        window = canary.round_trips(started, ended + after)
    return RoundTrips(window.seconds, window.unanswered, trips.closed), result


@dataclass(frozen=True)
class SideBySide:
    """One attack measured by a canary against the broker directly and through the proxy."""

    direct: RoundTrips
    proxied: RoundTrips

    @property
    def added_p99_ms(self) -> float:
        """What the proxy adds to the canary's p99 under the attack."""
        return self.proxied.p99_ms - self.direct.p99_ms

    @property
    def added_worst_ms(self) -> float:
        return self.proxied.worst_ms - self.direct.worst_ms

    def __str__(self) -> str:
        return f"direct: {self.direct}; through the proxy: {self.proxied}; added p99 {self.added_p99_ms:.1f} ms"


def side_by_side(
    direct: Address,
    proxied: Address,
    attack: Callable[[Address], object],
    *,
    settle: float = 0.3,
    after: float = 0.3,
    **canary_options: object,
) -> SideBySide:
    """`attack(address)` against the broker at `direct`, then through the proxy at `proxied`, each
    with a canary on the address attacked (the canary logs in as `sasl_plain` says on both)."""
    direct_trips, _ = under_attack(direct, lambda: attack(direct), settle=settle, after=after, **canary_options)
    proxied_trips, _ = under_attack(proxied, lambda: attack(proxied), settle=settle, after=after, **canary_options)
    return SideBySide(direct_trips, proxied_trips)
