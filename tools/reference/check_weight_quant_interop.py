#!/usr/bin/env python3
"""Interop: transformers + compressed-tensors load the checkpoint `kvq oneshot` makes from a
weight-quantized one ("take a W8A8 model, add FP8 KV").

The source is llm-compressor's FP8 W8A8 tiny GQA Llama (tests/data/lifecycle/wq_tiny_fp8, from
make_weight_quant_goldens.py); tests/unit/lifecycle/weight_quant_checkpoint_test.cc adds an FP8
attn_head kv_cache_scheme calibrated by kvq (tests/data/lifecycle/recipes/
kv_fp8_head_static_minmax.yaml) and, with KVQ_WQ_INTEROP_SAVE_DIR set, writes the checkpoint and
kvq's logits of its prompt (kvq_logits.json) there:
  KVQ_WQ_INTEROP_SAVE_DIR=/tmp/wq_interop/ckpt build/tests/test_unit_lifecycle \\
      --gtest_filter='WeightQuantCheckpoint.Oneshot*'
  CUDA_VISIBLE_DEVICES= ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python \\
      tools/reference/check_weight_quant_interop.py /tmp/wq_interop/ckpt

Records into tests/data/lifecycle/wq_interop_transformers.json: whether transformers registered
the checkpoint's k/v scales bit for bit, the quantization status of the Linears and attention
modules, transformers' logits of the prompt (float32, eager: FP8 weights decompressed, inputs
fake-quantized with their input_scale, k/v with the kv scales), the max |logit diff| against
kvq's, and how far the logits move with compressed-tensors' quantization disabled.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402
from safetensors import safe_open  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "lifecycle" / "wq_interop_transformers.json"
PACKAGES = ["torch", "transformers", "compressed-tensors", "safetensors"]


def main() -> None:
    ckpt = Path(sys.argv[1])
    torch.set_num_threads(1)
    kvq = json.loads((ckpt / "kvq_logits.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32,
                                                 attn_implementation="eager")
    model.eval()
    f = safe_open(str(ckpt / "model.safetensors"), "pt")
    equal = True
    for i, layer in enumerate(model.model.layers):
        for b in ("k", "v"):
            name = f"model.layers.{i}.self_attn.{b}_scale"
            p = getattr(layer.self_attn, f"{b}_scale", None)
            if p is None or not torch.equal(p.detach().float(), f.get_tensor(name).float()):
                equal = False
    with torch.no_grad():
        logits = model(torch.tensor([kvq["prompt"]])).logits[0].float()
        # Without compressed-tensors' fake quantization (inputs and k/v; the weights stay
        # decompressed): how far it moves the logits, i.e. what the comparison can see.
        from compressed_tensors.quantization import disable_quantization
        model.apply(disable_quantization)
        plain = model(torch.tensor([kvq["prompt"]])).logits[0].float()
    statuses = sorted({str(getattr(m, "quantization_status", None))
                       for n, m in model.named_modules() if hasattr(m, "quantization_scheme")})
    diff = float((logits - torch.tensor(kvq["logits"])).abs().max())
    rec = {
        "what": "transformers + compressed-tensors loading kvq oneshot's FP8 KV checkpoint of "
                "llm-compressor's FP8 W8A8 tiny GQA Llama",
        "generator": "tools/reference/check_weight_quant_interop.py",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "kv_scales_loaded_equal": equal,
        "quantization_status": statuses,
        "prompt": kvq["prompt"],
        "max_abs_logit_diff_vs_kvq": diff,
        "logits_max_abs_diff_unquantized": float((logits - plain).abs().max()),
        "logits": logits.tolist(),
    }
    fd, tmp = tempfile.mkstemp(dir=OUT.parent, prefix=OUT.name + ".")
    with os.fdopen(fd, "w") as fh:
        json.dump(rec, fh)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, OUT)
    print(f"kv scales equal: {equal} | statuses {statuses} | max |logit diff| vs kvq {diff:.3g}"
          f" | wrote {OUT}")


if __name__ == "__main__":
    main()
