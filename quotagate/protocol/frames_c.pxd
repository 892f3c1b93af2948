# C types for frames.py, compiled as frames_c (quotagate/compiled.py); session_core_c cimports it.

cimport cython

from quotagate.protocol.produce_walk_c cimport i32

cdef Py_ssize_t FRAME_SIZE_BYTES, NEVER, GATHER_READS_BELOW
cdef bytes EMPTY

@cython.locals(size=long, end=Py_ssize_t)
cpdef Py_ssize_t frame_end(const unsigned char* buf, Py_ssize_t pos, Py_ssize_t stop, Py_ssize_t max_size) noexcept


cpdef FrameSplitter splitter(Py_ssize_t max_frame_size, Py_ssize_t stream_from=*, Py_ssize_t head_size=*)


@cython.final
cdef class FrameSplitter:
    cdef public Py_ssize_t max_frame_size
    cdef public Py_ssize_t stream_from
    cdef public Py_ssize_t head_size
    cdef list _chunks
    cdef public Py_ssize_t buffered
    cdef Py_ssize_t _needed
    cdef bint _head_taken
    cdef bint _offered
    cdef public Py_ssize_t stream_left
    cdef public long bad_size

    @cython.locals(size=long, joined=bytes, chunks=list)
    cpdef bytes feed(self, bytes data)
    @cython.locals(rest=bytes)
    cpdef void keep(self, bytes buf, Py_ssize_t pos) except *
    cpdef object new_partial_head(self, Py_ssize_t size)
    @cython.locals(head=bytes)
    cdef bytes _joined_head(self, Py_ssize_t size)
    cpdef void clear(self) noexcept
    @cython.locals(have=Py_ssize_t)
    cpdef bint may_offer(self, bytes buf, Py_ssize_t pos) noexcept
    cpdef bint may_offer_held(self) noexcept
    cpdef bytes held(self)
    cpdef void refused_offer(self) noexcept
    cpdef void stream(self, Py_ssize_t length, Py_ssize_t have) noexcept
    @cython.locals(taken=Py_ssize_t)
    cpdef Py_ssize_t streamed(self, Py_ssize_t n) noexcept
