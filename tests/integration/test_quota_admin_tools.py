"""The proxy's quotas managed with Kafka's own tools (issue 13): kafka-configs.sh and the Java Admin
API pointed at the proxy set the proxy's quotas, not the brokers'; they bind on real traffic,
persist across a restart, are refused to principals not listed, and invalid ones are refused as the
broker refuses them.

The proxy sits in front of the test Kafka's SASL/PLAIN listener, so each tool runs as a user.
"""

from __future__ import annotations

import socket
import struct
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from kafka_rig import java_program
from tests.support.admin_quotas import admin_proxy, quotas_view
from tests.support.kafka_clients import Acked, confluent_producer_loop, librdkafka_sasl_plain, rate_between
from tests.support.kafka_fixtures import KAFKA_SASL_BOOTSTRAP, SASL_USERS
from tests.support.kafka_helpers import create_topic, unique_topic

pytestmark = pytest.mark.matrix

QUOTA = 200_000  # bytes/s


def sasl_properties(tmp_path: Path, user: str) -> Path:
    path = tmp_path / f"{user}.properties"
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="{user}" password="{SASL_USERS[user]}";\n'
    )
    return path


def configs(kafka_tool, bootstrap: str, user_file: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:  # type: ignore[no-untyped-def]
    return kafka_tool(
        "configs", "--bootstrap-server", bootstrap, "--command-config", str(user_file), *args, check=check
    )


def test_kafka_configs_sets_the_proxys_quota_which_binds_on_traffic_and_leaves_the_broker_alone(
    proxy_factory, kafka, kafka_tool, tmp_path
) -> None:
    proxy = admin_proxy(proxy_factory, tmp_path)
    admin = sasl_properties(tmp_path, "admin")
    alice = "--entity-type", "users", "--entity-name", "alice"
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", f"producer_byte_rate={QUOTA}", *alice)
    configs(
        kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "consumer_byte_rate=4096",
        *alice, "--entity-type", "clients", "--entity-name", "app",
    )  # fmt: skip
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "request_percentage=50",
            "--entity-type", "users", "--entity-default")  # fmt: skip
    described = configs(kafka_tool, proxy.bootstrap, admin, "--describe", "--entity-type", "users").stdout
    print(described)
    assert f"producer_byte_rate={QUOTA}" in described.replace(".0", "")
    assert "request_percentage=50" in described.replace(".0", "")
    pair = configs(kafka_tool, proxy.bootstrap, admin, "--describe", *alice, "--entity-type", "clients",
                   "--entity-name", "app").stdout  # fmt: skip
    assert "consumer_byte_rate=4096" in pair.replace(".0", ""), pair
    # The broker's own quotas are untouched.
    direct = configs(kafka_tool, KAFKA_SASL_BOOTSTRAP, admin, "--describe", "--entity-type", "users").stdout
    assert "producer_byte_rate" not in direct and "request_percentage" not in direct, direct
    view = quotas_view(proxy.metrics_port)
    alice_entry = next(e for e in view["configured"] if e["user"] == "alice" and e["client_id"] is None)
    assert alice_entry["producer_byte_rate"] == QUOTA and alice_entry["source"] == {"producer_byte_rate": "api"}

    # --delete-config removes one key and keeps the rest.
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--delete-config", "request_percentage",
            "--entity-type", "users", "--entity-default")  # fmt: skip
    after = configs(kafka_tool, proxy.bootstrap, admin, "--describe", "--entity-type", "users").stdout
    assert "request_percentage" not in after and "producer_byte_rate" in after, after

    # The quota binds on alice's traffic.
    topic = unique_topic("admin-q")
    create_topic(kafka.bootstrap, topic, partitions=2)
    acked = Acked()
    started = time.monotonic()
    sasl = librdkafka_sasl_plain("alice")
    confluent_producer_loop(proxy.bootstrap, topic, "alice-producer", 14.0, acked, sasl)
    rate = rate_between(acked.events, started + 3, started + 14)
    print(f"alice under a quota set by kafka-configs.sh: {rate / QUOTA:.3f}x")
    assert rate == pytest.approx(QUOTA, rel=0.10), f"{rate:.0f} B/s"


