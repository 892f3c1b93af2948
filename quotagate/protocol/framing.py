"""Kafka framing: a stream of frames, each a 4-byte big-endian size followed by that many bytes.

What bad bytes from a peer raise (`FrameError`; `frame_errors` makes a decoder raise it and nothing
else, and `decoded` is kafka-python's decode raising it), and a frame's announced size. The frames of
a stream are found by protocol/frames.py.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from functools import wraps
from struct import unpack_from
from typing import ParamSpec, TypeVar

FRAME_SIZE_BYTES = 4


class FrameError(ValueError):
    """The peer sent bytes that cannot be a Kafka frame; its connection should be closed.

    `reason` says why in the proxy's metrics: a protocol error, unless a subclass names the limit
    (quotagate_frames_refused_total's reasons)."""

    reason = "protocol_error"


def frame_size_problem(size: int, max_frame_size: int) -> str:
    return f"frame size {size} is outside 0..{max_frame_size}"


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


def decoded(cls: type, frame: bytes | memoryview, body_offset: int, version: int) -> object:
    """kafka-python's decode of the message of class `cls` at frame[body_offset:]: FrameError, naming
    the message, on bytes it cannot decode, whatever it raises for them."""
    try:
        return cls.decode(frame[body_offset:], version=version)  # type: ignore[attr-defined]
    except Exception as exc:  # kafka-python raises assorted errors on bad bytes
        raise FrameError(f"cannot decode {cls.__name__} v{version}: {exc}") from exc


def frame_body_size(frame: bytes | bytearray | memoryview) -> int:
    """The size a frame announces: its bytes after the 4-byte prefix (all of them arrived or not)."""
    return int(unpack_from(">i", frame, 0)[0])
