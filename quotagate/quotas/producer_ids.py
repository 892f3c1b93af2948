"""producer_ids_rate (KIP-936): which producer IDs are new for an entity, in bounded memory.

A Produce carries its producer's ID in every record batch; an idempotent producer keeps one ID for
its life, so a client that makes a new producer per batch shows a new ID per request. The quota
counts the new ones: an ID the entity used within the window passes free, a new one is charged one
token of the entity's producer_ids_rate bucket (refused while that bucket is in debt: KIP-599's
strict admission, as the KIP proposes) and remembered only once admitted.

Seen IDs are kept as the KIP proposes: per entity, two Bloom filters, the current one and the one
before it; an ID is seen if either holds it, and is added to the current one. Every half window the
current filter becomes the previous one and a new, empty one starts, so an ID is remembered for
between half and all of the window after it was last used (one found only in the previous filter is
put in the current one again). A filter is sized, when it starts, for the IDs that the rate lets
in during half a window plus the bucket's burst (nothing else can be added: only admitted IDs are),
at FALSE_POSITIVE_RATE; its size is capped at MAX_FILTER_BITS, past which the false-positive rate
grows (a false positive lets a new ID pass as seen: the quota errs for the client, never against it).
Entities unused for a whole window are dropped with their filters (`expire`), and at most
MAX_ENTITIES are kept (the least recently used goes first).

Figures (tests/unit/test_producer_ids.py): at 1 % and 7 hashes a filter costs 9.6 bits per ID: a
rate of 10/s over a 1 h window with an 11 s burst holds 18 110 IDs per half in 21.7 KB.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

FALSE_POSITIVE_RATE = 0.01
HASHES = 7  # optimal for 1 %: round(log2(1 / 0.01))
MIN_FILTER_BITS = 1024
MAX_FILTER_BITS = 1 << 23  # 1 MB per filter, 2 per entity
# Entities remembered at once: random client ids under a per-client-id quota must not grow the
# memory for an hour. Past it the least recently used entity is forgotten (its IDs count as new
# again: the quota errs against that client, once per ID).
MAX_ENTITIES = 4096
_MASK64 = (1 << 64) - 1


def filter_bits(capacity: float, false_positive_rate: float = FALSE_POSITIVE_RATE) -> int:
    """The bits of a Bloom filter holding `capacity` IDs at `false_positive_rate`, within the bounds."""
    bits = math.ceil(-max(capacity, 1.0) * math.log(false_positive_rate) / (math.log(2) ** 2))
    return min(max(bits, MIN_FILTER_BITS), MAX_FILTER_BITS)


def _hashes(producer_id: int) -> tuple[int, int]:
    """Two independent 64-bit hashes of an ID (splitmix64's finaliser, two seeds): the filter's
    indexes are h1 + i·h2 (Kirsch and Mitzenmacher), no more hashing than that."""
    h1 = (producer_id ^ 0x9E3779B97F4A7C15) & _MASK64
    h1 = ((h1 ^ (h1 >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    h1 = ((h1 ^ (h1 >> 27)) * 0x94D049BB133111EB) & _MASK64
    h1 ^= h1 >> 31
    h2 = (h1 * 0xD6E8FEB86659FD93 + 0x632BE59BD9B4E019) & _MASK64
    h2 ^= h2 >> 32
    return h1, h2 | 1


class BloomFilter:
    """A set of integers that may answer yes for one it was never given (never no for one it was)."""

    __slots__ = ("_array", "bits")

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self._array = bytearray((bits + 7) // 8)

    def __contains__(self, producer_id: int) -> bool:
        h1, h2 = _hashes(producer_id)
        array, bits = self._array, self.bits
        for i in range(HASHES):
            index = (h1 + i * h2) % bits
            if not array[index >> 3] & (1 << (index & 7)):
                return False
        return True

    def add(self, producer_id: int) -> None:
        h1, h2 = _hashes(producer_id)
        array, bits = self._array, self.bits
        for i in range(HASHES):
            index = (h1 + i * h2) % bits
            array[index >> 3] |= 1 << (index & 7)

    @property
    def size_bytes(self) -> int:
        return len(self._array)


@dataclass(slots=True)
class SeenProducerIds:
    """One entity's producer IDs seen within the window: two rotating Bloom filters."""

    half_window: float
    capacity: float  # IDs one half window can admit (sizes each new filter)
    started: float  # when the current filter started
    current: BloomFilter = field(init=False)
    previous: BloomFilter | None = None
    used: float = 0.0

    def __post_init__(self) -> None:
        self.current = BloomFilter(filter_bits(self.capacity))
        self.used = self.started

    def turn(self, now: float) -> None:
        """Starts a new filter for each half window gone by since the current one started."""
        if now - self.started < self.half_window:
            return
        halves = int((now - self.started) // self.half_window)
        self.previous = self.current if halves == 1 else None  # two or more halves: both are too old
        self.current = BloomFilter(filter_bits(self.capacity))
        self.started += halves * self.half_window

    def seen(self, producer_id: int, now: float) -> bool:
        """Whether `producer_id` was added within the window; one found only in the previous filter
        is added to the current one, so a producer that keeps sending stays seen."""
        self.turn(now)
        self.used = now
        if producer_id in self.current:
            return True
        previous = self.previous
        if previous is not None and producer_id in previous:
            self.current.add(producer_id)
            return True
        return False

    def add(self, producer_id: int, now: float) -> None:
        self.turn(now)
        self.current.add(producer_id)

    @property
    def size_bytes(self) -> int:
        return self.current.size_bytes + (self.previous.size_bytes if self.previous is not None else 0)


class ProducerIdMemory:
    """The seen producer IDs of every entity with a producer_ids_rate, by its bucket id.

    Pure: the caller gives the time. The number of entities is bounded by the configured quotas'
    buckets (one per user, client id or pair that produced within the window), each holding two
    bounded filters; `expire` drops those idle for a whole window."""

    def __init__(self, window_seconds: float, max_entities: int = MAX_ENTITIES) -> None:
        self.window_seconds = window_seconds
        self.max_entities = max_entities
        self._entities: dict[tuple[str | None, ...], SeenProducerIds] = {}

    def __len__(self) -> int:
        return len(self._entities)

    def entity(self, bucket_id: tuple[str | None, ...], rate: float, burst: float, now: float) -> SeenProducerIds:
        """The seen IDs of the entity whose bucket is `bucket_id` (new and empty if it has none)."""
        seen = self._entities.get(bucket_id)
        if seen is None:
            if len(self._entities) >= self.max_entities and not self.expire(now):
                del self._entities[min(self._entities, key=lambda key: self._entities[key].used)]
            half = self.window_seconds / 2
            seen = self._entities[bucket_id] = SeenProducerIds(half, rate * half + burst, now)
        return seen

    def expire(self, now: float) -> int:
        """Drops the entities that saw no produce for a whole window; returns how many."""
        idle = [key for key, seen in self._entities.items() if now - seen.used >= self.window_seconds]
        for key in idle:
            del self._entities[key]
        return len(idle)

    def reconfigure(self, window_seconds: float) -> None:
        """A new window: what was seen is forgotten (filters sized for the old one are dropped)."""
        if window_seconds != self.window_seconds:
            self.window_seconds = window_seconds
            self._entities.clear()

    @property
    def size_bytes(self) -> int:
        return sum(seen.size_bytes for seen in self._entities.values())
