# C types for flow_control.py, compiled as flow_control_c (quotagate/compiled.py): the session
# (session_core_c) and the glue (connection_core_c) cimport FlowControl to ask it with C calls.

cimport cython

cdef int READING, REFUSED, MUTED, HOLDING


cdef class FlowControl:
    cdef public double muted_until
    cdef public bint refused
    cdef public bint closed
    cdef public bint paused
    cdef bint _held_back
    cdef set _reasons
    cdef object _transport

    cpdef void mute(self, double until) noexcept
    cpdef bint muted(self, double now) noexcept
    cpdef void refuse(self) noexcept
    @cython.locals(state=int, held_back=bint)
    cpdef int settle(self, bint holding, double now) except -1
    cpdef void pause(self, object reason) except *
    cpdef void resume(self, object reason) except *
    @cython.locals(paused=bint)
    cdef void _apply(self) except *


cpdef FlowControl new_flow_control()
