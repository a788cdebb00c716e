# Types for the compiled build of decode.py (Cython reads this beside the .py; Python ignores it):
# attribute access and calls between these methods in C instead of by name.
cdef class DecodeJob:
    cdef public object req, on_first, on_finish
    cdef public Py_ssize_t context, n_tokens, extend, start_step, finish_step, reserved
    cdef public double first_token_ms
    cdef public bint stopped


cdef class CoreShare:
    cdef public list members
    cdef public double step_factor


cdef class DecodeInstance:
    cdef public object loop, name, latency, cache, waiting, running, core, _busy_since
    cdef public Py_ssize_t kv_capacity_tokens, max_batch, block_size, load, _seq, kv_used
    cdef public Py_ssize_t _sum_context, _sum_start, s0, _version, peak_batch, receiving
    cdef public list _finish_heap, _awaiting_first, _gap_steps, _gap_ms
    cdef public double t0, step_ms, busy_ms
