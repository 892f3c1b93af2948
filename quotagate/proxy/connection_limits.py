"""Kafka's connection limits, decided when a client connects and while its connection is idle.

What the broker does, and so what the proxy does (a client cannot tell the two apart):
- max.connections.per.ip (and its overrides): the acceptor accepts the connection, counts it, and
  closes it at once when that address already had its maximum (ConnectionQuotas.inc throws
  TooManyConnectionsException after accept; the acceptor closes the socket).
- max.connection.creation.rate (KIP-612): over the rate, the acceptor waits before it accepts more;
  the connections that arrive meanwhile sit in the listen backlog, their TCP connect already done by
  the kernel. The proxy accepts them and does not read them until the rate allows: same effect.
- connections.max.idle.ms: the broker's selector closes a connection over which no byte has moved
  for that long.

`ConnectionLimits` holds the decisions and the per-address counts; it never touches a socket and
reads no clock: server.py passes `now` in and acts on what it answers.
"""

from __future__ import annotations

import logging
import socket
from dataclasses import dataclass

from quotagate.config.settings import ProxyConfig
from quotagate.quotas.bucket import TokenBucket

log = logging.getLogger("quotagate.proxy")

REFUSED = -1.0  # admit(): close the connection now


@dataclass(frozen=True, slots=True)
class LimitSettings:
    max_per_ip: int
    per_ip_overrides: dict[str, int]  # address -> its own maximum
    creation_rate: float  # connections per second
    creation_burst: float
    max_idle_seconds: float

    @classmethod
    def from_config(cls, config: ProxyConfig, burst_seconds: float) -> LimitSettings:
        """`burst_seconds`: Kafka measures the creation rate over its quota sample windows; so many
        seconds' worth of connections may come at once."""
        rate = float(config.max_connection_creation_rate)
        return cls(
            max_per_ip=config.max_connections_per_ip,
            per_ip_overrides={_address(host): count for host, count in config.max_connections_per_ip_overrides},
            creation_rate=rate,
            creation_burst=max(rate * burst_seconds, 1.0),
            max_idle_seconds=config.connections_max_idle_ms / 1000,
        )


def _address(host: str) -> str:
    """The address an override names (Kafka resolves host names too); the name itself if it does not resolve."""
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][4][0]
    except OSError:
        log.warning("max_connections_per_ip_overrides: cannot resolve %r; it matches that literal address only", host)
        return host


class ConnectionLimits:
    def __init__(self, settings: LimitSettings, now: float) -> None:
        self.settings = settings
        self.per_ip: dict[str, int] = {}
        self._creation = TokenBucket.full(settings.creation_rate, settings.creation_burst, now)

    def max_for(self, address: str) -> int:
        return self.settings.per_ip_overrides.get(address, self.settings.max_per_ip)

    def admit(self, address: str, now: float) -> float:
        """A new connection from `address`: REFUSED (close it), or the seconds to wait before
        reading it (0.0: at once). An admitted connection must be `release`d when it closes."""
        count = self.per_ip.get(address, 0)
        if count >= self.max_for(address):
            return REFUSED
        self.per_ip[address] = count + 1
        self._creation.record(1.0, now)
        return self._creation.throttle_ms(now) / 1000

    def release(self, address: str) -> None:
        count = self.per_ip.get(address, 0) - 1
        if count > 0:
            self.per_ip[address] = count
        else:
            self.per_ip.pop(address, None)

    def is_idle(self, last_activity: float, now: float) -> bool:
        return now - last_activity >= self.settings.max_idle_seconds
