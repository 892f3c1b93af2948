"""Identity from authentication through the proxy, on a real broker with SASL_SSL and SSL listeners.

One broker (cluster "tls1") with a SASL_SSL listener (PLAIN, SCRAM-SHA-256/512 with users made by
the broker's own configs tool, OAUTHBEARER with the unsecured validator and re-authentication every
8 s) and an SSL listener that requires client certificates; every certificate is made here with
trustme. The proxy terminates TLS on both sides. Rates are measured as in test_quotas.py.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import socket
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion
from cryptography.hazmat.primitives import serialization
from kafka.protocol.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from quotagate.protocol.headers import response_body_offset
from tests.support.kafka_clients import (
    QUOTA,
    RECORD,
    WINDOWS,
    Acked,
    confluent_producer_loop,
    kafka_python_producer_loop,
    quota_config,
    rate_between,
    run_threads,
)
from tests.support.kafka_fixtures import (
    CLUSTER_SUFFIX,
    PORT_OFFSET,
    SASL_USERS,
    Cluster,
    fresh_cluster,
    secure_listener_overrides,
)
from tests.support.kafka_helpers import create_topic, produce_usage_records, unique_topic, wait_until

pytestmark = pytest.mark.matrix

# Clear of the other test clusters' ports (29092-29492), below 40000 with any offset up to 10000.
SASL_SSL_PORT = 29592 + PORT_OFFSET
SSL_PORT = 29593 + PORT_OFFSET
PLAINTEXT_PORT = 29594 + PORT_OFFSET
CONTROLLER_PORT = 29595 + PORT_OFFSET
OAUTHBEARER_REAUTH_MS = 8000
# Checkouts share .cache/kafka/run: a cluster per port offset, so two runs never take each other's.
TLS_CLUSTER = "tls1" + CLUSTER_SUFFIX  # another checkout's or Kafka version's is another cluster
ALICE_RULES = "RULE:^CN=(.*?),OU=ServiceUsers,.*$/$1/L, DEFAULT"


@dataclass
class Pki:
    ca: Path  # the CA every side trusts
    broker: Path  # broker key + chain (PKCS#8, as Kafka's PEM keystore wants)
    proxy_cert: Path  # the proxy's server certificate chain and key (SAN 127.0.0.1)
    proxy_key: Path
    proxy_client_cert: Path  # the proxy's client certificate, for the broker's SSL listener
    proxy_client_key: Path
    alice_cert: Path  # CN=alice,OU=ServiceUsers: a client certificate mapped to "alice"
    alice_key: Path


def _pkcs8(leaf: trustme.LeafCert) -> bytes:
    key = serialization.load_pem_private_key(leaf.private_key_pem.bytes(), password=None)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _write(directory: Path, name: str, leaf: trustme.LeafCert) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.pem", directory / f"{name}.key"
    cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
    key.write_bytes(_pkcs8(leaf))
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca_path = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    broker = ca.issue_cert("127.0.0.1", "localhost", common_name="broker")
    broker_path = directory / "broker.pem"
    broker_path.write_bytes(_pkcs8(broker) + b"".join(blob.bytes() for blob in broker.cert_chain_pems))
    proxy_cert, proxy_key = _write(directory, "proxy", ca.issue_cert("127.0.0.1", common_name="quotagate"))
    client_cert, client_key = _write(
        directory,
        "proxy-client",
        ca.issue_cert("quotagate.test", common_name="quotagate", organization_unit_name="Proxies"),
    )
    alice_cert, alice_key = _write(
        directory, "alice", ca.issue_cert("alice.test", common_name="Alice", organization_unit_name="ServiceUsers")
    )
    return Pki(ca_path, broker_path, proxy_cert, proxy_key, client_cert, client_key, alice_cert, alice_key)


@pytest.fixture(scope="module")
def secure_kafka(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    # The layout the cluster will have (its node's ports), in a folder of its own: the saved cluster of
    # that name may be another run's, of another Kafka, until fresh_cluster wipes it.
    probe = Cluster.create(
        TLS_CLUSTER, 1, PLAINTEXT_PORT, controller_base_port=CONTROLLER_PORT, workdir=tmp_path_factory.mktemp("layout")
    )
    overrides = secure_listener_overrides(
        probe.nodes[0], SASL_SSL_PORT, SSL_PORT, pki.broker, pki.ca, SASL_USERS, OAUTHBEARER_REAUTH_MS
    )
    cluster = fresh_cluster(TLS_CLUSTER, 1, PLAINTEXT_PORT, controller_base_port=CONTROLLER_PORT, overrides=overrides)
    try:
        # The SCRAM credentials by AlterUserScramCredentials, what kafka-configs.sh sends, without four
        # JVM start-ups of it. One request per mechanism: the broker refuses a user twice in one
        # (DUPLICATE_RESOURCE).
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upserts = [
                UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 4096), SASL_USERS[user].encode())
                for user in ("alice", "bob")
            ]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(timeout=60)
        # The controller has them; the broker learns them a moment later: wait until each logs in.
        for user in ("alice", "bob"):
            for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
                login = functools.partial(scram_login_works, pki, mechanism, user)
                wait_until(login, 60, f"{user} to log in with {mechanism}")
        yield cluster
    finally:
        cluster.stop()


def scram_login_works(pki: Pki, mechanism: str, user: str) -> bool:
    """Whether `user` logs in with `mechanism` on the broker's own SASL_SSL listener."""
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{SASL_SSL_PORT}", **sasl_ssl(pki, mechanism, user)})
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        return False
    return True


