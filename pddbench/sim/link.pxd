# Types for the compiled build of link.py (Cython reads this beside the .py; Python ignores it):
# attribute access, the methods' locals and calls between these methods in C instead of by name.
cimport cython
from pddbench.sim.engine cimport EventLoop


@cython.final
cdef class Transfer:
    cdef public object nbytes, on_done, args
    cdef public Py_ssize_t arrival
    cdef public double target, start_ms
    cdef public bint cancelled, done, queued


@cython.final
cdef class Link:
    cdef public EventLoop loop
    cdef public object profile, name, rate_gbps, rate_bytes_per_ms, delay_ms
    cdef public object _jitter, _schedule, _replay, _waiting
    cdef public list _heap
    cdef public bint fifo, _never_down
    cdef public Py_ssize_t _seq, active, _version, _outage_idx
    cdef public double service, _last_ms, bytes_sent

    @cython.locals(up=double, i=Py_ssize_t)
    cpdef double _uptime(self, double t0, double t1)
    @cython.locals(t=double, i=Py_ssize_t)
    cpdef double _time_after_uptime(self, double t0, double need)
    cpdef _skip_past_outages(self, double t)
    @cython.locals(now=double)
    cpdef _advance(self)
    @cython.locals(need_bytes=double, up_ms=double)
    cpdef _reschedule(self)
    @cython.locals(eps=double, tr=Transfer)
    cpdef _on_link_drain(self, Py_ssize_t version)
    cpdef _serve(self, Transfer tr)
    @cython.locals(tr=Transfer)
    cpdef _serve_next(self)
    cpdef _deliver(self, Transfer tr)
    cpdef _arrive(self, Transfer tr)
    cpdef double _jitter_ms(self)
