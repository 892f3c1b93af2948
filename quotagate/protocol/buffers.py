"""The bytes of a buffer as the compiled walks read and write them: the one thing about a buffer
that a typed Python source cannot say for both builds.

Compiled, a walk reads a frame through a `const unsigned char*` to its first byte, whatever object
holds it (bytes, a bytearray, a memoryview slice of a read), and copies and compares runs of bytes
with memcpy and memcmp: buffers.pxd states those in C, and the compiled modules cimport it.
Interpreted, this module stands in for it: a frame is read as it is (indexing and slicing a bytes or a
memoryview are the same reads), and a run is copied and compared by slicing. The walks' sources call
`buffers.chars(frame)`, `buffers.copy(...)` and `buffers.equal(...)` and nothing else differs between
the builds but their .pxd files.
"""

from __future__ import annotations

from array import array

Bytes = bytes | bytearray | memoryview


def chars(data: Bytes) -> Bytes:
    """The bytes of `data` (bytes, a bytearray or a contiguous memoryview of bytes), to index and
    slice (compiled: a const unsigned char* to the first)."""
    return data


def ints(data: array) -> array:
    """The ints of `data`, an array("i"), to index (compiled: a const int* to the first)."""
    return data


def copy(out: bytearray, at: int, source: Bytes, start: int, stop: int) -> None:
    """Copies source[start:stop] into out[at:], a bytearray (compiled: memcpy)."""
    out[at : at + stop - start] = source[start:stop]


def equal(buf: Bytes, start: int, other_buf: Bytes, other: int, size: int) -> bool:
    """Whether buf[start:start + size] and other_buf[other:other + size] hold the same bytes (compiled: memcmp)."""
    return buf[start : start + size] == other_buf[other : other + size]
