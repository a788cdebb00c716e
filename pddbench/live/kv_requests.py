"""Request bodies for vLLM's NixlConnector in pull mode, shared by the PD proxy, the PDD router
and the engine calibration: P prefills and keeps the KV for a decoder, which pulls it when asked
with the kv_transfer_params P returned."""

from __future__ import annotations


def one_token_body(body: dict, **extra) -> dict:
    """A non-streaming one-token request (prefill, KV pull, extend step) derived from the client's."""
    out = {k: v for k, v in body.items() if k not in ("stream_options", "pdd")}
    return {**out, "stream": False, "max_tokens": 1, "min_tokens": 1, **extra}


def remote_decode_prefill_body(body: dict) -> dict:
    """P's part of a request: prefill, one token, KV kept for a remote decoder."""
    return one_token_body(body, kv_transfer_params={
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None})
