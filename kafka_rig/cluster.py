"""Kafka clusters, each node a JVM the rig started and stops by pid; a cluster's state lives in its
workdir (.cache/kafka/run/NAME), so a later process can attach to it.

KRaft (every version): combined broker+controller nodes. ZooKeeper mode (3.x): broker nodes and one
ZooKeeper server (ZooKeeperServerMain, from the jars Kafka depends on) on the controller base port,
where a KRaft cluster's first controller would listen."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka_rig.jvm import (
    BROKER_MAIN,
    DEFAULT_HEAP_OPTS,
    JVM_PERFORMANCE_OPTS,
    REPO_ROOT,
    SHORT_JVM_OPTS,
    STORAGE_MAIN,
    TOOL_HEAP_OPTS,
    KafkaRigError,
    Variant,
    _jvm_cmd,
    default_variant,
    ensure_jars,
)
from kafka_rig.metadata import metadata_brokers
from kafka_rig.processes import HOST, _cmdline, _owned_pid, _port_open, _tail, _wait_gone

# Resolved: node dirs are matched against /proc/PID/cmdline, and a worktree's .cache may be a symlink.
RUN_DIR = (REPO_ROOT / ".cache" / "kafka" / "run").resolve()
# Features finalized when a cluster is formatted. A 4.2 broker serves share groups (KIP-932) when
# share.version >= 1 or the internal group.share.enable is true (KafkaApis.isShareGroupProtocolEnabled);
# group.coordinator.rebalance.protocols plays no part. Kafka 4.2's format already picks share.version 1
# (its latest production level, which needs metadata version 4.2-IV0); it is named here so that the
# share-group tests do not rest on a default.
# Only for versions whose storage tool knows share.version (Variant.share_groups: 4.1 and later).
FORMAT_FEATURES = ("share.version=1",)
ZOOKEEPER_MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
ZOOKEEPER_HEAP_OPTS = "-Xmx128m"
STOP_TIMEOUT = 30.0
# A node whose controller quorum is gone can never finish its controlled shutdown (it
# waits for the controller for minutes), so don't wait the full STOP_TIMEOUT for it.
NO_QUORUM_STOP_TIMEOUT = 5.0
STATE_FILE = "cluster.json"
# Name of the optional SASL_PLAINTEXT client listener (also its security protocol).
SASL_LISTENER = "SASL_PLAINTEXT"
# `up --sasl`: these users, on base port + SASL_PORT_OFFSET (+ node index).
SASL_PORT_OFFSET = 400
DEFAULT_SASL_USERS: dict[str, str] = {
    "admin": "admin-secret",
    "alice": "alice-secret",
    "bob": "bob-secret",
    "carol": "carol-secret",
}
# User names become JAAS option names (`user_<name>`), so keep them to plain word chars.
_SASL_USER_RE = re.compile(r"[A-Za-z0-9_-]+")


def _random_kafka_uuid() -> str:
    """A Kafka Uuid string (base64url of 16 bytes, no padding), like `StorageTool random-uuid`."""
    while True:
        text = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
        if not text.startswith("-"):  # Kafka avoids these: they look like CLI flags
            return text


@dataclass
class Node:
    """One combined broker+controller JVM."""

    node_id: int
    port: int
    controller_port: int
    dir: Path
    pid: int | None = None
    # Port of the SASL_PLAINTEXT (PLAIN) client listener; None when the cluster has none.
    sasl_port: int | None = None
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def id(self) -> int:
        return self.node_id

    @property
    def data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def properties(self) -> Path:
        return self.dir / "server.properties"

    @property
    def out_log(self) -> Path:
        """stdout/stderr of the JVM: WARN+ log lines, crashes, JVM errors."""
        return self.dir / "kafka.out"

    @property
    def server_log(self) -> Path:
        """The full INFO log written by log4j2."""
        return self.dir / "server.log"

    @property
    def pid_file(self) -> Path:
        return self.dir / "kafka.pid"

    @property
    def alive(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _owned_pid(self.pid, f"{self.dir}/")

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "meta.properties").exists()

    def log_tail(self, lines: int = 40) -> str:
        return (
            f"--- node {self.node_id} {self.out_log}:\n{_tail(self.out_log, lines)}\n"
            f"--- node {self.node_id} {self.server_log}:\n{_tail(self.server_log, lines)}"
        )


@dataclass
class Cluster:
    """A named KRaft cluster whose state lives in `workdir` (one subdir per node)."""

    name: str
    workdir: Path
    nodes: list[Node]
    cluster_id: str
    directory_ids: dict[int, str]
    wait: float = 90.0
    overrides: dict[str, str] = field(default_factory=dict)
    # user -> password accepted on the SASL_PLAINTEXT listener; empty: no such listener.
    sasl_users: dict[str, str] = field(default_factory=dict)
    # Which Kafka runs, and in which mode (saved with the cluster: its data dirs are that version's).
    variant: Variant = field(default_factory=default_variant)
    zookeeper_proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    # ----- construction / persistence

    @classmethod
    def create(
        cls,
        name: str,
        brokers: int = 1,
        base_port: int = 9092,
        workdir: Path | None = None,
        controller_base_port: int | None = None,
        wait: float = 90.0,
        overrides: Mapping[str, str] | None = None,
        sasl_users: Mapping[str, str] | None = None,
        sasl_base_port: int | None = None,
        variant: Variant | None = None,
    ) -> Cluster:
        """Describe a cluster, reusing the saved layout (cluster id, dir ids) if any.

        `variant`: which Kafka (default: kafka_rig.default_variant(), KAFKA_RIG_KAFKA or kafka/pom.xml's
        version in KRaft mode); a saved cluster keeps the one it was created with.

        With `sasl_users` (user -> password) every node also gets a SASL_PLAINTEXT client
        listener (mechanism PLAIN) on sasl_base_port + index (default base_port + 400).
        Unlike the port layout, the SASL setting may differ from the saved one as long as
        no node is running: it is then saved anew and applies from the next start."""
        if brokers < 1:
            raise KafkaRigError("brokers must be >= 1")
        users = _check_sasl_users(sasl_users)
        if sasl_base_port is not None and not users:
            raise KafkaRigError("sasl_base_port given without sasl_users")
        sasl_base = (base_port + SASL_PORT_OFFSET if sasl_base_port is None else sasl_base_port) if users else None
        sasl = {"sasl_base_port": sasl_base, "sasl_users": users or None}
        # Absolute, because it is matched against /proc/PID/cmdline to recognise our JVMs.
        workdir = Path(workdir).resolve() if workdir is not None else RUN_DIR / name
        ctrl_base = base_port + 100 if controller_base_port is None else controller_base_port
        variant = variant or default_variant()
        layout = {"brokers": brokers, "base_port": base_port, "controller_base_port": ctrl_base, "kafka": str(variant)}
        saved = _load_state(workdir)
        if saved is not None:
            saved.setdefault("kafka", str(Variant()))  # saved before the rig ran other versions
            old = {key: saved.get(key) for key in layout}
            if old != layout:
                raise KafkaRigError(
                    f"cluster {name!r} in {workdir} was created as {old}, not {layout}; "
                    f"stop and wipe it first (python -m kafka_rig down --name {name} --wipe)"
                )
            cluster_id = str(saved["cluster_id"])
            dir_ids = {int(k): str(v) for k, v in saved["directory_ids"].items()}
        else:
            cluster_id = _random_kafka_uuid()
            dir_ids = {i: _random_kafka_uuid() for i in range(1, brokers + 1)}
        nodes = [
            Node(
                node_id=i + 1,
                port=base_port + i,
                controller_port=ctrl_base + i,
                dir=workdir / f"node{i + 1}",
                sasl_port=None if sasl_base is None else sasl_base + i,
            )
            for i in range(brokers)
        ]
        ports = [port for node in nodes for port in (node.port, node.controller_port, node.sasl_port) if port]
        if len(set(ports)) != len(ports):
            raise KafkaRigError(f"cluster {name!r}: client, controller and SASL port ranges overlap: {sorted(ports)}")
        cluster = cls(name, workdir, nodes, cluster_id, dir_ids, wait, dict(overrides or {}), users, variant)
        for node in nodes:  # adopt JVMs left running by an earlier `up`
            node.pid = cluster._pid_from_file(node)
        old_sasl = {key: saved.get(key) for key in sasl} if saved is not None else None
        if old_sasl is not None and old_sasl != sasl and cluster.alive_nodes():
            raise KafkaRigError(
                f"cluster {name!r} in {workdir} is running with {_describe_sasl(old_sasl)}, but "
                f"{_describe_sasl(sasl)} was asked for; stop it first (python -m kafka_rig down --name {name})"
            )
        if old_sasl != sasl:
            workdir.mkdir(parents=True, exist_ok=True)
            (workdir / STATE_FILE).write_text(
                json.dumps(
                    {
                        **layout,
                        "name": name,
                        "cluster_id": cluster_id,
                        "directory_ids": {str(k): v for k, v in dir_ids.items()},
                        **sasl,
                    },
                    indent=2,
                )
            )
        return cluster

    @classmethod
    def attach(cls, name: str, workdir: Path | None = None) -> Cluster | None:
        """The saved cluster `name`, or None if it was never created."""
        workdir = Path(workdir) if workdir is not None else RUN_DIR / name
        saved = _load_state(workdir)
        if saved is None:
            return None
        sasl_base = saved.get("sasl_base_port")
        return cls.create(
            name,
            brokers=int(saved["brokers"]),
            base_port=int(saved["base_port"]),
            workdir=workdir,
            controller_base_port=int(saved["controller_base_port"]),
            sasl_users=saved.get("sasl_users") or None,
            sasl_base_port=None if sasl_base is None else int(sasl_base),
            variant=Variant.parse(str(saved.get("kafka") or Variant())),
        )

    # ----- info

    @property
    def bootstrap(self) -> str:
        """PLAINTEXT client listeners, "127.0.0.1:P,..."."""
        return ",".join(f"{HOST}:{n.port}" for n in self.nodes)

    @property
    def has_sasl(self) -> bool:
        return bool(self.sasl_users)

    @property
    def sasl_base_port(self) -> int | None:
        return self.nodes[0].sasl_port

    @property
    def sasl_bootstrap(self) -> str:
        """SASL_PLAINTEXT (PLAIN) client listeners, "127.0.0.1:P,..."; raises if there are none."""
        if not self.has_sasl:
            raise KafkaRigError(
                f"cluster {self.name!r} has no SASL listener (create it with sasl_users=..., or `up --sasl`)"
            )
        return ",".join(f"{HOST}:{n.sasl_port}" for n in self.nodes)

    @property
    def size(self) -> int:
        return len(self.nodes)

    def node(self, node_id: int) -> Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KafkaRigError(f"cluster {self.name!r} has no node {node_id}")

    def alive_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.alive]

    @property
    def zookeeper_dir(self) -> Path:
        return self.workdir / "zookeeper"

    @property
    def zookeeper_port(self) -> int:
        """ZooKeeper's client port (ZooKeeper mode): the controller base port, which no KRaft node uses then."""
        return self.nodes[0].controller_port

    @property
    def zookeeper_connect(self) -> str:
        return f"{HOST}:{self.zookeeper_port}"

    # ----- config / format

    def _quorum_bootstrap(self) -> str:
        return ",".join(f"{HOST}:{n.controller_port}" for n in self.nodes)

    def _write_properties(self, node: Node) -> None:
        n = self.size
        zookeeper = self.variant.zookeeper
        listeners = f"PLAINTEXT://{HOST}:{node.port}"
        protocols = "PLAINTEXT:PLAINTEXT"
        if not zookeeper:
            listeners += f",CONTROLLER://{HOST}:{node.controller_port}"
            protocols += ",CONTROLLER:PLAINTEXT"
        sasl: dict[str, str] = {}
        if self.has_sasl:
            listeners += f",{SASL_LISTENER}://{HOST}:{node.sasl_port}"
            protocols += f",{SASL_LISTENER}:SASL_PLAINTEXT"
            sasl = {
                "sasl.enabled.mechanisms": "PLAIN",
                f"listener.name.{SASL_LISTENER.lower()}.plain.sasl.jaas.config": _plain_jaas_config(self.sasl_users),
            }
        if zookeeper:
            roles = {"broker.id": str(node.node_id), "zookeeper.connect": self.zookeeper_connect}
        else:
            roles = {
                "process.roles": "broker,controller",
                "node.id": str(node.node_id),
                "controller.quorum.bootstrap.servers": self._quorum_bootstrap(),
                "controller.listener.names": "CONTROLLER",
                # A restarted broker is refused (DUPLICATE_BROKER_REGISTRATION) until its old
                # session expires, even after a clean shutdown: 9 s by default, 4 s here.
                "broker.session.timeout.ms": "4000",
                "broker.heartbeat.interval.ms": "1000",
            }
        props = {
            **roles,
            "listeners": listeners,
            # Dynamic (KIP-853) quorums want the controller listener advertised too.
            "advertised.listeners": listeners,
            # Brokers talk to each other on PLAINTEXT even when there is a SASL listener.
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": protocols,
            **sasl,
            "log.dirs": str(node.data_dir),
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": "0",
            # Internal topics default to RF 3 / min ISR 2, which a 1-node cluster can't host.
            "offsets.topic.replication.factor": str(min(3, n)),
            "transaction.state.log.replication.factor": str(min(3, n)),
            "transaction.state.log.min.isr": str(min(2, n)),
            "share.coordinator.state.topic.replication.factor": str(min(3, n)),
            "share.coordinator.state.topic.min.isr": str(min(2, n)),
        }
        props.update(self.overrides)
        if zookeeper:  # overrides written for KRaft (secure_listener_overrides) name a controller listener
            _drop_controller_listener(props)
        node.dir.mkdir(parents=True, exist_ok=True)
        node.properties.write_text(
            f"# Generated by kafka_rig for cluster {self.name!r}; rewritten on start.\n"
            + "".join(f"{k}={_escape_property(v)}\n" for k, v in props.items())
        )

    def _format(self, nodes: Iterable[Node]) -> None:
        """Format storage of unformatted nodes (in parallel: each is a JVM start)."""
        if self.size == 1:
            quorum = ["--standalone"]
        else:
            # Every node gets the same list; each picks its own directory id from it.
            quorum = [
                "--initial-controllers",
                ",".join(f"{n.node_id}@{HOST}:{n.controller_port}:{self.directory_ids[n.node_id]}" for n in self.nodes),
            ]
        features = FORMAT_FEATURES if self.variant.share_groups else ()
        procs: list[tuple[Node, subprocess.Popen[str]]] = []
        for node in nodes:
            args = ["format", "--cluster-id", self.cluster_id, "--config", str(node.properties), *quorum]
            for feature in features:
                args += ["--feature", feature]
            cmd = _jvm_cmd(STORAGE_MAIN, args, TOOL_HEAP_OPTS, None, SHORT_JVM_OPTS, self.variant)
            pipes: dict[str, Any] = {
                "stdin": subprocess.DEVNULL,
                "stdout": subprocess.PIPE,
                "stderr": subprocess.STDOUT,
            }
            procs.append((node, subprocess.Popen(cmd, text=True, **pipes)))
        for node, proc in procs:
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise KafkaRigError(f"formatting node {node.node_id} failed:\n{out}")

    # ----- lifecycle

    def start(self) -> Cluster:
        """Start every node that is not running, then wait_ready(). Stops them on failure."""
        ensure_jars(self.variant)
        started: list[Node] = []
        try:
            todo = [n for n in self.nodes if not n.alive]
            for node in todo:
                self._check_ports_free(node)
                self._write_properties(node)
            if self.variant.zookeeper:
                self._start_zookeeper()
            else:
                self._format([n for n in todo if not n.formatted])
            for node in todo:
                self._spawn(node)
                started.append(node)
            self.wait_ready()
        except BaseException:
            self._stop_nodes(started, timeout=10)
            if not self.alive_nodes():
                self._stop_zookeeper()
            raise
        return self

    def start_node(self, node_id: int, wait: float | None = None) -> Node:
        """(Re)start one node; wait until it and the other running nodes all see each other."""
        node = self.node(node_id)
        if not node.alive:
            ensure_jars(self.variant)
            self._check_ports_free(node)
            self._write_properties(node)
            if self.variant.zookeeper:
                self._start_zookeeper()
            elif not node.formatted:
                self._format([node])
            self._spawn(node)
        self.wait_ready(wait)
        return node

    def stop_node(self, node_id: int, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM one node, wait for it to exit, SIGKILL after `timeout` seconds."""
        self._stop_nodes([self.node(node_id)], timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every node of this cluster that the rig started (now or by an earlier `up`), then its ZooKeeper."""
        self._stop_nodes(self.nodes, timeout)
        self._stop_zookeeper()

    # ----- ZooKeeper (ZooKeeper mode)

    @property
    def _zookeeper_pid_file(self) -> Path:
        return self.zookeeper_dir / "zookeeper.pid"

    def _zookeeper_pid(self) -> int | None:
        try:
            pid = int(self._zookeeper_pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _owned_pid(pid, f"{self.zookeeper_dir}/") else None

    def _start_zookeeper(self) -> None:
        """Starts the cluster's ZooKeeper unless it runs, and waits for its port (brokers give up on a
        ZooKeeper that does not answer within zookeeper.connection.timeout.ms)."""
        if self._zookeeper_pid() is not None:
            return
        if _port_open(self.zookeeper_port, timeout=0.2):
            raise KafkaRigError(
                f"port {self.zookeeper_port} (ZooKeeper of {self.name!r}) is already in use by another process"
            )
        zk_dir = self.zookeeper_dir
        (zk_dir / "data").mkdir(parents=True, exist_ok=True)
        config = zk_dir / "zoo.cfg"
        config.write_text(
            f"dataDir={zk_dir / 'data'}\nclientPort={self.zookeeper_port}\nclientPortAddress={HOST}\n"
            "tickTime=2000\nmaxClientCnxns=0\nadmin.enableServer=false\n"
        )
        cmd = _jvm_cmd(ZOOKEEPER_MAIN, [str(config)], ZOOKEEPER_HEAP_OPTS, zk_dir, SHORT_JVM_OPTS, self.variant)
        with (zk_dir / "zookeeper.out").open("ab") as out:
            self.zookeeper_proc = subprocess.Popen(
                cmd, cwd=zk_dir, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self._zookeeper_pid_file.write_text(f"{self.zookeeper_proc.pid}\n")
        deadline = time.monotonic() + self.wait
        while not _port_open(self.zookeeper_port, timeout=0.2):
            if self.zookeeper_proc.poll() is not None or time.monotonic() >= deadline:
                self._stop_zookeeper()
                raise KafkaRigError(
                    f"ZooKeeper of {self.name!r} did not listen on {self.zookeeper_port}\n"
                    f"{_tail(zk_dir / 'zookeeper.out')}"
                )
            time.sleep(0.1)

    def _stop_zookeeper(self) -> None:
        pid = self._zookeeper_pid()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        if not _wait_gone(pid, self.zookeeper_proc, STOP_TIMEOUT):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, self.zookeeper_proc, 10)
        self.zookeeper_proc = None
        self._zookeeper_pid_file.unlink(missing_ok=True)

    def _stop_nodes(self, nodes: Sequence[Node], timeout: float) -> None:
        # Signal all first and wait after, so N nodes take ~max not ~sum of shutdown times
        # (stopping them one by one would leave the last ones without a quorum).
        victims = [(n, n.pid) for n in nodes if n.pid is not None and n.alive]
        if len(self.alive_nodes()) <= self.size // 2:
            timeout = min(timeout, NO_QUORUM_STOP_TIMEOUT)
        for _, pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for node, pid in victims:
            if not _wait_gone(pid, node.proc, max(0.0, deadline - time.monotonic())):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                _wait_gone(pid, node.proc, 10)
        for node in nodes:
            if not node.alive:
                node.proc = None
                node.pid = None
                node.pid_file.unlink(missing_ok=True)

    def _spawn(self, node: Node) -> None:
        # Both overridable from the environment, as kafka-run-class.sh allows (the tests give their brokers
        # SHORT_JVM_OPTS there: tests/conftest.py).
        heap = os.environ.get("KAFKA_HEAP_OPTS", DEFAULT_HEAP_OPTS)
        jvm_opts = os.environ.get("KAFKA_JVM_PERFORMANCE_OPTS", JVM_PERFORMANCE_OPTS)
        cmd = _jvm_cmd(BROKER_MAIN, [str(node.properties)], heap, node.dir, jvm_opts, self.variant)
        with node.out_log.open("ab") as out:
            out.write(f"\n=== {time.strftime('%F %T')} starting: {' '.join(cmd)}\n".encode())
            out.flush()
            # New session: the JVM must outlive `python -m kafka_rig up` and ignore the
            # terminal's Ctrl-C; we stop it explicitly by pid.
            node.proc = subprocess.Popen(
                cmd,
                cwd=node.dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        node.pid = node.proc.pid
        node.pid_file.write_text(f"{node.pid}\n")

    def _pid_from_file(self, node: Node) -> int | None:
        try:
            pid = int(node.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _owned_pid(pid, f"{node.dir}/") else None

    def _check_ports_free(self, node: Node) -> None:
        # In ZooKeeper mode nodes have no controller listener (the first one's port is ZooKeeper's).
        ports = [node.port] + ([] if self.variant.zookeeper else [node.controller_port])
        ports += [node.sasl_port] if node.sasl_port is not None else []
        for port in ports:
            if _port_open(port, timeout=0.2):
                raise KafkaRigError(
                    f"port {port} (node {node.node_id} of {self.name!r}) is already in use "
                    "by another process; stop it or pick another --base-port"
                )

    # ----- readiness

    def _expected(self) -> list[Node]:
        """Nodes that should be running: started (or adopted) and not stopped since."""
        return [n for n in self.nodes if n.pid is not None]

    def probe(self) -> dict[int, str]:
        """Per node that should be running: "" if it answers Metadata listing exactly the
        nodes that should be running (so all N unless some were stopped), else why not."""
        expected = self._expected()
        want = [n.node_id for n in expected]
        status: dict[int, str] = {}
        for node in expected:
            if not node.alive:
                status[node.node_id] = "not running"
                continue
            try:
                ids, controller = metadata_brokers(node.port)
            except (OSError, struct.error) as exc:
                status[node.node_id] = f"port {node.port}: {exc or type(exc).__name__}"
                continue
            ok = ids == want and controller >= 0
            if ok and node.sasl_port is not None and not _port_open(node.sasl_port):
                status[node.node_id] = f"SASL port {node.sasl_port} not accepting connections"
                continue
            status[node.node_id] = "" if ok else f"sees brokers {ids}, want {want}"
        return status

    def is_ready(self) -> bool:
        return all(not why for why in self.probe().values())

    def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until every running node accepts TCP and answers a Metadata request listing
        all running nodes as (unfenced) brokers. Fails fast if a node process died."""
        timeout = self.wait if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            dead = [n for n in self._expected() if not n.alive]
            if dead:
                tails = "\n".join(n.log_tail() for n in dead)
                codes = [n.proc.returncode if n.proc else "?" for n in dead]
                raise KafkaRigError(
                    f"cluster {self.name!r}: node(s) {[n.node_id for n in dead]} died (exit {codes})\n{tails}"
                )
            status = self.probe()
            if all(not why for why in status.values()):
                return
            if time.monotonic() >= deadline:
                bad = [n for n in self.nodes if status.get(n.node_id)]
                detail = "; ".join(f"node {n.node_id}: {status[n.node_id]}" for n in bad)
                tails = "\n".join(n.log_tail() for n in bad)
                raise KafkaRigError(f"cluster {self.name!r} not ready after {timeout:.0f}s ({detail})\n{tails}")
            time.sleep(0.25)

    # ----- context manager

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _check_sasl_users(users: Mapping[str, str] | None) -> dict[str, str]:
    if users is None:
        return {}
    if not users:
        raise KafkaRigError("sasl_users is empty: give at least one user, or None for no SASL listener")
    for user, password in users.items():
        if not _SASL_USER_RE.fullmatch(user):
            raise KafkaRigError(f"SASL user name {user!r} must match {_SASL_USER_RE.pattern}")
        if not isinstance(password, str):
            raise KafkaRigError(f"password of SASL user {user!r} must be a string")
    return dict(users)


def _drop_controller_listener(props: dict[str, str]) -> None:
    """Takes the CONTROLLER listener out of a ZooKeeper-mode broker's listener settings."""
    for key in ("listeners", "advertised.listeners", "listener.security.protocol.map"):
        if key in props:
            props[key] = ",".join(item for item in props[key].split(",") if not item.startswith("CONTROLLER"))


def _describe_sasl(sasl: Mapping[str, Any]) -> str:
    if not sasl.get("sasl_users"):
        return "no SASL listener"
    return f"SASL on base port {sasl.get('sasl_base_port')} for users {sorted(sasl['sasl_users'])}"


def _plain_jaas_config(users: Mapping[str, str]) -> str:
    """Broker-side JAAS config for PLAIN: one `user_<name>="<password>"` option per user."""

    def quoted(text: str) -> str:
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'

    options = " ".join(f"user_{user}={quoted(password)}" for user, password in users.items())
    return f"org.apache.kafka.common.security.plain.PlainLoginModule required {options};"


def secure_listener_overrides(
    node: Node,
    sasl_ssl_port: int,
    ssl_port: int,
    keystore_pem: Path,
    truststore_pem: Path,
    plain_users: Mapping[str, str],
    oauthbearer_reauth_ms: int | None = None,
) -> dict[str, str]:
    """Broker properties (for `overrides`) adding a SASL_SSL and an SSL client listener to `node`.

    SASL_SSL accepts PLAIN (`plain_users`), SCRAM-SHA-256/512 (users made with the configs tool,
    as an operator would: `configs --alter --add-config 'SCRAM-SHA-256=[password=...]'`) and
    OAUTHBEARER with Kafka's unsecured validator (unsigned JWS tokens, the user in `sub`); SSL
    requires a client certificate chaining to `truststore_pem`. `keystore_pem` holds the broker's
    unencrypted PKCS#8 key and its certificate chain. With `oauthbearer_reauth_ms`, OAUTHBEARER
    connections must re-authenticate that often (KIP-368). Brokers still talk to each other and
    to the rig on PLAINTEXT."""
    listeners = (
        f"PLAINTEXT://{HOST}:{node.port},CONTROLLER://{HOST}:{node.controller_port},"
        f"SASL_SSL://{HOST}:{sasl_ssl_port},SSL://{HOST}:{ssl_port}"
    )
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props = {
        "listeners": listeners,
        "advertised.listeners": listeners,
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL,SSL:SSL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(keystore_pem),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(truststore_pem),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": _plain_jaas_config(plain_users),
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
        ),
    }
    if oauthbearer_reauth_ms is not None:
        props["listener.name.sasl_ssl.oauthbearer.connections.max.reauth.ms"] = str(oauthbearer_reauth_ms)
    return props


def _escape_property(value: str) -> str:
    """Escape a value for java.util.Properties.load, which reads ISO-8859-1 and treats
    backslashes and line breaks specially: non-ASCII becomes \\uXXXX (UTF-16 units)."""
    out = value.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return "".join(ch if ord(ch) < 0x7F else _unicode_escape(ch) for ch in out)


def _unicode_escape(ch: str) -> str:
    units = ch.encode("utf-16-be")  # two units (a surrogate pair) beyond U+FFFF
    return "".join(f"\\u{units[i : i + 2].hex()}" for i in range(0, len(units), 2))


def _load_state(workdir: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads((workdir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data


def start_cluster(
    name: str,
    brokers: int = 1,
    base_port: int = 9092,
    workdir: Path | None = None,
    wait: float = 90,
    controller_base_port: int | None = None,
    overrides: Mapping[str, str] | None = None,
    sasl_users: Mapping[str, str] | None = None,
    sasl_base_port: int | None = None,
    variant: Variant | None = None,
) -> Cluster:
    """Start (or adopt, if already running) the named cluster and wait until it is ready.

    Node i (1-based) listens for clients on base_port+i-1 and for the controller quorum
    on controller_base_port+i-1 (default base_port+100+i-1). Storage is formatted on
    first start and reused afterwards. `overrides` are extra/replacement server.properties
    entries (not persisted: pass them again when restarting the cluster).

    With `sasl_users` (user -> password), node i also has a SASL_PLAINTEXT listener with
    the PLAIN mechanism on sasl_base_port+i-1 (default base_port+400+i-1), accepting
    exactly those users; there is no authorizer, so they may do anything. Brokers still
    talk to each other on PLAINTEXT. The setting is saved with the cluster (attach keeps it)."""
    cluster = Cluster.create(
        name,
        brokers,
        base_port,
        workdir,
        controller_base_port,
        wait,
        overrides,
        sasl_users=sasl_users,
        sasl_base_port=sasl_base_port,
        variant=variant,
    )
    return cluster.start()


def kill_stale(workdir: Path) -> list[int]:
    """SIGKILL leftover node JVMs of the cluster in `workdir` (e.g. from a crashed test run).

    Only processes whose command line names `workdir` are touched: the ones listed in
    the node pid files, plus any Kafka JVM still running from that dir whose pid file
    got lost."""
    marker = f"{Path(workdir).resolve()}/"
    pids: set[int] = set()
    for pid_file in [*Path(workdir).glob("node*/kafka.pid"), *Path(workdir).glob("zookeeper/zookeeper.pid")]:
        with contextlib.suppress(OSError, ValueError):
            pids.add(int(pid_file.read_text().strip()))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            cmd = _cmdline(int(entry.name))
            if (BROKER_MAIN in cmd.split() or ZOOKEEPER_MAIN in cmd.split()) and marker in cmd:
                pids.add(int(entry.name))
    killed = []
    for pid in sorted(pids):
        if pid != os.getpid() and _owned_pid(pid, marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            _wait_gone(pid, None, 10)
            killed.append(pid)
    return killed


def fresh_cluster(
    name: str,
    brokers: int = 1,
    base_port: int = 9092,
    workdir: Path | None = None,
    wait: float = 90,
    controller_base_port: int | None = None,
    overrides: Mapping[str, str] | None = None,
    sasl_users: Mapping[str, str] | None = None,
    sasl_base_port: int | None = None,
    variant: Variant | None = None,
) -> Cluster:
    """Kill leftovers of `name`, wipe its dir and start it from scratch (see start_cluster)."""
    workdir = Path(workdir) if workdir is not None else RUN_DIR / name
    kill_stale(workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    return start_cluster(
        name,
        brokers,
        base_port,
        workdir,
        wait,
        controller_base_port,
        overrides,
        sasl_users=sasl_users,
        sasl_base_port=sasl_base_port,
        variant=variant,
    )
