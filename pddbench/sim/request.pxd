# Types for the compiled build of request.py (Cython reads this beside the .py; Python ignores it):
# a request's state as a C struct, so the deployments (which cimport it) read and write it in C.
cimport cython


@cython.final
cdef class SimRequest:
    cdef public Py_ssize_t request_id, session_id, turn, input_tokens, output_tokens
    cdef public Py_ssize_t p_cached_tokens, decode_cached_tokens, relay_tokens
    cdef public object hash_ids, pipeline, offload_reason, handoff_mode, transfer_abort_reason, failure_reason
    cdef public object rdma_kv_bytes, wan_kv_bytes, wan_token_id_bytes, wan_kv_bytes_saved
    cdef public double arrival_ms, prefill_start_ms, prefill_end_ms, first_token_ms, finish_ms, max_itl_ms
    cdef public double wan_kv_ms, handoff_start_ms, handoff_stall_ms, relay_start_ms, relay_end_ms, md_first_ms
    cdef public bint transfer_aborted, singular_flow, done

    cpdef first_token(self, double t)
