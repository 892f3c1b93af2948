"""The memo of rewritten responses behaves exactly as the rewriters it wraps: the same bytes out, and
the same addresses and topics learned by the proxy, over long runs of repeated responses."""

from __future__ import annotations

import tracemalloc
import uuid
from struct import pack, unpack_from

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

from quotagate.protocol.apis import ApiKey
from quotagate.protocol.rewrite import RESPONSE_REWRITERS, RewriteMemo, response_rewriters, rewrite_metadata
from quotagate.proxy.topics import TopicCatalog
from tests.support.rewrite_messages import api_versions_message, response_frame


class Cluster:
    """The proxy's side of the ClusterView: the brokers' real addresses, the topic catalog, and the
    proxy address of node N (at `port_base + N`)."""

    def __init__(self) -> None:
        self.brokers: dict[int, tuple[str, int]] = {}
        self.catalog = TopicCatalog()
        self.port_base = 30000

    def advertise(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        self.brokers[node_id] = (host, port)
        return "proxy.example", self.port_base + node_id

    def observe_topics(self, topics) -> None:
        self.catalog.observe(topics)

    def state(self) -> tuple[object, ...]:
        return self.brokers, self.catalog.partitions, self.catalog.names_by_id


BROKER_HOSTS = {1: ("kafka-1", "kafka-1-moved"), 2: ("kafka-2",)}
TOPICS = {"orders": 6, "clicks": 2, "audit": 1}


def metadata(version: int, brokers: tuple[tuple[int, str], ...], topics: tuple[str, ...]) -> MetadataResponse:
    broker_cls = MetadataResponse.MetadataResponseBroker
    topic_cls = MetadataResponse.MetadataResponseTopic
    partition_cls = topic_cls.MetadataResponsePartition
    return MetadataResponse(
        version=version,
        brokers=[broker_cls(version=version, node_id=n, host=host, port=9092, rack=None) for n, host in brokers],
        controller_id=1,
        topics=[
            topic_cls(
                version=version,
                error_code=0,
                name=name,
                partitions=[partition_cls(version=version, partition_index=i) for i in range(TOPICS[name])],
                **({"topic_id": uuid.uuid5(uuid.NAMESPACE_DNS, name)} if version >= 10 else {}),
            )
            for name in topics
        ],
    )


@st.composite
def responses(draw: st.DrawFn) -> tuple[int, int, object]:
    """(api key, version, message) from a small pool, so that bodies repeat."""
    kind = draw(st.sampled_from(("metadata", "api_versions", "find_coordinator", "describe_cluster")))
    if kind == "metadata":
        version = draw(st.sampled_from((1, 4, 9, 12)))
        nodes = draw(st.lists(st.sampled_from(sorted(BROKER_HOSTS)), min_size=1, max_size=2, unique=True))
        brokers = tuple((n, draw(st.sampled_from(BROKER_HOSTS[n]))) for n in sorted(nodes))
        topics = tuple(draw(st.lists(st.sampled_from(sorted(TOPICS)), max_size=2, unique=True)))
        return ApiKey.METADATA, version, metadata(version, brokers, topics)
    if kind == "api_versions":
        version = draw(st.sampled_from((0, 3)))
        return ApiKey.API_VERSIONS, version, api_versions_message(version)
    if kind == "find_coordinator":
        version = draw(st.sampled_from((1, 3)))
        node = draw(st.sampled_from(sorted(BROKER_HOSTS)))
        host = draw(st.sampled_from(BROKER_HOSTS[node]))
        message = FindCoordinatorResponse(version=version, error_code=0, node_id=node, host=host, port=9092)
        return ApiKey.FIND_COORDINATOR, version, message
    broker_cls = DescribeClusterResponse.DescribeClusterBroker
    node = draw(st.sampled_from(sorted(BROKER_HOSTS)))
    message = DescribeClusterResponse(
        version=0,
        error_code=0,
        cluster_id="c",
        controller_id=1,
        brokers=[broker_cls(version=0, broker_id=node, host=BROKER_HOSTS[node][0], port=9092, rack=None)],
    )
    return ApiKey.DESCRIBE_CLUSTER, 0, message


def with_correlation_id(frame: memoryview, correlation_id: int) -> memoryview:
    out = bytearray(frame)
    out[4:8] = pack(">i", correlation_id)
    return memoryview(bytes(out))


# Responses are drawn by index into a pool of a few, so that the same bodies come back often.
STEPS = st.one_of(
    st.tuples(st.just("respond"), st.integers(0, 3), st.integers(0, 2**31 - 1)),
    st.tuples(st.just("forget"), st.sampled_from(sorted(TOPICS))),
    st.tuples(st.just("move_proxy_ports"), st.sampled_from((30000, 31000))),
)


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(responses(), min_size=1, max_size=4), st.lists(STEPS, min_size=1, max_size=40))
def test_memoized_rewrites_give_the_same_bytes_and_teach_the_proxy_the_same_as_uncached(
    pool: list[tuple[int, int, object]], steps: list
) -> None:
    plain, memoized = Cluster(), Cluster()
    memos = response_rewriters()
    for step in steps:
        if step[0] == "forget":  # a DeleteTopics answered: the next description must be learned again
            plain.catalog.forget(step[1])
            memoized.catalog.forget(step[1])
            continue
        if step[0] == "move_proxy_ports":  # what advertise answers changed: remembered bodies are stale
            plain.port_base = memoized.port_base = step[1]
            continue
        _, index, correlation_id = step
        api_key, version, message = pool[index % len(pool)]
        frame = with_correlation_id(response_frame(api_key, version, message), correlation_id)
        expected = RESPONSE_REWRITERS[api_key](frame, version, plain)
        got = memos[api_key](frame, version, memoized)
        assert (bytes(got) if got is not None else None) == (bytes(expected) if expected is not None else None)
        assert memoized.state() == plain.state()


