"""Request flows of the deployments, on a built Cluster.

- same_dc_pd / cross_dc_pd: P prefills, the decode side's missing KV goes over RDMA (same DC)
  or the WAN (cross DC), D decodes. TTFT waits for the transfer.
- pdd: P prefills; the shared policy picks P->MD (KV over the WAN, MD decodes) or P->RLD->MD
  (KV to the relay over RDMA and to MD over the WAN in parallel; the relay decodes at once and
  hands over to MD with Extend-Decode Handoff once MD has the prompt KV), filters singular flows,
  and picks One-Shot or Catch-Up.
- prfaas (Prefill-as-a-Service): the shared policy (policy/prfaas.py) prefills a request in the
  local PD cluster (P, KV over RDMA to D) or, when its uncached length is long and the line has
  room, in the remote prefill cluster, whose KV streams to D over the WAN layer by layer while it
  is computed.
"""

from __future__ import annotations

from pddbench.policy import pdd as policy
from pddbench.policy import prfaas
from pddbench.schema.scenario import Scenario
from pddbench.sim.cluster import Cluster
from pddbench.sim.decode import DecodeInstance, DecodeJob
from pddbench.sim.engine import (CATCH_UP_ROUND, CATCH_UP_TOKENS, HANDOFF, KV_ARRIVED, KV_AT_BUSY_DECODER,
                                 KV_STREAMED, MD_KV_ARRIVED, PULL_START, RELAY_KV_ARRIVED)
from pddbench.sim.link import Transfer
from pddbench.sim.request import SimRequest


class Deployment:
    def __init__(self, sc: Scenario, cluster: Cluster):
        self.sc, self.c, self.loop = sc, cluster, cluster.loop
        assert sc.model is not None and sc.deployment is not None
        self.kv_bytes_per_token = sc.model.kv_bytes_per_token
        self.window_tokens = sc.model.sliding_window_tokens
        self.window_bytes_per_token = sc.model.sliding_kv_bytes_per_token
        self.fixed_state_bytes = sc.model.fixed_state_bytes
        self.kv_block_tokens = sc.deployment.kv_block_tokens
        self.kind = sc.deployment.kind
        self.pull_at_step = sc.twin_calibration.kv_pull_at_decode_step
        self.busy_extra_ms = sc.twin_calibration.kv_pull_busy_extra_ms
        self.relay_busy_extra_ms = sc.twin_calibration.kv_pull_relay_busy_extra_ms

    def transfer_bytes(self, tokens: int) -> int:
        return policy.kv_transfer_bytes(tokens, self.kv_bytes_per_token, self.kv_block_tokens, self.window_tokens,
                                        self.window_bytes_per_token, self.fixed_state_bytes)

    def when_decoder_pulls(self, into: DecodeInstance, start, *args) -> None:
        """Call start(*args) when `into` would begin a pull: at once, or with
        `kv_pull_at_decode_step` when `into` next runs its scheduler (the pull is its own work)."""
        at = into.next_step_end_ms() if self.pull_at_step else self.loop.now
        if at > self.loop.now:
            self.loop.schedule(PULL_START, at, start, *args)
        else:
            start(*args)

    def pull(self, into: DecodeInstance, link, nbytes: int, arrival: int, on_arrival, *args) -> None:
        """Send `nbytes` of KV over `link` to `into` when it begins the pull; on_arrival(*args) is
        the event of kind `arrival` (engine.py) once the KV is there."""
        self.when_decoder_pulls(into, self._send, into, link, nbytes, arrival, on_arrival, args)

    def _send(self, into: DecodeInstance, link, nbytes: int, arrival: int, on_arrival, args: tuple):
        """Start the transfer now; a decoder that is running a batch receives it
        `kv_pull_busy_extra_ms` later (a relay: `kv_pull_relay_busy_extra_ms`). Returns the link's
        Transfer."""
        extra_ms = self.relay_busy_extra_ms if into in self.c.relay else self.busy_extra_ms
        if into.core is not None:  # the pull keeps a core-sharing decoder busy until its KV is in
            into.pull_started()
            on_arrival, args = _pull_done, (into, on_arrival, args)
        if extra_ms and into.running:
            return link.send_as(KV_AT_BUSY_DECODER, nbytes, self._kv_at_busy_decoder, extra_ms, arrival, on_arrival, args)
        return link.send_as(arrival, nbytes, on_arrival, *args)

    def _kv_at_busy_decoder(self, extra_ms: float, arrival: int, on_arrival, args: tuple) -> None:
        self.loop.schedule_after(arrival, extra_ms, on_arrival, *args)

    # -- shared steps ---------------------------------------------------------------------------
    def arrive(self, req: SimRequest) -> None:
        i, hit_blocks = self.c.pick_prefill(req.hash_ids, req.input_tokens)
        req.p_cached_tokens = self.c.prefill[i].submit(req, lambda r: self.prefilled(r, i), hit_blocks)

    def prefilled(self, req: SimRequest, p_index: int) -> None:
        raise NotImplementedError


