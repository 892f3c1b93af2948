# The C side of buffers.py (read its docstring): cimported by the compiled walks, never compiled
# itself. `chars` takes any object the walks are given: bytes, a bytearray, or a contiguous memoryview
# of bytes (a slice of a read); the pointer lives as long as that object, which the caller holds.

cdef extern from *:
    """
    #include <string.h>

    static inline const unsigned char* quotagate_chars(PyObject* data) {
        if (PyBytes_CheckExact(data)) return (const unsigned char*)PyBytes_AS_STRING(data);
        if (PyMemoryView_Check(data)) {
            Py_buffer* view = PyMemoryView_GET_BUFFER(data);
            if (view->itemsize == 1 && PyBuffer_IsContiguous(view, 'C'))
                return (const unsigned char*)view->buf;
        } else if (PyByteArray_Check(data)) {
            return (const unsigned char*)PyByteArray_AS_STRING(data);
        } else if (PyBytes_Check(data)) {
            return (const unsigned char*)PyBytes_AS_STRING(data);
        }
        PyErr_Format(PyExc_TypeError, "expected bytes, a bytearray or a contiguous memoryview of bytes, not %.200s",
                     Py_TYPE(data)->tp_name);
        return NULL;
    }

    static inline const int* quotagate_ints(PyObject* data) {
        Py_buffer view;
        if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0) return NULL;
        const int* ints = (const int*)view.buf;
        PyBuffer_Release(&view);  /* the array is never resized while walked: its buffer stays put */
        return ints;
    }

    static inline void quotagate_copy(unsigned char* out, Py_ssize_t at, const unsigned char* source, Py_ssize_t start,
                                      Py_ssize_t stop) {
        memcpy(out + at, source + start, (size_t)(stop - start));
    }

    static inline int quotagate_equal(const unsigned char* buf, Py_ssize_t start, const unsigned char* other_buf,
                                      Py_ssize_t other, Py_ssize_t size) {
        return memcmp(buf + start, other_buf + other, (size_t)size) == 0;
    }
    """
    const unsigned char* chars "quotagate_chars" (object data) except NULL
    const int* ints "quotagate_ints" (object data) except NULL
    void copy "quotagate_copy" (unsigned char* out, Py_ssize_t at, const unsigned char* source, Py_ssize_t start, Py_ssize_t stop) noexcept
    bint equal "quotagate_equal" (const unsigned char* buf, Py_ssize_t start, const unsigned char* other_buf, Py_ssize_t other, Py_ssize_t size) noexcept
