#!/usr/bin/env python3
"""Interop: a checkpoint SAVED BY llm-compressor, for kvq to load (tiny GQA Llama, kv-only FP8).

llm-compressor 0.14.0.1 `oneshot` with examples/recipes/kv_fp8_head.yaml (kv_cache_scheme FP8
E4M3, attn_head, static_minmax; kv-only because 0.14.0.1 never writes q_scale for attention
config groups) on the tiny GQA Llama (tests/data/tiny_llama/gqa) loaded in bfloat16 — the dtype
llm-compressor's examples load models in, and half the file size of fp32 — calibrated on
CALIB_SAMPLES (fixed token ids; the tiny model has no tokenizer, so oneshot gets a 256-entry
word-level tokenizer as its `processor`, which only collates the pre-tokenized samples), CPU,
batch size 1, pipeline "basic" (see make_calibration_goldens.py for why).

Writes (atomically):
  tests/data/lifecycle/lc_tiny_kv_fp8_head/   the directory `model.save_pretrained` wrote, as is:
      config.json, generation_config.json, model.safetensors (bf16 weights + bf16
      `<attn>.k_scale` / `<attn>.v_scale` [2,1,1]), recipe.yaml (no tokenizer: the tiny model
      has none)
  tests/data/lifecycle/lc_tiny_kv_fp8_head_transformers.json   what transformers (with
      compressed-tensors) does with that directory, loaded back with from_pretrained in float32
      (bf16 → fp32 is exact) and eager attention: the k/v scales it registered (and whether they
      equal the file's bit for bit), the quantization status, and the logits of every position
      of PROMPT (k/v fake-quantized by compressed-tensors' QuantizedKVCache).
tests/unit/lifecycle/lc_interop_test.cc loads the directory with kvq and compares.

Run (from the repository root; seconds):
  CUDA_VISIBLE_DEVICES= ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python \\
      tools/reference/make_lc_tiny_checkpoint.py [RECIPE]
RECIPE (default kv_fp8_head) names examples/recipes/RECIPE.yaml; the outputs are then
lc_tiny_RECIPE/ and lc_tiny_RECIPE_transformers.json. kv_fp8_head_r3 (SpinQuantModifier R2 + R3,
then the same kv scheme) gives the rotated checkpoint kvq must reproduce: llm-compressor fuses
the norms into the next Linear layers, centres the embeddings and fuses R2 into v_proj / o_proj
(all saved in the weights) and records R3 in transform_config for the loader to run online.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "lifecycle"
NAME = sys.argv[1] if len(sys.argv) > 1 else "kv_fp8_head"
CKPT = DATA / f"lc_tiny_{NAME}"
OUT = DATA / f"lc_tiny_{NAME}_transformers.json"
TINY = REPO / "tests" / "data" / "tiny_llama" / "gqa"
RECIPE = REPO / "examples" / "recipes" / f"{NAME}.yaml"
CALIB_SAMPLES = [[(t * 37 + i * 11 + 3) % 256 for t in range(24 + i)] for i in range(8)]
PROMPT = [1, 17, 42, 200, 99, 3, 128, 255, 64, 7, 31, 180]
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "safetensors",
            "datasets"]


def main() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from datasets import Dataset
    from llmcompressor import oneshot
    from safetensors import safe_open
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(str(TINY), dtype=torch.bfloat16,
                                                 attn_implementation="eager")
    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0"))
    proc = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", pad_token="t0")
    ds = Dataset.from_dict({"input_ids": CALIB_SAMPLES,
                            "attention_mask": [[1] * len(x) for x in CALIB_SAMPLES]})
    oneshot(model=model, processor=proc, dataset=ds, recipe=str(RECIPE), max_seq_length=64,
            num_calibration_samples=len(CALIB_SAMPLES), shuffle_calibration_samples=False,
            batch_size=1, pipeline="basic")

    # save_pretrained into a temp dir next to the target, then swap it in (atomic per dir).
    tmp = Path(tempfile.mkdtemp(dir=DATA, prefix=".lc_tiny."))
    model.save_pretrained(str(tmp))
    if CKPT.exists():
        shutil.rmtree(CKPT)
    os.replace(tmp, CKPT)
    os.chmod(CKPT, 0o755)
    for f in CKPT.iterdir():
        os.chmod(f, 0o644)

    # What transformers + compressed-tensors make of the saved directory.
    # compressed-tensors' hooked attention (registered for R3's q_attn) looks its wrapped
    # implementation up in ALL_ATTENTION_FUNCTIONS, which has no "eager": such a checkpoint only
    # runs with sdpa (recorded as attn_implementation).
    attn = "sdpa" if "q_attn" in (CKPT / "config.json").read_text() else "eager"
    loaded = AutoModelForCausalLM.from_pretrained(str(CKPT), dtype=torch.float32,
                                                  attn_implementation=attn)
    loaded.eval()
    f = safe_open(str(CKPT / "model.safetensors"), "pt")
    equal = True
    scales = {}
    statuses = set()
    for i, layer in enumerate(loaded.model.layers):
        a = layer.self_attn
        statuses.add(str(getattr(a, "quantization_status", None)))
        # kv-only recipes: no q_scale in the file. (With an R3 transform, compressed-tensors
        # nevertheless registers an uninitialised q_scale on load: recorded below.)
        q_scale_registered = getattr(a, "q_scale", None) is not None
        for b in ("k", "v"):
            name = f"model.layers.{i}.self_attn.{b}_scale"
            p = getattr(a, f"{b}_scale", None)
            if p is None or not torch.equal(p.detach().float(), f.get_tensor(name).float()):
                equal = False
            scales[name] = p.detach().float().flatten().tolist()
    # kv-only: llm-compressor must leave the weights alone (bf16 of the tiny model's fp32 ones).
    src = safe_open(str(TINY / "model.safetensors"), "pt")
    weights_equal = sorted(src.keys()) == sorted(k for k in f.keys() if k not in scales) and all(
        torch.equal(src.get_tensor(k).to(torch.bfloat16), f.get_tensor(k)) for k in src.keys())
    with torch.no_grad():
        logits = loaded(torch.tensor([PROMPT])).logits[0].float()
        # The same forward without compressed-tensors' kv fake quantization: shows how far the
        # quantization moves the logits (a kvq forward that skipped it would be this far off).
        from compressed_tensors.quantization import disable_quantization
        loaded.apply(disable_quantization)
        plain = loaded(torch.tensor([PROMPT])).logits[0].float()
    rec = {
        "what": "transformers + compressed-tensors loading a checkpoint llm-compressor oneshot "
                f"saved (tiny GQA Llama, bf16, examples/recipes/{NAME}.yaml)",
        "generator": "tools/reference/make_lc_tiny_checkpoint.py",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "calibration_samples": CALIB_SAMPLES,
        "load_dtype": "float32",
        "attn_implementation": loaded.config._attn_implementation,
        "weights_equal_source_bf16": weights_equal,
        "scales_loaded_equal": equal,
        "q_scale_registered_on_load": q_scale_registered,
        "transform_tensors": sorted(k for k in f.keys() if "_q_attn" in k or "_k_cache" in k),
        "scales": scales,
        "quantization_status": sorted(statuses),
        "prompt": PROMPT,
        "logits_max_abs_diff_unquantized": float((logits - plain).abs().max()),
        "logits": logits.tolist(),
    }
    fd, tmpf = tempfile.mkstemp(dir=DATA, prefix=OUT.name + ".")
    with os.fdopen(fd, "w") as fh:
        json.dump(rec, fh)
        fh.write("\n")
    os.chmod(tmpf, 0o644)
    os.replace(tmpf, OUT)
    print("scales equal:", equal, "| weights equal:", weights_equal, "| kv quantization moves logits by",
          rec["logits_max_abs_diff_unquantized"], "| wrote", CKPT, OUT)


if __name__ == "__main__":
    main()
