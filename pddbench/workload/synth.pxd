# Types for the compiled build of synth.py (Cython reads this beside the .py; Python ignores it):
# the generator's attributes, its methods' locals and calls between them in C instead of by name.
cimport cython


@cython.final
cdef class _Generator:
    cdef public object cfg, rng
    cdef public set seen
    cdef public Py_ssize_t next_id, emitted, next_sid
    cdef public list counts, sys_ids, targeted

    cpdef list _new_ids(self, Py_ssize_t n)
    @cython.locals(n=Py_ssize_t)
    cpdef Py_ssize_t _cached_blocks(self, list ids)
    @cython.locals(hundred_cached=Py_ssize_t, shortest=Py_ssize_t, longest=Py_ssize_t, ranges=dict,
                   b=Py_ssize_t, l_max=Py_ssize_t, l_min=Py_ssize_t)
    cpdef dict _length_ranges(self, Py_ssize_t cached_tok, Py_ssize_t context_tok)
    @cython.locals(counts=list, n=Py_ssize_t, deficits=list, i_behind=Py_ssize_t, under=list)
    cpdef _choose_bucket(self, list feasible)
    @cython.locals(x=double)
    cpdef Py_ssize_t _output_len(self)
    @cython.locals(n_blocks=Py_ssize_t, reuse=list, ids=list, hit=Py_ssize_t)
    cpdef _emit(self, ts, Py_ssize_t input_len, Py_ssize_t out_len, list prefix, sid, turn)
    @cython.locals(bs=Py_ssize_t, sys_ids=list, prefix=list, cached_tok=Py_ssize_t, context_tok=Py_ssize_t,
                   ranges=dict, feasible=list, input_len=Py_ssize_t, lo=Py_ssize_t, hi=Py_ssize_t)
    cpdef _turn(self, ts, s)
    cpdef _advance(self, s, req)
    @cython.locals(cached_tok=Py_ssize_t, input_len=Py_ssize_t)
    cpdef _carried_turn(self, ts, s, list prefix, list sys_ids)
    cpdef tuple _low_hit_turn(self, Py_ssize_t cached_tok, Py_ssize_t context_tok, list prefix, list sys_ids)
    cpdef _singular(self, ts)
