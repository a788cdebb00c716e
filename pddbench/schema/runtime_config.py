"""Settings of each runtime, as parts of the scenario schema: the simulator's step-time model
(`latency:`), what the simulator's twin of a live run models of the live engines
(`twin_calibration:`) and the live runtime (`live:`). Pure data: no runtime code is imported
here, so the schema can be read (and validated) where neither the simulator nor vLLM is wanted."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, model_validator


class LatencyConfig(BaseModel):
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    kind: Literal["roofline", "calibrated"] = "roofline"
    compute_efficiency: float = Field(0.45, ge=1e-6, le=1, description="achieved / peak FLOPs")
    memory_efficiency: float = Field(0.7, ge=1e-6, le=1, description="achieved / peak memory bandwidth")
    prefill_overhead_ms: float = Field(4.0, ge=0, le=1e6, description="fixed cost per prefill step (scheduling, comms)")
    decode_overhead_ms: float = Field(3.0, ge=0, le=1e6, description="fixed cost per decode step")
    layer_overhead_us: float = Field(
        0.0, ge=0, le=1e6, description="fixed cost per layer per step: the small kernels (norms, rotary, "
        "activation, residual adds) and launches; measured 41 us on H100, 17 us on A100 (docs/models.md)")
    allreduce_latency_us: float = Field(
        0.0, ge=0, le=1e6, description="start-up time of each tensor-parallel all-reduce (2 per layer on more "
        "than one chip); measured 27 us on H100, 44 us on A100 (docs/models.md)")
    measured_chip: Literal["h100", "a100"] | None = Field(
        None, description="roofline: the real chip these terms were checked against (the scenario's chips are "
        "scaled from it); the reproduction's answer states that check's error (pddbench model check)")
    calibration_csv: str | None = Field(
        None, description="for kind=calibrated: CSV with phase,tokens,attn_pairs,batch,kv_tokens,step_ms (and optionally cached_tokens)")


DecodeRole = Literal["decode", "relay", "main"]


class TwinCalibration(BaseModel):
    """Simulator only: how the twin of a live run models what vLLM CPU does that the paper's
    deployments do not (pulls from the step loop, decoders sharing a core, P's second lease), and
    the timings `pddbench fidelity` measures on the run. Its defaults are the simulator's plain
    model (the paper scenarios set none of it); a scenario that sets no field leaves the section
    out of its saved scenario.yaml."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    kv_pull_at_decode_step: bool = Field(
        False, description="a decoder starts pulling a request's KV at the end of the step it is running "
        "(when its scheduler next runs), not at once: vLLM's NIXL consumer issues reads from its step loop. "
        "On in the live twins; off in the paper scenarios, which assume the article's push-style transfer")
    kv_pull_busy_extra_ms: float = Field(
        0.0, ge=0, le=1e6, description="a KV pull into a decoder (D or MD) that is running a batch arrives this much "
        "later (the receive shares the decoder's core with its steps); fidelity takes it from the run's "
        "kv_transfer_busy_check.csv")
    kv_pull_relay_busy_extra_ms: float = Field(
        0.0, ge=0, le=1e6, description="pdd: as kv_pull_busy_extra_ms, for a pull into a relay (RLD) that is running "
        "a batch; fidelity takes it from the busy check's rld_idle / rld_busy rows")
    core_groups: dict[str, list[DecodeRole]] = Field(
        default_factory=dict, description="decode pools that share compute, by group name (e.g. {decoders: [relay, "
        "main]}): instance i of each runs on the same core, and its busy instances divide it (as the OS "
        "time-slices engines pinned to one CPU core: live PDD's RLD and MD)")
    core_shared_step_factor: float = Field(
        2.0, ge=1, le=100, description="decode pools in a core group: how many times longer a decoder's step takes "
        "while one other decoder on its core is busy (running a batch or receiving a KV pull); k busy: "
        "1 + (factor - 1)(k - 1). 2 = fair time-slicing; fidelity takes it from the run's core_share_check.csv")
    relay_step_factor: float = Field(
        1.0, gt=0, le=100, description="pdd: the relay's decode steps take this many times the relay pool's latency "
        "model says; the PDD twin, whose step times are fitted to MD, takes the relay's own measured pace from "
        "the run's core_share_check.csv (its idle rows against the fit)")
    second_prefill_for_md: bool = Field(
        False, description="pdd: on the relay path MD's pull waits for a second prefill on P (a prefix hit "
        "recomputing the prompt's last engine block), as the live PDD router asks P twice because vLLM's NIXL "
        "frees P's blocks after the first read; that step also delays P's other prefills")

    @model_validator(mode="after")
    def _one_group_per_pool(self):
        seen: dict[str, str] = {}
        for group, roles in self.core_groups.items():
            for role in roles:
                if role in seen:
                    raise ValueError(f"core_groups: the {role} pool is in both '{seen[role]}' and '{group}' "
                                     "(a pool's instances share one core each)")
                seen[role] = group
        return self

    def core_group_of(self, role: str) -> str | None:
        """The core group the `role` pool is in, if any."""
        return next((group for group, roles in self.core_groups.items() if role in roles), None)


