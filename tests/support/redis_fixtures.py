"""A throwaway redis-server on a free loopback port (Debian's, installed by `make redis-tools`),
stopped by its pid. `redis_server.stop()` / `.start()` let a test take Redis away mid-run.

Also, once per test session: a Redis Cluster of 3 primaries and 3 replicas (`redis_cluster`), and a
primary with a replica under three sentinels (`redis_sentinel`), all TLS-only with an ACL user for
the proxies. A test may kill -9 a node; it starts it again before it ends, so the next test finds
the set whole."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import trustme

from tests.support.proxy_fixtures import PROXY_HOST, free_port_block


@dataclass
class RedisServer:
    port: int
    workdir: Path
    process: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def url(self) -> str:
        return f"redis://{PROXY_HOST}:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                PROXY_HOST,
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection((PROXY_HOST, self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        pytest.fail("redis-server is not installed: run `make redis-tools`")
    server = RedisServer(free_port_block(1), tmp_path)
    server.start()
    yield server
    server.stop()


# Redis Cluster and Sentinel (issue 27): TLS on every port, an ACL user for the proxies ----------------
# One set of each per test session, on loopback. The servers' own traffic (cluster bus, replication,
# sentinels) uses the default user, which needs no password on the data nodes (the sentinels have
# one of their own, SENTINEL_PASSWORD); the proxies authenticate as ACL_USER,
# which may touch only quotagate's keys.
ACL_USER = "quotagate"
ACL_PASSWORD = "quotagate-secret"
SENTINEL_SERVICE = "quotas"
SENTINEL_PASSWORD = "sentinel-secret"


@dataclass(frozen=True)
class RedisTls:
    ca: Path
    cert: Path
    key: Path

    def server_args(self) -> list[str]:
        return [
            "--tls-cert-file", str(self.cert), "--tls-key-file", str(self.key),
            "--tls-ca-cert-file", str(self.ca), "--tls-auth-clients", "no", "--tls-replication", "yes",
        ]  # fmt: skip


def make_redis_tls(directory: Path) -> RedisTls:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1", "localhost", common_name="redis")
    tls = RedisTls(directory / "redis-ca.pem", directory / "redis.pem", directory / "redis.key")
    ca.cert_pem.write_to_path(str(tls.ca))
    leaf.cert_chain_pems[0].write_to_path(str(tls.cert))
    leaf.private_key_pem.write_to_path(str(tls.key))
    return tls


@dataclass
class TlsRedisNode:
    """One redis-server (or sentinel) listening on a TLS port only; kill() is kill -9."""

    port: int
    workdir: Path
    args: list[str]
    tls: RedisTls
    password: str | None = None  # the default user's (a sentinel's requirepass)
    process: subprocess.Popen[bytes] | None = field(default=None)

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(
            [
                *self.args,
                "--port",
                "0",
                "--tls-port",
                str(self.port),
                "--bind",
                PROXY_HOST,
                "--dir",
                str(self.workdir),
                "--save",
                "",
                "--appendonly",
                "no",
                "--logfile",
                str(self.workdir / "redis.log"),
                *self.tls.server_args(),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis on {self.port} exited: {(self.workdir / 'redis.log').read_text()[-2000:]}")
            try:
                with self.client() as client:
                    client.ping()
                    return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError(f"redis did not answer on port {self.port}")

    def client(self) -> redis.Redis:
        """The default user's client (the servers' side, for setting up and inspecting)."""
        return redis.Redis(
            PROXY_HOST,
            self.port,
            password=self.password,
            ssl=True,
            ssl_ca_certs=str(self.tls.ca),
            socket_timeout=2,
            socket_connect_timeout=1,
        )

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None

    @property
    def address(self) -> str:
        return f"{PROXY_HOST}:{self.port}"


def acl_user_args() -> list[str]:
    return ["--user", ACL_USER, "on", f">{ACL_PASSWORD}", "~quotagate:*", "&*", "+@all"]


def wait_until(what: str, condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} not within {seconds} s")


@dataclass
class RedisClusterSet:
    """3 primaries and 3 replicas, one replica each (redis-cli --cluster create)."""

    nodes: list[TlsRedisNode]
    tls: RedisTls
    password_file: Path

    def cluster_toml(self) -> str:
        seeds = ", ".join(f'"{node.address}"' for node in self.nodes[:3])
        return (
            f'[cluster]\nredis_cluster_nodes = [{seeds}]\nredis_username = "{ACL_USER}"\n'
            f'redis_password_file = "{self.password_file}"\nredis_tls = true\nredis_tls_ca = "{self.tls.ca}"\n'
        )

    def primary_of(self, key_pattern: str) -> TlsRedisNode:
        """The live primary that holds a key matching key_pattern."""
        for node in self.nodes:
            if node.process is None:
                continue
            with node.client() as client:
                if client.info("replication")["role"] == "master" and client.keys(key_pattern):
                    return node
        raise AssertionError(f"no primary holds a key matching {key_pattern}")

    def healthy(self) -> bool:
        for node in self.nodes:
            with node.client() as client:
                if client.cluster("info")["cluster_state"] != "ok":  # type: ignore[index]
                    return False
        return True


@pytest.fixture
def redis_cluster(redis_cluster_set: RedisClusterSet) -> RedisClusterSet:
    """The session's Redis Cluster, whole: a node a test killed and started again has rejoined."""
    wait_until("the Redis Cluster whole", redis_cluster_set.healthy)
    return redis_cluster_set


@pytest.fixture
def redis_sentinel(redis_sentinel_set: RedisSentinelSet) -> RedisSentinelSet:
    """The session's Sentinel set, whole: a primary a test killed is back, as a replica."""
    wait_until("the Sentinel set whole", redis_sentinel_set.healthy)
    return redis_sentinel_set


