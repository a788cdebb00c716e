# Types for the compiled build of prefill.py (Cython reads this beside the .py; Python ignores it).
cdef class PrefillJob:
    cdef public object req, on_done
    cdef public Py_ssize_t remaining, context


cdef class PrefillInstance:
    cdef public object loop, name, latency, cache, queue
    cdef public Py_ssize_t chunk_tokens, block_size, queued_tokens, steps
    cdef public bint pack_tail_chunks, busy
    cdef public double busy_ms