class PD(Deployment):
    """Same-DC or naive cross-DC prefill/decode disaggregation."""

    def prefilled(self, req: SimRequest, p_index: int) -> None:
        req.prefill_end_ms = self.loop.now
        d, req.decode_cached_tokens = self.c.pick_decode(self.c.decode, req.hash_ids, req.input_tokens)
        nbytes = self.transfer_bytes(req.input_tokens - req.decode_cached_tokens)
        if self.kind == "cross_dc_pd":
            req.wan_kv_bytes = nbytes
            self.pull(d, self.c.wan, nbytes, KV_ARRIVED, self._kv_arrived, req, d, True)
        else:
            req.rdma_kv_bytes = nbytes
            self.pull(d, self.c.rdma[p_index], nbytes, KV_ARRIVED, self._kv_arrived, req, d, False)

    def _kv_arrived(self, req: SimRequest, d: DecodeInstance, over_wan: bool) -> None:
        if over_wan:
            req.wan_kv_ms = self.loop.now - req.prefill_end_ms
        job = DecodeJob(req, req.input_tokens, req.output_tokens, 0, _first_token, _finished_on(d))
        _submit(d, job)


class PrfaaS(PD):
    """Selective offload of long prefills to a remote prefill cluster (Qin et al., arXiv 2604.15039)."""

    def arrive(self, req: SimRequest) -> None:
        i, hit_blocks = self.c.pick_prefill(req.hash_ids, req.input_tokens)
        local = self.c.prefill[i]
        uncached_local = req.input_tokens - min(hit_blocks * local.block_size, req.input_tokens)
        pol = self.sc.policy
        reason = "short_uncached"
        if uncached_local > pol.offload_threshold_tokens:  # only then is the line's prediction needed
            _d, d_cached = self.c.pick_decode(self.c.decode, req.hash_ids, req.input_tokens)
            reason = prfaas.choose_prefill_site(
                uncached_local_tokens=uncached_local, threshold_tokens=pol.offload_threshold_tokens,
                predicted_wan_kv_ms=self.c.wan.predict_ms(self.transfer_bytes(req.input_tokens - d_cached)),
                ttft_sla_ms=self.sc.sla.ttft_ms, wan_budget_fraction=pol.offload_wan_budget_fraction)
        req.offload_reason = reason
        if reason != "offloaded":
            req.p_cached_tokens = local.submit(req, lambda r: self.prefilled(r, i), hit_blocks)
            return
        req.pipeline = "pr_d"
        j, remote_blocks = self.c.pick_prefill(req.hash_ids, req.input_tokens, self.c.remote_prefill)
        st = _StreamState(req)
        req.p_cached_tokens = self.c.remote_prefill[j].submit(req, self._remote_prefilled(st), remote_blocks,
                                                              self._stream_start(st))

    def _stream_start(self, st: "_StreamState"):
        def start(req: SimRequest) -> None:
            # the decoder is chosen as the first layer's KV leaves: it is where the stream goes
            st.d, req.decode_cached_tokens = self.c.pick_decode(self.c.decode, req.hash_ids, req.input_tokens)
            st.nbytes = req.wan_kv_bytes = self.transfer_bytes(req.input_tokens - req.decode_cached_tokens)
            st.sent_ms = self.loop.now
            self.c.wan.send_as(KV_STREAMED, st.nbytes, self._kv_streamed, st)
        return start

    def _remote_prefilled(self, st: "_StreamState"):
        def done(req: SimRequest) -> None:
            req.prefill_end_ms = self.loop.now
            layers = self.sc.model.layers if self.sc.model is not None else 1
            st.last_layer_ms = self.c.wan.predict_ms(st.nbytes / max(1, layers))
            if st.line_done_ms >= 0:
                self._arrive_streamed(st)
        return done

    def _kv_streamed(self, st: "_StreamState") -> None:
        st.line_done_ms = self.loop.now
        if st.req.prefill_end_ms >= 0:
            self._arrive_streamed(st)

    def _arrive_streamed(self, st: "_StreamState") -> None:
        at = prfaas.streamed_kv_arrival_ms(prefill_end_ms=st.req.prefill_end_ms, line_done_ms=st.line_done_ms,
                                           last_layer_ms=st.last_layer_ms)
        self.loop.schedule(KV_ARRIVED, max(at, self.loop.now), self._streamed_kv_arrived, st)

    def _streamed_kv_arrived(self, st: "_StreamState") -> None:
        req = st.req
        req.wan_kv_ms = self.loop.now - st.sent_ms
        _submit(st.d, DecodeJob(req, req.input_tokens, req.output_tokens, 0, _first_token, _finished_on(st.d)))


