"""One way to reach a broker (issue 34, item 9): discovery's Metadata, the readiness probe's
ApiVersions and every client session connect through `proxy.upstream` (proxy/upstream.py), with the
same [upstream.tls] settings. The probe once connected in plaintext on its own, and /readyz said
"not ready" for good behind an SSL listener while discovery and clients worked.

The broker here is a double that speaks TLS only and requires a client certificate, as a broker's
SSL listener with ssl.client.auth=required does (tests/integration/test_security.py runs the same
against a real one for 30 s)."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from pathlib import Path
from struct import pack, unpack_from

import trustme
from kafka.protocol.metadata import MetadataResponse

from quotagate.protocol.apis import ApiKey
from quotagate.proxy.upstream import SOCKET_OPTIONS, Upstream
from tests.loopback.test_readiness import ready_within
from tests.loopback.test_tls import write_leaf
from tests.support.broker_double import HEARTBEAT, heartbeat, proxy_in_front_of, read_response


class TlsOnlyBroker:
    """Accepts TLS with a client certificate only; answers Metadata naming itself as broker 0 and
    anything else with an empty body; records (the client certificate's CN, API key) per request."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self.server: asyncio.Server | None = None
        self.port = 0
        self.connections = 0
        self.seen: list[tuple[str, int]] = []

    async def start(self, port: int) -> None:
        self.port = port
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port, ssl=self.context)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        subject = dict(rdn[0] for rdn in writer.get_extra_info("peercert")["subject"])
        try:
            while True:
                request = await reader.readexactly(int.from_bytes(await reader.readexactly(4), "big"))
                api_key, correlation_id = unpack_from(">h", request)[0], unpack_from(">i", request, 4)[0]
                self.seen.append((subject["commonName"], api_key))
                body = self._metadata() if api_key == ApiKey.METADATA else b"\x00\x00"
                payload = pack(">i", correlation_id) + body
                writer.write(pack(">i", len(payload)) + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _metadata(self) -> bytes:
        """The discovery request's answer (v12: a flexible header, then the body)."""
        broker = MetadataResponse.MetadataResponseBroker(
            version=12, node_id=0, host="127.0.0.1", port=self.port, rack=None
        )
        response = MetadataResponse(
            version=12, throttle_time_ms=0, brokers=[broker], cluster_id="c", controller_id=0, topics=[]
        )
        return b"\x00" + bytes(response.encode())

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()


class RecordingUpstream(Upstream):
    """The proxy's own Upstream, recording the socket options of every connection it opens."""

    def __init__(self, upstream: Upstream) -> None:
        super().__init__(upstream.tls, upstream.connect_timeout)
        self.options: list[list[int]] = []

    async def connect(self, host: str, port: int, protocol: Callable[[], asyncio.BaseProtocol]):  # type: ignore[override]
        transport, connected = await super().connect(host, port, protocol)
        sock = transport.get_extra_info("socket")
        self.options.append([sock.getsockopt(level, option) for level, option, _ in SOCKET_OPTIONS])
        return transport, connected


def pki(directory: Path) -> tuple[ssl.SSLContext, str]:
    """The broker's server context (client certificates required) and the proxy's [upstream.tls]."""
    directory.mkdir(exist_ok=True)
    ca = trustme.CA()
    ca_path = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    broker = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(ca_path))
    broker.verify_mode = ssl.CERT_REQUIRED
    ca.issue_cert("127.0.0.1", common_name="broker").configure_cert(broker)
    cert, key = write_leaf(directory, "proxy-client", ca.issue_cert("quotagate.test", common_name="quotagate"))
    return broker, f'[upstream.tls]\nca = "{ca_path}"\ncert = "{cert}"\nkey = "{key}"\n'


async def test_discovery_the_readiness_probe_and_sessions_reach_a_tls_broker_through_one_helper(
    tmp_path: Path,
) -> None:
    context, upstream_tls = pki(tmp_path)
    broker = TlsOnlyBroker(context)
    probes = "readiness_probe_seconds = 0.1\nreadiness_timeout_seconds = 2"
    async with proxy_in_front_of(broker, probes, top_toml=upstream_tls) as (proxy, _broker, port):
        assert proxy.brokers.addresses == {0: ("127.0.0.1", broker.port)}, "discovery reached the broker"
        assert proxy.listeners.ports.keys() == {0}
        recording = RecordingUpstream(proxy.upstream)  # for every part the proxy handed its Upstream
        proxy.upstream = proxy.discovery.upstream = proxy.listeners.upstream = recording
        before = broker.connections
        assert await proxy.discovery.refresh_metadata(), "discovery over TLS"
        assert await proxy.discovery.probe_brokers(), "the readiness probe over TLS, with the client certificate"
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(heartbeat(7))
        assert (await asyncio.wait_for(read_response(reader), 10))[0] == 7, "a client session over TLS"
        writer.close()
        assert not await ready_within(proxy, False, 1.0), "ready all along, a probe every 0.1 s"
        assert not proxy.readiness_problems()
        assert {api for who, api in broker.seen} == {ApiKey.METADATA, ApiKey.API_VERSIONS, HEARTBEAT}
        assert {who for who, api in broker.seen} == {"quotagate"}, "every path showed the proxy's certificate"
        # Every connection the broker took since the recorder went in was opened by the one helper,
        # each with the socket options Kafka's clients set.
        assert broker.connections - before == len(recording.options) >= 4
        assert all(options == [1] * len(SOCKET_OPTIONS) for options in recording.options), recording.options


async def test_a_broker_refusing_the_proxys_certificate_is_unreachable_on_every_path(tmp_path: Path) -> None:
    """The same settings on every path, failing as well: a broker that trusts another CA refuses the
    proxy's certificate for discovery, the probe and a client alike, and /readyz says so."""
    context, _ = pki(tmp_path / "broker-ca")
    _, other_tls = pki(tmp_path / "proxy-ca")
    broker = TlsOnlyBroker(context)
    probes = "readiness_probe_seconds = 0.1\nreadiness_timeout_seconds = 1"
    async with proxy_in_front_of(broker, probes, top_toml=other_tls, connect_timeout=1.0) as (proxy, _broker, port):
        assert not await proxy.discovery.refresh_metadata()
        assert not await proxy.discovery.probe_brokers()
        assert proxy.readiness_problems()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(heartbeat(1))
        try:
            assert await asyncio.wait_for(reader.read(), 10) == b"", "a client is closed, never answered"
        except ConnectionResetError:
            pass
        writer.close()
        assert broker.seen == []