def test_invalid_quotas_and_unlisted_principals_are_refused_and_quotas_survive_a_restart(
    proxy_factory, kafka, kafka_tool, tmp_path
) -> None:
    proxy = admin_proxy(proxy_factory, tmp_path)
    admin = sasl_properties(tmp_path, "admin")
    bob = "--entity-type", "users", "--entity-name", "bob"
    for value, message in (("0", "must be greater than 0"), ("-5", "must be greater than 0"),
                           ("1.5", "producer_byte_rate cannot be a fractional value.")):  # fmt: skip
        refused = configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config",
                          f"producer_byte_rate={value}", *bob, check=False)  # fmt: skip
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "InvalidRequestException" in output and message in output, output
    unknown = configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "bogus_rate=1", *bob, check=False)
    assert unknown.returncode != 0  # kafka-configs.sh refuses unknown keys itself; the proxy too (unit tests)

    carol = sasl_properties(tmp_path, "carol")
    denied = configs(kafka_tool, proxy.bootstrap, carol, "--alter", "--add-config", "producer_byte_rate=1000", *bob,
                     check=False)  # fmt: skip
    assert denied.returncode != 0 and "ClusterAuthorizationException" in denied.stdout + denied.stderr
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "producer_byte_rate=1000", *bob)

    proxy.stop()
    again = admin_proxy(proxy_factory, tmp_path)
    described = configs(kafka_tool, again.bootstrap, carol, "--describe", *bob).stdout
    assert "producer_byte_rate=1000" in described.replace(".0", ""), described


@pytest.mark.long_only
def test_non_finite_quotas_from_kafka_configs_get_invalid_request_and_nothing_is_stored(
    proxy_factory, kafka, kafka_tool, tmp_path
) -> None:
    """Issue 26: kafka-configs.sh sends 1e400 as Infinity and NaN as NaN. The proxy answers
    INVALID_REQUEST naming the key (before, the connection dropped and the tool retried until its
    timeout, or NaN was stored and disconnected every client it applied to)."""
    proxy = admin_proxy(proxy_factory, tmp_path)
    admin = sasl_properties(tmp_path, "admin")
    bob = "--entity-type", "users", "--entity-name", "bob"
    # Where the broker refuses too, its words (a byte rate above a Java long); else the proxy's.
    for config, message in (
        ("producer_byte_rate=1e400", "Proposed value for producer_byte_rate is too large for a LONG."),
        ("producer_byte_rate=NaN", "Configuration producer_byte_rate must be a finite number"),
        ("request_percentage=NaN", "Configuration request_percentage must be a finite number"),
        ("controller_mutation_rate=Infinity", "Configuration controller_mutation_rate must be a finite number"),
        ("consumer_byte_rate=1e19", "Proposed value for consumer_byte_rate is too large for a LONG."),
    ):
        refused = configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", config, *bob, check=False)
        output = refused.stdout + refused.stderr
        assert refused.returncode != 0 and "InvalidRequestException" in output, output
        assert message in output, output
    described = configs(kafka_tool, proxy.bootstrap, admin, "--describe", *bob).stdout
    assert "_rate" not in described and "request_percentage" not in described, described
    view = quotas_view(proxy.metrics_port)  # answers, and holds no entry for bob
    assert not any(entry["user"] == "bob" for entry in view["configured"]), view
    assert not (tmp_path / "admin-quotas.json").exists() or "bob" not in (tmp_path / "admin-quotas.json").read_text()
    # The proxy still takes a good quota on the same path.
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "request_percentage=12.5", *bob)
    assert "request_percentage=12.5" in configs(kafka_tool, proxy.bootstrap, admin, "--describe", *bob).stdout


