"""Unmutes throttled connections when their throttle time is over.

One heap and one timer serve the whole proxy (not a task or timer per connection), as Kafka's
ThrottledChannel delay queue does. A connection is in the heap at most once: muting it again while
it is queued only moves its deadline, and the entry is re-queued for the new deadline when it falls
due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from typing import Protocol


class Mutable(Protocol):
    muted_until: float
    closed: bool

    def unmute(self) -> None: ...


class DelayQueue:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Mutable]] = []
        self._queued: set[int] = set()  # id() of connections in the heap
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def mute(self, connection: Mutable, until: float) -> None:
        """Keeps `connection` muted until `until` (loop time), or longer if it already is."""
        if until <= connection.muted_until:
            return
        connection.muted_until = until
        if id(connection) not in self._queued:
            self._push(connection, until)

    def _push(self, connection: Mutable, until: float) -> None:
        self._queued.add(id(connection))
        heapq.heappush(self._heap, (until, next(self._order), connection))
        if until < self._timer_at:
            self._schedule(until)

    def _schedule(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        now = self._loop.time()
        due = []
        while self._heap and self._heap[0][0] <= now:
            _, _, connection = heapq.heappop(self._heap)
            self._queued.discard(id(connection))
            due.append(connection)
        for connection in due:
            if connection.closed:
                continue
            if connection.muted_until > now:
                self._push(connection, connection.muted_until)  # muted again while it waited
            else:
                connection.unmute()
        if self._heap and self._timer is None:
            self._schedule(self._heap[0][0])
