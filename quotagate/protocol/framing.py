"""Kafka framing: a stream of frames, each a 4-byte big-endian size followed by that many bytes.

`FrameSplitter` turns the chunks a socket delivers into whole frames. Goals: each byte is looked at
once (no rescanning), a chunk that holds only whole frames is sliced without copying, and a peer that
announces an absurd size is refused before anything is buffered for it.
"""

from __future__ import annotations

from struct import unpack_from

FRAME_SIZE_BYTES = 4


class FrameError(ValueError):
    """The peer sent bytes that cannot be a Kafka frame; its connection should be closed."""


class FrameSplitter:
    """Splits a byte stream into frames; each frame returned includes its 4-byte size prefix."""

    __slots__ = ("_max_frame_size", "_needed", "_partial")

    def __init__(self, max_frame_size: int) -> None:
        self._max_frame_size = max_frame_size
        self._partial = bytearray()
        # Total bytes (prefix included) the partial frame needs, 0 while its size is not yet known.
        self._needed = 0

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that has not fully arrived."""
        return len(self._partial)

    def feed(self, data: bytes) -> list[memoryview]:
        """Returns the frames completed by `data`, in order. Raises FrameError on a bad size."""
        if self._partial:
            self._partial += data
            if self._needed == 0 and len(self._partial) >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(self._partial, 0)
            if self._needed == 0 or len(self._partial) < self._needed:
                return []
            data = bytes(self._partial)
            self._partial = bytearray()
            self._needed = 0
        view = memoryview(data)
        frames: list[memoryview] = []
        pos = 0
        end = len(view)
        while end - pos >= FRAME_SIZE_BYTES:
            length = self._frame_length(view, pos)
            if end - pos < length:
                break
            frames.append(view[pos : pos + length])
            pos += length
        if pos < end:
            self._partial += view[pos:]
            if end - pos >= FRAME_SIZE_BYTES:
                self._needed = self._frame_length(view, pos)
        return frames

    def _frame_length(self, buf: bytes | bytearray | memoryview, pos: int) -> int:
        (size,) = unpack_from(">i", buf, pos)
        if size < 0 or size > self._max_frame_size:
            raise FrameError(f"frame size {size} is outside 0..{self._max_frame_size}")
        return FRAME_SIZE_BYTES + size
