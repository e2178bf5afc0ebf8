#!/usr/bin/env python3
"""Interop: transformers (+ compressed-tensors) loads a checkpoint kvq saved, and runs it.

The checkpoint is the tiny GQA Llama (tests/data/tiny_llama/gqa) quantized by kvq with
tests/data/lifecycle/recipes/attn_fp8_head_static_minmax.yaml (q, k, v FP8 per head) and
calibrated on the fixed samples of tests/unit/lifecycle/interop_test.cc; that test writes it to
$KVQ_INTEROP_SAVE_DIR when the variable is set:
  KVQ_INTEROP_SAVE_DIR=/tmp/kvq_interop build/tests/test_unit_lifecycle --gtest_filter='Interop*'
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/check_checkpoint_interop.py /tmp/kvq_interop

Records into tests/data/lifecycle/interop_transformers.json: whether transformers registered
q/k/v scales on every attention module with the checkpoint's values (bit-exact), the applied
quantization status, and the logits of every position for a fixed prompt with fake-quantized
q/k/v (compressed-tensors' hooked attention / kv cache, eager fp32) — the C++ test compares
kvq's own forward of the same checkpoint with them.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "lifecycle" / "interop_transformers.json"
PROMPT = [5, 6, 7, 100, 200, 31, 4, 250, 17, 9]
PACKAGES = ["torch", "transformers", "compressed-tensors", "safetensors"]


def main() -> None:
    ckpt = Path(sys.argv[1])
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32)
    model.eval()
    f = safe_open(str(ckpt / "model.safetensors"), "pt")
    equal = True
    n = 0
    statuses = set()
    for i, layer in enumerate(model.model.layers):
        a = layer.self_attn
        statuses.add(str(getattr(a, "quantization_status", None)))
        for b in ("q", "k", "v"):
            name = f"model.layers.{i}.self_attn.{b}_scale"
            p = getattr(a, f"{b}_scale", None)
            if p is None or not torch.equal(p.detach().float(), f.get_tensor(name).float()):
                equal = False
            n += 1
    with torch.no_grad():
        logits = model(torch.tensor([PROMPT])).logits[0]
    rec = {
        "what": "transformers loading a kvq checkpoint (tiny GQA, attn_fp8_head_static_minmax)",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "attn_implementation": model.config._attn_implementation,
        "scales_checked": n,
        "scales_loaded_equal": equal,
        "quantization_status": sorted(statuses),
        "prompt": PROMPT,
        "logits": logits.tolist(),
    }
    fd, tmp = tempfile.mkstemp(dir=OUT.parent)
    with os.fdopen(fd, "w") as fh:
        json.dump(rec, fh)
        fh.write("\n")
    os.replace(tmp, OUT)
    print("scales equal:", equal, "checked", n, "impl", rec["attn_implementation"])


if __name__ == "__main__":
    main()
