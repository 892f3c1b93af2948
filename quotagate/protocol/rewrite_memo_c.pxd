# C types for rewrite_memo.py, compiled as rewrite_memo_c (quotagate/compiled.py).

cimport cython

cdef int HEADER_VERSIONS

cdef class RewriteMemo:
    cdef public object rewrite
    cdef public int api_key
    cdef public Py_ssize_t max_entries, max_bytes, max_body_bytes, held_bytes, hits
    cdef public object entries
    cdef public list header_flexible

    @cython.locals(flexible=int)
    cdef Py_ssize_t _body_offset(self, object frame, int version) except -1

    @cython.locals(body_offset=Py_ssize_t, body=bytes)
    cpdef object rewritten(self, object frame, int version, object cluster)

cdef bint _replay(object entry, object cluster) except -1

@cython.locals(header=bytes)
cdef bytes _framed(object frame, Py_ssize_t body_offset, bytes body)
