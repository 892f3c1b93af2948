"""Pytest plugin: real Kafka clusters for tests (list it in conftest's `pytest_plugins`).

Fixtures (session scoped, started on first use, stopped at session end):

- ``kafka``: 1 broker, cluster "test1", bootstrap 127.0.0.1:29092; also a SASL_PLAINTEXT
  listener (mechanism PLAIN, no authorizer) at ``KAFKA_SASL_BOOTSTRAP`` 127.0.0.1:29492 for the
  users in ``SASL_USERS`` (admin, alice, bob, carol; password "<user>-secret")
- ``kafka_cluster``: 3 brokers (node ids 1..3), cluster "test3", bootstrap 127.0.0.1:29192-29194
- ``kafka_tool``: ``run_tool(main_class, *args, timeout=120, check=True, input=None, capture=True)``

Both clusters serve share groups (KIP-932): they are formatted with share.version=1
(kafka_rig.FORMAT_FEATURES), which is all a 4.2 broker needs.

Each session starts from empty data dirs: leftovers of a crashed earlier run of the
same cluster are killed (only JVMs whose command line names that cluster's dir) and
wiped. A test that stops a node of ``kafka_cluster`` must start it again before it ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# scripts/ is not a package (kafka_rig is a stdlib-only CLI too), so put it on the path.
_SCRIPTS = str(Path(__file__).resolve().parents[1] / "scripts")
if _SCRIPTS not in sys.path:
    sys.path.append(_SCRIPTS)

from kafka_rig import (  # noqa: E402
    DEFAULT_SASL_USERS,
    Cluster,
    KafkaRigError,
    fresh_cluster,
    run_tool,
    secure_listener_overrides,
)

__all__ = [
    "KAFKA_BOOTSTRAP",
    "KAFKA_CLUSTER_BOOTSTRAP",
    "KAFKA_SASL_BOOTSTRAP",
    "KAFKA_SASL_PORT",
    "SASL_USERS",
    "Cluster",
    "KafkaRigError",
    "fresh_cluster",
    "kafka",
    "kafka_cluster",
    "kafka_tool",
    "run_tool",
    "secure_listener_overrides",
]

# QUOTAGATE_TEST_PORT_OFFSET shifts every port below (default 0), so two checkouts can run their
# suites at once on one machine without two brokers on the same ports.
PORT_OFFSET = int(os.environ.get("QUOTAGATE_TEST_PORT_OFFSET", "0"))
# Checkouts share .cache (and so the clusters' run dirs): a shifted session gets clusters of its own
# name, so that another checkout's session, which kills its clusters' leftovers, never kills these.
CLUSTER_SUFFIX = f"-offset{PORT_OFFSET}" if PORT_OFFSET else ""
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


def _session_cluster(
    name: str,
    brokers: int,
    base_port: int,
    controller_base_port: int | None,
    sasl_users: dict[str, str] | None = None,
    sasl_base_port: int | None = None,
) -> Iterator[Cluster]:
    cluster = fresh_cluster(
        name,
        brokers,
        base_port,
        controller_base_port=controller_base_port,
        sasl_users=sasl_users,
        sasl_base_port=sasl_base_port,
    )
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def kafka() -> Iterator[Cluster]:
    """A single combined broker+controller node, with a SASL_PLAINTEXT (PLAIN) listener
    for SASL_USERS at KAFKA_SASL_BOOTSTRAP besides the PLAINTEXT one."""
    # Controller port moved off the default base_port+100 = 29192, which is the 3-node
    # cluster's first client port: both clusters must be able to run in one session.
    # SASL on 29492: clear of 29092 (client), 29192-29194 (test3 clients), 29292-29294
    # (test3 controllers) and 29392 (controller).
    yield from _session_cluster(
        "test1" + CLUSTER_SUFFIX,
        1,
        KAFKA_PORT,
        controller_base_port=KAFKA_CONTROLLER_PORT,
        sasl_users=SASL_USERS,
        sasl_base_port=KAFKA_SASL_PORT,
    )


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[Cluster]:
    """Three combined broker+controller nodes; internal topics get RF 3."""
    yield from _session_cluster(
        "test3" + CLUSTER_SUFFIX, 3, KAFKA_CLUSTER_PORT, controller_base_port=None
    )  # controllers +100


@pytest.fixture(scope="session")
def kafka_tool() -> RunTool:
    """`run_tool`: run a Kafka Java tool class (or an alias such as "topics") from the rig's jars."""
    return run_tool
