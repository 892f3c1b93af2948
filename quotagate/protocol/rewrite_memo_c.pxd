# C types for rewrite_memo.py, compiled as rewrite_memo_c (quotagate/compiled.py).

cimport cython

from quotagate.protocol cimport buffers

cdef int HEADER_VERSIONS


@cython.final
cdef class _Rewritten:
    cdef readonly object body
    cdef readonly tuple advertised, topics
    cdef readonly Py_ssize_t size, body_offset
    cdef readonly bytes prefix

cdef class RewriteMemo:
    cdef public object rewrite
    cdef public int api_key
    cdef public Py_ssize_t max_entries, max_bytes, max_body_bytes, held_bytes, hits
    cdef public object entries
    cdef public list header_flexible
    cdef public _Rewritten last
    cdef public int last_version
    cdef public bytes last_body

    @cython.locals(flexible=int)
    cdef Py_ssize_t _body_offset(self, object frame, int version) except -1

    @cython.locals(body_offset=Py_ssize_t, size=Py_ssize_t, body=bytes, last_body=bytes, entry=_Rewritten)
    cpdef object rewritten(self, object frame, int version, object cluster)
    cdef int _used(self, object entry, int version, bytes body) except -1

cdef bint _replay(_Rewritten entry, object cluster) except -1

@cython.locals(header=bytes)
cdef bytes _framed(object frame, Py_ssize_t body_offset, bytes body)
