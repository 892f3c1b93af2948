# C types for produce_walk.py, compiled as produce_walk_c (quotagate/compiled.py). session_core cimports it.
# What other modules cimport is cpdef: their source imports the same names, interpreted.

cimport cython

from quotagate.protocol cimport buffers

cdef Py_ssize_t PARTITION_BYTES
cdef int TRANSACTIONAL_ID_FROM, TOPIC_ID_FROM
cdef long MAX_TAGS, MAX_ARRAY, MAX_STRING

@cython.locals(topics=int, partitions=int, name=int, message=int, _t=int, _p=int)
cpdef Py_ssize_t usual_throttle_offset(const unsigned char* buf, Py_ssize_t length, Py_ssize_t pos, int version) noexcept

@cython.locals(offset=Py_ssize_t)
cpdef object usual_flexible_throttle_offset(object frame, Py_ssize_t pos, int version)

@cython.locals(value=long, shift=int, byte=int)
cpdef (long, Py_ssize_t) _uvarint(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end) noexcept
@cython.locals(high=long)
cpdef long i32(const unsigned char* buf, Py_ssize_t pos) noexcept
@cython.locals(at=Py_ssize_t, value=int)
cpdef int produce_acks(const unsigned char* buf, Py_ssize_t body, Py_ssize_t end, int version) noexcept
cpdef list produce_topics_of(object frame, Py_ssize_t pos, Py_ssize_t end, int version, bint names_only)
@cython.locals(
    flexible=bint, length=long, count=long, _t=long, start=Py_ssize_t, partitions_at=Py_ssize_t,
    partition_count=long, _p=long, size=long, record_bytes=long, topics=list,
)
cpdef list produce_topics(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, int version, bint names_only)
@cython.locals(count=long, _i=long, _tag=long, size=long)
cpdef Py_ssize_t _skip_tags(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end) noexcept
cpdef Py_ssize_t topics_start_of(object frame, Py_ssize_t pos, int version) except? -1
cpdef Py_ssize_t first_batch_of(object frame, Py_ssize_t pos, Py_ssize_t end, int version, Py_ssize_t least) except -3
@cython.locals(flexible=bint, length=long, count=long, _t=long, partitions=long, _p=long, size=long)
cdef Py_ssize_t first_batch(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, int version, Py_ssize_t least) noexcept
@cython.locals(value=long, length=long)
cpdef (long, Py_ssize_t) _string_length(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible) noexcept
cdef Py_ssize_t _topics_start(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, int version) noexcept
@cython.locals(length=long)
cdef Py_ssize_t _after_transactional_id(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible) noexcept
@cython.locals(count=long)
cpdef (long, Py_ssize_t) _count(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t end, bint flexible) noexcept
