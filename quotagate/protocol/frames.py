"""Whole frames out of a stream of reads, by offset: the one place a Kafka stream's frame
boundaries are found. The session core reads every frame of each direction through it.

A Kafka stream is a run of frames, each a 4-byte big-endian size and that many bytes. The goals
(h11's receive buffer states its own the same way): each byte is looked at once; a read of whole
frames is walked where it lies, with no copy (the usual read); a frame split across reads is copied
once, its reads kept as they arrived and joined when it is whole; a size outside the limit is
refused before anything is held for it.

- `frame_end(buf, pos, stop, max_size)`: where the frame at buf[pos] ends, when all of it lies
  before `stop`; -1 when it does not (yet), -2 when its size is outside 0..max_size.
- `FrameSplitter.feed(data)`: the bytes to walk with frame_end, from offset 0: `data` itself while
  nothing is held (the zero-copy read), the held partial frame joined with `data` once it is whole
  (its one copy), b"" while it is not, None when its size, completed by `data`, is outside the
  limit (`bad_size`). `keep(buf, pos)` holds the partial frame a walk ended on.
- A splitter made with `stream_from` may pass a large frame on as it arrives (cut-through): its
  caller offers the frame's head once (`may_offer`, `may_offer_held`), and a frame it streams is
  counted off the reads that follow (`streamed`), never held.

Compiled as frames_c (typed by frames_c.pxd), interpreted as it is: quotagate/compiled.py.
"""

from quotagate.protocol.framing import FRAME_SIZE_BYTES
from quotagate.protocol.produce_walk import i32

EMPTY = b""
# A partial frame's reads smaller than this are gathered in one buffer, not kept one by one: a frame
# sent a few bytes at a time held a Python object per read, twenty times the bytes it counted.
GATHER_READS_BELOW = 16 * 1024
# A frame may be cut through from this many bytes (prefix included) once `head_size` of it are
# here; 0: never.
NEVER = 0


def frame_end(buf: bytes, pos: int, stop: int, max_size: int) -> int:
    """Where the frame at buf[pos] ends (its size prefix included), when it lies whole before `stop`;
    -1 when it does not (fewer than 4 bytes, or fewer than it announces), -2 when its size is
    outside 0..max_size."""
    if stop - pos < FRAME_SIZE_BYTES:
        return -1
    size = i32(buf, pos)
    if size < 0 or size > max_size:
        return -2
    end = pos + FRAME_SIZE_BYTES + size
    return end if end <= stop else -1


def splitter(max_frame_size: int, stream_from: int = NEVER, head_size: int = 0) -> "FrameSplitter":
    """A FrameSplitter (made here: the compiled modules that hold one name its C type only)."""
    return FrameSplitter(max_frame_size, stream_from, head_size)