class AttachedEngine(BaseModel):
    """An engine that already runs (attach mode): pddbench checks it, sends to it, never stops it."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    url: str = Field(pattern=r"^http://[^/\s:]+(:[0-9]{1,5})?$", description=(
        "its OpenAI server, e.g. http://10.1.2.3:8000 (plain HTTP: pddbench's clients speak no TLS)"))
    kv_side_channel: str | None = Field(None, pattern=r"^[^\s:]+:[0-9]{1,5}$", description=(
        "HOST:PORT of its KV connector's side channel (NIXL handshake); needed for the roles that move KV "
        "(P, D, RLD, MD), checked to accept a connection"))

    @model_validator(mode="after")
    def _ports(self):
        for what, text in (("url", self.url), ("kv_side_channel", self.kv_side_channel)):
            port = (text or "").rpartition(":")[2]
            if text and port.isdigit() and not 0 < int(port) <= 65535 and (what != "url" or text.count(":") == 2):
                raise ValueError(f"{what} {text}: port {port} is not between 1 and 65535")
        return self


# The engines each live kind runs, by role, and the datacenter each role sits in (the live
# runtime's placement, pddbench/live/placement.py, builds the same roles in this order).
LIVE_ROLES: dict[str, dict[str, str]] = {"colocated": {"E0": "a"}, "same_dc_pd": {"P": "a", "D": "a"},
                                         "cross_dc_pd": {"P": "a", "D": "b"}, "pdd": {"P": "a", "RLD": "a", "MD": "b"}}


class VllmArgs(BaseModel):
    """The vLLM server arguments pddbench sets for an engine it starts."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    tensor_parallel_size: int | None = Field(None, ge=1, le=64, description="GPU engines: default the number of gpus")
    max_model_len: int = Field(8192, ge=16, le=10_000_000)
    gpu_memory_utilization: float | None = Field(None, gt=0, le=1, description="GPU engines: vLLM's memory fraction")
    enforce_eager: bool | None = Field(None, description="default: on for CPU engines (what vLLM CPU needs), off on GPU")
    extra_args: list[str] = Field(default_factory=list, description="any further vLLM flags, passed as given")


