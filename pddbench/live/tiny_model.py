"""`pddbench model tiny`: a small random-weight Llama-architecture model with a locally trained
byte-level BPE tokenizer, for real vLLM runs where no model hub is reachable. Needs the live
extra (torch, transformers, tokenizers: installed with vLLM)."""

from __future__ import annotations

import random
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]


def _corpus(seed: int, lines: int = 4000) -> list[str]:
    rng = random.Random(seed)
    words = ["kv", "cache", "prefill", "decode", "relay", "handoff", "token", "datacenter", "wan", "latency",
             "agent", "tool", "call", "result", "context", "batch", "step", "chip", "memory", "bandwidth"]
    return [" ".join(rng.choice(words) + (str(rng.randrange(100)) if rng.random() < 0.2 else "")
                     for _ in range(rng.randint(5, 30))) for _ in range(lines)]


def build_tiny_model(out: Path, hidden: int = 256, layers: int = 4, heads: int = 4, kv_heads: int = 2,
                     vocab: int = 1024, max_positions: int = 8192, seed: int = 0) -> dict:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(seed), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=hidden * 4, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
                      bos_token_id=1, eos_token_id=2, pad_token_id=3, torch_dtype="bfloat16", tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    return {"path": str(out), "vocab": vocab, "special_tokens": len(SPECIAL),
            "kv_bytes_per_token": kv_bytes_per_token(out),  # from the config.json just written, as a live run reads it
            "params": sum(p.numel() for p in model.parameters())}


def build_tiny_model_subprocess(out: Path) -> str:
    """Build the tiny model in a child process: torch's threads stay out of the caller, whose
    later netlink work in namespaces (pyroute2) misbehaves after torch is imported."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "pddbench", "model", "tiny", "--out", str(out)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        from pddbench.core.errors import UserError

        raise UserError(f"building the tiny model failed: {res.stderr.strip()[-500:]}")
    return str(out)


def kv_bytes_per_token(model_dir: str | Path) -> int:
    """KV bytes one token takes in all layers (K and V), from a Llama-style config.json: the one
    source of a live run's KV geometry (the run derives it once and records it in its summary)."""
    from pddbench.core.errors import InputError
    from pddbench.core.loading import read_json

    path = Path(model_dir) / "config.json"
    cfg = read_json(path, "model config")
    try:
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")  # newer transformers write "dtype"
        dtype_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype, 2)
        return 2 * cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", heads) * head_dim * dtype_bytes
    except (AttributeError, KeyError, TypeError, ZeroDivisionError) as exc:
        raise InputError(str(path), f"is not a Llama-style model config ({type(exc).__name__}: {exc}): the live "
                         "run derives the KV bytes per token from num_hidden_layers, num_attention_heads, "
                         "num_key_value_heads and hidden_size or head_dim") from None
