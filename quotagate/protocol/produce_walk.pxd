# The usual produce response's walk, for the session's fast lane to call without a Python call.

cdef Py_ssize_t usual_throttle_offset(const unsigned char* buf, Py_ssize_t length, Py_ssize_t pos, int version) noexcept
