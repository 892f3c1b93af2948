# C types for response_walk.py, compiled as response_walk_c (quotagate/compiled.py).

cimport cython

from quotagate.protocol cimport buffers
cimport quotagate.protocol.wire_walk_c as wire_walk
from quotagate.protocol.produce_walk_c cimport _count, _string_length, i32
from quotagate.protocol.wire_walk_c cimport OP_ARRAY_STRING, STRIDE, Walk, _put

cdef int HOST_CHAR, HOST_START, _COLON, _DOT, _ZERO, _NINE, MAX_PORT_DIGITS, MAX_COMPARED
cdef bytes CHAR_CLASSES

cpdef bint holds_host_port(bytes data) except -1
@cython.locals(classes="const unsigned char*", started=bint, at=Py_ssize_t, c=int, digits=int, after=Py_ssize_t, kind=int)
cdef bint _holds_host_port(const unsigned char* buf, Py_ssize_t start, Py_ssize_t end) noexcept

@cython.locals(
    walk=Walk, ops="const int*", buf="const unsigned char*", host_at=int, port_at=int, array_start=Py_ssize_t,
    count=long, start=int, stop=int, addresses=list, known=dict, compared="long long[:]", made_edits=object, edits="long long[:]",
    made=Py_ssize_t, _e=long, node_id=long, error=int, node_start=Py_ssize_t, host_start=Py_ssize_t,
    port_end=Py_ssize_t, at=int, index=Py_ssize_t, distinct=Py_ssize_t, i=Py_ssize_t, length=long,
    host_pos=Py_ssize_t, array_end=Py_ssize_t,
)
cpdef tuple address_edits(object prog, object frame, Py_ssize_t pos, int array_at, int node_at, int error_at, bint rest)
cdef bint _same(const unsigned char* buf, Py_ssize_t start, Py_ssize_t end, Py_ssize_t other, Py_ssize_t other_end) noexcept

@cython.locals(
    walk=Walk, ops="const int*", buf="const unsigned char*", results_at=int, configs_at=int, name_at=int,
    value_at=int, sensitive_at=int, synonyms_at=int, synonym_name_at=int, synonym_value_at=int, longest=Py_ssize_t,
    lengths=bytearray,
    synonym_values=list, results=long, _r=long, at=int, configs=long, _c=long, names_address=bint,
    sensitive=int, value_start=Py_ssize_t, value_end=Py_ssize_t, sensitive_pos=Py_ssize_t, field_at=int,
    synonyms=long, _s=long, synonym_at=int, start=Py_ssize_t,
)
cpdef object config_edits(object prog, object frame, Py_ssize_t pos, frozenset address_names)

@cython.locals(length=long, pos=Py_ssize_t, buf="const unsigned char*")
cdef bint _names_address(
    Walk walk, Py_ssize_t start, int at, bint is_name, frozenset address_names, const unsigned char* lengths,
    Py_ssize_t longest
) except -1

@cython.locals(walk=Walk)
cpdef Py_ssize_t fields_end(object prog, object frame, Py_ssize_t pos, int start_at, int stop_at) except -1

@cython.locals(
    walk=Walk, ops="const int*", wanted=Py_ssize_t, wanted_ops=object, fields="const int[:]", stride=Py_ssize_t,
    array_start=Py_ssize_t, count=long, made_spans=object, spans="long long[:]", strings=bint, e=long,
    base=Py_ssize_t, k=Py_ssize_t, at=int,
)
cpdef tuple entry_spans(object prog, object frame, Py_ssize_t pos, int array_at, tuple field_ats)

@cython.locals(
    buf="const unsigned char*", end=Py_ssize_t, values=list, base=Py_ssize_t,
    at=Py_ssize_t, length=long, value=long, count=long, strings=bint, shorts=bint, ints=bint, counts=bint,
)
cpdef list field_values(object frame, const long long[:] spans, Py_ssize_t stride, Py_ssize_t k, int kind, bint flexible)

@cython.locals(
    end=Py_ssize_t, count=Py_ssize_t, size=Py_ssize_t, at=Py_ssize_t, i=Py_ssize_t, start=Py_ssize_t,
    stop=Py_ssize_t, out=bytearray, out_buf="unsigned char*", buf="const unsigned char*", written=Py_ssize_t, replacement_buf="const unsigned char*", body=Py_ssize_t,
)
cpdef bytes splice(object data, const long long[:] edits, list replacements, bint framed)
