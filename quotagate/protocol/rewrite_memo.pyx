# cython: language_level=3
"""The memo of rewritten responses (rewrite.py's rewriters, memoized), compiled: a hit is every
ApiVersions, Metadata and FindCoordinator answer a busy client gets, and costs a dict look-up here.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

from collections import OrderedDict
from typing import NamedTuple

from quotagate.protocol.apis import response_header_is_flexible
from quotagate.protocol.headers import response_body_offset

# What one memo may hold (keys and rewritten bodies together), and the largest body it keeps: a
# Metadata answer naming every topic of a large cluster is megabytes, and is decoded every time.
MEMO_MAX_BYTES = 8 * 1024 * 1024
MEMO_MAX_BODY_BYTES = 2 * 1024 * 1024
# Response header versions known per API version (0: v0, 1: v1 with tagged fields); versions beyond
# go through response_body_offset every time.
cdef enum:
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


class _Rewritten(NamedTuple):
    """What a memo remembers of one rewrite: the new body (None: the frame went on untouched), the
    ClusterView calls the rewrite made and what advertise answered, and the bytes it holds."""

    body: object  # bytes | None
    advertised: tuple
    topics: tuple
    size: int


cdef class RewriteMemo:
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

    cdef public object rewrite
    cdef public int api_key
    cdef public Py_ssize_t max_entries, max_bytes, max_body_bytes, held_bytes, hits
    cdef public object entries  # OrderedDict[(version, body), _Rewritten]
    cdef signed char header_flexible[HEADER_VERSIONS]  # -1: not known yet

    def __init__(
        self,
        rewrite,
        int api_key,
        Py_ssize_t max_entries=256,
        Py_ssize_t max_bytes=MEMO_MAX_BYTES,
        Py_ssize_t max_body_bytes=MEMO_MAX_BODY_BYTES,
    ):
        self.rewrite = rewrite
        self.api_key = api_key
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.max_body_bytes = max_body_bytes
        self.entries = OrderedDict()
        self.held_bytes = 0
        self.hits = 0
        for version in range(HEADER_VERSIONS):
            self.header_flexible[version] = -1

    cdef Py_ssize_t _body_offset(self, object frame, const unsigned char[:] view, int version) except -1:
        """response_body_offset, without the call for a header without tagged fields."""
        if 0 <= version < HEADER_VERSIONS:
            if self.header_flexible[version] < 0:
                self.header_flexible[version] = response_header_is_flexible(self.api_key, version)
            if not self.header_flexible[version]:
                return 8
            if view.shape[0] > 8 and view[8] == 0:
                return 9
        return response_body_offset(frame, self.api_key, version)

    def __call__(self, frame, int version, cluster):
        cdef const unsigned char[:] view = frame
        cdef Py_ssize_t body_offset = self._body_offset(frame, view, version)
        cdef Py_ssize_t size = view.shape[0]
        body = PyBytes_FromStringAndSize(<const char*>&view[0] + body_offset, size - body_offset) if (
            body_offset < size
        ) else b""
        key = (version, body)
        entry = self.entries.get(key)
        if entry is not None and _replay(entry, cluster):
            self.entries.move_to_end(key)
            self.hits += 1
            if entry.body is None:
                return None
            return _framed(view, body_offset, <bytes>entry.body)
        recording = _RecordingView(cluster)
        rewritten = self.rewrite(frame, version, recording)
        # What follows the header of the rewritten frame is its new body.
        new_body = None if rewritten is None else bytes(rewritten[body_offset:])
        held = len(body) + (len(new_body) if new_body is not None else 0)
        if entry is not None:
            self._drop(key)
        if len(body) <= self.max_body_bytes:
            self.entries[key] = _Rewritten(new_body, tuple(recording.advertised), tuple(recording.topics), held)
            self.held_bytes += held
            while len(self.entries) > self.max_entries or self.held_bytes > self.max_bytes:
                self._drop(next(iter(self.entries)))
        return rewritten

    def _drop(self, key):
        self.held_bytes -= self.entries.pop(key).size


cdef bint _replay(object entry, object cluster) except -1:
    """Makes the ClusterView calls of the rewrite again; False if advertise now answers otherwise
    (the remembered body names the old proxy address: the response is rewritten again)."""
    for node_id, host, port, answer in entry.advertised:
        if cluster.advertise(node_id, host, port) != answer:
            return False
    if entry.topics:
        cluster.observe_topics(entry.topics)
    return True


cdef bytes _framed(const unsigned char[:] view, Py_ssize_t body_offset, bytes body):
    """The response's own header (its correlation id) with the remembered body, framed."""
    cdef Py_ssize_t start = min(4, view.shape[0]), end = min(body_offset, view.shape[0])
    cdef Py_ssize_t header = max(end - start, 0), length = len(body)  # frame[4:body_offset], as slicing cuts it
    cdef Py_ssize_t size = header + length
    out = PyBytes_FromStringAndSize(NULL, 4 + size)
    cdef unsigned char* at = <unsigned char*>PyBytes_AS_STRING(out)
    at[0] = (size >> 24) & 0xFF
    at[1] = (size >> 16) & 0xFF
    at[2] = (size >> 8) & 0xFF
    at[3] = size & 0xFF
    if header:
        memcpy(at + 4, &view[start], header)
    memcpy(at + 4 + header, PyBytes_AS_STRING(body), length)
    return out
