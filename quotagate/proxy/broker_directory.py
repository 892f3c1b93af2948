"""Where each broker really is, and the proxy address clients are told for it: the `ClusterView`
that the response rewriters (protocol/rewrite.py) write through.

Sans-IO, like the session: it never binds a socket. The proxy address of node N is computed
(`broker_port_base + N`, the same across restarts), and a node id named for the first time is
queued in `seen`. Whoever made the rewrite takes that queue as an output: a session moves it to its
`brokers_seen` (the connection glue has the proxy open those listeners before it writes the
response naming them), the proxy's own metadata refresh opens them at once. So a client is never
told an address nobody listens on, and no listener is bound from inside a rewrite.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from quotagate.proxy.topics import TopicCatalog

log = logging.getLogger("quotagate.proxy")


class BrokerDirectory:
    def __init__(self, advertised_host: str, broker_port: Callable[[int], int], topics: TopicCatalog) -> None:
        self.advertised_host = advertised_host
        self.broker_port = broker_port  # node id -> the proxy port serving it
        self.topics = topics
        self.addresses: dict[int, tuple[str, int]] = {}  # node id -> the broker's own address
        self.seen: list[int] = []  # node ids named for the first time, until taken (take_seen)

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Records broker node_id's real address; returns the proxy address clients must use."""
        known = self.addresses.get(node_id)
        if known != (host, port):
            if known is None:
                self.seen.append(node_id)
            else:
                log.info("broker %d moved from %s:%d to %s:%d", node_id, *known, host, port)
            self.addresses[node_id] = (host, port)
        return self.advertised_host, self.broker_port(node_id)

    def observe_topics(self, topics: Iterable[tuple[str, Any, int]]) -> None:
        self.topics.observe(topics)

    def take_seen(self) -> list[int]:
        """The node ids named for the first time since the last take, oldest first."""
        seen, self.seen = self.seen, []
        return seen
