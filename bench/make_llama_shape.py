#!/usr/bin/env python3
"""Write a random bf16 Llama checkpoint of a real model's shape, sharded as Hugging Face does.

For measuring kvq at scale (issue 18 item 7) without downloading a model: the config is the real
model's (Llama-3.2-1B, Llama-3.2-3B, Llama-3.1-8B: sizes, GQA, head_dim, rope_scaling "llama3",
tied or untied embeddings), the weights are N(0, 0.02) rounded to bf16 (norms 1), written as
`model-0000i-of-0000N.safetensors` + `model.safetensors.index.json`. The tokenizer files come from
another model directory (default: SmolLM2's; its ids are below every shape's vocab_size), so
`kvq oneshot` can calibrate on GSM8K through its chat template. The numbers such a model computes
are meaningless; its memory and time are a real model's.

Needs numpy only (Debian: python3-numpy). Writes ~2.5 / 6.4 / 16 GB; keep it outside the repo:
  python3 bench/make_llama_shape.py --shape 8b --out /tmp/llama-8b-shape
"""
from __future__ import annotations

import argparse
import json
import shutil
import struct
import sys
from pathlib import Path

import numpy as np

# config.json fields of the real models (Meta's published configs).
SHAPES = {
    "1b": dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
               num_attention_heads=32, num_key_value_heads=8, head_dim=64,
               tie_word_embeddings=True, rope_factor=32.0),
    "3b": dict(hidden_size=3072, intermediate_size=8192, num_hidden_layers=28,
               num_attention_heads=24, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=True, rope_factor=32.0),
    "8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=8, head_dim=128,
               tie_word_embeddings=False, rope_factor=8.0),
}
VOCAB = 128256


def config_json(s: dict) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": s["hidden_size"], "intermediate_size": s["intermediate_size"],
        "num_hidden_layers": s["num_hidden_layers"],
        "num_attention_heads": s["num_attention_heads"],
        "num_key_value_heads": s["num_key_value_heads"], "head_dim": s["head_dim"],
        "hidden_act": "silu", "max_position_embeddings": 131072, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": s["rope_factor"],
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
        "attention_bias": False, "mlp_bias": False, "vocab_size": VOCAB,
        "tie_word_embeddings": s["tie_word_embeddings"], "torch_dtype": "bfloat16",
        "bos_token_id": 1, "eos_token_id": 2,
    }


def tensors(s: dict) -> list[tuple[str, tuple[int, ...]]]:
    h, i, hd = s["hidden_size"], s["intermediate_size"], s["head_dim"]
    q, kv = s["num_attention_heads"] * hd, s["num_key_value_heads"] * hd
    out = [("model.embed_tokens.weight", (VOCAB, h))]
    for l in range(s["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (h,)), (p + "post_attention_layernorm.weight", (h,)),
                (p + "self_attn.q_proj.weight", (q, h)), (p + "self_attn.k_proj.weight", (kv, h)),
                (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, q)),
                (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                (p + "mlp.down_proj.weight", (h, i))]
    out.append(("model.norm.weight", (h,)))
    if not s["tie_word_embeddings"]:
        out.append(("lm_head.weight", (VOCAB, h)))
    return out


def write_bf16(f, shape: tuple[int, ...], rng: np.random.Generator, is_norm: bool) -> None:
    """Streams the tensor in row blocks (an 8B embedding is 2 GB in fp32)."""
    if is_norm:
        f.write(np.full(shape, 0x3F80, dtype=np.uint16).tobytes())  # 1.0 in bf16
        return
    rows, cols = shape
    block = max(1, (1 << 24) // cols)
    for r in range(0, rows, block):
        n = min(block, rows - r)
        x = rng.standard_normal((n, cols), dtype=np.float32) * np.float32(0.02)
        f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), required=True)
    ap.add_argument("--out", type=Path, required=True, help="a new directory")
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--tokenizer-from", type=Path,
                    default=Path.home() / ".cache/kvq/SmolLM2-135M-Instruct")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.out.exists():
        sys.exit(f"{a.out} exists; pass a new directory")
    s = SHAPES[a.shape]
    specs = tensors(s)
    sizes = [2 * int(np.prod(shape)) for _, shape in specs]
    total = sum(sizes)
    # Contiguous runs of tensors, each shard about total / shards bytes (as HF's max_shard_size).
    shards: list[list[int]] = [[]]
    acc = 0
    for idx, size in enumerate(sizes):
        if shards[-1] and acc + size > total / a.shards and len(shards) < a.shards:
            shards.append([])
            acc = 0
        shards[-1].append(idx)
        acc += size
    tmp = a.out.with_name(a.out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    rng = np.random.default_rng(a.seed)
    weight_map = {}
    for k, members in enumerate(shards):
        fname = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, offset = {}, 0
        for idx in members:
            name, shape = specs[idx]
            header[name] = {"dtype": "BF16", "shape": list(shape),
                            "data_offsets": [offset, offset + sizes[idx]]}
            offset += sizes[idx]
            weight_map[name] = fname
        header["__metadata__"] = {"format": "pt"}
        hjson = json.dumps(header, separators=(",", ":")).encode()
        hjson += b" " * (-len(hjson) % 8)
        with open(tmp / fname, "wb") as f:
            f.write(struct.pack("<Q", len(hjson)) + hjson)
            for idx in members:
                name, shape = specs[idx]
                write_bf16(f, shape, rng, name.endswith("norm.weight"))
        print(f"{fname}: {offset / 2**30:.2f} GiB", flush=True)
    (tmp / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    (tmp / "config.json").write_text(json.dumps(config_json(s), indent=2) + "\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(a.tokenizer_from / name, tmp / name)
    tmp.rename(a.out)
    print(f"{a.out}: Llama {a.shape} shape, {total / 1e9:.2f} GB of bf16 weights, "
          f"{len(shards)} shards")


if __name__ == "__main__":
    main()
