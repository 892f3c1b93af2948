"""A session built from a configuration alone (no proxy, no loop, no socket), and the request and
response bytes the session tests feed it."""

from __future__ import annotations

from collections.abc import Callable
from struct import pack, unpack_from

from kafka.protocol.admin import CreateTopicsRequest
from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from quotagate.config import parse_config
from quotagate.protocol.rewrite import response_rewriters
from quotagate.proxy.broker_directory import BrokerDirectory
from quotagate.proxy.entity_metrics import EntityMetrics
from quotagate.proxy.flow_control import ByteBudget
from quotagate.proxy.metrics import ProxyMetrics
from quotagate.proxy.session import Session, SessionServices
from quotagate.proxy.topics import TopicCatalog
from quotagate.quotas import QuotaEngine, QuotaKey
from quotagate.quotas.topic_thresholds import TopicThresholdGuard

PROXY = '[proxy]\nbootstrap_servers = ["127.0.0.1:1"]\nport = 1\n'


def frozen_clock() -> float:
    """The clock a session reads its own handling time from, stopped: a test's charges do not
    depend on how fast the machine ran it (tests of that time pass a clock of their own)."""
    return 0.0


def services_for(
    config_text: str = "",
    top_level: str = "",
    partial_frames: ByteBudget | None = None,
    clock: Callable[[], float] = frozen_clock,
) -> SessionServices:
    """The services a proxy hands its sessions, built from a config alone: no proxy, no loop.
    `partial_frames`: a budget shared with other sessions (else one of their own); `clock`: what the
    session's own time is read from."""
    config = parse_config(top_level + PROXY + config_text)
    engine = QuotaEngine(config.quotas, config.windows)
    proxy = config.proxy
    topics = TopicCatalog()
    return SessionServices(
        engine=engine,
        topic_guard=TopicThresholdGuard(
            config.topic_thresholds, config.windows.burst_seconds(QuotaKey.PRODUCER_BYTE_RATE)
        ),
        topics=topics,
        metrics=ProxyMetrics(),
        entity_metrics=EntityMetrics(lambda: engine, lambda: 0.0, config.metrics.max_entities),
        rewriters=response_rewriters(),
        cluster=BrokerDirectory("127.0.0.1", lambda node_id: 40000 + node_id, topics),
        usage=None,
        wall_offset=0.0,  # usage records read the test clock as epoch seconds
        max_frame_size=proxy.max_frame_size,
        sasl_max_receive_size=proxy.sasl_server_max_receive_size if proxy.client_sasl != "none" else None,
        sasl_required={"required": True, "none": False}.get(proxy.client_sasl),
        partial_frames=partial_frames or ByteBudget(proxy.partial_frames_max_bytes),
        partial_frame_share=proxy.partial_frames_max_bytes_per_connection,
        max_decoded_elements=proxy.max_decoded_elements,
        clock=clock,
    )


def session_with(
    config: str = "", top_level: str = "", session_class: type[Session] = Session
) -> tuple[Session, QuotaEngine]:
    """A session (of `session_class`: a build's, tests/support/builds.py) whose broker connection is
    up, and the engine it charges."""
    session = session_class(services_for(config, top_level))
    session.broker_connected(0.0)
    return session, session.services.engine


def create_topics(correlation_id: int) -> bytes:
    topic = CreateTopicsRequest.CreatableTopic(
        version=6, name="t", num_partitions=3, replication_factor=1, assignments=[], configs=[]
    )
    request = CreateTopicsRequest(version=6, topics=[topic], timeout_ms=1000, validate_only=False)
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def produce(correlation_id: int, topics: dict[str, bytes], version: int = 8) -> bytes:
    request = ProduceRequest(
        version=version,
        transactional_id=None,
        acks=1,
        timeout_ms=1000,
        topic_data=[(name, [(0, records)]) for name, records in topics.items()],
    )
    request.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(request.encode(header=True, framed=True))


def produce_answer(correlation_id: int, topics: list[str], version: int = 8, throttle: int = 0) -> bytes:
    """What a broker answers a produce of `topics` (partition 0 each), any version (the fields a version
    lacks are left out)."""
    topic, partition = (
        ProduceResponse.TopicProduceResponse,
        ProduceResponse.TopicProduceResponse.PartitionProduceResponse,
    )
    response = ProduceResponse(
        version=version,
        responses=[
            topic(
                version=version,
                name=name,
                partition_responses=[
                    partition(
                        version=version,
                        index=0,
                        error_code=0,
                        base_offset=7,
                        log_append_time_ms=-1,
                        log_start_offset=0,
                        record_errors=[],
                        error_message=None,
                    )
                ],
            )
            for name in topics
        ],
        throttle_time_ms=throttle,
    )
    payload = pack(">i", correlation_id) + bytes(response.encode())
    return pack(">i", len(payload)) + payload


def frames(buffer: bytes) -> list[bytes]:
    pos, out = 0, []
    while pos + 4 <= len(buffer):
        size = unpack_from(">i", buffer, pos)[0]
        out.append(buffer[pos : pos + 4 + size])
        pos += 4 + size
    assert pos == len(buffer), "a partial frame"
    return out


def taken(queue: list[bytes | memoryview]) -> bytes:
    data = b"".join(queue)
    queue.clear()
    return data


def correlation_ids(data: bytes, offset: int) -> list[int]:
    return [unpack_from(">i", frame, offset)[0] for frame in frames(data)]


METADATA = 3


def metadata_request(correlation_id: int) -> bytes:
    """A Metadata v1 request for every topic (topics: null)."""
    payload = pack(">hhih", METADATA, 1, correlation_id, 3) + b"app" + pack(">i", -1)
    return pack(">i", len(payload)) + payload


def metadata_answer(correlation_id: int, brokers: dict[int, tuple[str, int]]) -> bytes:
    """A broker's Metadata v1 answer naming `brokers` (node id -> its own host and port) and no topic."""
    broker = MetadataResponse.MetadataResponseBroker
    response = MetadataResponse(
        version=1,
        brokers=[broker(version=1, node_id=n, host=host, port=port, rack=None) for n, (host, port) in brokers.items()],
        controller_id=min(brokers),
        topics=[],
    )
    payload = pack(">i", correlation_id) + bytes(response.encode())
    return pack(">i", len(payload)) + payload


def advertised_brokers(frame: bytes) -> dict[int, tuple[str, int]]:
    """The brokers a Metadata v1 answer (frame, as the client gets it) names."""
    response = MetadataResponse.decode(frame[8:], version=1)
    return {b.node_id: (b.host, b.port) for b in response.brokers}
