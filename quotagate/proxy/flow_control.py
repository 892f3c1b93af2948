"""Pausing a transport's reading for several independent reasons at once, and a byte budget shared
by many connections.

Reading is paused while any reason holds (the upstream is still connecting, the other side's write
buffer is full, later: the client is muted for a quota) and resumes when the last one is released.
Pausing twice for the same reason is harmless, as is releasing a reason that does not hold.
"""

from __future__ import annotations

import asyncio


class ReadGate:
    __slots__ = ("_reasons", "_transport", "paused")

    def __init__(self, transport: asyncio.ReadTransport) -> None:
        self._transport = transport
        self._reasons: set[str] = set()
        # Whether any reason holds: an attribute, read after every read of the connection.
        self.paused = False

    def pause(self, reason: str) -> None:
        if not self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)
        self.paused = True

    def resume(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        self.paused = bool(self._reasons)
        if not self._reasons and not self._transport.is_closing():
            self._transport.resume_reading()


class ByteBudget:
    """Bytes that every connection draws on together, up to `limit` (proxy.partial_frames_max_bytes:
    what all clients' partial frames may hold). A holder that cannot take more is refused, never
    made to wait: waiting on bytes other connections hold could stall them all."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size
