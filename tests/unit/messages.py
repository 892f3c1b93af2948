"""Test messages built with kafka-python's classes, shared by the protocol tests."""

from kafka.protocol.producer import ProduceResponse


def produce_response(
    version: int, throttle: int, endpoints: bool = False, topics: int = 2, partitions: int = 3
) -> ProduceResponse:
    """A produce response with `topics` × `partitions` results, record errors from v8 and, if asked,
    KIP-951 NodeEndpoints: enough structure to exercise every walk over it."""
    topic = ProduceResponse.TopicProduceResponse
    partition = topic.PartitionProduceResponse
    error = partition.BatchIndexAndErrorMessage
    entries = []
    for t in range(topics):
        results = [
            partition(
                version=version,
                index=p,
                error_code=0,
                base_offset=1000 + p,
                **(
                    {
                        "record_errors": [error(version=version, batch_index=1, batch_index_error_message="x")] * p,
                        "error_message": "oops" if p == 2 else None,
                    }
                    if version >= 8
                    else {}
                ),
            )
            for p in range(partitions)
        ]
        name = {"name": f"topic-{t}"} if version < 13 else {"topic_id": "0" * 31 + str(t)}
        entries.append(topic(version=version, partition_responses=results, **name))
    fields = {}
    if endpoints:
        node = ProduceResponse.NodeEndpoint
        fields["node_endpoints"] = [node(version=version, node_id=2, host="kafka-2", port=9092, rack="r")]
    return ProduceResponse(version=version, responses=entries, throttle_time_ms=throttle, **fields)
