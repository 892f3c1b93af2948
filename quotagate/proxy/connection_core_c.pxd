# C types for connection_core.py, compiled as connection_core_c (quotagate/compiled.py).

cimport cython

from quotagate.proxy.flow_control_c cimport FlowControl
from quotagate.proxy.session_core_c cimport SessionCore

# FlowControl.settle's answers that the glue acts on (flow_control.py).
cdef int MUTED, REFUSED

cdef void _write(object transport, list queued) except *


cdef class ClientCore:
    cdef public SessionCore session
    cdef public FlowControl flow
    cdef public object transport
    cdef public UpstreamCore upstream
    cdef public object clock
    cdef public double last_activity

    @cython.locals(now=double)
    cpdef data_received(self, object data)
    @cython.locals(session=SessionCore, queued=list, state=int)
    cpdef flush(self, double now)


cdef class UpstreamCore:
    cdef public ClientCore client
    cdef public object transport
    cdef public FlowControl flow

    @cython.locals(client=ClientCore, now=double)
    cpdef data_received(self, object data)
