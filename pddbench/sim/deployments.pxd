# Types for the compiled build of deployments.py (Cython reads this beside the .py; Python ignores
# it): the request, decoder, job and transfer types cimported, so the annotations in deployments.py
# type those arguments and the relay state is a C struct (their attributes read in C, not by name).
cimport cython
from pddbench.sim.decode cimport DecodeInstance, DecodeJob
from pddbench.sim.link cimport Transfer
from pddbench.sim.request cimport SimRequest


@cython.final
cdef class _RelayState:
    cdef public SimRequest req
    cdef public DecodeInstance md, rld
    cdef public DecodeJob job
    cdef public Transfer wan_tr
    cdef public Py_ssize_t handed, rounds
    cdef public double last_relay_token_ms
    cdef public bint skip_relay


cpdef _pull_done(DecodeInstance into, on_arrival, tuple args)
cpdef _first_token(DecodeJob job)
cpdef _submit(DecodeInstance inst, DecodeJob job)
