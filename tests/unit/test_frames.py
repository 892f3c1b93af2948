"""protocol/frames.py: whole frames out of a stream of reads, by offset, on both builds (frames_c
compiled, frames interpreted). `walk` reads a stream as the session core's loops do (feed, then
frame_end from offset 0, then keep the partial end), so any cut of a stream must give its frames,
in order, each once, and what is held must be what has not been given yet."""

from __future__ import annotations

import importlib
import random
import tracemalloc
from struct import pack
from types import ModuleType

import pytest

from quotagate import compiled

BUILDS = ["quotagate.protocol.frames"] + (["quotagate.protocol.frames_c"] if compiled.COMPILED else [])


@pytest.fixture(params=BUILDS)
def frames(request: pytest.FixtureRequest) -> ModuleType:
    return importlib.import_module(request.param)


def frame(payload: bytes) -> bytes:
    return pack(">i", len(payload)) + payload


def walk(frames: ModuleType, splitter: object, data: bytes, max_size: int) -> tuple[list[bytes], bool]:
    """The frames `data` completes, read as the session core reads them, and whether a size over
    the limit stopped the walk."""
    buf = splitter.feed(data)  # type: ignore[attr-defined]
    if buf is None:
        return [], True
    pos, out = 0, []
    while True:
        end = frames.frame_end(buf, pos, len(buf), max_size)
        if end < 0:
            break
        out.append(buf[pos:end])
        pos = end
    if end == -2:
        return out, True
    if pos < len(buf):
        splitter.keep(buf, pos)  # type: ignore[attr-defined]
    return out, False


def test_a_read_of_whole_frames_is_walked_where_it_lies(frames: ModuleType) -> None:
    data = frame(b"one") + frame(b"") + frame(b"three")
    splitter = frames.splitter(1024)
    assert splitter.feed(data) is data, "no copy of a read that holds only whole frames"
    assert walk(frames, frames.splitter(1024), data, 1024) == ([frame(b"one"), frame(b""), frame(b"three")], False)


def test_a_frame_fed_one_byte_at_a_time_is_joined_once_it_is_whole(frames: ModuleType) -> None:
    splitter = frames.splitter(1024)
    data = frame(b"alpha") + frame(b"beta" * 50)
    out = []
    for i in range(len(data)):
        out += walk(frames, splitter, data[i : i + 1], 1024)[0]
    assert out == [frame(b"alpha"), frame(b"beta" * 50)] and splitter.buffered == 0


def test_a_frame_sent_a_few_bytes_at_a_time_is_held_in_about_its_own_size(frames: ModuleType) -> None:
    """A partial frame's small reads are gathered, not kept one by one: sent three bytes at a time, a
    1 MiB frame held a Python object per read, 15.5 MB for the 1 MiB partial_frames_max_bytes counted
    (64 KiB here)."""
    data = pack(">i", 1 << 16) + bytes(range(256)) * 256
    last = len(data) - 3
    splitter = frames.splitter(1 << 20)
    tracemalloc.start()
    try:
        for at in range(0, last, 3):
            assert walk(frames, splitter, data[at : min(at + 3, last)], 1 << 20) == ([], False)
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert splitter.buffered == last
    assert held < 3 * len(data), f"{held} bytes held for a partial frame of {splitter.buffered}"
    assert walk(frames, splitter, data[last:], 1 << 20) == ([data], False)


@pytest.mark.parametrize("seed", range(20))
def test_any_cut_of_a_stream_gives_its_frames_in_order_and_holds_only_what_is_not_given(
    frames: ModuleType, seed: int
) -> None:
    rng = random.Random(seed)
    payloads = [bytes([i]) * rng.choice([0, 1, 3, 100, 5000, 70_000]) for i in range(12)]
    data = b"".join(frame(p) for p in payloads)
    splitter, out, fed = frames.splitter(100_000), [], 0
    while fed < len(data):
        chunk = data[fed : fed + rng.choice([1, 2, 5, 700, 65536, 200_000])]
        fed += len(chunk)
        out += [bytes(f[4:]) for f in walk(frames, splitter, chunk, 100_000)[0]]
        assert splitter.buffered == fed - sum(4 + len(p) for p in out)
    assert out == payloads and splitter.buffered == 0


@pytest.mark.parametrize("size", [-1, 2049])
def test_a_size_outside_the_limit_stops_the_walk_after_the_frames_before_it(frames: ModuleType, size: int) -> None:
    data = frame(b"a" * 10) + frame(b"b" * 3) + pack(">i", size) + b"zz"
    assert walk(frames, frames.splitter(2048), data, 2048) == ([frame(b"a" * 10), frame(b"b" * 3)], True)


def test_a_size_outside_the_limit_is_refused_when_its_split_prefix_completes(frames: ModuleType) -> None:
    splitter = frames.splitter(2048)
    assert walk(frames, splitter, b"\x7f\xff", 2048) == ([], False) and splitter.buffered == 2
    assert splitter.feed(b"\xff\xff") is None and splitter.bad_size == 0x7FFFFFFF


