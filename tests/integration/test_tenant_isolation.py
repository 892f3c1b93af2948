"""One tenant cannot stall, expose or break the others through the proxy (issue 34, items 1-3), on a
real broker of its own with an authorizer: PLAINTEXT (User:ANONYMOUS, a super user, as the
controller's own connections are) and SASL_PLAINTEXT/PLAIN (admin a super user; alice, bob and carol
only what ACLs grant them).

- Bounded work before admission: a canary (tests/support/canary.py) times Metadata every 10-20 ms on
  its own connection while an attack runs, against the broker directly and through the proxy; what
  the proxy adds to the canary's p99 stays within 50 ms, in the best of up to three rounds. Each
  attack takes a few seconds; `make test` runs the heaviest (38 MB), `make test-canary` all of them
  (QUOTAGATE_CANARY_ATTACKS=all): issue 34's, and the responses a client sizes that the proxy
  rewrites (a batched FindCoordinator, DescribeConfigs of many resources).
- Authentication first: on a SASL listener nothing but ApiVersions and SASL is answered or forwarded
  before authentication completes, and no path lifts the pre-authentication frame limit; one
  connection's partial frames cannot take the memory every other client needs; a stray request
  after a SaslHandshake is answered as the broker answers it (ILLEGAL_SASL_STATE, then closed).
- Describe as the broker: DescribeClientQuotas is answered only to principals the broker lets
  describe; strings over Kafka's 32 767 bytes close the connection and are never persisted.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import struct
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka.protocol.admin import AlterClientQuotasRequest, DescribeClientQuotasRequest, DescribeClientQuotasResponse

from quotagate.protocol.client_quotas import CLUSTER_AUTHORIZATION_FAILED
from tests.support import attack_frames, sasl_messages
from tests.support.attack_frames import answered_then_closed, closed_without_answer
from tests.support.canary import Canary, sasl_plain_login, side_by_side
from tests.support.kafka_fixtures import PORT_OFFSET, SASL_USERS, Cluster, fresh_cluster
from tests.support.proxy_fixtures import PROXY_HOST, ProxyProcess

# Last two digits clear of every other test cluster's ports (…92-…95) whatever the offset.
PLAINTEXT_PORT = 29096 + PORT_OFFSET
SASL_PORT = 29097 + PORT_OFFSET
CONTROLLER_PORT = 29098 + PORT_OFFSET
ISOLATION_CLUSTER = f"iso1-offset{PORT_OFFSET}" if PORT_OFFSET else "iso1"
AUTHORIZED = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS;User:admin",
}
# What the proxy may add to the canary's p99 under an attack, beyond what the same attack does to a
# client of the broker directly (issue 34): a bound of isolation, not a speed target.
ADDED_P99_BOUND_MS = 50.0
ROUNDS = 3
DESCRIBE_CLIENT_QUOTAS, ALTER_CLIENT_QUOTAS, API_VERSIONS = 48, 49, 18


@pytest.fixture(scope="module")
def isolation_kafka() -> Iterator[Cluster]:
    cluster = fresh_cluster(
        ISOLATION_CLUSTER,
        1,
        PLAINTEXT_PORT,
        controller_base_port=CONTROLLER_PORT,
        overrides=AUTHORIZED,
        sasl_users=SASL_USERS,
        sasl_base_port=SASL_PORT,
    )
    try:
        # bob may describe the cluster's configs (and so its quotas); alice and carol may not.
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        binding = AclBinding(
            ResourceType.BROKER,
            "kafka-cluster",
            ResourcePatternType.LITERAL,
            "User:bob",
            "*",
            AclOperation.DESCRIBE_CONFIGS,
            AclPermissionType.ALLOW,
        )
        for future in admin.create_acls([binding]).values():
            future.result(timeout=60)
        del admin  # librdkafka's client, gone before the broker is
        yield cluster
    finally:
        cluster.stop()


def refusals(proxy: ProxyProcess, reason: str) -> float:
    url = f"http://{PROXY_HOST}:{proxy.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        for line in response.read().decode().splitlines():
            if line.startswith(f'quotagate_frames_refused_total{{reason="{reason}"}}'):
                return float(line.split()[1])
    return 0.0


# item 1: bounded work per request before admission -----------------------------------------------
ATTACKS = {
    # a Produce v13 (above the proxy's cap) whose header is 38 MB of empty tagged fields
    "produce-38mb-tagged-header": lambda: attack_frames.produce_with_tagged_header(38_000_000),
    "produce-8mb-tagged-header": lambda: attack_frames.produce_with_tagged_header(8_000_000),
    # from User:ANONYMOUS, who may not alter the proxy's quotas (validate_only: the broker changes nothing)
    "alter-client-quotas-200000-entries": lambda: attack_frames.alter_client_quotas(200_000),
    "metadata-naming-50000-topics": lambda: attack_frames.metadata_naming(50_000),
    # responses a client sizes, which the proxy rewrites (issue 34's follow-ups)
    "find-coordinator-20000-keys": lambda: attack_frames.find_coordinators(20_000),
    "describe-configs-of-5000-unknown-topics": lambda: attack_frames.describe_configs(
        [(attack_frames.TOPIC_RESOURCE, f"ghost-{i:08d}") for i in range(5_000)]
    ),
    "describe-configs-of-50000-unknown-topics": lambda: attack_frames.describe_configs(
        [(attack_frames.TOPIC_RESOURCE, f"ghost-{i:08d}") for i in range(50_000)]
    ),
    "describe-configs-of-the-broker-200-times": lambda: attack_frames.describe_configs(
        [(attack_frames.BROKER_RESOURCE, "1")] * 200
    ),
}
# The slice `make test` runs: the heaviest attack. QUOTAGATE_CANARY_ATTACKS=all runs them all.
SLICE = ("produce-38mb-tagged-header",)
RUN_ALL = os.environ.get("QUOTAGATE_CANARY_ATTACKS") == "all"


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_an_attack_adds_at_most_50_ms_to_another_clients_p99_over_what_it_does_to_the_broker(
    isolation_kafka: Cluster, proxy_factory, attack: str
) -> None:
    if attack not in SLICE and not RUN_ALL:
        pytest.skip("the full set of canary attacks: make test-canary (QUOTAGATE_CANARY_ATTACKS=all)")
    proxy = proxy_factory(isolation_kafka.bootstrap)
    frame = ATTACKS[attack]()  # built before the canary starts: it shares this process
    outcomes: dict[tuple[str, int], str] = {}

    def send(address: tuple[str, int]) -> None:
        outcomes[address] = attack_frames.send_and_wait(address, frame)

    broker = (PROXY_HOST, PLAINTEXT_PORT)
    with Canary((PROXY_HOST, proxy.port)):  # a fresh proxy's first answers build its walks, once
        time.sleep(1.0)
    # Up to ROUNDS rounds, the best kept: the machine's other work and the broker's own stalls (its
    # p99 under one attack went from 23 to 321 ms between runs) only ever blur the comparison.
    rounds = []
    for _ in range(ROUNDS):
        both = side_by_side(broker, (PROXY_HOST, proxy.port), send)
        rounds.append(both)
        if both.added_p99_ms <= ADDED_P99_BOUND_MS:
            break
    print(f"\n{attack}: " + "; ".join(map(str, rounds)))  # the figures of the closing note (pytest -s, or -rP)
    assert not both.direct.closed and not both.proxied.closed, both
    assert both.proxied.unanswered == 0, both
    assert both.added_p99_ms <= ADDED_P99_BOUND_MS, rounds
    assert outcomes[(PROXY_HOST, proxy.port)] == outcomes[broker], "the proxy answers (or closes) as the broker does"


# item 2: authentication first, as the broker -----------------------------------------------------
def frame_of(request: object, correlation_id: int, client_id: str = "tenant") -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=client_id)  # type: ignore[attr-defined]
    return bytes(request.encode(header=True, framed=True))  # type: ignore[attr-defined]


def describe_everything(correlation_id: int = 5) -> bytes:
    return frame_of(DescribeClientQuotasRequest(version=1, components=[], strict=False), correlation_id)


@pytest.fixture
def sasl_proxy(isolation_kafka: Cluster, proxy_factory, tmp_path: Path) -> ProxyProcess:
    """A proxy before the SASL listener, answering quota admin requests from its own quotas."""
    state = tmp_path / "quotas.json"
    return proxy_factory(
        isolation_kafka.sasl_bootstrap,
        '[[quotas]]\nuser = "alice"\nproducer_byte_rate = 1000\n'
        f'[admin]\nalter_principals = ["admin"]\nstate_file = "{state}"\n',
        "partial_frames_max_bytes = 67108864\n",  # 64 MiB, as in the issue: a share of 32 MiB each
    )


def test_a_quota_request_before_sasl_authentication_is_closed_unanswered_as_the_broker_closes_it(
    sasl_proxy: ProxyProcess,
) -> None:
    for data in (describe_everything(), attack_frames.alter_client_quotas(3)):
        assert closed_without_answer((PROXY_HOST, SASL_PORT), data), "the broker closes it before authentication"
        assert closed_without_answer((PROXY_HOST, sasl_proxy.port), data), (
            "the proxy must not answer it (nor forward it)"
        )
    assert refusals(sasl_proxy, "before_sasl_authentication") == 2


def test_no_request_lifts_the_pre_authentication_frame_limit(sasl_proxy: ProxyProcess) -> None:
    """ApiVersions, then a quota request (answered by the proxy before, which lifted the 512 KiB
    limit: a 60 MiB frame was then held), then a 2 MiB frame: ApiVersions is answered, nothing else."""
    api_versions = attack_frames.framed(attack_frames.header_v1(API_VERSIONS, 0, 1))
    big = struct.pack(">i", 2 * 1024 * 1024) + attack_frames.header_v1(0, 9, 3)
    answered = answered_then_closed((PROXY_HOST, sasl_proxy.port), api_versions + describe_everything(2) + big)
    assert answered == [1], "ApiVersions is answered, nothing after it, and the connection closed"


def test_one_connections_partial_frame_cannot_take_the_memory_another_clients_request_needs(
    sasl_proxy: ProxyProcess,
) -> None:
    """partial_frames_max_bytes 64 MiB: an authenticated tenant sends 62.5 MiB of a 63 MiB frame and
    stops; admin's 2 MiB request still gets through (before, the tenant's frame held 62.5 MiB and
    admin's connection was refused at 64)."""
    announced = 63 * 1024 * 1024
    with socket.create_connection((PROXY_HOST, sasl_proxy.port), timeout=20) as slow:
        sasl_plain_login(slow, "carol", SASL_USERS["carol"])
        head = struct.pack(">i", announced) + attack_frames.header_v1(0, 9, 3)
        try:
            slow.sendall(head + b"\0" * (announced - 512 * 1024))
        except (BrokenPipeError, ConnectionResetError):
            pass  # refused at its size, while it was still sending
        time.sleep(0.5)
        with socket.create_connection((PROXY_HOST, sasl_proxy.port), timeout=20) as sock:
            sasl_plain_login(sock, "admin", SASL_USERS["admin"])
            sock.sendall(attack_frames.metadata_naming(140_000, correlation_id=9))  # 2.2 MB
            size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
            assert size > 0 and struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0] == 9
        try:
            assert slow.recv(1) == b"", "the 63 MiB frame is over one connection's share: refused at its size"
        except ConnectionResetError:
            pass
    assert refusals(sasl_proxy, "partial_frames_max_bytes_per_connection") == 1
    assert refusals(sasl_proxy, "partial_frames_max_bytes") == 0


