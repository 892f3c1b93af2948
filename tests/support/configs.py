"""A configuration that sets every section (its keys away from their defaults), for the configuration
reference and check-config tests."""

from __future__ import annotations

FULL = """
quota_window_num = 5
quota_window_size_seconds = 0.5

[proxy]
bootstrap_servers = ["kafka-1:9092", "[::1]:9093"]
listen_host = "0.0.0.0"
advertised_host = "quotagate.internal"
broker_port_base = 20000
connect_timeout_seconds = 2.5

[metrics]
max_entities = 7

[[quotas]]
user = "<default>"
client_id = "<default>"
producer_byte_rate = 1048576
request_percentage = 12.5

[[quotas]]
client_id = "odd \\"id\\" \\u0001"
controller_mutation_rate = 20

[topic_thresholds]
total_bytes_in_per_sec = 1000
[topic_thresholds.topics]
"orders-v1" = 400
"a b" = 100

[usage]
enabled = true
sink = "kafka"
kafka_bootstrap_servers = ["k:1"]
"""
