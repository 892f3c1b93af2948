"""Hypothesis settings and strategies for the protocol fuzz tests: damaged frames grown from good seeds."""

from __future__ import annotations

from struct import pack

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from kafka.protocol.producer import ProduceRequest

FUZZ = settings(
    derandomize=True,
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def reframed(body: bytes) -> memoryview:
    """A frame as FrameSplitter delivers it: its size prefix always matches what follows."""
    return memoryview(pack(">i", len(body)) + body)


def bad_frames(seeds: list[bytes]) -> st.SearchStrategy[memoryview]:
    """Truncations, byte flips, garbage tails of the seeds (bodies without prefix), and random bytes."""
    seed = st.sampled_from(seeds)

    def truncate(draw_seed: bytes, cut: float) -> bytes:
        return draw_seed[: int(len(draw_seed) * cut)]

    def flip(draw_seed: bytes, flips: list[tuple[float, int]]) -> bytes:
        out = bytearray(draw_seed)
        for where, value in flips:
            if out:
                out[int(where * (len(out) - 1))] = value
        return bytes(out)

    where = st.floats(0, 1)
    truncated = st.builds(truncate, seed, where)
    flipped = st.builds(flip, seed, st.lists(st.tuples(where, st.integers(0, 255)), min_size=1, max_size=6))
    tailed = st.builds(lambda s, cut, tail: truncate(s, cut) + tail, seed, where, st.binary(max_size=40))
    # A count or length turned huge: 0x7f.. and 0xff.. at a random place.
    inflated = st.builds(
        lambda s, at, filler: s[: int(at * len(s))] + bytes([filler]) * 4 + s[int(at * len(s)) :],
        seed,
        where,
        st.sampled_from([0x7F, 0xFF, 0x80]),
    )
    noise = st.binary(max_size=120)
    return st.one_of(truncated, flipped, tailed, inflated, noise).map(reframed)


def produce_request(version: int, acks: int = -1) -> bytes:
    request = ProduceRequest(
        version=version,
        transactional_id="tx" if version % 2 else None,
        acks=acks,
        timeout_ms=1000,
        topic_data=[("orders", [(0, b"\x01" * 20), (1, b"\x02" * 7)]), ("clicks", [(0, b"\x03" * 9)])],
    )
    request.with_header(correlation_id=9, client_id="c")
    return bytes(request.encode(header=True, framed=True))[4:]


def header_only(api_key: int, version: int) -> bytes:
    """A request that is nothing but its header (v1: no tagged fields), body empty."""
    return pack(">hhih", api_key, version, 7, 1) + b"c"
