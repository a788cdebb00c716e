"""The PDD router on real vLLM engines: an OpenAI-compatible /v1/completions front serving each
request with P and RLD (datacenter A) and MD (datacenter B, across the WAN), using the same
policy functions as the simulator (pddbench/policy/pdd.py).

Design (no engine patch; vLLM's NixlConnector pull path and its prefix cache):
- P prefills with `do_remote_decode`; the decoder named in the returned kv_transfer_params pulls
  the prompt KV. NIXL frees P's blocks after the *first* consumer's read notification, so the
  dual path asks P twice: the second request is a prefix-cache hit on P (only the last partial
  block is recomputed) and gives MD its own lease on the same KV.
- RLD decodes from the first lease at once; its tokens stream to the client (eager tokens).
- MD pulls the prompt KV over the WAN with a one-token request; vLLM caches the pulled full
  blocks in MD's prefix cache (the "KV has arrived" moment).
- Extend-Decode Handoff: the router stops reading RLD (closing the stream aborts the request
  there) and sends MD prompt + the eager token ids as a normal request: the prompt part is a
  prefix-cache hit, the eager tokens are recomputed in one extend step, and MD decodes the rest.
  The client stream continues from MD; the cut is the last token forwarded, so nothing is
  duplicated or lost.
- Catch-Up: while RLD keeps decoding, MD replays the tokens produced so far in one-token extend
  requests (each caches their full blocks), so the final switch recomputes only a short tail.
- Singular flows never start MD's transfer; a relay that finishes first has MD's pull cancelled
  (policy.relay_finish_stops_wan_kv) or left to drain into MD's prefix cache.

Every response ends with a usage chunk that carries a `pdd` object (pipeline, handoff mode,
tokens per decoder, timings, bytes per link), which the replay client copies into the records.
Binds to loopback or a project namespace address only.

Modules: config (RouterConfig, Trip), stream (upstream calls), wan (WAN pull booking and
prediction), flow (the request flow), app (the HTTP front; `python -m pddbench.live.router`).
"""
