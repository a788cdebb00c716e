"""benchmarks/gpu/calibrate.sh, as far as a host without a GPU can check it: the script parses, its
live scenarios are the shipped live ones on GPU engines, the fit recovers a known engine latency
curve, and the measurement pipeline runs end to end on real vLLM (CPU build) with the shipped
Llama-3-8B-class config and dummy weights (a one-layer copy: the CPU cannot hold 8B)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from pddbench.live.declared import declared_specs
from pddbench.live.engines import vllm_available
from pddbench.measure import gpu_calibration as gc
from pddbench.measure.roofline_check import MEASURED_CHIPS
from pddbench.report.model_card import load_model
from pddbench.schema.runtime_config import LatencyConfig
from pddbench.schema.scenario import load_scenario
from pddbench.sim.latency import Calibrated
from tests.conftest import REPO

GPU = REPO / "benchmarks" / "gpu"


def test_the_script_parses_and_its_live_scenarios_are_the_shipped_ones_on_gpu():
    assert subprocess.run(["bash", "-n", str(GPU / "calibrate.sh")]).returncode == 0
    for kind, roles in (("same-dc-pd", ["P", "D"]), ("pdd", ["P", "RLD", "MD"])):
        gpu, cpu = load_scenario(str(GPU / f"live-{kind}.yaml")), load_scenario(f"live/{kind}")
        assert gpu.model_dump(exclude={"name": True, "live": {"engines"}}) == \
            cpu.model_dump(exclude={"name": True, "live": {"engines"}})
        specs = declared_specs(gpu.deployment.kind, gpu.live, "/model")
        assert [(s.name, s.gpus, s.on_gpu) for s in specs] == [(r, (0,), True) for r in roles]


def test_the_shipped_config_is_the_shipped_llama_3_8b():
    config = json.loads((GPU / "llama-3-8b" / "config.json").read_text())
    arch = load_model("llama-3-8b")[0].arch
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size"):
        assert config[key] == getattr(arch, key), key


def test_the_fit_recovers_a_known_engine_latency_curve():
    model, _ = load_model("llama-3-8b")
    chip = MEASURED_CHIPS["h100"]
    rows = [{"phase": "prefill", "tokens": n, "attn_pairs": n * n / 2, "batch": "", "kv_tokens": "", "step_ms": 0.0}
            for n in gc.PREFILL_TOKENS]
    rows += [{"phase": "decode", "tokens": "", "attn_pairs": "", "batch": b, "kv_tokens": b * (c + 16), "step_ms": 0.0}
             for c in gc.DECODE_CONTEXTS for b in gc.DECODE_BATCHES]
    compute, memory, comm, fixed, _ = gc.fit_rows(rows, model, chip)
    truth = gc.predicted(compute, memory, comm, fixed, 0.57, 0.81, [2.8, 1.7])
    for r, ms in zip(rows, truth):
        r["step_ms"] = float(ms)
    got = gc.calibrate(rows, model, chip, LatencyConfig())
    assert (got["fit"]["compute_efficiency"], got["fit"]["memory_efficiency"]) == (0.57, 0.81)
    assert got["fit"]["prefill_overhead_ms"] == pytest.approx(2.8, abs=0.01)
    assert got["fit"]["decode_overhead_ms"] == pytest.approx(1.7, abs=0.01)
    assert got["after"]["worst_abs_error"] < 1e-3 < got["before"]["median_abs_error"]


def test_bad_arguments_are_refused(tmp_path):
    assert gc.main(["--config", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert gc.main(["--config", str(GPU / "llama-3-8b"), "--chip", "tpu", "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(not vllm_available(), reason="vLLM is not installed (`make test` installs it)")
def test_the_pipeline_runs_on_cpu_vllm_with_dummy_weights(tmp_path):
    out = tmp_path / "steps"
    res = subprocess.run([sys.executable, "-m", "pddbench.measure.gpu_calibration", "--smoke", "--config",
                          str(GPU / "llama-3-8b"), "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    fitted = Calibrated.fit_csv(out / "calibration.csv")  # usable as latency.kind: calibrated
    assert fitted.prefill_ms(64, 0.0) > 0
    result = json.loads((out / "calibration.json").read_text())
    assert result["smoke"] and result["rows"] == len(gc.SMOKE["prefill"]) + len(gc.SMOKE["batches"])
    assert np.isfinite(result["after"]["median_abs_error"])
    assert "sim vs measured, after the fit" in res.stdout