class _StreamState:
    __slots__ = ("req", "d", "nbytes", "sent_ms", "line_done_ms", "last_layer_ms")

    def __init__(self, req: SimRequest):
        self.req = req
        self.d: DecodeInstance | None = None
        self.nbytes = 0
        self.sent_ms = self.line_done_ms = -1.0
        self.last_layer_ms = 0.0


class PDD(Deployment):
    def prefilled(self, req: SimRequest, p_index: int) -> None:
        now = req.prefill_end_ms = self.loop.now
        pol, sla = self.sc.policy, self.sc.sla
        md, req.decode_cached_tokens = self.c.pick_decode(self.c.decode, req.hash_ids, req.input_tokens)
        uncached = req.input_tokens - req.decode_cached_tokens
        wan_bytes = self.transfer_bytes(uncached)
        # The relay a relay path would use: the least loaded (the relay holds no cache).
        rld = min(self.c.relay, key=lambda r: (r.load, r.name))
        pipeline = policy.choose_pipeline(
            predicted_wan_kv_ms=self.c.wan.predict_ms(wan_bytes), ttft_sla_ms=sla.ttft_ms,
            budget_fraction=pol.relay_ttft_budget_fraction, relay_only_ablation=pol.relay_only_pipeline,
            relay_utilisation=rld.pressure(), relay_busy_fraction=pol.relay_busy_fraction)
        req.pipeline = pipeline
        if pipeline == "p_md":
            req.wan_kv_bytes = wan_bytes
            self.pull(md, self.c.wan, wan_bytes, KV_ARRIVED, self._kv_arrived_at_md, req, md, now)
            return
        # Relay path: the KV goes to that relay over RDMA.
        req.rdma_kv_bytes = self.transfer_bytes(req.input_tokens)
        state = _RelayState(req, md, rld)
        singular = pol.singular_filter and policy.is_singular_flow(
            input_tokens=req.input_tokens, uncached_tokens=uncached, max_output_tokens=req.output_tokens,
            min_input_tokens=pol.singular_min_input_tokens, max_output=pol.singular_max_output_tokens)
        if pipeline == "p_rld":
            req.decode_cached_tokens = 0
        elif singular:
            req.singular_flow = req.transfer_aborted = True
            req.transfer_abort_reason = "singular_flow"
            req.wan_kv_bytes_saved = wan_bytes
            req.decode_cached_tokens = 0
        else:
            req.wan_kv_bytes = wan_bytes
            if self.sc.twin_calibration.second_prefill_for_md:
                # MD's own lease: P recomputes the prompt's last engine block (vLLM always computes
                # at least the last token, and caches whole blocks only)
                tail = req.input_tokens - (req.input_tokens - 1) // self.kv_block_tokens * self.kv_block_tokens
                self.c.prefill[p_index].submit_recompute(
                    req, tail, lambda _r: self.when_decoder_pulls(md, self._start_md_pull, state, wan_bytes))
            else:
                self.when_decoder_pulls(md, self._start_md_pull, state, wan_bytes)
        self.pull(rld, self.c.rdma[p_index], req.rdma_kv_bytes, RELAY_KV_ARRIVED, self._relay_kv_arrived, state)

    def _start_md_pull(self, st: "_RelayState", wan_bytes: int) -> None:
        req = st.req
        if req.done and self.sc.policy.relay_finish_stops_wan_kv:  # the relay finished before MD's pull began
            req.transfer_aborted = True
            req.transfer_abort_reason = "relay_finish"
            req.wan_kv_bytes_saved = wan_bytes
            req.wan_kv_bytes -= wan_bytes
            return
        st.wan_tr = self._send(st.md, self.c.wan, wan_bytes, MD_KV_ARRIVED, self._md_kv_arrived, (st,))

    # -- P -> MD --------------------------------------------------------------------------------
    def _kv_arrived_at_md(self, req: SimRequest, md: DecodeInstance, sent_ms: float) -> None:
        req.wan_kv_ms = self.loop.now - sent_ms
        _submit(md, DecodeJob(req, req.input_tokens, req.output_tokens, 0, _first_token, _finished_on(md)))

    # -- P -> RLD -> MD -------------------------------------------------------------------------
    def _relay_kv_arrived(self, st: "_RelayState") -> None:
        req = st.req
        if req.done or st.skip_relay:
            return
        req.relay_start_ms = self.loop.now
        st.job = DecodeJob(req, req.input_tokens, req.output_tokens, 0, _first_token, self._relay_finished(st))
        _submit(st.rld, st.job)

    def _relay_finished(self, st: "_RelayState"):
        def done(job: DecodeJob, t: float) -> None:
            req = st.req
            req.max_itl_ms = max(req.max_itl_ms, st.rld.max_gap_since(job.start_step))
            req.relay_tokens = req.output_tokens
            req.relay_end_ms = req.finish_ms = t
            req.done = True
            if req.pipeline == "p_rld":
                req.handoff_mode = "none"
                return
            req.handoff_mode = "relay_finish"
            if st.wan_tr is not None and not st.wan_tr.done and self.sc.policy.relay_finish_stops_wan_kv:
                saved = int(self.c.wan.cancel(st.wan_tr))
                if st.md.core is not None:
                    st.md.pull_ended()  # a cancelled pull never arrives
                if saved > 0 or not st.wan_tr.done:
                    req.transfer_aborted = True
                    req.transfer_abort_reason = "relay_finish"
                    req.wan_kv_bytes_saved = saved
                    req.wan_kv_bytes -= saved
        return done

    def _md_kv_arrived(self, st: "_RelayState") -> None:
        req, pol = st.req, self.sc.policy
        req.wan_kv_ms = self.loop.now - req.prefill_end_ms
        if st.md.cache is not None:
            # The prompt's KV is on MD now and held there for the handoff (or kept once the relay
            # has finished): MD's radix cache has it from this moment, not from the request's end.
            st.md.cache.insert(req.hash_ids)
        if req.done or st.job is None:
            if st.job is None and not req.done:
                # The relay has not even been reached (RDMA slower than WAN): plain P->MD.
                st.skip_relay = True
                req.pipeline = "p_md"
                _submit(st.md, DecodeJob(req, req.input_tokens, req.output_tokens, 0, _first_token, _finished_on(st.md)))
            return
        pending = st.rld.produced_by_now(st.job)
        mode = policy.choose_handoff_mode(
            configured=pol.handoff_mode, pending_tokens=pending, threshold_tokens=pol.catch_up_threshold_tokens,
            relay_utilisation=st.rld.utilisation(), relay_busy_fraction=pol.relay_busy_fraction)
        req.handoff_mode = mode
        req.handoff_start_ms = self.loop.now
        if mode == "one_shot":
            self._final_switch(st)
        else:
            self._catch_up_round(st)

    def _catch_up_round(self, st: "_RelayState") -> None:
        req, pol = st.req, self.sc.policy
        if req.done:
            return
        pending = st.rld.produced_by_now(st.job) - st.handed
        if policy.catch_up_finished(pending_tokens=pending, batch_tokens=pol.catch_up_batch_tokens,
                                    rounds=st.rounds, max_rounds=pol.catch_up_max_rounds):
            self._final_switch(st)
            return
        st.rounds += 1
        nbytes = policy.handoff_message_bytes(pending)
        req.wan_token_id_bytes += nbytes
        self.c.wan.send_as(CATCH_UP_TOKENS, nbytes, self._catch_up_tokens_arrived, st, pending)

    def _catch_up_tokens_arrived(self, st: "_RelayState", tokens: int) -> None:
        if st.req.done:
            return
        st.handed += tokens
        pause = st.md.extend_pause(tokens)
        self.loop.schedule_after(CATCH_UP_ROUND, pause, self._catch_up_round, st)

    def _final_switch(self, st: "_RelayState") -> None:
        req = st.req
        produced, t_last = st.rld.stop(st.job)
        if req.done:
            return  # the relay's last step finished the request
        req.relay_tokens = produced
        req.relay_end_ms = self.loop.now
        req.max_itl_ms = max(req.max_itl_ms, st.rld.max_gap_since(st.job.start_step)) if produced > 1 else req.max_itl_ms
        st.last_relay_token_ms = t_last if produced else float("nan")
        remaining = produced - st.handed
        nbytes = policy.handoff_message_bytes(remaining)
        req.wan_token_id_bytes += nbytes
        self.c.wan.send_as(HANDOFF, nbytes, self._handoff_arrived, st, remaining)

    def _handoff_arrived(self, st: "_RelayState", extend: int) -> None:
        req = st.req
        n_left = req.output_tokens - req.relay_tokens
        job = DecodeJob(req, req.input_tokens + st.handed, n_left, extend, self._md_first(st), _finished_on(st.md))
        _submit(st.md, job)

    def _md_first(self, st: "_RelayState"):
        def first(job: DecodeJob) -> None:
            req = st.req
            req.md_first_ms = job.first_token_ms
            req.first_token(job.first_token_ms)
            if st.last_relay_token_ms == st.last_relay_token_ms:  # not NaN
                req.handoff_stall_ms = job.first_token_ms - st.last_relay_token_ms
        return first


