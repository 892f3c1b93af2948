# C types for wire_walk.py, compiled as wire_walk_c (quotagate/compiled.py).

cimport cython

from quotagate.protocol cimport buffers
from quotagate.protocol.produce_walk_c cimport _skip_tags, _uvarint, i32

cdef int OP_FIXED, OP_STRING, OP_BYTES, OP_ARRAY_FIXED, OP_ARRAY_STRING, OP_ARRAY_STRUCT, OP_STRUCT, STRIDE
cdef long MAX_STRING, MAX_ARRAY


@cython.final
cdef class Walk:
    cdef public object program
    cdef public bint flexible
    cdef public object frame
    cdef public Py_ssize_t end
    cdef public Py_ssize_t elements
    cdef public Py_ssize_t max_elements
    cdef public object limit_key
    cdef object _ops
    cdef const int* _op
    cdef const unsigned char* _buf

    cpdef Py_ssize_t message(self, Py_ssize_t pos) except -1
    cpdef Py_ssize_t after(self, Py_ssize_t pos, int at) except -1
    @cython.locals(ops="const int*", count=long, first=Py_ssize_t, kept_end=Py_ssize_t, index=long)
    cpdef tuple first_elements(self, Py_ssize_t pos, int array_at, long keep)
    cdef Py_ssize_t struct(self, Py_ssize_t pos, int start, int stop) except -1
    @cython.locals(at=int)
    cdef Py_ssize_t fields(self, Py_ssize_t pos, int start, int stop) except -1
    @cython.locals(ops="const int*", op=int, length=long, count=long, _i=long)
    cdef Py_ssize_t field(self, Py_ssize_t pos, int at) except -1
    @cython.locals(value=int)
    cdef int int16(self, Py_ssize_t pos, int at) except? -32769
    cdef long int32(self, Py_ssize_t pos, int at) except? -2147483649
    @cython.locals(length=long)
    cdef Py_ssize_t string_element(self, Py_ssize_t pos, int at) except -1
    @cython.locals(ops="const int*", value=long, count=long)
    cdef (long, Py_ssize_t) count(self, Py_ssize_t pos, int at) except *
    @cython.locals(after=Py_ssize_t)
    cdef Py_ssize_t tags(self, Py_ssize_t pos) except -1
    @cython.locals(
        ops="const int*", start=int, stop=int, count=long, index=long, at=int, spans="long long[:]",
        size=Py_ssize_t, out=bytearray, out_buf="unsigned char*", prefix_buf="const unsigned char*",
        suffix_buf="const unsigned char*", written=Py_ssize_t,
    )
    cpdef tuple echo(self, Py_ssize_t pos, int array_at, int field_at, bytes prefix, bytes suffix)
    @cython.locals(value=long, length=long)
    cdef (long, Py_ssize_t) _length(self, Py_ssize_t pos, int at) except *
    cdef str _name(self, int at)
    cdef str _where(self)
    cdef int _truncated(self, int at) except -1


@cython.locals(walk=Walk)
cpdef Py_ssize_t check(object cls, int version, object frame, Py_ssize_t body, Py_ssize_t max_elements=*, object limit_key=*) except -1
@cython.locals(
    walk=Walk, ops="const int*", topics_at=int, error_at=int, name_at=int, id_at=int, partitions_at=int, start=int,
    stop=int, count=long, found=list, _t=long, error=int, name_start=Py_ssize_t, name_end=Py_ssize_t,
    id_start=Py_ssize_t, partitions=long, at=int, _p=long, length=long, name_pos=Py_ssize_t,
)
cpdef tuple metadata_topics(object prog, object frame, Py_ssize_t pos)
@cython.locals(n=Py_ssize_t)
cpdef Py_ssize_t _put(unsigned char* out, Py_ssize_t at, const unsigned char* source, Py_ssize_t start, Py_ssize_t stop) noexcept
