"""The order a Kafka broker lists quota entities, their components and their keys in.

Kafka answers DescribeClientQuotas and AlterClientQuotas from `java.util.HashMap`s (an entity is a
HashMap of entity type to name; the controller's results and the metadata image's entities and
quota values are HashMaps too), so its answers list things in a HashMap's iteration order: by
bucket (the key's hash, spread and masked by the table's size), and within a bucket in the order
the keys were put. A client that keeps an answer as a list sees that order (an entity of user and
client-id comes as [client-id, user]); the proxy answers in the same order by computing it here.

Pure and small: Java's String.hashCode, Map.hashCode and a HashMap's table size after a number of
puts. Bins that Java turns into trees (8 keys in one bucket of a table of 64 or more) are listed
here in insertion order, as every smaller bin is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")

_MASK = 0xFFFFFFFF
_DEFAULT_CAPACITY = 16  # new HashMap<>()
_LOAD_FACTOR = 0.75


def string_hash(text: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as an unsigned 32-bit int."""
    h = 0
    units = text.encode("utf-16-be", "surrogatepass")
    for index in range(0, len(units), 2):
        h = (31 * h + (units[index] << 8 | units[index + 1])) & _MASK
    return h


def map_hash(entries: Iterable[tuple[str, str | None]]) -> int:
    """Java's Map.hashCode for a map of strings (a null value hashes to 0), unsigned 32-bit."""
    total = 0
    for key, value in entries:
        total = (total + (string_hash(key) ^ (string_hash(value) if value is not None else 0))) & _MASK
    return total


def entity_hash(entries: Iterable[tuple[str, str | None]]) -> int:
    """ClientQuotaEntity.hashCode: Objects.hash(entries), i.e. 31 + the map's hash."""
    return (31 + map_hash(entries)) & _MASK


def table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the least power of two at or above `capacity` (1 for 0 or less)."""
    size = 1
    while size < capacity:
        size <<= 1
    return size


def capacity_after(puts: int, initial: int | None = None) -> int:
    """The table size of `new HashMap<>(initial)` (None: `new HashMap<>()`) after `puts` new keys:
    it doubles whenever its size passes three quarters of the table."""
    capacity = _DEFAULT_CAPACITY if initial is None else table_size_for(initial)
    for size in range(1, puts + 1):
        if size > int(capacity * _LOAD_FACTOR):
            capacity <<= 1
    return capacity


def hashmap_order(
    keys: Sequence[T], hash_of: Callable[[T], int] = string_hash, initial: int | None = None, puts: int | None = None
) -> list[T]:
    """`keys` (distinct, in the order they were first put) in the order `new HashMap<>(initial)`
    (None: `new HashMap<>()`) iterates them after `puts` puts (default: one per key)."""
    mask = capacity_after(len(keys) if puts is None else puts, initial) - 1

    def bucket(key: T) -> int:
        h = hash_of(key)
        return (h ^ (h >> 16)) & mask

    return sorted(keys, key=bucket)  # stable: a bucket keeps its keys in the order they were put


def rebuilt_order(keys: Sequence[T], hash_of: Callable[[T], int] = string_hash) -> list[T]:
    """The order of a map of `keys` as Kafka's metadata image rebuilds it when a change is applied
    (ClientQuotasDelta.apply, ClientQuotaDelta.apply): put into `new HashMap<>(size)` in the order
    of the changes, themselves a `new HashMap<>()`. A map changed piece by piece over time can put
    keys of one bucket in another order: the broker's history decides those ties, and the proxy,
    which has no such history, takes this one."""
    return hashmap_order(hashmap_order(keys, hash_of), hash_of, initial=len(keys))