class _RelayState:
    __slots__ = ("req", "md", "rld", "job", "wan_tr", "handed", "rounds", "last_relay_token_ms", "skip_relay")

    def __init__(self, req: SimRequest, md: DecodeInstance, rld: DecodeInstance):
        self.req, self.md, self.rld = req, md, rld
        self.job: DecodeJob | None = None
        self.wan_tr: Transfer | None = None
        self.handed = 0
        self.rounds = 0
        self.last_relay_token_ms = float("nan")
        self.skip_relay = False


def _pull_done(into: DecodeInstance, on_arrival, args: tuple) -> None:
    into.pull_ended()
    on_arrival(*args)


def _first_token(job: DecodeJob) -> None:
    job.req.first_token(job.first_token_ms)


def _finished_on(inst: DecodeInstance):
    def done(job: DecodeJob, t: float) -> None:
        req: SimRequest = job.req
        req.max_itl_ms = max(req.max_itl_ms, inst.max_gap_since(job.start_step))
        req.finish_ms = t
        req.done = True
    return done


def _submit(inst: DecodeInstance, job: DecodeJob) -> None:
    if job.reserved > inst.kv_capacity_tokens:
        job.req.failure_reason = f"kv_exceeds_{inst.name[:2].rstrip('0123456789')}_capacity"
        job.req.done = True
        return
    inst.submit(job)


# Deployment kinds the simulator runs; the schema refuses others (e.g. live-only colocated).
DEPLOYMENTS: dict[str, type[Deployment]] = {"same_dc_pd": PD, "cross_dc_pd": PD, "pdd": PDD, "prfaas": PrfaaS}


def make_deployment(sc: Scenario, cluster: Cluster) -> Deployment:
    assert sc.deployment is not None
    return DEPLOYMENTS[sc.deployment.kind](sc, cluster)
