# Types for the compiled build of prefill.py (Cython reads this beside the .py; Python ignores it):
# attribute access, the methods' locals and calls between these methods in C instead of by name.
cimport cython
from pddbench.sim.engine cimport EventLoop


@cython.final
cdef class PrefillJob:
    cdef public object req, on_done, on_start
    cdef public Py_ssize_t remaining, context


@cython.final
cdef class PrefillInstance:
    cdef public EventLoop loop
    cdef public object name, latency, cache, queue
    cdef public Py_ssize_t chunk_tokens, block_size, queued_tokens, steps
    cdef public bint pack_tail_chunks, busy
    cdef public double busy_ms

    @cython.locals(cached=Py_ssize_t, computed=Py_ssize_t)
    cpdef Py_ssize_t submit(self, req, on_done, hit_blocks=*, on_start=*)
    cpdef submit_recompute(self, req, Py_ssize_t computed, on_done, on_start=*)
    @cython.locals(budget=Py_ssize_t, tokens=Py_ssize_t, attn=double, pieces=list, job=PrefillJob,
                   take=Py_ssize_t, is_tail=bint, step_ms=double)
    cpdef _step(self)
    @cython.locals(job=PrefillJob, take=Py_ssize_t)
    cpdef _on_prefill_step(self, list pieces)
