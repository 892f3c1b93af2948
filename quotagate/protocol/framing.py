"""Kafka framing: a stream of frames, each a 4-byte big-endian size followed by that many bytes.

`FrameSplitter` turns the chunks a socket delivers into whole frames. Goals: each byte is looked at
once (no rescanning), a chunk that holds only whole frames is sliced without copying, and a peer that
announces an absurd size is refused before anything is buffered for it.

`StreamingFrameSplitter` also passes a large frame on in pieces as its bytes arrive (cut-through),
when its caller agrees after seeing the frame's first bytes: a 1 MB fetch response then reaches the
client while the broker is still sending it, and the proxy never holds more of it than one read.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from enum import IntEnum
from functools import wraps
from struct import unpack_from
from typing import ParamSpec, TypeVar

FRAME_SIZE_BYTES = 4
# A partial frame's reads smaller than this are gathered in one buffer, not kept one by one: a frame
# sent a few bytes at a time held a Python object per read, twenty times the bytes it counted.
GATHER_READS_BELOW = 16 * 1024


class FrameError(ValueError):
    """The peer sent bytes that cannot be a Kafka frame; its connection should be closed.

    `reason` says why in the proxy's metrics: a protocol error, unless a subclass names the limit
    (quotagate_frames_refused_total's reasons)."""

    reason = "protocol_error"


class FrameSizeError(FrameError):
    """A frame announced a size outside the limit. `frames`: the whole frames the same feed completed
    before it, in order (the broker answers those before it reads the offending size)."""

    def __init__(self, size: int, max_frame_size: int) -> None:
        super().__init__(f"frame size {size} is outside 0..{max_frame_size}")
        self.size = size
        self.frames: list[memoryview] = []


# What kafka-python and struct raise on bytes that are not the message they should be: truncation
# (struct.error, IndexError), a null array or string where the schema has none (TypeError,
# AttributeError on None), bad UTF-8, out-of-range numbers.
_MALFORMED = (struct.error, IndexError, KeyError, TypeError, AttributeError, ValueError, OverflowError)
_P = ParamSpec("_P")
_R = TypeVar("_R")


def frame_errors(what: str) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]:
    """Makes a decoder raise FrameError, and nothing else, on malformed bytes: what it reads from
    a peer must close that peer's connection, never escape as another exception."""

    def wrap(decoder: Callable[_P, _R]) -> Callable[_P, _R]:
        @wraps(decoder)
        def decode(*args: _P.args, **kwargs: _P.kwargs) -> _R:
            try:
                return decoder(*args, **kwargs)
            except FrameError:
                raise
            except _MALFORMED as exc:
                raise FrameError(f"malformed {what}: {exc!r}") from exc

        return decode

    return wrap