# item 3: describe like the broker ----------------------------------------------------------------
def describe_as(port: int, user: str) -> DescribeClientQuotasResponse:
    with socket.create_connection((PROXY_HOST, port), timeout=20) as sock:
        sasl_plain_login(sock, user, SASL_USERS[user])
        sock.sendall(describe_everything(6))
        size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
        payload = sock.recv(size, socket.MSG_WAITALL)
    assert struct.unpack_from(">i", payload)[0] == 6
    return DescribeClientQuotasResponse.decode(payload[5:], version=1)  # after the correlation id and tags


def test_describe_client_quotas_is_answered_only_to_principals_the_broker_lets_describe(
    sasl_proxy: ProxyProcess,
) -> None:
    assert describe_as(SASL_PORT, "alice").error_code == CLUSTER_AUTHORIZATION_FAILED, "the broker refuses alice"
    assert describe_as(SASL_PORT, "bob").error_code == 0, "bob has DESCRIBE_CONFIGS on the cluster"
    refused = describe_as(sasl_proxy.port, "alice")
    assert (refused.error_code, refused.entries) == (CLUSTER_AUTHORIZATION_FAILED, None), "alice sees nothing"
    for user in ("bob", "admin"):
        answered = describe_as(sasl_proxy.port, user)
        assert answered.error_code == 0, (user, answered.error_message)
        entities = [[(e.entity_type, e.entity_name) for e in entry.entity] for entry in answered.entries]
        assert entities == [[("user", "alice")]], f"{user} sees the proxy's quotas"


