"""The walks read a frame alike whatever holds it (protocol/buffers.py: compiled, a pointer to its
first byte), on both builds: bytes, a bytearray, a memoryview slice of a larger read."""

from __future__ import annotations

import pytest

from quotagate import compiled
from quotagate.protocol import produce_walk, response_walk
from tests.support.fuzz import produce_request

BUILDS = {"interpreted": (produce_walk, response_walk)}
if compiled.COMPILED:
    BUILDS["compiled"] = (
        compiled.load("quotagate.protocol.produce_walk"),
        compiled.load("quotagate.protocol.response_walk"),
    )

FRAME = produce_request(9, acks=1)  # body of a Produce v9 (no size prefix), client id "c"
BODY = 2 + 2 + 4 + 2 + 1 + 1  # api key, version, correlation id, client id "c", no header tags


def holders(frame: bytes) -> dict[str, object]:
    read = b"\x00" * 7 + frame + b"\xff" * 5
    return {"bytes": frame, "bytearray": bytearray(frame), "memoryview slice": memoryview(read)[7 : 7 + len(frame)]}


@pytest.mark.parametrize("build", sorted(BUILDS))
def test_a_frame_is_read_alike_from_bytes_a_bytearray_and_a_memoryview_slice(build: str) -> None:
    walk, responses = BUILDS[build]
    topics = {name: walk.produce_topics_of(frame, BODY, len(FRAME), 9, True) for name, frame in holders(FRAME).items()}
    assert topics["bytes"] == [b"orders", b"clicks"]
    assert all(type(name) is bytes for name in topics["memoryview slice"])
    assert topics["bytearray"] == topics["memoryview slice"] == topics["bytes"]
    firsts = {name: walk.first_batch_of(frame, BODY, len(FRAME), 9, 1) for name, frame in holders(FRAME).items()}
    assert len(set(firsts.values())) == 1 and firsts["bytes"] > BODY
    edits = response_walk.array("q", (0, 3, 0))
    for frame in holders(FRAME).values():
        assert responses.splice(frame, edits, [b"xy"], False) == b"xy" + FRAME[3:]


def test_a_memoryview_the_walks_cannot_point_into_is_refused() -> None:
    if not compiled.COMPILED:
        pytest.skip("compiled build not built")
    walk = compiled.load("quotagate.protocol.produce_walk")
    with pytest.raises(TypeError, match="contiguous memoryview of bytes"):
        walk.produce_topics_of(memoryview(FRAME * 2)[::2], BODY, len(FRAME), 9, True)
