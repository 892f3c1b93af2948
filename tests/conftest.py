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

