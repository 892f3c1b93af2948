"""How much Python a call runs, counted instead of timed: the proxy's work on what a client sized
(20 000 coordinators, 100 000 partitions) must be C per byte, so the Python functions it runs must
not grow with the entries. kafka-python's decoder and a Python loop run one or more per entry; the
compiled walks run none. A count is exact on a shared, noisy machine where a time is not.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

from quotagate import compiled

# Only the compiled build walks in C; interpreted, the same walks are Python loops by design.
compiled_only = pytest.mark.skipif(not compiled.COMPILED, reason="the interpreted build walks in Python by design")


def python_calls(call: Callable[[], Any]) -> int:
    """How many Python functions `call()` runs, itself excluded (generators count each resumption)."""
    count = -1
    previous = sys.getprofile()

    def profile(_frame: object, event: str, _arg: object) -> None:
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(previous)
    return count


def assert_bounded(
    make: Callable[[int], Callable[[], Any]], small: int, large: int, what: str, per_entry: int = 0
) -> None:
    """`make(n)` gives a call over n entries: the Python it runs must not grow from `small` to `large`
    by more than `per_entry` calls an entry (what the proxy must make of each: a decoded name)."""
    few, many = python_calls(make(small)), python_calls(make(large))
    assert many <= few + per_entry * (large - small), (
        f"{what}: {few} Python calls for {small} entries, {many} for {large}: more than {per_entry} an entry"
    )
