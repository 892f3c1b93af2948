"""The memo of rewritten responses (rewrite.py's rewriters, memoized): a hit is every ApiVersions,
Metadata and FindCoordinator answer a busy client gets, and costs a dict look-up here.

Compiled as rewrite_memo_c (typed by rewrite_memo_c.pxd), interpreted as it is: quotagate/compiled.py.
"""

from collections import OrderedDict
from struct import pack

from quotagate.protocol import buffers
from quotagate.protocol.apis import response_header_is_flexible
from quotagate.protocol.headers import response_body_offset

# What one memo may hold (keys and rewritten bodies together), and the largest body it keeps: a
# Metadata answer naming every topic of a large cluster is megabytes, and is decoded every time.
MEMO_MAX_BYTES = 8 * 1024 * 1024
MEMO_MAX_BODY_BYTES = 2 * 1024 * 1024
# Response header versions known per API version (0: v0, 1: v1 with tagged fields); versions beyond
# go through response_body_offset every time.
HEADER_VERSIONS = 64


class _RecordingView:
    """A ClusterView that passes every call on and remembers it, so that a memo hit can make the
    same calls again: the proxy learns broker addresses and topics from them."""

    __slots__ = ("advertised", "cluster", "topics")

    def __init__(self, cluster):
        self.cluster = cluster
        self.advertised = []  # (node_id, host, port, what advertise answered)
        self.topics = []  # (name, topic id or None, partition count)

    def advertise(self, node_id, host, port):
        answer = self.cluster.advertise(node_id, host, port)
        self.advertised.append((node_id, host, port, answer))
        return answer

    def observe_topics(self, topics):
        observed = list(topics)  # the rewriter passes a generator: it can be read once
        self.topics.extend(observed)
        self.cluster.observe_topics(observed)


class _Rewritten:
    """What a memo remembers of one rewrite: the new body (None: the frame went on untouched), the
    ClusterView calls the rewrite made and what advertise answered, the bytes it holds, and the new
    frame's size prefix for a header of the length it had then. (Compiled, a C struct: a hit reads
    its fields without a Python attribute look-up.)"""

    __slots__ = ("advertised", "body", "body_offset", "prefix", "size", "topics")

    def __init__(self, body, advertised, topics, size, body_offset, prefix):
        self.body = body  # bytes | None
        self.advertised = advertised
        self.topics = topics
        self.size = size
        self.body_offset = body_offset
        self.prefix = prefix


class RewriteMemo:
    """Remembers rewritten bodies: clients ask the same Metadata, ApiVersions and FindCoordinator
    questions over and over, and a hit costs a dict look-up instead of a kafka-python decode and
    encode (~50-500 µs).

    Exact, byte for byte and in its effects, as the rewriter it wraps. The rewrite of a response is a
    function of its API version, its body (the bytes after the header: the correlation id differs
    between answers and is kept from the response at hand) and of what `ClusterView.advertise`
    answers; so the memo is keyed by (version, body), and a hit makes the same ClusterView calls
    the rewrite made, in order (the proxy learns a broker's address and the topics from them: a
    broker that moved back to an address seen before, a topic deleted and described again), and
    is a hit only if advertise answers as it did then. Bounded LRU: MEMO_MAX_BYTES in all, bodies
    over MEMO_MAX_BODY_BYTES are rewritten every time."""

    def __init__(
        self,
        rewrite,
        api_key,
        max_entries=256,
        max_bytes=MEMO_MAX_BYTES,
        max_body_bytes=MEMO_MAX_BODY_BYTES,
    ):
        self.rewrite = rewrite
        self.api_key = api_key
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self.entries = OrderedDict()  # (version, body) -> _Rewritten
        self.held_bytes = 0
        self.hits = 0
        self.header_flexible = [-1] * HEADER_VERSIONS  # per API version; -1: not known yet
        # The entry used last, always the last of `entries`: a client asks the same question again and
        # again, and its answer is compared with this one's body where it lies, before any copy or hash.
        self.last = None
        self.last_version = -1
        self.last_body = b""

    def _body_offset(self, frame, version):
        """response_body_offset, without the call for a header without tagged fields."""
        if 0 <= version < HEADER_VERSIONS:
            flexible = self.header_flexible[version]
            if flexible < 0:
                flexible = self.header_flexible[version] = int(response_header_is_flexible(self.api_key, version))
            if not flexible:
                return 8
            if len(frame) > 8 and frame[8] == 0:
                return 9
        return response_body_offset(frame, self.api_key, version)

    def __call__(self, frame, version, cluster):
        return self.rewritten(frame, version, cluster)

    def rewritten(self, frame, version, cluster):
        """The rewritten frame, or None when it goes on as it is; `frame` is bytes or a memoryview."""
        body_offset = self._body_offset(frame, version)
        size = len(frame) - body_offset
        if size > self.max_body_bytes:  # never kept, so never found: no copy, no hash
            return self.rewrite(frame if type(frame) is memoryview else memoryview(frame), version, cluster)
        last_body = self.last_body
        if (
            self.last is not None
            and version == self.last_version
            and size == len(last_body)
            and buffers.equal(buffers.chars(frame), body_offset, buffers.chars(last_body), 0, size)
        ):
            entry = self.last
            body = last_body
            key = None  # the last of `entries` already
        else:
            body = frame[body_offset:] if type(frame) is bytes else bytes(frame[body_offset:])
            key = (version, body)
            entry = self.entries.get(key)
        if entry is not None and _replay(entry, cluster):
            if key is not None:
                self.entries.move_to_end(key)
                self._used(entry, version, body)
            self.hits += 1
            if entry.body is None:
                return None
            if body_offset == entry.body_offset:  # the response's own header (its correlation id), then the body
                return b"".join((entry.prefix, buffers.chars(frame)[4:body_offset], entry.body))
            return _framed(frame, body_offset, entry.body)
        recording = _RecordingView(cluster)
        rewritten = self.rewrite(frame if type(frame) is memoryview else memoryview(frame), version, recording)
        # What follows the header of the rewritten frame is its new body.
        new_body = None if rewritten is None else bytes(rewritten[body_offset:])
        held = len(body) + (len(new_body) if new_body is not None else 0)
        if key is None:
            key = (version, body)
        if entry is not None:
            self._drop(key)
        prefix = b"" if new_body is None else pack(">i", body_offset - 4 + len(new_body))
        entry = _Rewritten(new_body, tuple(recording.advertised), tuple(recording.topics), held, body_offset, prefix)
        self.entries[key] = entry
        self._used(entry, version, body)
        self.held_bytes += held
        while len(self.entries) > self.max_entries or self.held_bytes > self.max_bytes:
            self._drop(next(iter(self.entries)))
        return rewritten

    def _used(self, entry, version, body):
        self.last = entry
        self.last_version = version
        self.last_body = body

    def _drop(self, key):
        dropped = self.entries.pop(key)
        self.held_bytes -= dropped.size
        if dropped is self.last:
            self._used(None, -1, b"")


def _replay(entry, cluster):
    """Makes the ClusterView calls of the rewrite again; False if advertise now answers otherwise
    (the remembered body names the old proxy address: the response is rewritten again)."""
    for node_id, host, port, answer in entry.advertised:
        if cluster.advertise(node_id, host, port) != answer:
            return False
    if entry.topics:
        cluster.observe_topics(entry.topics)
    return True


def _framed(frame, body_offset, body):
    """The response's own header (its correlation id) with the remembered body, framed."""
    header = bytes(frame[4:body_offset])  # as slicing cuts it: empty for a frame shorter than its header
    return b"".join((pack(">i", len(header) + len(body)), header, body))