def test_a_partial_frames_head_is_given_once(frames: ModuleType) -> None:
    splitter = frames.splitter(2048)
    walk(frames, splitter, frame(b"\x00\x03\x00\x07" + b"x" * 100)[:6], 2048)
    assert splitter.partial_size == 104 and splitter.new_partial_head(8) is None  # 6 of 8 bytes here
    walk(frames, splitter, b"\x00\x07x", 2048)
    assert splitter.new_partial_head(8) == frame(b"\x00\x03\x00\x07" + b"x" * 100)[:8]
    assert splitter.new_partial_head(8) is None, "checked once, not at every read of its body"


# cut-through -------------------------------------------------------------------------------------


def streamed(frames: ModuleType, splitter: object, chunks: list[bytes], accept: bool) -> list[tuple[str, bytes]]:
    """The pieces a stream's reads give, as the session core's broker loop cuts them: whole frames,
    the head of a frame cut through, then its body as it arrives."""
    out: list[tuple[str, bytes]] = []
    for data in chunks:
        pos = 0
        if splitter.stream_left:  # type: ignore[attr-defined]
            pos = splitter.streamed(len(data))  # type: ignore[attr-defined]
            out.append(("body" if splitter.stream_left else "last", data[:pos]))  # type: ignore[attr-defined]
        buf = splitter.feed(data)  # type: ignore[attr-defined]
        if buf is not data:
            pos = 0
        while (end := frames.frame_end(buf, pos, len(buf), 1 << 30)) >= 0:
            out.append(("whole", buf[pos:end]))
            pos = end
        if pos < len(buf):
            if splitter.may_offer(buf, pos):  # type: ignore[attr-defined]
                if accept:
                    splitter.stream(4 + int.from_bytes(buf[pos : pos + 4], "big"), len(buf) - pos)  # type: ignore[attr-defined]
                    out.append(("head", buf[pos:]))
                    continue
                splitter.refused_offer()  # type: ignore[attr-defined]
            splitter.keep(buf, pos)  # type: ignore[attr-defined]
        elif not buf and splitter.may_offer_held():  # type: ignore[attr-defined]
            head = splitter.held()  # type: ignore[attr-defined]
            if accept:
                splitter.stream(splitter.needed, len(head))  # type: ignore[attr-defined]
                out.append(("head", head))
            else:
                splitter.refused_offer()  # type: ignore[attr-defined]
    return out


def test_a_large_frame_is_cut_through_as_its_bytes_arrive(frames: ModuleType) -> None:
    big, small = frame(b"B" * 1000), frame(b"s" * 10)
    splitter = frames.splitter(4096, 100, 16)
    out = streamed(frames, splitter, [small + big[:300], big[300:700], big[700:] + small], accept=True)
    assert [kind for kind, _ in out] == ["whole", "head", "body", "last", "whole"]
    assert out[1][1] == big[:300] and b"".join(piece for _, piece in out[1:4]) == big
    assert splitter.stream_left == 0 and splitter.buffered == 0


def test_a_refused_or_small_frame_is_held_whole_and_offered_once(frames: ModuleType) -> None:
    big = frame(b"B" * 1000)
    splitter = frames.splitter(4096, 100, 16)
    assert streamed(frames, splitter, [big[:300], big[300:600], big[600:]], accept=False) == [("whole", big)]
    small = frame(b"s" * 50)  # under stream_from: never offered
    assert not splitter.may_offer(small[:20], 0)
    assert streamed(frames, splitter, [small[:20], small[20:]], accept=True) == [("whole", small)]


def test_a_frame_is_offered_only_once_head_size_of_it_has_arrived(frames: ModuleType) -> None:
    big = frame(b"B" * 1000)
    splitter = frames.splitter(4096, 100, 64)
    out = streamed(frames, splitter, [big[i : i + 10] for i in range(0, len(big), 10)], accept=True)
    assert out[0] == ("head", big[:70])
    assert b"".join(piece for _, piece in out) == big and out[-1][0] == "last"


@pytest.mark.parametrize("seed", range(20))
def test_any_cut_of_a_stream_with_frames_cut_through_gives_its_frames(frames: ModuleType, seed: int) -> None:
    rng = random.Random(seed)
    sent = [frame(bytes([i % 256]) * rng.choice([0, 3, 90, 150, 700, 3000])) for i in range(40)]
    data = b"".join(sent)
    cuts = sorted(rng.sample(range(1, len(data)), 60))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    splitter = frames.splitter(4096, 100, 16)
    rebuilt: list[bytes] = []
    for chunk in chunks:
        for kind, piece in streamed(frames, splitter, [chunk], accept=rng.random() < 0.5):
            if kind in ("whole", "head"):
                rebuilt.append(piece)
                assert kind == "whole" or len(piece) >= 16
            else:
                rebuilt[-1] += piece
    assert rebuilt == sent and splitter.stream_left == 0 and splitter.buffered == 0
