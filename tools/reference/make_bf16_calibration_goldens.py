#!/usr/bin/env python3
"""bf16 calibration goldens: llm-compressor's k/v scales for a bf16 checkpoint of the default model.

A bf16 checkpoint calibrates differently in the reference depending on the dtype it is loaded in:
  - "bf16": from_pretrained(dtype=torch.bfloat16), what a user of a bf16 model gets — torch then
    computes every activation in bf16 (each matmul, norm and RoPE output rounded to 8 bits of
    mantissa), so the observed k/v, and their maxima, carry bf16 rounding;
  - "fp32_on_bf16_weights": the same bf16 weights loaded with dtype=torch.float32 — fp32
    arithmetic on bf16-valued weights, which is what kvq does with a bf16 checkpoint (weights kept
    in bf16, every kernel computing in fp32).
Both are real oneshot runs (recipe tests/data/lifecycle/recipes/kv_fp8_head_static_minmax.yaml)
on the 64 GSM8K samples of calibration_goldens.json (same token ids; shuffle off, so its
LengthAwareSampler feeds them longest first as there). The bf16 checkpoint is the fp32 model's
weights rounded to bf16 (torch's round-to-nearest-even; kvq's test rounds the same way).

Writes tests/data/lifecycle/calibration_bf16_goldens.json (per run, per layer k/v scales).
Run (from the repository root; a few CPU minutes):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_bf16_calibration_goldens.py
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_calibration_goldens import ensure_model, write_atomic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "lifecycle"
RECIPE = DATA / "recipes" / "kv_fp8_head_static_minmax.yaml"
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor"]


def main() -> None:
    torch.set_num_threads(2)
    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = json.load(open(DATA / "calibration_goldens.json"))
    ids = base["samples_rendered"]
    model_path = ensure_model(Path("/root/.cache/kvq/SmolLM2-135M-Instruct"),
                              Path("/root/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf"),
                              Path("/tmp/kvq_ref_smollm2_fp32"))
    bf16_dir = Path("/tmp/kvq_ref_smollm2_bf16")
    m = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    m.to(torch.bfloat16).save_pretrained(str(bf16_dir))
    AutoTokenizer.from_pretrained(str(model_path)).save_pretrained(str(bf16_dir))
    golden = {
        "what": "llm-compressor oneshot k/v scales (kv_fp8_head_static_minmax) on a bf16 "
                "checkpoint of the default model, loaded as bf16 and as fp32",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "samples": "calibration_goldens.json samples_rendered, fed in its feed_order",
        "runs": {},
    }
    for run, dtype in (("bf16", torch.bfloat16), ("fp32_on_bf16_weights", torch.float32)):
        model = AutoModelForCausalLM.from_pretrained(str(bf16_dir), dtype=dtype)
        seen: list[list[int]] = []
        h = model.model.embed_tokens.register_forward_hook(
            lambda _m, inp, _o: seen.append(inp[0][0].tolist()))
        ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
        oneshot(model=model, dataset=ds, recipe=str(RECIPE), max_seq_length=512,
                num_calibration_samples=len(ids), shuffle_calibration_samples=False,
                batch_size=1, pipeline="basic")
        h.remove()
        assert [ids.index(s) for s in seen] == base["feed_order"]
        golden["runs"][run] = {
            "dtype": str(dtype),
            "layers": [{f"{b}_scale": getattr(l.self_attn, f"{b}_scale").detach().float()
                        .flatten().tolist() for b in ("k", "v")} for l in model.model.layers],
        }
    write_atomic(DATA / "calibration_bf16_goldens.json", json.dumps(golden) + "\n")
    print("wrote", DATA / "calibration_bf16_goldens.json")


if __name__ == "__main__":
    main()
