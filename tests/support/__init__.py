"""What the tests share, in one place; no test module imports another.

Pytest plugins (listed in tests/conftest.py): kafka_fixtures (real Kafka clusters from the rig),
proxy_fixtures (quotagate as a process), redis_fixtures (a throwaway redis-server), broker_double
(a broker double and a proxy in this process: the `rig` fixture).

Bytes and doubles for the unit tests: messages, rewrite_messages, mutation_messages, share_messages,
session_double, fuzz, usage, configs. For the tests with sockets, tools and Kafka: http,
kafka_clients, kafka_helpers, mutation_client, compose, ops_assets. in_process: the connection layer
on fake transports, for the hot-path bench.
"""
