"""Builds a deployment's instances and links from a scenario, routes requests, prices the hardware."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from pddbench.cache import PrefixCache
from pddbench.core.errors import UserError
from pddbench.schema.scenario import Pool, Scenario
from pddbench.sim.decode import CoreShare, DecodeInstance
from pddbench.sim.engine import EventLoop
from pddbench.sim.latency import Calibrated, LatencyModel, Roofline, ScaledDecode
from pddbench.sim.link import Link
from pddbench.sim.prefill import PrefillInstance


def _calibrated(sc: Scenario, _pool: Pool) -> LatencyModel:
    if not sc.latency.calibration_csv:
        raise UserError("latency.kind 'calibrated' needs latency.calibration_csv")
    return Calibrated.fit_csv(sc.latency.calibration_csv)


def _roofline(sc: Scenario, pool: Pool) -> LatencyModel:
    chip, m = sc.chips[pool.chip], sc.model
    assert m is not None
    return Roofline(
        chips=pool.chips_per_instance, peak_flops=chip.peak_tflops * 1e12, mem_bw=chip.memory_bw_tbps * 1e12,
        total_params=m.params_total_b * 1e9, active_params=m.params_active_b * 1e9,
        bytes_per_param=m.weight_bytes_per_param, kv_bytes_per_token=m.kv_bytes_per_token,
        layers=m.layers, hidden=m.hidden_size, cfg=sc.latency,
        experts_total=m.experts_total or 0, experts_active=m.experts_active or 0,
        shared_params=m.moe_shared_params_b() * 1e9 if m.experts_total else 0.0,
        interconnect_bw=chip.interconnect_gbps * 1e9 / 8,
        flops_per_token=m.flops_per_token or 0.0, attn_flops_per_pair=m.attn_flops_per_pair or 0.0,
        state_bytes_per_seq=m.fixed_state_bytes + m.sliding_window_tokens * m.sliding_kv_bytes_per_token)


LATENCY_MODELS: dict[str, Callable[[Scenario, Pool], LatencyModel]] = {"roofline": _roofline, "calibrated": _calibrated}


def latency_model(sc: Scenario, pool: Pool) -> LatencyModel:
    return LATENCY_MODELS[sc.latency.kind](sc, pool)


def kv_capacity_tokens(sc: Scenario, pool: Pool, role: str) -> int:
    chip, m = sc.chips[pool.chip], sc.model
    assert m is not None
    weights = m.params_total_b * 1e9 * m.weight_bytes_per_param
    free = pool.chips_per_instance * chip.memory_gb * 1e9 * pool.kv_memory_fraction - weights
    if free <= 0:
        raise UserError(
            f"deployment.{role}: the model's weights ({weights / 1e9:.0f} GB) do not fit in "
            f"{pool.chips_per_instance} x {pool.chip} ({chip.memory_gb:g} GB each, "
            f"kv_memory_fraction {pool.kv_memory_fraction}); raise chips_per_instance")
    return int(free // m.kv_bytes_per_token)


def hardware_cost_per_hour(sc: Scenario) -> float:
    d = sc.deployment
    assert d is not None
    cost = 0.0
    for pool in d.pools().values():
        cost += pool.instances * pool.chips_per_instance * sc.chips[pool.chip].price_per_hour
    if d.kind in CROSSES_WAN:
        cost += sc.network.wan_lines * sc.network.wan_line_price_per_hour
    return round(cost, 6)


CROSSES_WAN = ("cross_dc_pd", "pdd", "prfaas")  # the kinds whose KV crosses the WAN: they pay its lines


@dataclass
class Cluster:
    loop: EventLoop
    prefill: list[PrefillInstance]
    rdma: list[Link]            # one per prefill instance (its NICs)
    decode: list[DecodeInstance]  # D (PD baselines) or MD (pdd)
    relay: list[DecodeInstance]
    wan: Link
    # how many more sequences than the least loaded decoder an instance may hold and still win a
    # request on its cache match (deployment.decode_routing_slack_seqs)
    decode_slack: int
    remote_prefill: list[PrefillInstance]  # prfaas: the prefill cluster across the WAN

    def pick_prefill(self, hash_ids: list[int], input_tokens: int, pool: list[PrefillInstance] | None = None
                     ) -> tuple[int, int]:
        """Least work first, counting cache hits: queued tokens + this request's uncached part,
        among `pool` (default: P). Returns (the instance's index, its cached blocks), so the match
        is not redone."""
        best, best_cost, best_blocks = 0, float("inf"), 0
        p: PrefillInstance  # typed for the compiled build (attributes read in C)
        for i, p in enumerate(self.prefill if pool is None else pool):
            if p.queued_tokens >= best_cost:
                continue  # its cost is at least its queue: it cannot win, so skip the match
            # p.match_tokens(hash_ids, input_tokens), written out: this loop runs per request
            blocks = 0 if p.cache is None else p.cache.match(hash_ids)
            cost = p.queued_tokens + input_tokens - min(blocks * p.block_size, input_tokens)
            if cost < best_cost:
                best, best_cost, best_blocks = i, cost, blocks
        return best, best_blocks

    def pick_decode(self, pool: list[DecodeInstance], hash_ids: list[int], input_tokens: int) -> tuple[DecodeInstance, int]:
        """Cache-aware among the lightly loaded: the longest prefix match among instances whose
        load is within `decode_slack` sequences of the least loaded one (ties: lower load, then
        lower index). Returns (the instance, its cached prompt tokens).

        The slack trades cache affinity (fewer KV bytes to ship) against load balance (hot
        decoders set the P90 TPOT). The default, 16, was measured on paper/same-dc-pd and
        paper/pdd (2000 requests, before the MoE expert-coverage model), throughput within SLA
        in req/s for slack 4 / 16 / 64: same-dc-pd with TPOT <= 80 ms 11.94 / 11.00 / 8.06;
        pdd with the shipped SLA 10.00 / 11.31 / 11.63 (same-dc-pd with the shipped SLA: 20.6
        for all). 16 is within 8% of the best on both; the old max_batch // 4 = 64 cost the
        baseline 32%."""
        max_load = min([d.load for d in pool]) + self.decode_slack
        best, key = pool[0], None
        d: DecodeInstance  # typed for the compiled build (attributes read in C)
        for d in pool:
            if d.load > max_load:
                continue
            # d.match_tokens(hash_ids, input_tokens), written out: this loop runs per request
            hit = 0 if d.cache is None else min(d.cache.match(hash_ids) * d.block_size, input_tokens)
            k = (-hit, d.load)
            if key is None or k < key:
                best, key = d, k
        assert key is not None  # the least loaded instance is always within the slack
        return best, -key[0]


def build_cluster(sc: Scenario, loop: EventLoop) -> Cluster:
    d, bs = sc.deployment, sc.workload.block_size
    if d is None or sc.model is None:
        raise UserError("a simulated run needs 'model', 'chips' and 'deployment' in the scenario")

    def cache_for(pool: Pool, role: str) -> PrefixCache | None:
        return PrefixCache(kv_capacity_tokens(sc, pool, role) // bs) if pool.prefix_cache else None

    def prefills(pool: Pool | None, role: str, tag: str) -> list[PrefillInstance]:
        if pool is None:
            return []
        return [PrefillInstance(loop, f"{tag}{i}", latency_model(sc, pool), pool.chunk_tokens, cache_for(pool, role),
                                bs, pool.pack_tail_chunks) for i in range(pool.instances)]

    prefill = prefills(d.prefill, "prefill", "P")
    remote_prefill = prefills(d.remote_prefill, "remote_prefill", "PR") if d.kind == "prfaas" else []
    rdma_profile = sc.network.rdma_profile()
    rdma = [Link(loop, rdma_profile, f"rdma{i}") for i in range(d.prefill.instances)]

    def decoders(pool: Pool | None, role: str, tag: str) -> list[DecodeInstance]:
        if pool is None:
            return []
        lat, cap = latency_model(sc, pool), kv_capacity_tokens(sc, pool, role)
        return [DecodeInstance(loop, f"{tag}{i}", lat, cap, pool.max_batch_seqs, cache_for(pool, role), bs)
                for i in range(pool.instances)]

    decode = decoders(d.decode, "decode", "D") if d.kind != "pdd" else decoders(d.main, "main", "MD")
    relay = decoders(d.relay, "relay", "RLD") if d.kind == "pdd" else []
    for r in relay:
        r.cache = None  # the relay keeps no prefix cache: it gets every prompt's KV over RDMA
        if sc.twin_calibration.relay_step_factor != 1.0:
            r.latency = ScaledDecode(r.latency, sc.twin_calibration.relay_step_factor)
    pools = {"decode": decode, "main": decode, "relay": relay}
    shares: dict[tuple[str, int], CoreShare] = {}
    for role, pool in d.pools().items():
        if (group := sc.twin_calibration.core_group_of(role)) is not None and role in pools:
            for i, inst in enumerate(pools[role]):
                inst.core = shares.setdefault((group, i), CoreShare(sc.twin_calibration.core_shared_step_factor))
                inst.core.members.append(inst)
    wan = Link(loop, sc.network.wan_profile(), "wan", sc.network.wan_lines)
    return Cluster(loop, prefill, rdma, decode, relay, wan, d.decode_routing_slack_seqs, remote_prefill)
