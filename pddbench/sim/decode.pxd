# Types for the compiled build of decode.py (Cython reads this beside the .py; Python ignores it):
# attribute access, the methods' locals and calls between these methods in C instead of by name
# (an untyped local costs a lookup by name per attribute; cpdef methods stay callable from Python).
cimport cython
from pddbench.sim.engine cimport EventLoop


@cython.final
cdef class DecodeJob:
    cdef public object req, on_first, on_finish
    cdef public Py_ssize_t context, n_tokens, extend, start_step, finish_step, reserved
    cdef public double first_token_ms
    cdef public bint stopped


cdef class CoreShare:
    cdef public list members
    cdef public double step_factor


@cython.final
cdef class DecodeInstance:
    cdef public EventLoop loop
    cdef public object name, latency, cache, waiting, running, core, _busy_since
    cdef public Py_ssize_t kv_capacity_tokens, max_batch, block_size, load, _seq, kv_used
    cdef public Py_ssize_t _sum_context, _sum_start, s0, _version, peak_batch, receiving
    cdef public list _finish_heap, _awaiting_first, _gap_steps, _gap_ms
    cdef public double t0, step_ms, busy_ms

    cpdef double _step_end_ms(self, Py_ssize_t step)
    @cython.locals(now=double, x=double, c=Py_ssize_t)
    cpdef tuple _boundary(self)
    cpdef double _share(self)
    cpdef bint busy_on_core(self)
    @cython.locals(t_b=double, s_b=Py_ssize_t, t0=double, s0=Py_ssize_t, step_ms=double, job=DecodeJob,
                   keep=list, finished=list, heap=list)
    cpdef tuple _sync(self)
    @cython.locals(n=Py_ssize_t, was_busy=bint, kv=Py_ssize_t)
    cpdef _new_epoch(self, double t_b, Py_ssize_t s_b, double pause_ms=*)
    cpdef _push_gap(self, Py_ssize_t step, double gap)
    @cython.locals(i=Py_ssize_t)
    cpdef double max_gap_since(self, Py_ssize_t step)
    @cython.locals(now=double, last=Py_ssize_t)
    cpdef Py_ssize_t produced_by_now(self, DecodeJob job)
    cpdef bint _can_admit(self)
    @cython.locals(t_b=double, s_b=Py_ssize_t, finished=list, job=DecodeJob, pause=double, extend=Py_ssize_t,
                   n_admitted=Py_ssize_t, n=Py_ssize_t, kv=Py_ssize_t, t=double)
    cpdef tuple _change(self, DecodeJob stop=*)
    cpdef _release(self, DecodeJob job)
    cpdef submit(self, DecodeJob job)
    @cython.locals(produced=Py_ssize_t, t_b=double, s_b=Py_ssize_t)
    cpdef tuple stop(self, DecodeJob job)
    @cython.locals(n=Py_ssize_t, kv=Py_ssize_t, pause=double, t_b=double, s_b=Py_ssize_t, finished=list)
    cpdef double extend_pause(self, Py_ssize_t tokens)
    cpdef _on_decode_finish(self, Py_ssize_t version)
