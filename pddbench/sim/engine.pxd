# Types for the compiled build of engine.py (Cython reads this beside the .py; Python ignores it):
# attribute access in C instead of by name; the per-kind counts a C array (14: engine.N_KINDS).
cimport cython


cdef class EventLoop:
    cdef public double now
    cdef public list _heap
    cdef public Py_ssize_t _seq
    cdef public Py_ssize_t events
    cdef Py_ssize_t _by_kind[14]
    cdef public Py_ssize_t stall_events

    @cython.locals(heap=list, events=Py_ssize_t, every=Py_ssize_t, t=double, kind=Py_ssize_t, last_t=double,
                   idle=Py_ssize_t, limit=Py_ssize_t)
    cpdef run(self, double until=*, on_progress=*)