@pytest.mark.java
def test_java_admin_api_alters_and_describes_with_filters(proxy_factory, kafka, tmp_path) -> None:
    proxy = admin_proxy(proxy_factory, tmp_path)
    source = Path(__file__).resolve().parents[1] / "java" / "ClientQuotasAdmin.java"

    def run(user: str) -> str:
        result = subprocess.run(
            java_program(source, proxy.bootstrap, user, SASL_USERS[user]),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    denied = run("bob")
    assert "alter failed: ClusterAuthorizationException" in denied, denied
    out = run("admin")
    print(out)
    lines = dict(line.split(": ", 1) for line in out.splitlines() if ": " in line)
    assert "altered" in out
    assert lines["exact user=alice"] == "{{user=alice}={producer_byte_rate=300000.0}}"
    assert lines["strict user=alice"] == "{{user=alice}={producer_byte_rate=300000.0}}"
    assert lines["default clients"] == "{{client-id=null}={request_percentage=25.0}}"
    assert lines["any user"] == "{{user=alice}={producer_byte_rate=300000.0}}"


@pytest.mark.java
def test_a_client_id_prefix_quota_set_with_the_java_admin_api_holds_two_producers_of_the_fleet_together(
    proxy_factory, kafka, tmp_path
) -> None:
    """Issue 28: a quota on every client id starting with "fleet-" (Redpanda's client-id-prefix
    entity), set through the Java Admin API, is one bucket: two producers of the fleet share it."""
    proxy = admin_proxy(proxy_factory, tmp_path)
    source = Path(__file__).resolve().parents[1] / "java" / "ClientIdPrefixQuota.java"
    result = subprocess.run(
        java_program(source, proxy.bootstrap, "admin", SASL_USERS["admin"], "fleet-", "producer_byte_rate", str(QUOTA)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    print(result.stdout)
    lines = dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)
    assert "altered" in result.stdout
    assert lines["exact prefix"] == f"{{{{client-id-prefix=fleet-}}={{producer_byte_rate={float(QUOTA)}}}}}"
    assert lines["any prefix"] == lines["exact prefix"]

    topic = unique_topic("prefix-q")
    create_topic(kafka.bootstrap, topic, partitions=2)
    sasl = librdkafka_sasl_plain("alice")
    fleet = [Acked(), Acked()]
    started = time.monotonic()
    producers = [
        threading.Thread(target=confluent_producer_loop, args=(proxy.bootstrap, topic, f"fleet-{i}", 14.0, acked, sasl))
        for i, acked in enumerate(fleet)
    ]
    for producer in producers:
        producer.start()
    for producer in producers:
        producer.join(timeout=60)
    rates = [rate_between(acked.events, started + 3, started + 14) for acked in fleet]
    print(
        f"fleet-0 and fleet-1 under one prefix quota: {rates[0]:.0f} + {rates[1]:.0f} B/s = {sum(rates) / QUOTA:.3f}x"
    )
    assert sum(rates) == pytest.approx(QUOTA, rel=0.10), rates
    assert min(rates) > 0.2 * QUOTA, rates  # both got through, neither was starved
    entities = {(e["user"], e["client_id"]): e["quotas"] for e in quotas_view(proxy.metrics_port)["entities"]}
    assert entities[("alice", "fleet-0")]["producer_byte_rate"]["matched"] == "client-id-prefix=fleet-"


def api_versions_answered(port: int, correlation_id: int, timeout: float = 5.0) -> tuple[bool, float]:
    """Connects to the proxy, asks ApiVersions v0, and returns whether it was answered, and after how
    many seconds the answer (or the close) came."""
    started = time.monotonic()
    payload = struct.pack(">hhih", 18, 0, correlation_id, 5) + b"burst"
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        try:
            answered = len(conn.recv(4)) == 4
        except ConnectionResetError:
            answered = False
    return answered, time.monotonic() - started


def test_kafka_configs_entity_type_ips_sets_a_connection_creation_rate_that_holds_a_burst_of_connections(
    proxy_factory, kafka, kafka_tool, tmp_path
) -> None:
    """Issue 28: `kafka-configs.sh --entity-type ips --add-config connection_creation_rate=N` against
    the proxy (KIP-612). Connections from that address over the rate are closed after the throttle
    time without being read, as the broker's acceptor does; the others are answered."""
    proxy = admin_proxy(proxy_factory, tmp_path)
    admin = sasl_properties(tmp_path, "admin")
    local = "--entity-type", "ips", "--entity-name", "127.0.0.1"
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "connection_creation_rate=4", *local)
    configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "connection_creation_rate=1000",
            "--entity-type", "ips", "--entity-default")  # fmt: skip
    described = configs(kafka_tool, proxy.bootstrap, admin, "--describe", "--entity-type", "ips").stdout
    print(described)
    assert "connection_creation_rate=4" in described.replace(".0", ""), described
    configured = quotas_view(proxy.metrics_port)["configured"]
    assert {"user": None, "client_id": None, "ip": "127.0.0.1", "connection_creation_rate": 4.0,
            "source": {"connection_creation_rate": "api"}, "shadow": False} in configured, configured  # fmt: skip
    refused = configs(kafka_tool, proxy.bootstrap, admin, "--alter", "--add-config", "producer_byte_rate=10",
                      *local, check=False)  # fmt: skip
    assert refused.returncode != 0, refused.stdout

    time.sleep(1.5)  # the tool's own connections from 127.0.0.1 are paid back (burst: 4/s x 1 window)
    outcomes = []
    started = time.monotonic()
    while time.monotonic() - started < 5.0:  # 10 connections a second, each asking ApiVersions
        outcomes.append(api_versions_answered(proxy.port, len(outcomes)))
        time.sleep(max(0.0, started + len(outcomes) * 0.1 - time.monotonic()))
    elapsed = time.monotonic() - started
    answered = sum(1 for ok, _ in outcomes if ok)
    closed_after = [seconds for ok, seconds in outcomes if not ok]
    print(f"{len(outcomes)} connections in {elapsed:.1f} s at rate 4/s (burst 4): {answered} answered, "
          f"{len(closed_after)} closed after {min(closed_after):.2f}-{max(closed_after):.2f} s")  # fmt: skip
    expected = 4 + 4 * elapsed  # the burst, then the rate
    assert expected * 0.8 <= answered <= expected * 1.2 + 1, answered
    # Closed after the time to the next allowed connection: at most 1/rate (0.25 s) plus scheduling.
    assert closed_after and all(seconds <= 1.0 for seconds in closed_after), closed_after
    assert max(closed_after) >= 0.1, closed_after  # held, not closed at once
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    assert metric(text, "quotagate_connections_refused_total", reason="connection_creation_rate") == len(closed_after)


