"""Unmutes throttled connections when their throttle time is over.

One heap and one timer serve the whole proxy (not a task or timer per connection), as Kafka's
ThrottledChannel delay queue does. The mute's end is the connection's FlowControl's
(`muted_until`, flow_control.py): the queue reads it, never writes it. A connection is in the heap at
most once: muted again for longer while it is queued, its entry is re-queued for the new end when
the old one falls due.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections.abc import Callable
from typing import Protocol


class Muted(Protocol):
    """A connection's FlowControl, as the queue reads it."""

    @property
    def muted_until(self) -> float: ...

    @property
    def closed(self) -> bool: ...


class DelayQueue:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._heap: list[tuple[float, int, Muted, Callable[[], None]]] = []
        self._queued: set[int] = set()  # id() of connections in the heap
        self._order = itertools.count()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = math.inf

    def __len__(self) -> int:
        return len(self._heap)

    def wake(self, muted: Muted, unmute: Callable[[], None]) -> None:
        """Calls `unmute` once the loop's time reaches `muted.muted_until` (unless `muted.closed`
        by then); nothing if it is queued already."""
        if id(muted) not in self._queued:
            self._push(muted, unmute, muted.muted_until)

    def _push(self, muted: Muted, unmute: Callable[[], None], until: float) -> None:
        self._queued.add(id(muted))
        heapq.heappush(self._heap, (until, next(self._order), muted, unmute))
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
            _, _, muted, unmute = heapq.heappop(self._heap)
            self._queued.discard(id(muted))
            due.append((muted, unmute))
        for muted, unmute in due:
            if muted.closed:
                continue
            if muted.muted_until > now:
                self._push(muted, unmute, muted.muted_until)  # muted again, for longer, while it waited
            else:
                unmute()
        if self._heap and self._timer is None:
            self._schedule(self._heap[0][0])
