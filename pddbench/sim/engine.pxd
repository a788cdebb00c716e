# Types for the compiled build of engine.py (Cython reads this beside the .py; Python ignores it):
# attribute access in C instead of by name.
cdef class EventLoop:
    cdef public double now
    cdef public list _heap
    cdef public Py_ssize_t _seq
    cdef public Py_ssize_t events
