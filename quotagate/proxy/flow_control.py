"""Pausing a transport's reading for several independent reasons at once.

Reading is paused while any reason holds (the upstream is still connecting, the other side's write
buffer is full, later: the client is muted for a quota) and resumes when the last one is released.
Pausing twice for the same reason is harmless, as is releasing a reason that does not hold.
"""

from __future__ import annotations

import asyncio


class ReadGate:
    __slots__ = ("_reasons", "_transport")

    def __init__(self, transport: asyncio.ReadTransport) -> None:
        self._transport = transport
        self._reasons: set[str] = set()

    @property
    def paused(self) -> bool:
        return bool(self._reasons)

    def pause(self, reason: str) -> None:
        if not self._reasons and not self._transport.is_closing():
            self._transport.pause_reading()
        self._reasons.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self._reasons:
            return
        self._reasons.discard(reason)
        if not self._reasons and not self._transport.is_closing():
            self._transport.resume_reading()
