"""What each Kafka API is charged, and which of the proxy's policies see it: stated once, here.

`APIS` gives each API its policy: bits saying which quota keys its exchanges are charged to (spec
§2-4) and what else the proxy does with it. Everything else is derived from it:

- the session core's per-API table (proxy/session_core.py's POLICY): what it charges and reads of a
  request, and which policy handlers it runs (proxy/session.py: `SessionPolicies.chains`);
- the charging functions (quotas/charging.py), handed an exchange's policy bits;
- the usage records' quota fields, one per key of `RECORDED_KEYS` (proxy/usage_fields.py), filled
  for the keys an API is charged to (`quota_keys`: proxy/usage.py), and the per-topic rows of
  produce aggregates (proxy/usage_collectors.py);
- the what-if replay's choice of records per quota key (pipeline/whatif.py) and the pipeline's
  fetch columns (pipeline/schema.py).

An API not named in `APIS` is charged its request time, and nothing else happens to it. Nothing
here imports kafka-python's codec: the pipeline's executors read it too.
"""

from __future__ import annotations

from quotagate.protocol.api_keys import ApiKey
from quotagate.quotas.entities import QuotaKey

# What an exchange is charged: bits of an API's policy, one per quota key.
BYTES_IN = 1  # producer_byte_rate: the request's size (header and body), charged when it is read
BYTES_OUT = 2  # consumer_byte_rate: the response's size, charged when it is back
REQUEST_TIME = 4  # request_percentage: the exchange's time (the broker's as the proxy sees it, and the proxy's own)
PARTITIONS_MUTATED = 8  # controller_mutation_rate: partitions created or deleted, admitted topic by topic (KIP-599)
NEW_PRODUCER_IDS = 16  # producer_ids_rate: an idempotent producer ID new to its entity (KIP-936)
# What else the proxy does with it: each a hook of the session (proxy/session.py), besides LONG_POLL.
LONG_POLL = 32  # may wait at the broker up to its max_wait_ms for data: that wait is not request time
SASL = 64  # the SASL exchange: its mechanism, the user it claims, what follows held until the broker answers
LOCAL_ANSWER = 128  # answered from the proxy's own quotas (with [admin])
THRESHOLDS = 256  # per-topic bytes-in thresholds (with [topic_thresholds])
TOPIC_NAMES = 512  # usage records name its topics, an aggregate row per topic

KEYS = {
    BYTES_IN: QuotaKey.PRODUCER_BYTE_RATE,
    BYTES_OUT: QuotaKey.CONSUMER_BYTE_RATE,
    REQUEST_TIME: QuotaKey.REQUEST_PERCENTAGE,
    PARTITIONS_MUTATED: QuotaKey.CONTROLLER_MUTATION_RATE,
    NEW_PRODUCER_IDS: QuotaKey.PRODUCER_IDS_RATE,
}
# The keys usage records name (a quota field each: proxy/usage_fields.py) and the pipeline replays:
# not producer_ids_rate (a record carries no producer ID, so nothing it holds says what that quota
# would have done).
RECORDED_KEYS = tuple(key for bit, key in KEYS.items() if bit != NEW_PRODUCER_IDS)
# Charged when the request is read, before the broker sees it (the others when its response is back):
# a client that pipelines cannot get ahead of these.
CHARGED_AT_READ = (QuotaKey.PRODUCER_BYTE_RATE, QuotaKey.CONTROLLER_MUTATION_RATE)

# The APIs Kafka exempts from request quotas: the ones ApiKeys.java marks `clusterAction` (used only
# between brokers and controllers; their time is recorded as "exempt-request-time", never throttled),
# checked against core's RequestQuotaTest (testExemptRequestTime). Not exempt although inter-broker:
# UpdateFeatures 57 (clusterAction, but throttled when sent to a broker: RequestQuotaTest's
# clusterActionsWithThrottleForBroker), and FetchSnapshot 59, UnregisterBroker 64, ControllerRegistration
# 70, AssignReplicasToDirs 73, Add/Remove/UpdateRaftVoter 80-82, which are not clusterAction.
CLUSTER_ACTIONS = (
    4,  # LeaderAndIsr
    5,  # StopReplica
    6,  # UpdateMetadata
    7,  # ControlledShutdown
    27,  # WriteTxnMarkers
    52,  # Vote
    53,  # BeginQuorumEpoch
    54,  # EndQuorumEpoch
    55,  # DescribeQuorum
    56,  # AlterPartition
    58,  # Envelope
    62,  # BrokerRegistration
    63,  # BrokerHeartbeat
    67,  # AllocateProducerIds
    83,  # InitializeShareGroupState
    84,  # ReadShareGroupState
    85,  # WriteShareGroupState
    86,  # DeleteShareGroupState
    87,  # ReadShareGroupStateSummary
)

# Every API not named here: REQUEST_TIME alone.
DEFAULT_POLICY = REQUEST_TIME
APIS: dict[int, int] = {
    ApiKey.PRODUCE: BYTES_IN | REQUEST_TIME | NEW_PRODUCER_IDS | THRESHOLDS | TOPIC_NAMES,
    ApiKey.FETCH: BYTES_OUT | REQUEST_TIME | LONG_POLL,
    ApiKey.SHARE_FETCH: BYTES_OUT | REQUEST_TIME | LONG_POLL,  # KIP-932: the broker's fetch quota
    ApiKey.CREATE_TOPICS: PARTITIONS_MUTATED | REQUEST_TIME,
    ApiKey.DELETE_TOPICS: PARTITIONS_MUTATED | REQUEST_TIME,
    ApiKey.CREATE_PARTITIONS: PARTITIONS_MUTATED | REQUEST_TIME,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: LOCAL_ANSWER | REQUEST_TIME,
    ApiKey.ALTER_CLIENT_QUOTAS: LOCAL_ANSWER | REQUEST_TIME,
    ApiKey.SASL_HANDSHAKE: SASL,  # authentication is never charged
    ApiKey.SASL_AUTHENTICATE: SASL,
    **dict.fromkeys(CLUSTER_ACTIONS, 0),
}
PRODUCE = int(ApiKey.PRODUCE)


def policy(api_key: int) -> int:
    """The policy bits of `api_key`."""
    return APIS.get(api_key, DEFAULT_POLICY)


def quota_keys(api_key: int) -> tuple[QuotaKey, ...]:
    """The quota keys an exchange of `api_key` is charged to."""
    bits = policy(api_key)
    return tuple(key for bit, key in KEYS.items() if bits & bit)


def apis_with(bits: int) -> tuple[int, ...]:
    """The APIs named in `APIS` whose policy has any of `bits`, in key order."""
    return tuple(sorted(int(key) for key, policy_bits in APIS.items() if policy_bits & bits))
