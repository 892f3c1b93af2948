import random
import tracemalloc
from collections.abc import Callable
from struct import pack

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest

from quotagate.protocol.framing import FrameError, FrameSizeError, FrameSplitter, Piece, StreamingFrameSplitter
from quotagate.protocol.headers import peek_correlation_id, peek_request_header, response_body_offset
from quotagate.protocol.produce import produce_request_acks


def frame(payload: bytes) -> bytes:
    return pack(">i", len(payload)) + payload


def test_splitter_returns_whole_frames_from_one_chunk_in_order() -> None:
    data = frame(b"one") + frame(b"") + frame(b"three")
    frames = FrameSplitter(1024).feed(data)
    assert [bytes(f[4:]) for f in frames] == [b"one", b"", b"three"]


def test_splitter_reassembles_frames_fed_one_byte_at_a_time() -> None:
    splitter = FrameSplitter(1024)
    data = frame(b"alpha") + frame(b"beta" * 50)
    out = []
    for i in range(len(data)):
        out.extend(bytes(f) for f in splitter.feed(data[i : i + 1]))
    assert out == [frame(b"alpha"), frame(b"beta" * 50)]
    assert splitter.buffered == 0


def test_a_frame_sent_a_few_bytes_at_a_time_is_held_in_about_its_own_size() -> None:
    """A partial frame's reads were kept one by one: sent three bytes at a time, a 1 MiB frame held
    a Python object per read, 15.5 MB for the 1 MiB partial_frames_max_bytes counted (a quarter of
    it here)."""
    frame = pack(">i", 1 << 18) + bytes(range(256)) * 1024
    last = len(frame) - 3
    splitter = FrameSplitter(1 << 20)
    tracemalloc.start()
    try:
        for at in range(0, last, 3):
            assert splitter.feed(frame[at : min(at + 3, last)]) == []
        held, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert splitter.buffered == last
    assert held < 3 * len(frame), f"{held} bytes held for a partial frame of {splitter.buffered}"
    assert [bytes(f) for f in splitter.feed(frame[last:])] == [frame]


def test_splitter_keeps_a_partial_tail_for_the_next_chunk() -> None:
    splitter = FrameSplitter(1024)
    data = frame(b"x" * 10) + frame(b"y" * 10)
    assert [bytes(f) for f in splitter.feed(data[:17])] == [frame(b"x" * 10)]
    assert splitter.buffered == 3
    assert [bytes(f) for f in splitter.feed(data[17:])] == [frame(b"y" * 10)]


@pytest.mark.parametrize("seed", range(20))
def test_splitter_reassembles_any_chunking_and_counts_what_it_holds(seed: int) -> None:
    rng = random.Random(seed)
    payloads = [bytes([i]) * rng.choice([0, 1, 3, 100, 5000, 70_000]) for i in range(12)]
    data = b"".join(frame(p) for p in payloads)
    splitter, out, fed = FrameSplitter(100_000), [], 0
    while fed < len(data):
        chunk = data[fed : fed + rng.choice([1, 2, 5, 700, 65536, 200_000])]
        fed += len(chunk)
        out.extend(bytes(f[4:]) for f in splitter.feed(chunk if rng.random() < 0.8 else bytearray(chunk)))
        assert splitter.buffered == fed - sum(4 + len(p) for p in out)
    assert out == payloads and splitter.buffered == 0


@pytest.mark.parametrize("size", [-1, 2049])
def test_splitter_refuses_sizes_outside_the_limit(size: int) -> None:
    with pytest.raises(FrameError, match=r"outside 0\.\.2048"):
        FrameSplitter(2048).feed(pack(">i", size) + b"zz")


def test_a_bad_size_carries_the_frames_completed_before_it_in_the_same_chunk() -> None:
    """The broker answers the requests before the offending size: the session needs them."""
    splitter = FrameSplitter(2048)
    splitter.feed(frame(b"a" * 10)[:5])
    with pytest.raises(FrameSizeError) as refused:
        splitter.feed(frame(b"a" * 10)[5:] + frame(b"b" * 3) + pack(">i", 4096))
    assert [bytes(f) for f in refused.value.frames] == [frame(b"a" * 10), frame(b"b" * 3)]
    assert refused.value.size == 4096


def test_splitter_refuses_a_bad_size_announced_in_a_split_prefix() -> None:
    splitter = FrameSplitter(2048)
    assert splitter.feed(b"\x7f\xff") == []
    with pytest.raises(FrameError):
        splitter.feed(b"\xff\xff")


def streamed(splitter: StreamingFrameSplitter, chunks: list[bytes], accept: bool = True) -> list[tuple[Piece, bytes]]:
    return [(kind, bytes(piece)) for chunk in chunks for kind, piece in splitter.pieces(chunk, lambda head: accept)]


def recording(answer: bool) -> tuple[list[bytes], Callable[[memoryview], bool]]:
    """A `streamable` that answers `answer` and keeps every head it is shown."""
    heads: list[bytes] = []

    def streamable(head: memoryview) -> bool:
        heads.append(bytes(head))
        return answer

    return heads, streamable


def test_streaming_splitter_cuts_a_large_frame_through_as_its_bytes_arrive() -> None:
    big = frame(b"B" * 1000)
    small = frame(b"s" * 10)
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=16)
    out = streamed(splitter, [small + big[:300], big[300:700], big[700:] + small])
    assert [kind for kind, _ in out] == [Piece.WHOLE, Piece.HEAD, Piece.BODY, Piece.LAST, Piece.WHOLE]
    assert out[1][1] == big[:300] and b"".join(piece for _, piece in out[1:4]) == big
    assert out[0][1] == out[4][1] == small
    assert not splitter.streaming and splitter.buffered == 0


