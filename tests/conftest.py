# kafka_rig and tests.support import from the repository root, which pytest puts on sys.path
# (tests/ is a package there); nothing edits sys.path.
import os

import pytest

from kafka_rig.jvm import SHORT_JVM_OPTS

pytest_plugins = [
    "tests.support.kafka_fixtures",
    "tests.support.proxy_fixtures",
    "tests.support.redis_fixtures",
    "tests.support.broker_double",
]


def pytest_configure(config: pytest.Config) -> None:
    # The tests' brokers (the fixtures', and those bench.soak/bench.chaos start as children) run C1 only
    # with the serial GC, as the rig's short-lived tools do: a broker is ready in 2.8 s of CPU instead of
    # 5.0, and restarted in 4-6 s instead of 9-11 (load average 12-14). No test measures a broker's own
    # throughput; `make bench` keeps Kafka's flags. setdefault: a run may still ask for others.
    os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", SHORT_JVM_OPTS)


# Under pytest-xdist (`make test` runs two workers), tests that must share a worker. Each other file
# outside tests/unit is a group of its own: its module fixtures and fixed ports (the TLS cluster, the
# frozen broker) exist once. tests/unit is spread test by test.
SHARED_WORKER_GROUPS = {
    # the pipeline on a standalone cluster against S3Proxy and HDFS: its own processes (no local
    # SparkSession), beside the other Spark tests rather than after them (first match wins)
    "tests/pipeline/test_storage.py": "spark-storage",
    "tests/pipeline/": "spark",  # one SparkSession (a JVM of ~1 GB) in the run, not one per worker
    # both stop and restart nodes of the shared 3-node cluster
    "tests/integration/test_cluster_failover.py": "kafka-cluster",
    "tests/integration/test_kafka_rig.py": "kafka-cluster",
    # each takes much of the machine for minutes (four brokers and eight clients; two replicas under
    # load): one after the other, never at once
    "tests/integration/test_soak_and_chaos.py": "machine-wide",
    "tests/integration/test_rolling_restart.py": "machine-wide",
}


def worker_group(nodeid: str) -> str:
    """The group of SHARED_WORKER_GROUPS a test belongs to: xdist runs each group on one worker."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/unit/"):
        return nodeid
    return next((name for prefix, name in SHARED_WORKER_GROUPS.items() if path.startswith(prefix)), path)


# The Spark tests, ~270-420 s on their one worker of a ~600-s run, start first so that they are not
# left running alone at the end: a stable sort, the rest in file order. (Starting the soak and the
# 3-node cluster's tests at the same moment too put the machine at a load average of 11 at once.)
FIRST_GROUPS = ("spark", "spark-storage")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        group = worker_group(item.nodeid)
        return FIRST_GROUPS.index(group) if group in FIRST_GROUPS else len(FIRST_GROUPS)

    items.sort(key=rank)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's loadscope scheduling with worker_group as the scope. (Not --dist loadgroup: xdist 3.8
    adds its group to a test id through Item._nodeid, which pytest 9.2's ids no longer read.)"""
    from xdist.scheduler import LoadScopeScheduling

    class SharedWorkerScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    return SharedWorkerScheduling(config, log)
