"""Models from their architecture: the derived sizes against what their makers published, the KV
and state each layer kind costs, how a scenario names a model, and the simulator's WAN bytes of a
hybrid model's request."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pddbench.core.errors import InputError, UserError
from pddbench.models.architecture import Architecture, derive
from pddbench.models.shipped import model_names, shipped_entry, shipped_model
from pddbench.policy.pdd import kv_transfer_bytes
from pddbench.schema.scenario import Model, load_scenario
from pddbench.sim.run import simulate
from tests.inprocess import cli

REPO = Path(__file__).resolve().parents[1]
PAPER = REPO / "scenarios" / "paper"
ARCH_MODELS = [n for n in model_names() if "arch" in shipped_model(n)]


def test_the_issue_s_architectures_are_shipped():
    kinds = {n: derive(Architecture(**shipped_model(n)["arch"])) for n in ARCH_MODELS}
    assert any(d.attention == "gqa" and not d.experts_total for d in kinds.values())      # dense GQA
    assert any(d.attention == "mla" and d.experts_total for d in kinds.values())           # MLA + MoE
    assert any(d.linear_layers and d.full_layers for d in kinds.values())                  # hybrid linear
    assert {"deepseek-v3", "qwen3-235b-a22b", "llama-3-70b", "qwen3-next-80b-a3b"} <= set(ARCH_MODELS)
    assert {"assumed-600b-moe-fp8", "assumed-600b-moe-fp8-kv4k"} <= set(model_names())


@pytest.mark.parametrize("name", ARCH_MODELS)
def test_derived_sizes_match_the_published_ones(name):
    entry = shipped_entry(name)
    m = Model(**entry["model"])
    assert entry["source"].startswith("https://huggingface.co/")
    pub = entry["published"]
    assert m.params_total_b == pytest.approx(pub["params_total_b"], rel=0.02)
    if "params_active_b" in pub:  # Qwen3-Next's "3B activated" does not say what it counts: total only
        assert m.params_active_b == pytest.approx(pub["params_active_b"], rel=0.02)


def test_kv_bytes_per_token_per_attention_kind():
    # MLA: the latent (kv_lora_rank + rope dims) per layer; GQA: 2 x KV heads x head dim per layer
    assert Model(**shipped_model("deepseek-v3")).kv_bytes_per_token == 61 * (512 + 64) * 2
    assert Model(**shipped_model("llama-3-70b")).kv_bytes_per_token == 80 * 2 * 8 * 128 * 2
    assert Model(**shipped_model("qwen3-235b-a22b")).kv_bytes_per_token == 94 * 2 * 4 * 128 * 2
    nxt = Model(**shipped_model("qwen3-next-80b-a3b"))
    assert nxt.kv_bytes_per_token == 12 * 2 * 2 * 256 * 2           # only the 12 full-attention layers
    assert nxt.fixed_state_bytes == 36 * (32 * 128 * 128 + (2 * 16 * 128 + 32 * 128) * 3) * 2


def test_sliding_window_layers_cost_at_most_the_window():
    arch = Architecture(num_hidden_layers=4, hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                        intermediate_size=512, vocab_size=1000, sliding_window=100,
                        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"])
    d = derive(arch)
    per_layer = 2 * 2 * 64 * 2
    assert (d.kv_bytes_per_token, d.sliding_kv_bytes_per_token, d.sliding_window_tokens) == \
        (2 * per_layer, 2 * per_layer, 100)
    m = Model(name="swa", arch=arch)
    nbytes = lambda n: kv_transfer_bytes(n, m.kv_bytes_per_token, 1, m.sliding_window_tokens,
                                         m.sliding_kv_bytes_per_token, m.fixed_state_bytes)
    assert nbytes(50) == 50 * 2 * per_layer + 50 * 2 * per_layer
    assert nbytes(1000) == 1000 * 2 * per_layer + 100 * 2 * per_layer  # the window, not the context
    assert nbytes(0) == 0


def test_an_explicit_size_overrides_the_derived_one():
    m = Model(name="v3-fp8-kv", arch=shipped_model("deepseek-v3")["arch"], kv_bytes_per_token=35136)
    assert m.kv_bytes_per_token == 35136 and m.params_total_b == pytest.approx(671.0, rel=0.01)


def test_the_article_s_two_kv_figures_are_two_variants_of_the_paper_model():
    paper = yaml.safe_load((PAPER / "base.yaml").read_text())["model"]
    a, b = shipped_model("assumed-600b-moe-fp8"), shipped_model("assumed-600b-moe-fp8-kv4k")
    assert a == paper
    assert {k: v for k, v in b.items() if k not in ("name", "kv_bytes_per_token")} == \
        {k: v for k, v in paper.items() if k not in ("name", "kv_bytes_per_token")}
    assert (a["kv_bytes_per_token"], b["kv_bytes_per_token"]) == (47606, 4400)


def test_a_scenario_names_a_shipped_model_and_sets_its_fields(tmp_path):
    sc = load_scenario(PAPER / "pdd.yaml", ["model=deepseek-v3", "model.kv_bytes_per_token=35136"])
    assert sc.model.name == "deepseek-v3" and sc.model.kv_bytes_per_token == 35136
    assert sc.model.attention == "mla" and sc.model.experts_total == 256
    with pytest.raises(UserError, match="no shipped model 'nope'"):
        load_scenario(PAPER / "pdd.yaml", ["model=nope", "model.layers=3"])


def test_model_arch_reads_a_hugging_face_config_json(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "rope_theta": 500000.0,
              "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    sc = load_scenario(PAPER / "pdd.yaml", ["model={name: l3, weight_bytes_per_param: 2}", f"model.arch={path}"])
    assert sc.model.params_total_b == pytest.approx(8.03, rel=0.01)
    assert sc.model.kv_bytes_per_token == 32 * 2 * 8 * 128 * 2


def test_a_bad_architecture_is_refused_with_its_field(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(f"base: {PAPER / 'pdd.yaml'}\nmodel:\n  name: x\n  arch:\n    num_hidden_layers: 0\n"
                    "    hidden_size: 8\n    num_attention_heads: 1\n    vocab_size: 10\n    intermediate_size: 8\n")
    with pytest.raises(InputError) as exc:
        load_scenario(path)
    assert exc.value.field == "model.arch.num_hidden_layers" and exc.value.line == 5
    path.write_text(f"base: {PAPER / 'pdd.yaml'}\nmodel:\n  name: x\n  layers: 3\n")
    with pytest.raises(InputError, match="give params_total_b"):
        load_scenario(path)


def test_a_hybrid_request_sends_its_state_once_over_the_wan():
    sc = load_scenario(PAPER / "pdd.yaml", ["model=qwen3-next-80b-a3b", "workload.synth.requests=120"])
    rec, _ = simulate(sc)
    sent = rec[(rec.wan_kv_bytes > 0) & ~rec.transfer_aborted]  # an aborted transfer sent only a part
    assert len(sent) > 10
    uncached = sent.input_tokens - sent.decode_cached_tokens
    assert (sent.wan_kv_bytes == uncached * 24576 + sc.model.fixed_state_bytes).all()


def test_a_saved_arch_scenario_reloads_to_the_same_records(tmp_path):
    sc = load_scenario(PAPER / "pdd.yaml", ["model=qwen3-235b-a22b", "workload.synth.requests=80"])
    saved = tmp_path / "scenario.yaml"
    saved.write_text(yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
    again = load_scenario(saved)
    assert again.model == sc.model
    a, _ = simulate(sc)
    b, _ = simulate(again)
    assert a.equals(b)


def test_the_paper_model_saves_as_before():
    dumped = load_scenario(PAPER / "pdd.yaml").model_dump(mode="json")["model"]
    assert set(dumped) == set(yaml.safe_load((PAPER / "base.yaml").read_text())["model"]) | {"name"}


def test_model_show_list_and_refusals():
    r = cli("model", "show", "qwen3-next-80b-a3b")
    assert r.code == 0 and "linear-attention state: 39,518,208 B per request" in r.out
    card = json.loads(cli("model", "show", "deepseek-v3", "--json").out)
    assert card["kv_bytes_per_token"] == 70272 and card["wan_kv_bytes"]["1000"] == 70272 * 1000
    listed = json.loads(cli("model", "list", "--json").out)
    assert [r["name"] for r in listed] == model_names()
    bad = cli("model", "show", "nope")
    assert bad.code == 2 and bad.one_line and "model list" in bad.err
    missing = cli("model", "show", "/nonexistent/config.json")
    assert missing.code == 2 and missing.one_line


def test_derived_sizes_are_checked_and_never_mixed_with_a_model_s_sizes():
    for model, extra, words in (("llama-3-8b", "model.arch.num_attention_heads=5000", "not a multiple of num_attention"),
                                ("deepseek-v3", "model.arch.first_k_dense_replace=100", "exceeds num_hidden_layers"),
                                ("deepseek-v3", "model.params_active_b=30", "params_active_b given beside model.arch")):
        with pytest.raises(InputError, match=words):
            load_scenario(PAPER / "pdd.yaml", [f"model={model}", extra])
    with pytest.raises(InputError, match="no full-attention layer needs model.kv_bytes_per_token"):
        load_scenario(PAPER / "pdd.yaml", ["model=qwen3-next-80b-a3b", "model.arch.full_attention_interval=100"])
    with pytest.raises(InputError, match="given beside model.arch"):  # the paper's sizes would stay: refused
        load_scenario(PAPER / "pdd.yaml", ["model.arch=llama-3-8b"])


def test_a_saved_arch_scenario_keeps_the_architecture_not_its_derived_sizes(tmp_path):
    sc = load_scenario(PAPER / "pdd.yaml", ["model=qwen3-next-80b-a3b"])
    dumped = sc.model_dump(mode="json")["model"]
    assert "arch" in dumped and not {"params_total_b", "kv_bytes_per_token", "fixed_state_bytes"} & set(dumped)
    saved = tmp_path / "scenario.yaml"
    saved.write_text(yaml.safe_dump(sc.model_dump(mode="json"), sort_keys=False))
    fp8 = load_scenario(saved, ["model.arch.kv_cache_dtype_bytes=1"])  # an edit of the saved run re-derives
    assert fp8.model.kv_bytes_per_token == sc.model.kv_bytes_per_token // 2


def test_a_config_json_s_error_names_its_field_and_its_dtype_sets_the_weight_bytes(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"num_hidden_layers": "many", "hidden_size": 64, "num_attention_heads": 4,
                                "vocab_size": 100, "intermediate_size": 128}))
    with pytest.raises(InputError, match="num_hidden_layers"):
        load_scenario(PAPER / "pdd.yaml", ["model={name: x}", f"model.arch={path}"])
    path.write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
                                "vocab_size": 100, "intermediate_size": 128, "torch_dtype": "bfloat16"}))
    assert load_scenario(PAPER / "pdd.yaml", ["model={name: x}", f"model.arch={path}"]).model.weight_bytes_per_param == 2


def test_a_child_scenario_sets_fields_of_its_base_s_shipped_model_and_finds_its_config_beside_it(tmp_path):
    (tmp_path / "base.yaml").write_text(f"extends: {PAPER / 'pdd.yaml'}\nmodel: deepseek-v3\n")
    (tmp_path / "child.yaml").write_text("extends: base.yaml\nmodel: {kv_bytes_per_token: 35136}\n")
    m = load_scenario(tmp_path / "child.yaml").model
    assert (m.name, m.kv_bytes_per_token, m.experts_total) == ("deepseek-v3", 35136, 256)
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64,
                                                      "num_attention_heads": 4, "vocab_size": 100,
                                                      "intermediate_size": 128}))
    (tmp_path / "own.yaml").write_text("extends: base.yaml\nmodel: {name: own, arch: config.json}\n")
    assert load_scenario(tmp_path / "own.yaml").model.layers == 2  # relative to the scenario, not the cwd


def test_the_model_axis_words_say_where_each_gain_flips():
    from pddbench.reproduce import crossovers as cx
    from pddbench.reproduce.answer import crossover_line, model_line

    flip = {"value": 31.0, "bracket": [29.0, 33.0], "direction": "PDD wins above it", "range": [1, 400]}
    never = {"value": None, "bracket": None, "direction": "PDD loses across the whole range", "range": [1, 400]}
    item = {"claim": "throughput_change_best", "axis": cx.MODEL_AXIS, "model": "deepseek-v3", "value": None,
            "range": [1, 400], "direction": "", "throughput_change_pct": -12.0, "ttft_change_pct": 4.0,
            "rate": flip, "ttft_rate": never}
    words = cx.words([item])[0]
    assert "deepseek-v3" in words and "-12.0 % (does not hold)" in words and "+4.0 % (does not hold)" in words
    assert "throughput gain changes sign at a WAN line of 31 Gbit/s" in words and "TTFT gain along" in words
    line = model_line([item])
    assert "deepseek-v3 throughput -12 %, TTFT +4 %, throughput flips at 31 Gbit/s" in line
    assert crossover_line([item], []) is None  # the model axis is not an axis with one crossover value
    assert set(cx.axis_models()) >= {"deepseek-v3", "assumed-600b-moe-fp8-kv4k"}
