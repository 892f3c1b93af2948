# C types for connection_core.py, compiled as connection_core_c (quotagate/compiled.py).

cimport cython

from quotagate.proxy.session_core_c cimport SessionCore

cdef void _write(object transport, list queued) except *


cdef class ClientCore:
    cdef public SessionCore session
    cdef public object transport
    cdef public UpstreamCore upstream
    cdef public object reading
    cdef public object clock
    cdef public double last_activity
    cdef public double muted_until

    @cython.locals(now=double)
    cpdef data_received(self, object data)
    @cython.locals(session=SessionCore, queued=list, muted_until=double)
    cpdef flush(self)


cdef class UpstreamCore:
    cdef public ClientCore client
    cdef public object transport
    cdef public object reading

    @cython.locals(client=ClientCore, now=double)
    cpdef data_received(self, object data)