def tls_proxy_toml(pki: Pki, client_auth: str = "none", upstream_client_cert: bool = False) -> str:
    listener = f'[proxy.tls]\ncert = "{pki.proxy_cert}"\nkey = "{pki.proxy_key}"\n'
    if client_auth != "none":
        listener += f'ca = "{pki.ca}"\nclient_auth = "{client_auth}"\nprincipal_mapping_rules = "{ALICE_RULES}"\n'
    upstream = f'[upstream.tls]\nca = "{pki.ca}"\n'
    if upstream_client_cert:
        upstream += f'cert = "{pki.proxy_client_cert}"\nkey = "{pki.proxy_client_key}"\n'
    return listener + "\n" + upstream


def sasl_ssl(pki: Pki, mechanism: str, user: str, password: str | None = None) -> dict[str, str]:
    """librdkafka's settings for a SASL_SSL client of the proxy."""
    return {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(pki.ca),
        "sasl.mechanism": mechanism,
        "sasl.username": user,
        "sasl.password": password if password is not None else SASL_USERS[user],
    }


def scrape(metrics_port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()


def entity_users(metrics_port: int) -> set[str]:
    """The users the proxy's per-entity metrics name (each one was charged something)."""
    return set(re.findall(r'^quotagate_\w+\{[^}]*user="([^"]*)"', scrape(metrics_port), re.MULTILINE))


def throttled_responses(metrics_port: int, user: str) -> float:
    """Responses to `user` that carried a throttle, by the proxy's count."""
    pattern = rf'^quotagate_throttled_responses_total\{{[^}}]*user="{re.escape(user)}"[^}}]*\}} (\S+)$'
    return sum(float(value) for value in re.findall(pattern, scrape(metrics_port), re.MULTILINE))


@pytest.mark.java
def test_sasl_ssl_alice_is_held_to_her_quota_with_three_clients_and_bob_is_free(
    secure_kafka: Cluster, pki: Pki, proxy_factory, kafka_tool, tmp_path: Path
) -> None:
    """alice per client-id (SCRAM-SHA-256 with librdkafka, SCRAM-SHA-512 with kafka-python,
    OAUTHBEARER with the Java producer, which re-authenticates every 8 s); bob (PLAIN) has none."""
    bootstrap = f"127.0.0.1:{SASL_SSL_PORT}"
    proxy = proxy_factory(
        bootstrap,
        WINDOWS
        + tls_proxy_toml(pki)
        + quota_config(f'user = "alice"\nclient_id = "<default>"\nproducer_byte_rate = {QUOTA}'),
    )
    topic = unique_topic("tls")
    create_topic(secure_kafka.bootstrap, topic, partitions=3)
    seconds = 24.0
    confluent_alice, python_alice, bob = Acked(), Acked(), Acked()
    java_result: dict[str, str] = {}
    kafka_python_scram = {
        "security_protocol": "SASL_SSL",
        "ssl_cafile": str(pki.ca),
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": SASL_USERS["alice"],
    }

    # A file, not --command-property: the JAAS line holds "=" signs ProducerPerformance would split on.
    java_config = tmp_path / "alice-java.properties"
    java_config.write_text(
        f"bootstrap.servers={proxy.bootstrap}\nclient.id=alice-java\nacks=1\nsecurity.protocol=SASL_SSL\n"
        f"ssl.truststore.type=PEM\nssl.truststore.location={pki.ca}\nsasl.mechanism=OAUTHBEARER\n"
        "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="alice";\n'
    )

    def java() -> None:
        java_result["out"] = kafka_tool(
            "producer-perf",
            "--topic", topic, "--num-records", str(int(QUOTA * seconds / RECORD)), "--record-size", str(RECORD),
            "--throughput", "-1", "--print-metrics", "--command-config", str(java_config),
            timeout=150,
        ).stdout  # fmt: skip

    started = time.monotonic()
    run_threads(
        java,
        lambda: confluent_producer_loop(
            proxy.bootstrap, topic, "alice-librdkafka", seconds, confluent_alice,
            sasl_ssl(pki, "SCRAM-SHA-256", "alice"),
        ),
        lambda: kafka_python_producer_loop(
            proxy.bootstrap, topic, "alice-kafka-python", seconds, python_alice, kafka_python_scram
        ),
        lambda: confluent_producer_loop(proxy.bootstrap, topic, "bob", seconds, bob, sasl_ssl(pki, "PLAIN", "bob")),
    )  # fmt: skip
    out = java_result["out"]
    reports = [float(rate) for _, rate in re.findall(r"(\d+) records sent, ([\d.]+) records/sec", out)]
    assert len(reports) >= 2, out
    steady = reports[1:-1] or reports[-1:]
    rates = {
        "java (OAUTHBEARER)": sum(steady) / len(steady) * RECORD,
        "librdkafka (SCRAM-SHA-256)": rate_between(confluent_alice.events, started + 3, started + seconds),
        "kafka-python (SCRAM-SHA-512)": rate_between(python_alice.events, started + 3, started + seconds),
    }
    bob_rate = rate_between(bob.events, started + 3, started + seconds)
    print({name: round(rate / QUOTA, 3) for name, rate in rates.items()}, f"bob {bob_rate / QUOTA:.1f}x")
    for name, rate in rates.items():
        assert rate == pytest.approx(QUOTA, rel=0.12), f"alice's {name} producer achieved {rate:.0f} B/s"
    # Free: never throttled, and past alice's quota (how far past depends on the machine's load:
    # 11x on a quiet machine, 2x with a load average of 16 on its 2 cores).
    assert entity_users(proxy.metrics_port) >= {"alice", "bob"}
    assert throttled_responses(proxy.metrics_port, "bob") == 0, "bob was throttled"
    assert throttled_responses(proxy.metrics_port, "alice") > 0, "alice was never throttled"
    assert bob_rate > QUOTA, f"bob, who has no quota, only achieved {bob_rate:.0f} B/s"
    throttle = re.search(r"producer-metrics:produce-throttle-time-avg:\{client-id=alice-java\}\s*:\s*([\d.]+)", out)
    assert throttle and float(throttle.group(1)) > 0, "the Java producer must have seen throttle_time_ms"


def test_a_wrong_password_is_refused_by_the_broker_and_nothing_is_charged_as_that_user(
    secure_kafka: Cluster, pki: Pki, proxy_factory
) -> None:
    proxy = proxy_factory(
        f"127.0.0.1:{SASL_SSL_PORT}",
        WINDOWS + tls_proxy_toml(pki) + quota_config(f'user = "alice"\nproducer_byte_rate = {QUOTA}'),
    )
    topic = unique_topic("wrongpw")
    create_topic(secure_kafka.bootstrap, topic, partitions=1)
    errors: list[str] = []
    producer = Producer(
        {
            "bootstrap.servers": proxy.bootstrap,
            "client.id": "mallory",
            "message.timeout.ms": 4000,
            "error_cb": lambda error: errors.append(str(error)),
            **sasl_ssl(pki, "SCRAM-SHA-256", "alice", password="not-alice-secret"),
        }
    )
    for _ in range(20):
        try:
            producer.produce(topic, value=b"x" * RECORD)
        except (BufferError, KafkaException):
            break
    producer.flush(6)
    assert any("Authentication failed" in error or "SASL" in error for error in errors), errors
    assert "alice" not in entity_users(proxy.metrics_port), "a refused login was charged to the user it claimed"


def test_an_mtls_client_is_the_user_its_certificate_maps_to_and_is_held_to_that_users_quota(
    secure_kafka: Cluster, pki: Pki, proxy_factory
) -> None:
    """kafka-python with alice's certificate (CN=Alice,OU=ServiceUsers -> "alice" by the rules) through
    a proxy that requires client certificates, to the broker's SSL listener (the proxy's own
    certificate there). kafka-python ignores throttle_time_ms: only the proxy's mute holds it."""
    proxy = proxy_factory(
        f"127.0.0.1:{SSL_PORT}",
        WINDOWS
        + tls_proxy_toml(pki, client_auth="required", upstream_client_cert=True)
        + quota_config(f'user = "alice"\nproducer_byte_rate = {QUOTA}'),
    )
    topic = unique_topic("mtls")
    create_topic(secure_kafka.bootstrap, topic, partitions=1)
    seconds = 16.0
    acked = Acked()
    mtls = {
        "security_protocol": "SSL",
        "ssl_cafile": str(pki.ca),
        "ssl_certfile": str(pki.alice_cert),
        "ssl_keyfile": str(pki.alice_key),
    }
    started = time.monotonic()
    kafka_python_producer_loop(proxy.bootstrap, topic, "cert-client", seconds, acked, mtls)
    rate = rate_between(acked.events, started + 3, started + seconds)
    print(f"mTLS alice {rate / QUOTA:.3f}x")
    assert rate == pytest.approx(QUOTA, rel=0.10), f"alice by certificate achieved {rate:.0f} B/s"
    assert "alice" in entity_users(proxy.metrics_port)


def test_usage_records_reach_a_kafka_topic_over_the_upstream_tls_settings(
    secure_kafka: Cluster, pki: Pki, proxy_factory
) -> None:
    """A cluster reachable only over SSL with client certificates takes the usage topic too: the
    sink connects with [upstream.tls] (CAs and the proxy's client certificate), as the proxy does."""
    usage_topic = unique_topic("usage-tls")
    create_topic(secure_kafka.bootstrap, usage_topic, partitions=1)
    upstream = f'[upstream.tls]\nca = "{pki.ca}"\ncert = "{pki.proxy_client_cert}"\nkey = "{pki.proxy_client_key}"\n'
    proxy = proxy_factory(
        f"127.0.0.1:{SSL_PORT}",
        upstream + f'[usage]\nenabled = true\nsink = "kafka"\nrecords = "request"\nkafka_topic = "{usage_topic}"\n'
        "flush_interval_seconds = 0.2\n",
    )
    topic = unique_topic("traffic-tls")
    create_topic(secure_kafka.bootstrap, topic, partitions=1)
    kafka_python_producer_loop(proxy.bootstrap, topic, "usage-over-tls", 1.0, Acked())
    records = produce_usage_records(secure_kafka.bootstrap, usage_topic, "usage-over-tls")
    assert any(r["client_id"] == "usage-over-tls" and r["api_key"] == 0 for r in records), f"{len(records)} records"


@pytest.mark.long_only
def test_readyz_stays_200_for_30_s_behind_the_brokers_ssl_listener(
    secure_kafka: Cluster, pki: Pki, proxy_factory
) -> None:
    """Issue 34, item 9: the readiness probe connected in plaintext while discovery used [upstream.tls],
    so behind an SSL listener /readyz answered 200 once and 503 from the first probe on. Now the probe,
    discovery and sessions connect through one helper: with a probe every 0.5 s, 60 of them in 30 s,
    /readyz never leaves 200 (the listener also requires the proxy's client certificate)."""
    upstream = f'[upstream.tls]\nca = "{pki.ca}"\ncert = "{pki.proxy_client_cert}"\nkey = "{pki.proxy_client_key}"\n'
    probes = "readiness_probe_seconds = 0.5\nreadiness_timeout_seconds = 5\n"
    proxy = proxy_factory(f"127.0.0.1:{SSL_PORT}", upstream, proxy_toml=probes)
    url = f"http://127.0.0.1:{proxy.metrics_port}/readyz"
    answers: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                answers.append(response.status)
        except urllib.error.HTTPError as exc:
            answers.append(exc.code)
        time.sleep(0.25)
    print(f"/readyz: {len(answers)} answers, {answers.count(200)} of them 200")
    assert len(answers) >= 60 and set(answers) == {200}, answers
    assert "no broker answered ApiVersions" not in proxy.log_text()
    assert proxy.log_text().count("readiness probe of") == 0, "no probe failed"


def authenticate(user: str) -> SaslAuthenticateRequest:
    """OAUTHBEARER's client-first message with an unsigned JWS naming `user` (the listener's
    unsecured validator takes it), in a SaslAuthenticate v2 (v1+: a client that may re-authenticate)."""

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    now = int(time.time())
    token = f"{part({'alg': 'none'})}.{part({'sub': user, 'iat': now, 'exp': now + 3600})}."
    return SaslAuthenticateRequest(version=2, auth_bytes=f"n,,\x01auth=Bearer {token}\x01\x01".encode())


def read_exactly(sock: ssl.SSLSocket, count: int) -> bytes:
    """`count` bytes, or fewer if the connection closes first (an SSLSocket takes no MSG_WAITALL)."""
    data = b""
    while len(data) < count:
        try:
            chunk = sock.recv(count - len(data))
        except (ssl.SSLError, ConnectionError):
            break
        if not chunk:
            break
        data += chunk
    return data


def exchange(sock: ssl.SSLSocket, request: Any, answer: Any, correlation_id: int) -> Any | None:
    """Writes one request and reads its answer (of class `answer`), decoded; None if the connection
    closed instead."""
    request.with_header(correlation_id=correlation_id, client_id="reauth-test")
    sock.sendall(bytes(request.encode(header=True, framed=True)))
    size = read_exactly(sock, 4)
    if len(size) < 4:
        return None
    frame = size + read_exactly(sock, int.from_bytes(size, "big"))
    body = response_body_offset(memoryview(frame), request.API_KEY, request.version)
    return answer.decode(frame[body:], version=request.version)


def test_a_reauthentication_as_another_user_is_refused_by_the_broker_and_the_first_user_stays(
    secure_kafka: Cluster, pki: Pki, proxy_factory
) -> None:
    """What docs/security.md says of KIP-368: the broker does not let a re-authentication change the
    principal (SASL_AUTHENTICATION_FAILED, error 58) and closes the connection; the proxy, which
    adopts a user only on the broker's success, charged the connection to alice throughout and
    nothing to bob. (OAUTHBEARER connections on this listener re-authenticate every 8 s.)"""
    proxy = proxy_factory(f"127.0.0.1:{SASL_SSL_PORT}", tls_proxy_toml(pki))
    context = ssl.create_default_context(cafile=str(pki.ca))
    with (
        socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as sock,
    ):
        handshake = SaslHandshakeRequest(version=1, mechanism="OAUTHBEARER")
        metadata = MetadataRequest(
            version=12, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        assert exchange(sock, handshake, SaslHandshakeResponse, 1).error_code == 0
        first = exchange(sock, authenticate("alice"), SaslAuthenticateResponse, 2)
        assert first.error_code == 0 and first.session_lifetime_ms > 0, first
        assert exchange(sock, metadata, MetadataResponse, 3).brokers, "served as alice"
        assert exchange(sock, handshake, SaslHandshakeResponse, 4).error_code == 0, "a re-authentication begins"
        again = exchange(sock, authenticate("bob"), SaslAuthenticateResponse, 5)
        assert again.error_code == 58 and "Cannot change principals" in again.error_message, again
        assert exchange(sock, metadata, MetadataResponse, 6) is None, "the broker closed the connection"
    users = entity_users(proxy.metrics_port)
    assert "alice" in users and "bob" not in users, users


def tls_verdict(port: int, ca: Path, cert: tuple[Path, Path] | None) -> str:
    """Handshakes with the proxy as a client with `cert` (or none) and reads: "open", the reason of
    the TLS alert the client got (ssl.SSLError.reason), or "eof" when the connection just closed."""
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(*map(str, cert))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                # TLS 1.3: the server judges the client's certificate after the client's Finished,
                # so its verdict arrives with the first read.
                return "open" if tls.recv(1) else "eof"
        except ssl.SSLEOFError:
            return "eof"
        except ssl.SSLError as exc:
            return exc.reason or "ssl error"
        except (ConnectionError, TimeoutError):
            return "eof"


def test_a_refused_client_certificate_gets_the_tls_alert_and_is_counted(
    secure_kafka: Cluster, pki: Pki, proxy_factory, tmp_path: Path
) -> None:
    """Issue 26: with client_auth = "required", a client without a certificate, or with one from
    another CA, got an EOF where `openssl s_server` sends `certificate required` or `unknown ca`
    (librdkafka then retries as if the network failed), and the proxy neither logged nor counted
    it. A client with a good certificate is still served."""
    toml = tls_proxy_toml(pki, client_auth="required", upstream_client_cert=True)
    proxy = proxy_factory(f"127.0.0.1:{SSL_PORT}", toml)
    stranger_ca = trustme.CA()
    stranger = _write(tmp_path, "stranger", stranger_ca.issue_cert("alice.test", common_name="Alice"))
    no_cert = tls_verdict(proxy.port, pki.ca, None)
    other_ca = tls_verdict(proxy.port, pki.ca, stranger)
    print(f"no certificate: {no_cert}; another CA's: {other_ca}")
    assert no_cert == "TLSV13_ALERT_CERTIFICATE_REQUIRED", no_cert
    assert other_ca == "TLSV1_ALERT_UNKNOWN_CA", other_ca
    metrics = scrape(proxy.metrics_port)
    failures = dict(re.findall(r'quotagate_tls_handshake_failures_total\{reason="([^"]+)"\} (\S+)', metrics))
    assert failures == {"peer_did_not_return_a_certificate": "1.0", "certificate_verify_failed": "1.0"}, failures
    assert "TLS handshake with client 127.0.0.1:" in proxy.log_text()
    # alice's certificate is served: her client gets Metadata through the proxy.
    producer = Producer({
        "bootstrap.servers": proxy.bootstrap, "security.protocol": "SSL", "ssl.ca.location": str(pki.ca),
        "ssl.certificate.location": str(pki.alice_cert), "ssl.key.location": str(pki.alice_key),
    })  # fmt: skip
    assert producer.list_topics(timeout=20).brokers, "no broker listed through the proxy"
