"""quotagate: a Kafka-protocol proxy that enforces client quotas per (user, client-id) across a cluster."""

__version__ = "0.1.0"