class KVConnector(BaseModel):
    """The engine's KV connector (the roles that move KV: P, D, RLD, MD)."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    name: Literal["NixlConnector"] = "NixlConnector"
    buffer_device: Literal["cpu", "cuda"] | None = Field(None, description="default: cpu on CPU engines, cuda on GPU")
    side_channel_port: int | None = Field(None, ge=1024, le=65535, description="NIXL handshake port; default "
                                          "live.port_base + 101 + the role's place (P 0, then D / RLD, MD)")


class EngineDecl(BaseModel):
    """One engine pddbench starts for a role (`live.engines`)."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    role: Literal["E0", "P", "D", "RLD", "MD"]  # ROLE_NAMES
    instances: int = Field(1, ge=1, le=16, description=(
        "engines of this role, alike (named P, P2, P3 ...; ports and side channels counted up from the first); "
        "several only for P and D of same_dc_pd / cross_dc_pd, which the PD proxy spreads requests over"))
    datacenter: Literal["a", "b"] = Field(description="where it runs: a (P and RLD), b (D across datacenters, MD); "
                                          "a same-datacenter kind has every engine in a")
    model: str | None = Field(None, min_length=1, description="path or name the engine loads; default live.model_dir "
                              "(unset: the tiny model); every role serves the same model")
    device: Literal["cpu", "gpu"] = "cpu"
    cpus: list[Annotated[int, Field(ge=0, le=4095)]] | None = Field(
        None, min_length=1, description="CPU engines: the cores the whole engine runs on (of this host's, checked "
        "where it starts)")
    gpus: list[Annotated[int, Field(ge=0, le=1023)]] | None = Field(
        None, min_length=1, description="GPU engines: device ids (CUDA_VISIBLE_DEVICES), each once")
    port: int | None = Field(None, ge=1024, le=65535, description="its OpenAI server's port; default live.port_base + "
                             "1 + the role's place (P 0, then D / RLD, MD)")
    vllm: VllmArgs = Field(default_factory=VllmArgs)
    kv_connector: KVConnector = Field(default_factory=KVConnector)
    env: dict[str, str] = Field(default_factory=dict, description="extra environment of the engine's processes")

    @model_validator(mode="after")
    def _devices(self):
        if self.device == "cpu" and self.gpus is not None:
            raise ValueError(f"{self.role}: gpus given for a cpu engine; set device: gpu")
        if self.device == "gpu":
            if self.cpus is not None:
                raise ValueError(f"{self.role}: cpus given for a gpu engine (GPU engines are placed by gpus)")
            if self.gpus is None:
                raise ValueError(f"{self.role}: a gpu engine needs gpus (device ids, e.g. [0])")
            tp = self.vllm.tensor_parallel_size
            if tp is not None and tp != len(self.gpus):
                raise ValueError(f"{self.role}: vllm.tensor_parallel_size {tp} but {len(self.gpus)} gpus; give one "
                                 "device per tensor-parallel rank")
            if len(set(self.gpus)) != len(self.gpus):
                raise ValueError(f"{self.role}: gpus {self.gpus} names a device twice")
        else:
            gpu_only = [k for k in ("gpu_memory_utilization", "tensor_parallel_size")
                        if getattr(self.vllm, k) is not None]
            if gpu_only:
                raise ValueError(f"{self.role}: vllm.{gpu_only[0]} is a GPU setting; this engine runs on cpu")
            if self.kv_connector.buffer_device == "cuda":
                raise ValueError(f"{self.role}: kv_connector.buffer_device cuda on a cpu engine; use cpu (or device: gpu)")
        return self


def check_engines(kind: str, engines: list[EngineDecl], port_base: int, model_dir: str | None) -> None:
    """A declared layout the kind can run: every role it needs once and no other, each in its
    datacenter, no two engines (or side channels) on one port; refused in one line."""
    need = LIVE_ROLES[kind]
    roles = [e.role for e in engines]
    for r in roles:
        if roles.count(r) > 1:
            raise ValueError(f"live.engines: role {r} is declared {roles.count(r)} times; the live fronts drive one "
                             "engine per role")
    if sorted(roles) != sorted(need):
        missing, extra = sorted(set(need) - set(roles)), sorted(set(roles) - set(need))
        raise ValueError(f"live.engines: a {kind} deployment runs {', '.join(need)}" + (
            f"; missing {', '.join(missing)}" if missing else "") + (f"; {', '.join(extra)} is not one of its roles"
                                                                       if extra else ""))
    for e in engines:
        if e.instances > 1 and not (kind in ("same_dc_pd", "cross_dc_pd") and e.role in ("P", "D")):
            raise ValueError(f"live.engines: {e.instances} instances of {e.role}; a {kind} deployment's front drives "
                             f"one {e.role} (several only for P and D of same_dc_pd / cross_dc_pd)")
        if e.datacenter != need[e.role]:
            raise ValueError(f"live.engines: {e.role} in datacenter {e.datacenter}; a {kind} deployment puts {e.role} "
                             f"in {need[e.role]}")
    models = {e.model or model_dir or "the tiny model" for e in engines}
    if len(models) > 1:
        raise ValueError(f"live.engines: roles load different models ({', '.join(sorted(str(m) for m in models))}); "
                         "KV moves between them, so every role serves the same model")
    ports: dict[int, str] = {port_base: "the front's (live.port_base)"}
    for _e, name, port, side in engine_instances(kind, engines, port_base):
        for p, what in ((port, "port"), (side, "side channel")):
            if p > 65535:
                raise ValueError(f"live.engines: {name}'s {what} would be {p}, past 65535; give its role lower ports")
            if p in ports:
                raise ValueError(f"live.engines: {name}'s {what} {p} is already {ports[p]}; give each its own port")
            ports[p] = f"{name}'s {what}"


