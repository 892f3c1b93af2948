"""The proxy's own requests to the cluster: which brokers and topics there are, and whether any
broker answers. Every connection they make is `Upstream`'s (proxy/upstream.py), as a client's is.

- Metadata, at start and every metadata_refresh_seconds: each broker named gets its listener
  (`open_listeners`) and its address in the directory, and the topics their names.
- An ApiVersions probe every readiness_probe_seconds: a frozen broker still accepts TCP
  connections, so only an answer within readiness_timeout_seconds counts (/readyz).
- With client_sasl = "auto", whether the brokers' listener wants SASL first: a SASL listener takes
  the proxy's Metadata request and closes the connection unanswered.

Both ask the bootstrap servers first, then the brokers known, one after another, until one answers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from quotagate.config.settings import ProxyConfig
from quotagate.protocol.discovery import (
    decode_discovery,
    encode_discovery_request,
    encode_probe_request,
    is_probe_answer,
)
from quotagate.protocol.framing import FrameError
from quotagate.proxy.broker_directory import BrokerDirectory
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.topics import TopicCatalog
from quotagate.proxy.upstream import Unanswered, Upstream

log = logging.getLogger("quotagate.proxy")


class BrokerDiscovery:
    def __init__(
        self,
        config: ProxyConfig,
        upstream: Upstream,
        brokers: BrokerDirectory,
        topics: TopicCatalog,
        open_listeners: Callable[[Iterable[int]], None],
        metrics: ProxyMetrics,
    ) -> None:
        self.config = config
        self.upstream = upstream
        self.brokers = brokers
        self.topics = topics
        self._open_listeners = open_listeners
        self.metrics = metrics
        self.reachable = False  # a broker answered the last refresh or probe
        # Whether the brokers' listener wants SASL first (sasl_server_max_receive_size applies then);
        # None: not known yet (client_sasl = "auto" before the brokers answered), taken as required.
        self.require_sasl: bool | None = {"required": True, "none": False}.get(config.client_sasl)
        self._correlation_id = 0

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        """Records broker node_id's real address, has its listener bound if it is new, and returns
        the proxy address clients must use."""
        address = self.brokers.advertise(node_id, host, port)
        self._open_listeners(self.brokers.take_seen())
        return address

    async def refresh_metadata(self) -> bool:
        """Asks one broker for the brokers and topics; opens listeners for new brokers."""
        for host, port in self._candidates():
            correlation_id = self._next_correlation_id()
            request = encode_discovery_request(correlation_id)
            try:
                answer = await self.upstream.ask(host, port, request, self.config.connect_timeout_seconds)
                brokers, topics = decode_discovery(answer, correlation_id)
            except Unanswered as exc:
                # The broker took the connection but would not answer: a SASL listener wants
                # authentication first. It is up; brokers are then learned from clients' metadata.
                log.debug("metadata refresh from %s:%d unanswered: %s", host, port, exc)
                self._learn_client_sasl(True)
                self._set_reachable(True)
                return False
            except (OSError, TimeoutError, FrameError) as exc:
                log.debug("metadata refresh from %s:%d failed: %r", host, port, exc)
                continue
            self._learn_client_sasl(False)
            for node_id, broker_host, broker_port in brokers:
                self.advertise(node_id, broker_host, broker_port)
            self.topics.observe(topics)
            self._set_reachable(True)
            return True
        self._set_reachable(False)
        return False

    async def probe_brokers(self) -> bool:
        """Asks the bootstrap servers and known brokers for ApiVersions, one after another, until
        one answers within readiness_timeout_seconds; records and returns whether one did."""
        timeout = self.config.readiness_timeout_seconds
        for host, port in self._candidates():
            correlation_id = self._next_correlation_id()
            try:
                answer = await self.upstream.ask(host, port, encode_probe_request(correlation_id), timeout)
            except (OSError, TimeoutError, FrameError, Unanswered) as exc:
                log.debug("readiness probe of %s:%d failed: %r", host, port, exc)
                continue
            if not is_probe_answer(answer, correlation_id):
                log.debug("readiness probe of %s:%d: the answer does not match the request", host, port)
                continue
            self._set_reachable(True)
            return True
        if self.reachable:
            log.warning("no broker answered ApiVersions within %.1f s: not ready", timeout)
        self._set_reachable(False)
        return False

    async def refresh_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.metadata_refresh_seconds)
            await self.refresh_metadata()

    async def probe_periodically(self) -> None:
        while True:
            await asyncio.sleep(self.config.readiness_probe_seconds)
            await self.probe_brokers()

    def _candidates(self) -> list[tuple[str, int]]:
        """Whom the proxy's own requests go to, in order: the bootstrap servers, then known brokers."""
        return list(dict.fromkeys([*self.config.bootstrap_servers, *self.brokers.addresses.values()]))

    def _next_correlation_id(self) -> int:
        self._correlation_id += 1
        return self._correlation_id

    def _learn_client_sasl(self, required: bool) -> None:
        """With client_sasl = "auto": what the brokers' answer to the proxy's Metadata request says
        (a SASL listener closes it unanswered), for the connections accepted from now on."""
        if self.config.client_sasl == "auto" and required != self.require_sasl:
            log.info("the brokers' listener %s SASL", "requires" if required else "does not require")
            self.require_sasl = required

    def _set_reachable(self, reachable: bool) -> None:
        self.reachable = reachable
        self.metrics.upstream_up.set(1 if reachable else 0)
