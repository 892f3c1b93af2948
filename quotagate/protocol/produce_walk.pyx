# cython: language_level=3
"""Where throttle_time_ms sits in the produce response nearly every produce gets back, found fast.

The usual shape: flexible (v9+), no record errors, no tagged fields inside, every count and length
one byte. Compiled: produce.py's general walk starts with it, and the session's fast lane
(proxy/session_core.pyx) reads it to tell a response that names no broker (no top-level tags).
"""

cdef enum:
    # index, error_code, base_offset, log_append_time_ms, log_start_offset
    PARTITION_BYTES = 30
    TOPIC_ID_FROM = 13


cdef Py_ssize_t usual_throttle_offset(const unsigned char* buf, Py_ssize_t length, Py_ssize_t pos, int version) noexcept:
    """The offset of throttle_time_ms in the usual shape, from the body at `pos`; -1 for any other shape
    (the full walk then handles it, errors included): never a wrong offset."""
    cdef int topics, partitions, name, message, t, p
    if pos >= length:
        return -1
    topics = buf[pos] - 1
    pos += 1
    if topics < 0 or topics >= 0x7F:
        return -1
    for t in range(topics):
        if version >= TOPIC_ID_FROM:
            pos += 16
        else:
            if pos >= length:
                return -1
            name = buf[pos]  # compact string: length + 1, one byte
            if name == 0 or name >= 0x80:
                return -1
            pos += name
        if pos >= length:
            return -1
        partitions = buf[pos] - 1
        pos += 1
        if partitions < 0 or partitions >= 0x7F:
            return -1
        for p in range(partitions):
            pos += PARTITION_BYTES
            if pos + 1 >= length:
                return -1
            message = buf[pos + 1]  # after an empty record_errors (one byte: 1)
            if buf[pos] != 1 or message >= 0x80:
                return -1
            pos += 2 + (message - 1 if message > 1 else 0)
            if pos >= length or buf[pos] != 0:  # the partition's tagged fields
                return -1
            pos += 1
        if pos >= length or buf[pos] != 0:  # the topic's tagged fields
            return -1
        pos += 1
    return pos if pos + 4 <= length else -1


def usual_flexible_throttle_offset(frame, Py_ssize_t pos, int version):
    """usual_throttle_offset for Python: the offset, or None for any other shape."""
    cdef const unsigned char[:] view = frame
    if view.shape[0] == 0:
        return None
    cdef Py_ssize_t offset = usual_throttle_offset(&view[0], view.shape[0], pos, version) if pos >= 0 else -1
    return None if offset < 0 else offset