def engine_instances(kind: str, engines: list[EngineDecl], port_base: int) -> list[tuple[EngineDecl, str, int, int]]:
    """(declaration, name, server port, side-channel port) of every engine, in the kind's role
    order, each role's instances together (P, P2, ...). Ports not given are numbered as the fixed
    layout's are: port_base + 1 + i and port_base + 101 + i, i counting every engine before it;
    a given port is the first instance's, the others count up from it."""
    by_role = {e.role: e for e in engines}
    out, i = [], 0
    for role in LIVE_ROLES[kind]:
        e = by_role[role]
        for k in range(e.instances):
            port = e.port + k if e.port else port_base + 1 + i
            side = e.kv_connector.side_channel_port + k if e.kv_connector.side_channel_port else port_base + 101 + i
            out.append((e, role if k == 0 else f"{role}{k + 1}", port, side))
            i += 1
    return out


ROLE_NAMES = ("E0", "P", "D", "RLD", "MD")


def role_of(name: str) -> str:
    """An engine's role from its name (P2 -> P; E0 is a role's own name)."""
    return name if name in ROLE_NAMES else name.rstrip("0123456789")


class HostWan(BaseModel):
    """One datacenter's side of the WAN between real hosts (`pddbench netem up --dev --peer`)."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}
    dev: str = Field(min_length=1, max_length=15, pattern=r"^[A-Za-z0-9_.:@-]+$",
                     description="the interface of that datacenter's nodes that leads to the other datacenter")
    peer: str = Field(min_length=1, description="the other datacenter's IPv4 prefix, e.g. 10.20.0.0/16")


class LiveConfig(BaseModel):
    """How a live run drives real engines. The deployment itself is `deployment.kind`."""
    model_config = {"extra": "forbid", "allow_inf_nan": False}

    @model_validator(mode="before")
    @classmethod
    def _kind_moved(cls, data):
        if isinstance(data, dict) and "deployment" in data:
            raise ValueError("live.deployment is now stated once for both runtimes: write deployment.kind instead")
        return data

    @model_validator(mode="after")
    def _one_load(self):
        if self.load is not None:
            other = [k for k in ("rate_rps", "time_scale", "concurrency") if getattr(self, k) is not None]
            if other:
                raise ValueError(f"live.load and live.{other[0]} both set: choose one (set the other to null)")
        if self.ray_wan is not None and self.ray_address is None:
            raise ValueError("live.ray_wan shapes the WAN on the nodes of live.ray_address's cluster: give "
                             "live.ray_address too")
        if self.ray_wan is not None and sorted(self.ray_wan) != ["a", "b"]:
            raise ValueError(f"live.ray_wan names {sorted(self.ray_wan)}; give both datacenters, a and b (each "
                             "node shapes what it sends and delays what it receives)")
        if self.attach is not None and self.ray_address is not None:
            raise ValueError("live.attach and live.ray_address both set: attached engines already run; Ray places "
                             "engines pddbench starts")
        if self.attach is not None and self.engines is not None:
            raise ValueError("live.attach and live.engines both set: attach to running engines or declare the ones "
                             "pddbench starts, not both (with attach, set live.engines: null)")
        if self.engines is not None and self.model_dir is None and any(e.model for e in self.engines):
            raise ValueError("live.engines names a model: give live.model_dir too (a copy of the model's folder; "
                             "config.json is enough), whose KV bytes per token the router, calibration and summary use")
        if self.attach is not None and self.model_dir is None:
            raise ValueError("live.attach needs live.model_dir: the served model's folder (a copy of its config.json "
                             "is enough), whose KV bytes per token the router, calibration and summary use")
        if self.concurrency is not None and self.concurrency < self.replay_workers:
            raise ValueError(f"live.concurrency {self.concurrency} < live.replay_workers {self.replay_workers}: "
                             "each worker keeps at least one request in flight")
        return self

    model_dir: str | None = Field(None, description="served model; unset builds the tiny random model in the run folder")
    served_model_name: str = Field("tiny", min_length=1, description=(
        "the name the engines serve the model as (what every request names); engines pddbench starts get it"))
    attach: dict[str, AttachedEngine] | None = Field(None, description=(
        "attach mode: the engines already running, by role (colocated: E0; same_dc_pd / cross_dc_pd: P, D; pdd: "
        "P, RLD, MD); pddbench starts only its front, replay client and calibration, on this host, and checks "
        "each engine's health, served model and KV side channel first. Needs live.model_dir (a copy of the served "
        "model's folder, for its KV bytes per token)"))
    engines: list[EngineDecl] | None = Field(None, description=(
        "the engines pddbench starts, one per role (colocated: E0; same_dc_pd / cross_dc_pd: P, D; pdd: P, RLD, "
        "MD): model, device (cpu cores or gpu ids), vLLM arguments, datacenter, KV connector; unset: the fixed "
        "two-core layout of pddbench/live/placement.py"))
    ray_address: str | None = Field(None, min_length=1, description=(
        "place the engines on this Ray cluster's nodes by datacenter (each node started with the resource dc_a or "
        "dc_b): each engine runs on a node of its role's datacenter at that node's address; the run emulates no WAN "
        "(between real hosts: `pddbench netem up --dev --peer` on each side) and its front and client run here"))
    ray_wan: dict[Literal["a", "b"], HostWan] | None = Field(None, description=(
        "with live.ray_address: the scenario's WAN profile applied on every node of the cluster for the run "
        "(`netem up --dev --peer`, host mode: datacenter a's nodes send forward, b's reverse), removed after it"))
    port_base: int = Field(8300, ge=1024, le=65000)
    time_scale: float | None = Field(None, ge=1e-6, le=1e6)
    rate_rps: float | None = Field(None, ge=1e-6, le=1e6, description="fixed mean arrival rate (req/s); or live.load")
    load: float | None = Field(None, gt=0, le=4, description=(
        "arrival rate as a fraction of the deployment's capacity measured on this machine before the "
        "replay (pddbench/live/capacity_probe.py); excludes rate_rps, time_scale and concurrency"))
    probe_requests: int = Field(24, ge=4, le=1000, description="live.load: requests in the capacity probe")
    probe_concurrency: int = Field(4, ge=1, le=256, description="live.load: probe requests in flight at a time")
    arrival: Literal["constant", "poisson", "gamma"] = "poisson"
    concurrency: int | None = Field(None, ge=1, le=1_000_000)
    replay_workers: int = Field(1, ge=1, le=64, description=(
        "client processes that send the replay (`pddbench replay --workers`): whole sessions each, on one "
        "schedule, merged into one records file; more than one pays off only with free cores beside the engines"))
    duration_s: float | None = Field(None, ge=1e-3, le=1e7)
    vocab_lo: int = 16
    vocab_hi: int = 1024
    timeout_s: float = Field(300.0, ge=1e-3, le=1e7)
    calibrate_probes: int = Field(100, ge=10, le=1_000_000)
    min_relay_tokens: int = Field(0, ge=0, le=10_000_000, description="pdd: hold each handoff until the relay has produced this many tokens")
    front_added_delay_ms: float = Field(0.0, ge=0, le=60000, description=(
        "an injected regression: the PD proxy / PDD router holds every request this long before serving it "
        "(to check that the nightly gate fails on a real slowdown; 0 in every shipped scenario)"))
    calibrate_engine: bool = Field(False, description="after the replay, measure P's prefill and D's decode step "
                                   "times into engine_calibration.csv, and the P -> D KV transfer into "
                                   "kv_transfer_calibration.csv (colocated / same_dc_pd / cross_dc_pd), "
                                   "for `pddbench fidelity`")