def metric(text: str, name: str, **labels: str) -> float:
    """The value of one sample of /metrics (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(f"{name}{{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_shadow_quota_throttles_nothing_and_reports_what_it_would_have_done(proxy_factory, kafka) -> None:
    proxy = proxy_factory(
        kafka.bootstrap,
        f'quota_window_num = 1\n\n[[quotas]]\nclient_id = "tried"\nproducer_byte_rate = {QUOTA}\nshadow = true\n',
    )
    topic = unique_topic("shadow")
    create_topic(kafka.bootstrap, topic, partitions=2)
    acked = Acked()
    started = time.monotonic()
    confluent_producer_loop(proxy.bootstrap, topic, "tried", 10.0, acked)
    with urllib.request.urlopen(f"http://127.0.0.1:{proxy.metrics_port}/metrics", timeout=10) as response:
        scraped_at = time.monotonic()
        text = response.read().decode()
    rate = rate_between(acked.events, started + 2, started + 10)
    charged = metric(text, "quotagate_produce_bytes_total", client_id="tried")
    debt = metric(text, "quotagate_shadow_debt_seconds", client_id="tried", quota="producer_byte_rate")
    # Never throttled: bursting over the quota all along, the bucket never refilled after the first
    # charge, so its debt is what was charged beyond the burst, less what the elapsed time earned.
    expected = (charged - QUOTA) / QUOTA - (scraped_at - started)
    print(f"shadow: producer at {rate / QUOTA:.1f}x the quota; debt {debt:.1f} s, expected {expected:.1f} s")
    assert rate > 2 * QUOTA, f"{rate:.0f} B/s: a shadow quota must not hold the producer back"
    assert metric(text, "quotagate_produce_throttle_time_seconds_total", client_id="tried") == 0
    assert metric(text, "quotagate_shadow_throttled_responses_total", client_id="tried") > 0
    assert debt == pytest.approx(expected, rel=0.10)