def test_a_name_over_32767_bytes_closes_the_connection_as_the_broker_does_and_is_never_persisted(
    sasl_proxy: ProxyProcess,
) -> None:
    long_name = "n" * 40_000
    cls = AlterClientQuotasRequest
    alter = frame_of(
        cls(
            version=1,
            entries=[
                cls.EntryData(
                    version=1,
                    entity=[cls.EntryData.EntityData(version=1, entity_type="user", entity_name=long_name)],
                    ops=[cls.EntryData.OpData(version=1, key="producer_byte_rate", value=1000.0, remove=False)],
                )
            ],
            validate_only=False,
        ),
        7,
    )
    admin = functools.partial(sasl_plain_login, user="admin", password=SASL_USERS["admin"])
    assert closed_without_answer((PROXY_HOST, SASL_PORT), alter, admin), "the broker closes on what it cannot parse"
    assert closed_without_answer((PROXY_HOST, sasl_proxy.port), alter, admin)
    state = Path(sasl_proxy.config_path.read_text().split('state_file = "')[1].split('"')[0])
    assert not state.exists() or long_name not in json.dumps(json.loads(state.read_text()))
    component = DescribeClientQuotasRequest.ComponentData(version=1, entity_type="user", match_type=0, match=long_name)
    describe = frame_of(DescribeClientQuotasRequest(version=1, components=[component], strict=False), 8)
    assert closed_without_answer((PROXY_HOST, SASL_PORT), describe, admin)
    assert closed_without_answer((PROXY_HOST, sasl_proxy.port), describe, admin)


