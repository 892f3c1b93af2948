"""The two callbacks a connection pair runs per read: `data_received` and `flush`.

`ClientConnection` and `UpstreamConnection` (connection.py) subclass these and keep everything else
(connecting, closing, refusals, flow control). Per read, the glue only stamps the time, hands the
bytes to the session and writes what the session queued; compiled (as connection_core_c, with
session_core_c: quotagate/compiled.py), that costs what a bare uvloop forwarder's callbacks cost,
not a Python frame per call. `flush` does the rare things (a broker seen for the first time, a
refusal, a mute) through the hooks below, which the subclass supplies; whether the client is read
after it is the connection's FlowControl's to say (proxy/flow_control.py), asked once per flush.
"""

from quotagate.protocol.framing import FrameError
from quotagate.proxy.flow_control import MUTED, REFUSED


def _write(transport, queued):
    """Writes and empties `queued`: one frame (the usual case) by write(), several by one writelines()."""
    if len(queued) == 1:
        transport.write(queued[0])
    else:
        transport.writelines(queued)
    del queued[:]


class ClientCore:
    """A client connection's per-read work: the session in, its answers out, the mute applied.

    Its fields (connection_core_c.pxd has their C types): `session`, `flow` (the session's
    FlowControl: whether the client is read), `transport`, `upstream` (the UpstreamCore), `clock` and
    `last_activity` (last byte either way: connections_max_idle_ms)."""

    def data_received(self, data):
        now = self.clock()
        self.last_activity = now
        self.session.feed_client(data, now)  # what the broker would close for comes back as session.refusal
        self.flush(now)

    def flush(self, now):
        """Writes what the session queued for either side, then reads on or not as the flow control
        says: a refusal closes the pair once answered, a mute is handed to the delay queue."""
        session = self.session
        queued = session.to_broker
        if queued and self.upstream is not None:
            _write(self.upstream.transport, queued)
        if session.brokers_seen:  # a response names a broker for the first time: its listener, then the response
            self._open_brokers_seen()
        queued = session.to_client
        if queued and self.transport is not None:
            _write(self.transport, queued)
        state = self.flow.settle(session.is_holding(), now)
        if state == REFUSED:
            self._close_when_answered()
        elif state == MUTED:
            self._mute()

    # hooks: the subclass's ----------------------------------------------------------------------
    def _close_when_answered(self):
        """The session refused the client: close once what went before is answered."""
        raise NotImplementedError

    def _mute(self):
        """The client is muted: the delay queue wakes it when `flow.muted_until` has passed."""
        raise NotImplementedError

    def _open_brokers_seen(self):
        """Have a listener bound for each node id in the session's `brokers_seen`, then empty it."""
        raise NotImplementedError


class UpstreamCore:
    """A broker connection's per-read work: the broker's bytes into the client's session, then its flush."""

    def data_received(self, data):
        client = self.client
        now = client.clock()
        client.last_activity = now
        try:
            client.session.feed_broker(data, now)
        except FrameError as exc:
            client.protocol_error("broker", exc)
            return
        client.flush(now)