@pytest.fixture(scope="session")
def redis_cluster_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterSet]:
    directory, tls, password_file = _prepare(tmp_path_factory, "redis-cluster")
    # One port at a time (six for clients, six for the cluster bus): a loopback busy with other
    # tests' connections (TIME_WAIT) seldom has long runs free.
    ports = free_ports(12)
    bus_ports = ports[6:]
    nodes = [
        TlsRedisNode(
            ports[i],
            directory / f"node-{i}",
            [
                "redis-server",
                "--cluster-enabled",
                "yes",
                "--cluster-port",
                str(bus_ports[i]),
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
                "--cluster-replica-validity-factor",
                "0",
                "--tls-cluster",
                "yes",
                *acl_user_args(),
            ],
            tls,
        )
        for i in range(6)
    ]
    cluster = RedisClusterSet(nodes, tls, password_file)
    try:
        for node in nodes:
            node.start()
        subprocess.run(
            ["redis-cli", "--tls", "--cacert", str(tls.ca), "--cluster", "create"]
            + [node.address for node in nodes]
            + ["--cluster-replicas", "1", "--cluster-yes"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_until("the Redis Cluster's state ok on all six nodes", cluster.healthy)
        yield cluster
    finally:
        for node in nodes:
            node.kill()


@dataclass
class RedisSentinelSet:
    """One primary, one replica, three sentinels (quorum 2) monitoring SENTINEL_SERVICE."""

    primary: TlsRedisNode
    replica: TlsRedisNode
    sentinels: list[TlsRedisNode]
    tls: RedisTls
    password_file: Path
    sentinel_password_file: Path

    def cluster_toml(self) -> str:
        sentinels = ", ".join(f'"{node.address}"' for node in self.sentinels)
        return (
            f'[cluster]\nredis_sentinels = [{sentinels}]\nredis_sentinel_service = "{SENTINEL_SERVICE}"\n'
            f'redis_sentinel_password_file = "{self.sentinel_password_file}"\n'
            f'redis_username = "{ACL_USER}"\nredis_password_file = "{self.password_file}"\n'
            f'redis_tls = true\nredis_tls_ca = "{self.tls.ca}"\n'
        )

    def current_primary(self) -> TlsRedisNode:
        """The data node the sentinels name as primary now."""
        with self.sentinels[0].client() as client:
            _host, port = client.sentinel_get_master_addr_by_name(SENTINEL_SERVICE)
        return next(node for node in (self.primary, self.replica) if node.port == int(port))

    def healthy(self) -> bool:
        """Every sentinel agrees on a live primary that has a replica and knows the other sentinels."""
        for sentinel in self.sentinels:
            with sentinel.client() as client:
                master = client.sentinel_master(SENTINEL_SERVICE)
                if master["num-other-sentinels"] < 2 or master["num-slaves"] < 1 or "s_down" in master["flags"]:
                    return False
        with self.current_primary().client() as client:
            return client.info("replication")["connected_slaves"] >= 1


@pytest.fixture(scope="session")
def redis_sentinel_set(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisSentinelSet]:
    directory, tls, password_file = _prepare(tmp_path_factory, "redis-sentinel")
    sentinel_password_file = directory / "sentinel-password"
    sentinel_password_file.write_text(SENTINEL_PASSWORD + "\n")
    primary_port, replica_port, *sentinel_ports = free_ports(5)
    data_args = ["redis-server", *acl_user_args(), "--replica-announce-ip", PROXY_HOST]
    primary = TlsRedisNode(primary_port, directory / "primary", data_args, tls)
    replica = TlsRedisNode(
        replica_port, directory / "replica", [*data_args, "--replicaof", PROXY_HOST, str(primary_port)], tls
    )
    sentinels = []
    for i in range(3):
        workdir = directory / f"sentinel-{i}"
        workdir.mkdir()
        conf = workdir / "sentinel.conf"  # a sentinel rewrites its file: one each
        conf.write_text(
            f"sentinel monitor {SENTINEL_SERVICE} {PROXY_HOST} {primary_port} 2\n"
            f"sentinel down-after-milliseconds {SENTINEL_SERVICE} 1000\n"
            f"sentinel failover-timeout {SENTINEL_SERVICE} 4000\n"
            f"sentinel announce-ip {PROXY_HOST}\n"
            # The sentinels' own password, which they also use with each other.
            f"requirepass {SENTINEL_PASSWORD}\nsentinel sentinel-pass {SENTINEL_PASSWORD}\n"
        )
        args = ["redis-server", str(conf), "--sentinel"]
        sentinels.append(TlsRedisNode(sentinel_ports[i], workdir, args, tls, SENTINEL_PASSWORD))
    topology = RedisSentinelSet(primary, replica, sentinels, tls, password_file, sentinel_password_file)
    try:
        for node in (primary, replica, *sentinels):
            node.start()
        wait_until("three sentinels agreeing on the primary and its replica", topology.healthy)
        yield topology
    finally:
        for node in (*sentinels, replica, primary):
            node.kill()


def free_ports(count: int) -> list[int]:
    """`count` distinct free loopback ports, each found on its own (free_port_block(1))."""
    ports: list[int] = []
    while len(ports) < count:
        port = free_port_block(1)
        if port not in ports:
            ports.append(port)
    return ports


def _prepare(tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Path, RedisTls, Path]:
    """A folder for one set, its servers' certificate, and ACL_USER's password file."""
    _require_redis_server()
    directory = tmp_path_factory.mktemp(name)
    password_file = directory / "password"
    password_file.write_text(ACL_PASSWORD + "\n")
    return directory, make_redis_tls(directory), password_file


def _require_redis_server() -> None:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("redis-server is not installed: run `make redis-tools`")
