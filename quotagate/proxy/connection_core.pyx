# cython: language_level=3
"""The two callbacks a connection pair runs per read, compiled: `data_received` and `flush`.

`ClientConnection` and `UpstreamConnection` (connection.py) subclass these and keep everything else
(connecting, closing, refusals, flow control). Per read, the glue only stamps the time, hands the
bytes to the session and writes what the session queued; compiled, that costs what a bare uvloop
forwarder's callbacks cost, not a Python frame per call. `flush` does the rare things (a refusal, a
mute, a hold, a resume) through the subclass's Python methods.
"""

from quotagate.proxy.session_core cimport SessionCore

from quotagate.protocol.framing import FrameError

# Reading paused for a quota: a mute, or frames the session holds.
QUOTA = "quota"


cdef inline void _write(object transport, list queued) except *:
    """Writes and empties `queued`: one frame (the usual case) by write(), several by one writelines()."""
    if len(queued) == 1:
        transport.write(queued[0])
    else:
        transport.writelines(queued)
    del queued[:]


cdef class ClientCore:
    """A client connection's per-read work: the session in, its answers out, the mute applied."""

    cdef public SessionCore session
    cdef public object transport
    cdef public UpstreamCore upstream
    cdef public object reading  # ReadGate, set in connection_made
    cdef public object clock
    cdef public double last_activity  # last byte either way (connections_max_idle_ms)
    cdef public double muted_until  # kept by the delay queue (its `Mutable`)

    def data_received(self, data):
        cdef double now = self.clock()
        self.last_activity = now
        self.session.feed_client(data, now)  # what the broker would close for comes back as session.refusal
        self.flush()

    def flush(self):
        """Writes what the session queued for either side, and stops reading if it says so."""
        cdef SessionCore session = self.session
        cdef list queued = session.to_broker
        if queued and self.upstream is not None:
            _write(self.upstream.transport, queued)
        queued = session.to_client
        if queued and self.transport is not None:
            _write(self.transport, queued)
        cdef double muted_until = session.muted_until
        if session.refusal is not None:
            self._close_when_answered()
        elif muted_until > self.muted_until:  # muted now, or for longer
            self.proxy.delay_queue.mute(self, muted_until)
            self.reading.pause(QUOTA)
        elif session.is_holding():
            self.reading.pause(QUOTA)
        elif self.reading is not None and self.reading.paused and not self.muted:
            # What was held for a SaslAuthenticate answer went with the broker's bytes: read again.
            self.reading.resume(QUOTA)


cdef class UpstreamCore:
    """A broker connection's per-read work: the broker's bytes into the client's session, then its flush."""

    cdef public ClientCore client
    cdef public object transport
    cdef public object reading  # ReadGate, set in connection_made

    def data_received(self, data):
        cdef ClientCore client = self.client
        cdef double now = client.clock()
        client.last_activity = now
        try:
            client.session.feed_broker(data, now)
        except FrameError as exc:
            client.protocol_error("broker", exc)
            return
        client.flush()