class FrameSplitter:
    """The partial frame of one direction of a connection, held between reads; see the module.

    Fields: max_frame_size; buffered (bytes held of the partial frame); stream_left (bytes still to
    come of a frame being cut through)."""

    def __init__(self, max_frame_size: int, stream_from: int = NEVER, head_size: int = 0) -> None:
        if stream_from and not FRAME_SIZE_BYTES <= head_size < stream_from:
            raise ValueError("need FRAME_SIZE_BYTES <= head_size < stream_from")
        self.max_frame_size = max_frame_size
        self.stream_from = stream_from
        self.head_size = head_size
        self._chunks = []  # the partial frame, as it arrived
        self.buffered = 0
        # Bytes the partial frame needs (prefix included); 0 while its size has not arrived.
        self._needed = 0
        self._head_taken = False  # new_partial_head gave the partial frame's head already
        self._offered = False  # the partial frame was offered for cut-through and refused
        self.stream_left = 0
        self.bad_size = 0  # the size outside the limit that feed() returned None for

    def feed(self, data: bytes) -> bytes | None:
        """The bytes whose whole frames `data` completes, to walk from offset 0; None when the held
        frame's size, completed by `data`, is outside the limit (see the module)."""
        if self.buffered == 0:
            return data
        chunks = self._chunks
        if len(data) >= GATHER_READS_BELOW:  # kept as it is: its bytes are copied once, when whole
            chunks.append(data)
        elif type(chunks[len(chunks) - 1]) is bytearray:  # no negative index: compiled, none wraps around
            chunks[len(chunks) - 1] += data
        else:
            chunks.append(bytearray(data))
        self.buffered += len(data)
        if self._needed == 0 and self.buffered >= FRAME_SIZE_BYTES:
            size = i32(self._joined_head(FRAME_SIZE_BYTES), 0)
            if size < 0 or size > self.max_frame_size:
                self.bad_size = size
                return None
            self._needed = FRAME_SIZE_BYTES + size
        if self._needed == 0 or self.buffered < self._needed:
            return EMPTY
        joined = b"".join(self._chunks)  # the one copy of the frame's bytes
        self._chunks = []
        self.buffered = 0
        self._needed = 0
        self._head_taken = False
        self._offered = False
        return joined

    def keep(self, buf: bytes, pos: int) -> None:
        """Holds buf[pos:], the start of a frame a walk found not whole (frame_end gave -1 at pos).
        A copy of the read's end, unless the read is all of it: a view would keep the whole read
        alive, beyond what the caller counts as held."""
        rest = buf if pos == 0 else buf[pos:]
        self._chunks = [rest]
        self.buffered = len(rest)
        self._needed = FRAME_SIZE_BYTES + i32(rest, 0) if self.buffered >= FRAME_SIZE_BYTES else 0
        self._head_taken = False

    @property
    def partial_size(self) -> int:
        """The size the partial frame announces (prefix excluded); 0 while it is not known."""
        return self._needed - FRAME_SIZE_BYTES if self._needed else 0

    def new_partial_head(self, size: int) -> bytes | None:
        """The first `size` bytes of the partial frame (its size prefix included), the first time
        that many have arrived; else None (not yet, or given already: a frame's head is checked once,
        not at every read of its body)."""
        if self._head_taken or self.buffered < size:
            return None
        self._head_taken = True
        return self._joined_head(size)

    def _joined_head(self, size: int) -> bytes:
        head = EMPTY
        for chunk in self._chunks:  # the first chunk nearly always holds it all
            head += chunk[: size - len(head)]
            if len(head) == size:
                break
        return head

    def clear(self) -> None:
        """Drops the partial frame (its connection is being closed)."""
        self._chunks = []
        self.buffered = 0
        self._needed = 0
        self._head_taken = False
        self._offered = False

    # cut-through ---------------------------------------------------------------------------------
    def may_offer(self, buf: bytes, pos: int) -> bool:
        """Whether the frame a walk ended on at buf[pos] (not whole) may be cut through: large
        enough, its head here, not refused before."""
        have = len(buf) - pos
        return (
            self.stream_from != NEVER
            and have >= self.head_size
            and FRAME_SIZE_BYTES + i32(buf, pos) >= self.stream_from
            and not self._offered
        )

    def may_offer_held(self) -> bool:
        """may_offer for the held partial frame; `held()` is then its head."""
        return (
            self.stream_from != NEVER
            and self._needed >= self.stream_from
            and self.buffered >= self.head_size
            and not self._offered
        )

    def held(self) -> bytes:
        return b"".join(self._chunks)

    def refused_offer(self) -> None:
        """The frame offered is not cut through: it is held until whole, and not offered again."""
        self._offered = True

    def stream(self, length: int, have: int) -> None:
        """The frame offered (`length` bytes, prefix included, `have` of them passed on) is cut
        through: the rest is counted off the next reads (`streamed`), never held."""
        self.clear()
        self.stream_left = length - have

    def streamed(self, n: int) -> int:
        """How many of the next `n` bytes read belong to the frame being cut through."""
        taken = self.stream_left if self.stream_left < n else n
        self.stream_left -= taken
        return taken

    @property
    def needed(self) -> int:
        """Bytes the held partial frame needs (prefix included); 0 while its size is unknown."""
        return self._needed
