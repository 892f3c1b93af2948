"""The asyncio layer: listeners, the client/upstream connection pair, flow control, metrics.

Thin glue over `quotagate.protocol`: bytes in, frames out, decisions made by the protocol and quota
modules. Nothing here parses a message body itself.
"""