class FrameSplitter:
    """Splits a byte stream into frames; each frame returned includes its 4-byte size prefix.

    A frame that arrives over several reads is kept as those reads (`_chunks`) and joined once when
    it is whole: each of its bytes is copied once (a produce batch larger than a read is the usual
    case), not appended to a buffer and copied out of it again."""

    __slots__ = ("_chunk_bytes", "_chunks", "_head_taken", "_max_frame_size", "_needed", "_partial")

    def __init__(self, max_frame_size: int) -> None:
        self._max_frame_size = max_frame_size
        self._partial = bytearray()  # StreamingFrameSplitter's partial frame
        self._chunks: list[bytes] = []  # feed()'s partial frame, as it arrived
        self._chunk_bytes = 0
        # Total bytes (prefix included) the partial frame needs, 0 while its size is not yet known.
        self._needed = 0
        self._head_taken = False  # new_partial_head gave the partial frame's head already

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not fully arrived."""
        return len(self._partial) + self._chunk_bytes

    @property
    def partial_size(self) -> int:
        """The size the partial frame announces (prefix excluded); 0 while it is not known."""
        return self._needed - FRAME_SIZE_BYTES if self._needed else 0

    def new_partial_head(self, size: int) -> bytes | None:
        """The first `size` bytes of the partial frame (its size prefix included), the first time
        that many have arrived; else None (not yet, or given already: a frame's head is checked once,
        not at every read of its body)."""
        if self._head_taken:
            return None
        head = self.partial_head(size)
        self._head_taken = head is not None
        return head

    def partial_head(self, size: int) -> bytes | None:
        """The first `size` bytes of the partial frame (its size prefix included), once that many
        have arrived; else None."""
        if self._chunks:
            if self._chunk_bytes < size:
                return None
            head = b""
            for chunk in self._chunks:  # the first chunk nearly always holds it all
                head += chunk[: size - len(head)]
                if len(head) == size:
                    break
            return head
        if len(self._partial) < size:
            return None
        return bytes(self._partial[:size])

    def clear(self) -> None:
        """Drops the partial frame (its connection is being closed)."""
        self._partial = bytearray()
        self._chunks = []
        self._chunk_bytes = 0
        self._needed = 0
        self._head_taken = False

    def whole_frame(self, data: bytes) -> memoryview | None:
        """`data` as a frame when it is exactly one whole frame within the limit and nothing is
        buffered (a read holding one request or one response: the usual case on a connection with
        one request in flight); else None, and `data` goes through `feed` (or `pieces`)."""
        if self._partial or self._chunks or len(data) < FRAME_SIZE_BYTES:
            return None
        (size,) = unpack_from(">i", data, 0)
        if size + FRAME_SIZE_BYTES != len(data) or size > self._max_frame_size:
            return None
        return memoryview(data)

    def feed(self, data: bytes) -> list[memoryview]:
        """Returns the frames completed by `data`, in order. Raises FrameSizeError on a bad size,
        carrying the frames completed before it."""
        frame = self.whole_frame(data)
        if frame is not None:
            return [frame]
        frames: list[memoryview] = []
        try:
            return self._feed(data, frames)
        except FrameSizeError as exc:
            exc.frames = frames
            raise

    def _keep(self, data: bytes | bytearray) -> None:
        """Keeps a read of the partial frame: a large one as it is (its bytes are copied once, when
        the frame is whole), a small one gathered with the small ones before it."""
        chunks = self._chunks
        if len(data) >= GATHER_READS_BELOW:
            chunks.append(data)
        elif chunks and type(chunks[-1]) is bytearray:
            chunks[-1] += data
        else:
            chunks.append(bytearray(data))
        self._chunk_bytes += len(data)

    def _feed(self, data: bytes, frames: list[memoryview]) -> list[memoryview]:
        if self._chunks:
            self._keep(data)
            if self._needed == 0 and self._chunk_bytes >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(b"".join(self._chunks)[:FRAME_SIZE_BYTES], 0)
            if self._needed == 0 or self._chunk_bytes < self._needed:
                return []
            data = b"".join(self._chunks)  # the one copy of the frame's bytes
            self._chunks = []
            self._head_taken = False
            self._chunk_bytes = 0
            self._needed = 0
        view = memoryview(data)
        pos = 0
        end = len(view)
        while end - pos >= FRAME_SIZE_BYTES:
            length = self._frame_length(view, pos)
            if end - pos < length:
                break
            frames.append(view[pos : pos + length])
            pos += length
        if pos < end:
            # The read itself when it starts the frame; else a copy of its end (a view would keep
            # the whole read alive, beyond what partial_frames_max_bytes counts).
            self._keep(data if pos == 0 and type(data) is bytes else bytes(view[pos:]))
            if end - pos >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(view, pos)
        return frames

    def _frame_length(self, buf: bytes | bytearray | memoryview, pos: int) -> int:
        (size,) = unpack_from(">i", buf, pos)
        if size < 0 or size > self._max_frame_size:
            raise FrameSizeError(size, self._max_frame_size)
        return FRAME_SIZE_BYTES + size


def frame_body_size(frame: bytes | bytearray | memoryview) -> int:
    """The size a frame announces: its bytes after the 4-byte prefix (all of them arrived or not)."""
    return int(unpack_from(">i", frame, 0)[0])


def _never(head: memoryview) -> bool:
    return False


class Piece(IntEnum):
    """What a piece from `StreamingFrameSplitter.pieces` is."""

    WHOLE = 0  # a complete frame
    HEAD = 1  # the first bytes of a streamed frame: all that has arrived, at least `head_size` (prefix included)
    BODY = 2  # more bytes of the streamed frame
    LAST = 3  # the streamed frame's final bytes


class StreamingFrameSplitter(FrameSplitter):
    """A FrameSplitter that may pass large frames on in pieces instead of buffering them whole.

    A frame of at least `stream_from` bytes (prefix included) that has not fully arrived is offered
    to the caller's `streamable(head)` once at least `head_size` of its bytes are here; the head is
    all of it that has arrived. If it says yes, the frame comes
    out as HEAD, then BODY pieces as its bytes arrive, then LAST; else it is buffered and comes out
    WHOLE, like every smaller frame. `pieces` is a generator so that the caller has handled every
    earlier piece before it is asked about the next frame.
    """

    __slots__ = ("_head_size", "_offered", "_stream_from", "_stream_left")

    def __init__(self, max_frame_size: int, stream_from: int, head_size: int) -> None:
        super().__init__(max_frame_size)
        if head_size < FRAME_SIZE_BYTES or stream_from <= head_size:
            raise ValueError("need FRAME_SIZE_BYTES <= head_size < stream_from")
        self._stream_from = stream_from
        self._head_size = head_size
        self._stream_left = 0  # bytes of the streamed frame still to come
        self._offered = False  # the buffered partial frame was offered and refused

    def whole_frame(self, data: bytes) -> memoryview | None:
        if self._stream_left:
            return None
        return super().whole_frame(data)

    def feed(self, data: bytes) -> list[memoryview]:
        """Whole frames only, as FrameSplitter.feed: nothing is streamed."""
        if self._stream_left:
            raise RuntimeError("feed() in the middle of a streamed frame; use pieces()")
        return [piece for _, piece in self.pieces(data, _never)]

    @property
    def streaming(self) -> bool:
        """A streamed frame has begun and not ended."""
        return self._stream_left > 0

    def pieces(self, data: bytes, streamable: Callable[[memoryview], bool]) -> Iterator[tuple[Piece, memoryview]]:
        """Yields the pieces `data` completes, in order. Raises FrameError on a bad size."""
        view = memoryview(data)
        pos, end = 0, len(view)
        if self._stream_left:
            taken = min(self._stream_left, end)
            self._stream_left -= taken
            pos = taken
            yield (Piece.BODY if self._stream_left else Piece.LAST), view[:taken]
        if self._partial and pos < end:
            self._partial += view[pos:]
            if self._needed == 0 and len(self._partial) >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(self._partial, 0)
            if self._needed == 0 or len(self._partial) < self._needed:
                if self._may_offer(self._needed, len(self._partial)):
                    # A copy: a view of the bytearray, if kept, would stop it from growing.
                    head = memoryview(bytes(self._partial))
                    if streamable(head):
                        self._stream_left = self._needed - len(head)
                        self._reset_partial()
                        yield Piece.HEAD, head
                    else:
                        self._offered = True
                return
            view = memoryview(bytes(self._partial))
            pos, end = 0, len(view)
            self._reset_partial()
        while end - pos >= FRAME_SIZE_BYTES:
            length = self._frame_length(view, pos)
            if end - pos >= length:
                yield Piece.WHOLE, view[pos : pos + length]
                pos += length
                continue
            if self._may_offer(length, end - pos):
                if streamable(view[pos:end]):
                    self._stream_left = length - (end - pos)
                    yield Piece.HEAD, view[pos:end]
                    return
                self._offered = True
            break
        if pos < end:
            self._partial += view[pos:]
            if end - pos >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(view, pos)

    def _may_offer(self, length: int, have: int) -> bool:
        return not self._offered and length >= self._stream_from and have >= self._head_size

    def _reset_partial(self) -> None:
        self._partial = bytearray()
        self._needed = 0
        self._offered = False
