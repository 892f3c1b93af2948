"""What the proxy knows of the cluster's topics: partition counts by name, names by topic id.

Fed by every Metadata response the proxy rewrites, by its own periodic discovery, and by the
outcome of topic mutations. The controller mutation quota uses it to charge a DeleteTopics the
topic's partition count and a CreatePartitions the partitions it adds.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class TopicCatalog:
    def __init__(self) -> None:
        self.partitions: dict[str, int] = {}
        self.names_by_id: dict[Any, str] = {}

    def observe(self, topics: Iterable[tuple[str, Any, int]]) -> None:
        for name, topic_id, partitions in topics:
            self.partitions[name] = partitions
            if topic_id is not None:
                self.names_by_id[topic_id] = name

    def name_of(self, name: str | None, topic_id: Any) -> str | None:
        return name or self.names_by_id.get(topic_id)

    def partition_count(self, name: str | None) -> int | None:
        return None if name is None else self.partitions.get(name)

    def forget(self, name: str) -> None:
        self.partitions.pop(name, None)
        for topic_id in [i for i, n in self.names_by_id.items() if n == name]:
            del self.names_by_id[topic_id]