# item 2 again: a stray request after a SaslHandshake, as the broker answers it ----------------------
ILLEGAL_SASL_STATE = 34
STRAYS = {
    "metadata": lambda cid: attack_frames.metadata_naming(2, correlation_id=cid),
    "describe-client-quotas": describe_everything,  # the proxy answers it itself once authenticated
    "api-versions": lambda cid: attack_frames.framed(attack_frames.header_v1(API_VERSIONS, 0, cid)),
    "second-handshake": lambda cid: sasl_messages.handshake(cid, "PLAIN"),
}


def test_a_request_after_a_sasl_handshake_is_answered_illegal_sasl_state_then_closed_as_by_the_broker(
    sasl_proxy: ProxyProcess,
) -> None:
    """SaslServerAuthenticator.handleSaslToken: after a SaslHandshake, a request other than
    SaslAuthenticate is parsed, answered with its API's error response (ILLEGAL_SASL_STATE) and the
    connection closed; nothing after it is read. The proxy answers byte for byte as the broker does.
    One proxy for every stray (a proxy's start is most of this test's time)."""
    for n, (stray, request) in enumerate(STRAYS.items(), start=1):
        data = sasl_messages.handshake(1, "PLAIN") + request(2) + attack_frames.metadata_naming(1, correlation_id=3)
        direct = attack_frames.frames_until_closed((PROXY_HOST, SASL_PORT), data)
        proxied = attack_frames.frames_until_closed((PROXY_HOST, sasl_proxy.port), data)
        assert [struct.unpack_from(">i", f, 4)[0] for f in direct] == [1, 2], f"{stray}: the handshake, the stray"
        assert struct.pack(">h", ILLEGAL_SASL_STATE) in direct[1], f"{stray}: its answer carries ILLEGAL_SASL_STATE"
        assert proxied == direct, f"{stray}: the proxy answers as the broker does, byte for byte, then closes"
        assert refusals(sasl_proxy, "before_sasl_authentication") == n, stray


def test_a_sasl_authenticate_after_authentication_is_refused_as_by_the_broker_and_the_connection_goes_on(
    sasl_proxy: ProxyProcess,
) -> None:
    """KafkaApis answers a SaslAuthenticate after authentication with ILLEGAL_SASL_STATE and reads on:
    the proxy forwards it unread (a 400 kB token) and drops nothing that follows."""
    token = b"n,,\x01auth=Bearer " + b"x" * 400_000 + b"\x01\x01"
    data = sasl_messages.authenticate(7, token) + attack_frames.metadata_naming(1, correlation_id=8)
    for port in (SASL_PORT, sasl_proxy.port):
        with socket.create_connection((PROXY_HOST, port), timeout=20) as sock:
            sasl_plain_login(sock, "alice", SASL_USERS["alice"])
            sock.sendall(data)
            answers = [read_frame(sock), read_frame(sock)]
        assert [struct.unpack_from(">i", a)[0] for a in answers] == [7, 8], port
        assert struct.unpack_from(">h", answers[0], 4)[0] == ILLEGAL_SASL_STATE, port


def read_frame(sock: socket.socket) -> bytes:
    size = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))[0]
    return sock.recv(size, socket.MSG_WAITALL)
