"""Sans-IO Kafka codec: framing, cheap header peeks, version tables and the few rewrites the proxy needs.

Nothing here touches a socket or a clock; every function works on bytes or memoryviews so it can be
tested by feeding bytes. Messages that must be rewritten are decoded and re-encoded with kafka-python's
schema-generated `kafka.protocol` classes; everything else is only peeked at with `struct`.
"""
