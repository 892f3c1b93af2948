"""Run a real Apache Kafka from Maven Central's jars, for tests, benchmarks and local development: KRaft
(combined broker+controller nodes) by default, ZooKeeper mode for 3.x. The default version is
kafka/pom.xml's (jars in .cache/kafka/libs); any other (3.9.1, 4.0.2, 4.4.0, ...) is fetched into
.cache/kafka-versions/VERSION/libs and chosen with `variant=Variant.parse("3.9.1-zk")`, `--kafka`, or
KAFKA_RIG_KAFKA for everything at once (clusters, tools, Java programs). Importable from the repository
root (it is not part of quotagate and knows nothing of it); its only dependency beyond the standard
library is kafka-python's protocol classes, for the Metadata readiness probe.

Library::

    cluster = start_cluster("dev", brokers=3, base_port=9092)
    cluster.bootstrap            # "127.0.0.1:9092,127.0.0.1:9093,127.0.0.1:9094"
    # Optional second client listener, SASL_PLAINTEXT with the PLAIN mechanism:
    cluster = start_cluster("sasl", base_port=9092, sasl_users={"alice": "alice-secret"}, sasl_base_port=9492)
    cluster.sasl_bootstrap       # "127.0.0.1:9492"
    cluster.stop_node(2); cluster.start_node(2)
    cluster.stop()
    # SASL_SSL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER unsecured) and SSL (client auth required)
    # listeners on a 1-node cluster, from PEM files (see secure_listener_overrides):
    cluster = start_cluster("tls", base_port=9594, overrides=secure_listener_overrides(...))

CLI (kafka_rig/__main__.py)::

    python -m kafka_rig up [--brokers N] [--base-port P] [--name NAME] [--fresh] [--sasl] [--kafka 3.9.1-zk]
    python -m kafka_rig status [--name NAME]
    python -m kafka_rig fetch [4.4.0 3.9.1-zk ...]
    python -m kafka_rig down [--name NAME] [--wipe]
    python -m kafka_rig tool MAIN_CLASS_OR_ALIAS ARGS...

Modules: jvm (jars, java, tool classes), processes (pids and ports), metadata (the readiness
probe), cluster (Node, Cluster, SASL and TLS listeners, start/attach/stop).
"""

from kafka_rig.cluster import (
    DEFAULT_SASL_USERS,
    FORMAT_FEATURES,
    RUN_DIR,
    SASL_PORT_OFFSET,
    Cluster,
    Node,
    fresh_cluster,
    kill_stale,
    secure_listener_overrides,
    start_cluster,
)
from kafka_rig.jvm import (
    BROKER_MAIN,
    DEFAULT_HEAP_OPTS,
    DEFAULT_VERSION,
    LIBS_DIR,
    STORAGE_MAIN,
    TOOL_ALIASES,
    VARIANT_ENV,
    KafkaRigError,
    Variant,
    default_variant,
    ensure_jars,
    java_classpath,
    java_program,
    run_tool,
    tool_command,
)
from kafka_rig.metadata import metadata_brokers
from kafka_rig.processes import HOST

__all__ = [
    "BROKER_MAIN",
    "DEFAULT_HEAP_OPTS",
    "DEFAULT_SASL_USERS",
    "DEFAULT_VERSION",
    "FORMAT_FEATURES",
    "HOST",
    "LIBS_DIR",
    "RUN_DIR",
    "SASL_PORT_OFFSET",
    "STORAGE_MAIN",
    "TOOL_ALIASES",
    "VARIANT_ENV",
    "Cluster",
    "KafkaRigError",
    "Node",
    "Variant",
    "default_variant",
    "ensure_jars",
    "fresh_cluster",
    "java_classpath",
    "java_program",
    "kill_stale",
    "metadata_brokers",
    "run_tool",
    "secure_listener_overrides",
    "start_cluster",
    "tool_command",
]
