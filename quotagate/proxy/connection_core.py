"""The two callbacks a connection pair runs per read: `data_received` and `flush`.

`ClientConnection` and `UpstreamConnection` (connection.py) subclass these and keep everything else
(connecting, closing, refusals, flow control). Per read, the glue only stamps the time, hands the
bytes to the session and writes what the session queued; compiled (as connection_core_c, with
session_core_c: quotagate/compiled.py), that costs what a bare uvloop forwarder's callbacks cost,
not a Python frame per call. `flush` does the rare things (a broker seen for the first time, a
refusal, a mute, a hold, a resume) through the hooks below, which the subclass supplies.
"""

from quotagate.protocol.framing import FrameError

# Reading paused for a quota: a mute, or frames the session holds.
QUOTA = "quota"


def _write(transport, queued):
    """Writes and empties `queued`: one frame (the usual case) by write(), several by one writelines()."""
    if len(queued) == 1:
        transport.write(queued[0])
    else:
        transport.writelines(queued)
    del queued[:]


class ClientCore:
    """A client connection's per-read work: the session in, its answers out, the mute applied.

    Its fields (session_core_c.pxd has their C types): `session`, `transport`, `upstream` (the
    UpstreamCore), `reading` (ReadGate, set in connection_made), `clock`, `last_activity` (last byte
    either way: connections_max_idle_ms) and `muted_until` (kept by the delay queue, its `Mutable`)."""

    def data_received(self, data):
        now = self.clock()
        self.last_activity = now
        self.session.feed_client(data, now)  # what the broker would close for comes back as session.refusal
        self.flush()

    def flush(self):
        """Writes what the session queued for either side, and stops reading if it says so."""
        session = self.session
        queued = session.to_broker
        if queued and self.upstream is not None:
            _write(self.upstream.transport, queued)
        if session.brokers_seen:  # a response names a broker for the first time: its listener, then the response
            self._open_brokers_seen()
        queued = session.to_client
        if queued and self.transport is not None:
            _write(self.transport, queued)
        muted_until = session.muted_until
        if session.refusal is not None:
            self._close_when_answered()
        elif muted_until > self.muted_until:  # muted now, or for longer
            self._mute(muted_until)
            self.reading.pause(QUOTA)
        elif session.is_holding():
            self.reading.pause(QUOTA)
        elif self.reading is not None and self.reading.paused and not self.muted:
            # What was held for a SaslAuthenticate answer went with the broker's bytes: read again.
            self.reading.resume(QUOTA)

    # hooks: the subclass's ----------------------------------------------------------------------
    def _close_when_answered(self):
        """The session refused the client: close once what went before is answered."""
        raise NotImplementedError

    def _mute(self, until):
        """Stop reading until `until` (the delay queue resumes it)."""
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
        client.flush()
