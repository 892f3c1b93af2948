"""Whether a connection is read now: the one owner of pausing its reads. And a byte budget shared
by many connections.

One source, two builds (quotagate/compiled.py): compiled as flow_control_c (C types in
flow_control_c.pxd), the session and the glue ask it with C calls.

A client connection is not read while any of these holds. `settle` weighs them in this order, the
only place it is written; the first that holds is the state it returns:

1. REFUSED: the client sent what the broker closes a connection for (the session's `_refuse`):
   never read again; the pair closes once what went before is answered.
2. MUTED: a quota throttle (KIP-219) until `muted_until`. The session mutes (`mute`); the delay
   queue wakes the connection when it is over, reading `muted_until`, never writing it.
3. HOLDING: the session holds frames it read but may not forward yet (the broker connecting, an
   answer awaited), or a frame arrives while a SaslAuthenticate is answered (the broker reads
   nothing meanwhile).
4. The transport's own reasons, each named (`pause`/`resume`): the broker connection not up yet,
   the other side's write buffer full (back-pressure), the connection rate, shutdown.

A broker connection has only the fourth kind. Pausing twice for the same reason is harmless, as is
releasing one that does not hold; the transport is paused when the first holds and resumed when
the last is released.
"""

# What `settle` returns: the first reason that holds, in the order above.
READING = 0
REFUSED = 1
MUTED = 2
HOLDING = 3


class FlowControl:
    """Whether one connection is read now (the module's docstring has the order of its reasons).

    Fields: `muted_until` (the mute's end, on the caller's clock; written by `mute` only),
    `refused`, `closed` (the connection is gone: the delay queue drops it), `paused` (whether the
    transport's reading is paused now)."""

    def __init__(self):
        self.muted_until = 0.0
        self.refused = False
        self.closed = False
        self.paused = False
        self._held_back = False  # paused for REFUSED, MUTED or HOLDING (what `settle` said last)
        self._reasons = set()  # the transport's own reasons that hold
        self._transport = None  # None until `attach`: a session without a socket (tests) pauses nothing

    def attach(self, transport):
        """The transport whose reading this pauses; what holds already applies to it."""
        self._transport = transport
        if self.paused and not transport.is_closing():
            transport.pause_reading()

    # the session's ------------------------------------------------------------------------------
    def mute(self, until):
        """Reads nothing until `until` (or longer, if muted longer already)."""
        if until > self.muted_until:
            self.muted_until = until

    def muted(self, now):
        return self.muted_until > now

    def refuse(self):
        """The session refused the client: it is never read again."""
        self.refused = True

    # the glue's ---------------------------------------------------------------------------------
    def settle(self, holding, now):
        """Pauses or resumes reading as the reasons say now (`holding`: the session holds frames);
        returns the first that holds (READING: none of the first three)."""
        state = READING
        if self.refused:
            state = REFUSED
        elif self.muted_until > now:
            state = MUTED
        elif holding:
            state = HOLDING
        held_back = state != READING
        if held_back != self._held_back:
            self._held_back = held_back
            self._apply()
        return state

    def pause(self, reason):
        """Pauses reading for the transport's `reason` until `resume(reason)`."""
        self._reasons.add(reason)
        self._apply()

    def resume(self, reason):
        if reason in self._reasons:
            self._reasons.discard(reason)
            self._apply()

    def _apply(self):
        paused = self._held_back or len(self._reasons) > 0
        if paused == self.paused:
            return
        self.paused = paused
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if paused:
            transport.pause_reading()
        else:
            transport.resume_reading()


def new_flow_control():
    """A FlowControl of this build (the compiled session cimports this, not the class)."""
    return FlowControl()


class ByteBudget:
    """Bytes that every connection draws on together, up to `limit` (proxy.partial_frames_max_bytes:
    what all clients' partial frames may hold). A holder that cannot take more is refused, never
    made to wait: waiting on bytes other connections hold could stall them all."""

    __slots__ = ("limit", "used")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size