def test_a_repeated_body_is_a_hit_and_keeps_each_correlation_id() -> None:
    memo = RewriteMemo(rewrite_metadata, ApiKey.METADATA)
    cluster = Cluster()
    frame = response_frame(ApiKey.METADATA, 12, metadata(12, ((1, "kafka-1"),), ("orders",)))
    first = memo(frame, 12, cluster)
    second = memo(with_correlation_id(frame, 77), 12, cluster)
    assert memo.hits == 1
    assert second[8:] == first[8:] and unpack_from(">i", second, 4)[0] == 77
    assert unpack_from(">i", second, 0)[0] == len(second) - 4


def test_a_broker_back_at_an_address_seen_before_is_learned_again_on_a_hit() -> None:
    memo = RewriteMemo(rewrite_metadata, ApiKey.METADATA)
    cluster = Cluster()
    at_first, moved = (metadata(4, ((1, host),), ()) for host in BROKER_HOSTS[1])
    for message in (at_first, moved, at_first):
        memo(response_frame(ApiKey.METADATA, 4, message), 4, cluster)
    assert memo.hits == 1
    assert cluster.brokers[1] == ("kafka-1", 9092), "the proxy must connect where the broker is now"


def test_the_memo_holds_at_most_its_byte_bound_and_never_a_body_over_its_largest() -> None:
    bodies = [metadata(4, ((1, "kafka-1"),), (name,)) for name in TOPICS]
    size = len(bytes(response_frame(ApiKey.METADATA, 4, bodies[0])))
    memo = RewriteMemo(rewrite_metadata, ApiKey.METADATA, max_bytes=2 * size + size // 2, max_body_bytes=size)
    cluster = Cluster()
    for message in bodies:
        memo(response_frame(ApiKey.METADATA, 4, message), 4, cluster)
        assert memo.held_bytes <= memo.max_bytes
    assert 0 < len(memo.entries) < len(bodies)
    big = metadata(4, ((1, "kafka-1"),), tuple(TOPICS))
    memo(response_frame(ApiKey.METADATA, 4, big), 4, cluster)
    assert all(len(body) <= size for _, body in memo.entries)


def test_a_body_over_the_largest_kept_is_neither_copied_nor_hashed() -> None:
    """A body the memo will not keep cannot be found in it either: looking it up copied and hashed
    megabytes a client sized (a DescribeConfigs of 50 000 topics) for nothing."""
    seen: list[object] = []

    def rewrite(frame: memoryview, version: int, cluster: object) -> None:
        seen.append(type(cluster))

    memo = RewriteMemo(rewrite, ApiKey.DESCRIBE_CONFIGS, max_body_bytes=1 << 20)
    frame = memoryview(pack(">ii", 4 + (4 << 20), 7) + b"\x00" + bytes(4 << 20))
    tracemalloc.start()
    try:
        assert memo.rewritten(frame, 4, Cluster()) is None
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"{peak} bytes allocated to look up a body of 4 MiB"
    assert seen == [Cluster] and not memo.entries, "rewritten as it is, with the cluster itself"


def test_the_answer_used_last_is_found_in_place_and_the_least_recently_used_goes_first() -> None:
    """A repeated answer is compared with the last one where it lies (no copy, no hash) and stays the
    most recently used: the memo of two drops the one used longest ago, as a look-up would."""
    memo = RewriteMemo(rewrite_metadata, ApiKey.METADATA, max_entries=2)
    cluster = Cluster()
    a, b, c = (response_frame(ApiKey.METADATA, 4, metadata(4, ((1, "kafka-1"),), (name,))) for name in TOPICS)
    for frame in (a, b, a, a, c):  # a: a look-up hit, then found in place; c evicts b, not a
        memo(frame, 4, cluster)
    assert memo.hits == 2 and memo.last_body == bytes(c[8:])
    memo(memoryview(b"\x00" * 3 + bytes(a))[3:], 4, cluster)  # a memoryview slice of a read, as it comes
    assert memo.hits == 3, "the answer used before the last one was kept"
    memo(b, 4, cluster)
    assert memo.hits == 3 and [body for _, body in memo.entries] == [bytes(a[8:]), bytes(b[8:])]