def test_streaming_splitter_buffers_a_refused_or_small_frame_whole() -> None:
    big = frame(b"B" * 1000)
    asked, refuse = recording(False)
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=16)
    out = [(k, bytes(p)) for chunk in (big[:300], big[300:600], big[600:]) for k, p in splitter.pieces(chunk, refuse)]
    assert out == [(Piece.WHOLE, big)]
    assert asked == [big[:300]]  # offered once, not again for each chunk
    small = frame(b"s" * 50)  # under stream_from: never offered
    assert streamed(splitter, [small[:20], small[20:]]) == [(Piece.WHOLE, small)]


def test_streaming_splitter_waits_for_head_size_bytes_before_offering() -> None:
    big = frame(b"B" * 1000)
    heads, accept = recording(True)
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=64)
    out = [(k, bytes(p)) for i in range(0, len(big), 10) for k, p in splitter.pieces(big[i : i + 10], accept)]
    assert heads == [big[:70]] and out[0] == (Piece.HEAD, big[:70])
    assert b"".join(piece for _, piece in out) == big and out[-1][0] == Piece.LAST


def test_streaming_splitter_asks_about_a_frame_only_after_yielding_the_earlier_ones() -> None:
    # The caller matches responses to requests in order: when it is asked about a frame, it must
    # already have handled every frame before it.
    frames = [frame(b"a" * 5), frame(b"b" * 5), frame(b"C" * 500)]
    seen: list[Piece] = []
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=16)

    def accept(head: memoryview) -> bool:
        assert len(seen) == 2
        return True

    for kind, _ in splitter.pieces(b"".join(frames)[:-100], accept):
        seen.append(kind)
    assert seen == [Piece.WHOLE, Piece.WHOLE, Piece.HEAD]


def test_streaming_splitter_refuses_a_bad_size_like_the_plain_one() -> None:
    splitter = StreamingFrameSplitter(2048, stream_from=100, head_size=16)
    with pytest.raises(FrameError, match=r"outside 0\.\.2048"):
        list(splitter.pieces(frame(b"x" * 3) + pack(">i", 4096) + b"zz", lambda head: True))


def test_streaming_splitter_feed_gives_whole_frames_only() -> None:
    big = frame(b"B" * 1000)
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=16)
    assert splitter.feed(big[:500]) == []
    assert [bytes(f) for f in splitter.feed(big[500:] + big)] == [big, big]


@pytest.mark.parametrize("seed", range(20))
def test_streaming_splitter_reassembles_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    frames = [frame(bytes([i % 256]) * rng.choice([0, 3, 90, 150, 700, 3000])) for i in range(40)]
    data = b"".join(frames)
    cuts = sorted(rng.sample(range(1, len(data)), 60))
    chunks = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    splitter = StreamingFrameSplitter(4096, stream_from=100, head_size=16)
    out = [(k, bytes(p)) for c in chunks for k, p in splitter.pieces(c, lambda head: rng.random() < 0.5)]
    rebuilt: list[bytes] = []
    for kind, piece in out:
        if kind in (Piece.WHOLE, Piece.HEAD):
            rebuilt.append(piece)
        else:
            rebuilt[-1] += piece
        if kind == Piece.HEAD:
            assert len(piece) >= 16
    assert rebuilt == frames
    assert not splitter.streaming and splitter.buffered == 0


def encoded_request(message, correlation_id: int = 7, client_id: str | None = "app-1") -> memoryview:
    message.with_header(correlation_id=correlation_id, client_id=client_id)
    return memoryview(bytes(message.encode(header=True, framed=True)))


@pytest.mark.parametrize("version", [0, 4, 8, 9, 12, 13])
def test_request_header_peek_reads_key_version_correlation_and_client_id(version: int) -> None:
    request = encoded_request(MetadataRequest(version=version, topics=[]), correlation_id=4242)
    header = peek_request_header(request)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (3, version, 4242, "app-1")
    decoded = MetadataRequest.decode(request[header.body_offset :], version=version)
    assert decoded.topics == []


def test_request_header_peek_handles_a_null_client_id() -> None:
    header = peek_request_header(encoded_request(ApiVersionsRequest(version=0), client_id=None))
    assert header.client_id is None and header.body_offset == 4 + 10


def test_request_header_peek_refuses_a_short_frame() -> None:
    with pytest.raises(FrameError, match="shorter than a header"):
        peek_request_header(memoryview(frame(b"\x00\x03")))


@pytest.mark.parametrize("version", [3, 5, 8, 9, 11, 13])
@pytest.mark.parametrize("transactional_id", [None, "tx-1"])
@pytest.mark.parametrize("acks", [0, 1, -1])
def test_produce_acks_is_read_behind_the_transactional_id(
    version: int, transactional_id: str | None, acks: int
) -> None:
    request = encoded_request(
        ProduceRequest(version=version, transactional_id=transactional_id, acks=acks, timeout_ms=100, topic_data=[])
    )
    header = peek_request_header(request)
    assert produce_request_acks(request, header.body_offset, version) == acks


def test_response_body_offset_skips_flexible_header_tags_but_not_for_api_versions() -> None:
    response = memoryview(frame(pack(">i", 99) + b"\x00" + b"body"))
    assert peek_correlation_id(response) == 99
    assert response_body_offset(response, 3, 12) == 9  # Metadata v12: header v1 with tags
    assert response_body_offset(response, 3, 8) == 8  # Metadata v8: header v0
    assert response_body_offset(response, 18, 3) == 8  # ApiVersions: always header v0
