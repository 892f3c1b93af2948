"""Pytest plugin: real Kafka clusters for tests (list it in conftest's `pytest_plugins`).

Fixtures (session scoped, started on first use, stopped at session end):

- ``kafka``: 1 broker, cluster "test1", bootstrap 127.0.0.1:29092; also a SASL_PLAINTEXT
  listener (mechanism PLAIN, no authorizer) at ``KAFKA_SASL_BOOTSTRAP`` 127.0.0.1:29492 for the
  users in ``SASL_USERS`` (admin, alice, bob, carol; password "<user>-secret")
- ``kafka_cluster``: 3 brokers (node ids 1..3), cluster "test3", bootstrap 127.0.0.1:29192-29194
- ``kafka_tool``: ``run_tool(main_class, *args, timeout=120, check=True, input=None, capture=True)``

Which Kafka: kafka/pom.xml's version in KRaft mode, or the one KAFKA_RIG_KAFKA names ("4.4.0",
"3.9.1-zk"): the rig then runs that version's jars for the clusters, the tools and the Java programs
(``KAFKA_VARIANT``; `make test-matrix` runs the ``matrix`` tests once per version, docs/compatibility.md).
A test that needs what only some versions have says so with ``needs_share_groups`` (and the like):
it is skipped, naming the version, where the broker lacks it.

From 4.1 the clusters serve share groups (KIP-932): they are formatted with share.version=1
(kafka_rig.FORMAT_FEATURES), which is all a 4.2 broker needs.

Each session starts from empty data dirs: leftovers of a crashed earlier run of the
same cluster are killed (only JVMs whose command line names that cluster's dir) and
wiped. A test that stops a node of ``kafka_cluster`` must start it again before it ends.

Under pytest-xdist (`-n 2`) the workers of one run share each cluster: the first worker to ask
starts it fresh, the others adopt it, and the last one done stops it (a count of users in a file
beside the run's base temp dir, under an flock: xdist's documented pattern for session fixtures).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kafka_rig import (
    DEFAULT_SASL_USERS,
    Cluster,
    KafkaRigError,
    Variant,
    default_variant,
    fresh_cluster,
    run_tool,
    secure_listener_overrides,
    start_cluster,
)

__all__ = [
    "KAFKA_BOOTSTRAP",
    "KAFKA_CLUSTER_BOOTSTRAP",
    "KAFKA_SASL_BOOTSTRAP",
    "KAFKA_SASL_PORT",
    "KAFKA_VARIANT",
    "SASL_USERS",
    "Cluster",
    "KafkaRigError",
    "fresh_cluster",
    "kafka",
    "kafka_cluster",
    "kafka_tool",
    "needs_kraft",
    "needs_old_protocol",
    "needs_share_groups",
    "run_tool",
    "secure_listener_overrides",
]

# QUOTAGATE_TEST_PORT_OFFSET shifts every port below (default 0), so two checkouts can run their
# suites at once on one machine without two brokers on the same ports.
PORT_OFFSET = int(os.environ.get("QUOTAGATE_TEST_PORT_OFFSET", "0"))
# The Kafka this session runs (KAFKA_RIG_KAFKA, else kafka/pom.xml's in KRaft mode).
KAFKA_VARIANT = default_variant()
# Checkouts share .cache (and so the clusters' run dirs): a shifted session gets clusters of its own
# name, so that another checkout's session, which kills its clusters' leftovers, never kills these;
# so does another Kafka (its data dirs are not the default's).
CLUSTER_SUFFIX = ("" if KAFKA_VARIANT == Variant() else f"-k{KAFKA_VARIANT}") + (
    f"-offset{PORT_OFFSET}" if PORT_OFFSET else ""
)
# What only some versions or modes have: the tests that need it are skipped elsewhere, naming the Kafka.
needs_share_groups = pytest.mark.skipif(
    not KAFKA_VARIANT.share_groups, reason=f"Kafka {KAFKA_VARIANT} serves no share groups (KIP-932, 4.1+)"
)
needs_kraft = pytest.mark.skipif(KAFKA_VARIANT.zookeeper, reason=f"Kafka {KAFKA_VARIANT} runs with ZooKeeper")
needs_old_protocol = pytest.mark.skipif(
    KAFKA_VARIANT.major >= 4, reason=f"Kafka {KAFKA_VARIANT} refuses Produce v0-v2 and Fetch v0-v3 (KIP-896, 4.0)"
)
KAFKA_PORT = 29092 + PORT_OFFSET
KAFKA_CONTROLLER_PORT = 29392 + PORT_OFFSET
KAFKA_SASL_PORT = 29492 + PORT_OFFSET
KAFKA_CLUSTER_PORT = 29192 + PORT_OFFSET  # 3 nodes: this and the next two; controllers at +100
KAFKA_BOOTSTRAP = f"127.0.0.1:{KAFKA_PORT}"
KAFKA_CLUSTER_BOOTSTRAP = ",".join(f"127.0.0.1:{KAFKA_CLUSTER_PORT + i}" for i in range(3))
# The `kafka` cluster's SASL_PLAINTEXT/PLAIN listener and the users it accepts (user -> password):
# admin/admin-secret, alice/alice-secret, bob/bob-secret, carol/carol-secret.
KAFKA_SASL_BOOTSTRAP = f"127.0.0.1:{KAFKA_SASL_PORT}"
SASL_USERS: dict[str, str] = dict(DEFAULT_SASL_USERS)

RunTool = Callable[..., subprocess.CompletedProcess[str]]


@contextlib.contextmanager
def _run_wide_lock(path: Path) -> Iterator[None]:
    """An exclusive flock on `path`, held by one xdist worker of the run at a time."""
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _session_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    brokers: int,
    base_port: int,
    controller_base_port: int | None,
    sasl_users: dict[str, str] | None = None,
    sasl_base_port: int | None = None,
) -> Iterator[Cluster]:
    layout = {
        "controller_base_port": controller_base_port,
        "sasl_users": sasl_users,
        "sasl_base_port": sasl_base_port,
        "variant": KAFKA_VARIANT,
    }
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        cluster = fresh_cluster(name, brokers, base_port, **layout)
        try:
            yield cluster
        finally:
            cluster.stop()
        return
    # The run's base temp dir (pytest-N/) is the workers' common parent: one lock and count per cluster.
    run_dir = tmp_path_factory.getbasetemp().parent
    lock, users = run_dir / f"{name}.lock", run_dir / f"{name}.users"
    with _run_wide_lock(lock):
        count = int(users.read_text()) if users.exists() else 0
        # The first user starts it from empty dirs; the others adopt the running JVMs.
        cluster = (fresh_cluster if count == 0 else start_cluster)(name, brokers, base_port, **layout)
        users.write_text(str(count + 1))
    try:
        yield cluster
    finally:
        with _run_wide_lock(lock):
            count = int(users.read_text()) - 1
            users.write_text(str(count))
            if count == 0:
                cluster.stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On xdist's controller, once every worker is done: stop a shared cluster that a crashed worker
    still counted as a user of (no broker outlives the run)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is not None or session.config.getoption("dist", "no") == "no":
        return
    # The controller's base temp dir is the workers' common parent (see _session_cluster).
    for users in session.config._tmp_path_factory.getbasetemp().glob("*.users"):  # type: ignore[attr-defined]
        if int(users.read_text()) > 0:
            cluster = Cluster.attach(users.stem)
            if cluster is not None:
                cluster.stop()


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A single combined broker+controller node, with a SASL_PLAINTEXT (PLAIN) listener
    for SASL_USERS at KAFKA_SASL_BOOTSTRAP besides the PLAINTEXT one."""
    # Controller port moved off the default base_port+100 = 29192, which is the 3-node
    # cluster's first client port: both clusters must be able to run in one session.
    # SASL on 29492: clear of 29092 (client), 29192-29194 (test3 clients), 29292-29294
    # (test3 controllers) and 29392 (controller).
    yield from _session_cluster(
        tmp_path_factory,
        "test1" + CLUSTER_SUFFIX,
        1,
        KAFKA_PORT,
        controller_base_port=KAFKA_CONTROLLER_PORT,
        sasl_users=SASL_USERS,
        sasl_base_port=KAFKA_SASL_PORT,
    )


@pytest.fixture(scope="session")
def kafka_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three combined broker+controller nodes; internal topics get RF 3."""
    yield from _session_cluster(
        tmp_path_factory, "test3" + CLUSTER_SUFFIX, 3, KAFKA_CLUSTER_PORT, controller_base_port=None
    )  # controllers +100


@pytest.fixture(scope="session")
def kafka_tool() -> RunTool:
    """`run_tool`: run a Kafka Java tool class (or an alias such as "topics") from the rig's jars."""
    return run_tool
