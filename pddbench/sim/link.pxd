# Types for the compiled build of link.py (Cython reads this beside the .py; Python ignores it).
cdef class Transfer:
    cdef public object nbytes, on_done, args
    cdef public double target, start_ms
    cdef public bint cancelled, done, queued


cdef class Link:
    cdef public object loop, profile, name, rate_gbps, rate_bytes_per_ms, delay_ms
    cdef public object _jitter, _schedule, _replay, _waiting
    cdef public list _heap
    cdef public bint fifo, _never_down
    cdef public Py_ssize_t _seq, active, _version, _outage_idx
    cdef public double service, _last_ms, bytes_sent
