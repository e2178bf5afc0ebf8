#!/usr/bin/env python3
"""Weight-quantized checkpoints SAVED BY llm-compressor, for kvq to load (tiny GQA Llama).

llm-compressor 0.14.0.1 `oneshot` with a QuantizationModifier (targets Linear, ignore lm_head)
quantizes the tiny GQA Llama (tests/data/tiny_llama/gqa) and saves it compressed, one directory
per VARIANT below (scheme, load dtype): the compressed-tensors formats llm-compressor writes for
the common deployments —
  fp8          "FP8"          float-quantized: FP8 E4M3 weights per tensor, static per-tensor FP8
                              input activations (an input_scale calibrated on CALIB_SAMPLES)
  fp8_dynamic  "FP8_DYNAMIC"  float-quantized: FP8 weights per channel, dynamic per-token FP8
                              inputs
  w8a8_int8    "W8A8"         int-quantized: int8 weights per channel, dynamic per-token int8
                              inputs
  w4a16        int4 group 32  pack-quantized: 8 int4 codes per int32, symmetric (the preset
                              W4A16's group 128 does not divide the tiny model's 64 columns)
  w4a16_asym   int4 group 32  pack-quantized, asymmetric: packed int4 zero points too
fp8 / w8a8_int8 / w4a16 are quantized from the fp32 model (fp32 scales), fp8_dynamic and
w4a16_asym from it loaded in bfloat16 (bf16 scales: the dtype llm-compressor's examples use).
Calibration: CALIB_SAMPLES (fixed token ids; a 256-entry word-level tokenizer only collates
them), CPU, batch size 1, pipeline "basic" (as make_lc_tiny_checkpoint.py).

Writes (atomically), for each VARIANT:
  tests/data/lifecycle/wq_tiny_VARIANT/   the directory `model.save_pretrained` wrote, as is
      (config.json with its quantization_config, model.safetensors, recipe.yaml, ...)
  tests/data/lifecycle/wq_tiny_VARIANT_goldens.json:
    - "stored": per quantized Linear, compressed-tensors' decompression of the checkpoint's own
      tensors (the model-free path: the format's compressor `decompress` on the module's state
      dict, i.e. in the dtype of weight_scale): dtype, shape, FNV-1a 64 of the little-endian
      bytes; full values (as float) for model.layers.0.self_attn.k_proj
    - "float32": the same for the weights transformers + compressed-tensors hold after
      `from_pretrained(dtype=float32)` (the scales cast to fp32 before decompression: equal to
      "stored" for an fp32 checkpoint, not for a bf16 one; full values only where they differ)
    - "logits": every position of PROMPT from that float32 model (eager attention; the input
      activations quantized as compressed-tensors' forward does), and
      "logits_max_abs_diff_act_quant": how far they move when quantization is disabled (the
      weights stay decompressed) — what a forward without the activation quantization misses
tests/unit/lifecycle/weight_quant_test.cc compares kvq with them.

Run (from the repository root; about a minute):
  CUDA_VISIBLE_DEVICES= ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python \\
      tools/reference/make_weight_quant_goldens.py [VARIANT ...]
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
TINY = REPO / "tests" / "data" / "tiny_llama" / "gqa"
CALIB_SAMPLES = [[(t * 37 + i * 11 + 3) % 256 for t in range(24 + i)] for i in range(8)]
PROMPT = [1, 17, 42, 200, 99, 3, 128, 255, 64, 7, 31, 180]
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "safetensors"]
FULL_VALUES = "model.layers.0.self_attn.k_proj"


def int4_group32(symmetric: bool) -> dict:
    return {"group_0": {"targets": ["Linear"],
                        "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                    "group_size": 32, "symmetric": symmetric,
                                    "dynamic": False}}}


VARIANTS = {
    "fp8": ({"scheme": "FP8"}, torch.float32),
    "fp8_dynamic": ({"scheme": "FP8_DYNAMIC"}, torch.bfloat16),
    "w8a8_int8": ({"scheme": "W8A8"}, torch.float32),
    "w4a16": ({"config_groups": int4_group32(True)}, torch.float32),
    "w4a16_asym": ({"config_groups": int4_group32(False)}, torch.bfloat16),
}


def fnv1a64(t: torch.Tensor) -> str:
    data = t.detach().contiguous().view(torch.uint8).numpy().tobytes()
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def describe(name: str, w: torch.Tensor) -> dict:
    rec = {"dtype": str(w.dtype).removeprefix("torch."), "shape": list(w.shape),
           "fnv1a64": fnv1a64(w)}
    if name == FULL_VALUES:
        rec["values"] = w.float().flatten().tolist()
    return rec


def write_atomic(path: Path, rec: dict) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as fh:
        json.dump(rec, fh)
        fh.write("\n")
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def stored_decompression(ckpt: Path) -> dict:
    """compressed-tensors' decompression of each quantized module's own checkpoint tensors."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig
    from safetensors import safe_open

    qc = QuantizationConfig.model_validate(
        json.loads((ckpt / "config.json").read_text())["quantization_config"])
    (group,) = qc.config_groups.values()
    f = safe_open(str(ckpt / "model.safetensors"), "pt")
    modules = sorted({k.rsplit(".", 1)[0] for k in f.keys() if k.endswith(".weight_scale")})
    out = {}
    for m in modules:
        local = {k[len(m) + 1:]: f.get_tensor(k) for k in f.keys()
                 if k.startswith(m + ".") and "." not in k[len(m) + 1:]}
        compressor = BaseCompressor.get_value_from_registry(group.format)
        out[m] = describe(m, compressor.decompress(local, group)["weight"])
    return out


def make(variant: str) -> None:
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    kwargs, dtype = VARIANTS[variant]
    ckpt = DATA / f"wq_tiny_{variant}"
    out = DATA / f"wq_tiny_{variant}_goldens.json"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(str(TINY), dtype=dtype,
                                                 attn_implementation="eager")
    tk = Tokenizer(models.WordLevel({f"t{i}": i for i in range(256)}, unk_token="t0"))
    proc = PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="t0", pad_token="t0")
    ds = Dataset.from_dict({"input_ids": CALIB_SAMPLES,
                            "attention_mask": [[1] * len(x) for x in CALIB_SAMPLES]})
    recipe = QuantizationModifier(targets="Linear", ignore=["lm_head"], **kwargs)
    oneshot(model=model, processor=proc, dataset=ds, recipe=recipe, max_seq_length=64,
            num_calibration_samples=len(CALIB_SAMPLES), shuffle_calibration_samples=False,
            batch_size=1, pipeline="basic")

    tmp = Path(tempfile.mkdtemp(dir=DATA, prefix=".wq_tiny."))
    model.save_pretrained(str(tmp))
    if ckpt.exists():
        shutil.rmtree(ckpt)
    os.replace(tmp, ckpt)
    os.chmod(ckpt, 0o755)
    for f in ckpt.iterdir():
        os.chmod(f, 0o644)

    stored = stored_decompression(ckpt)
    loaded = AutoModelForCausalLM.from_pretrained(str(ckpt), dtype=torch.float32,
                                                  attn_implementation="eager")
    loaded.eval()
    mods = dict(loaded.named_modules())
    with torch.no_grad():
        # transformers leaves the weights compressed (dequantize=False); compressed-tensors
        # decompresses them on the first forward.
        logits = loaded(torch.tensor([PROMPT])).logits[0].float()
        float32 = {m: describe(m, mods[m].weight) for m in stored}
    for m, rec in float32.items():
        if rec["fnv1a64"] == stored[m]["fnv1a64"]:
            rec.pop("values", None)
        scale_dtypes = sorted({str(mods[m].weight_scale.dtype) for m in stored})
        statuses = sorted({str(getattr(mods[m], "quantization_status", None)) for m in stored})
        from compressed_tensors.quantization import disable_quantization
        loaded.apply(disable_quantization)
        plain = loaded(torch.tensor([PROMPT])).logits[0].float()
    config = json.loads((ckpt / "config.json").read_text())["quantization_config"]
    rec = {
        "what": f"llm-compressor oneshot {kwargs} on the tiny GQA Llama loaded in {dtype}; "
                "compressed-tensors' decompression and transformers' logits",
        "generator": "tools/reference/make_weight_quant_goldens.py",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "calibration_samples": CALIB_SAMPLES,
        "format": config["format"],
        "quantization_status_after_load": statuses,
        "weight_scale_dtype_after_float32_load": scale_dtypes,
        "stored": stored,
        "float32": float32,
        "prompt": PROMPT,
        "logits_max_abs_diff_act_quant": float((logits - plain).abs().max()),
        "logits": logits.tolist(),
    }
    write_atomic(out, rec)
    size = sum(f.stat().st_size for f in ckpt.iterdir())
    print(f"{variant}: format {config['format']}, {size} bytes, activation quantization moves "
          f"logits by {rec['logits_max_abs_diff_act_quant']:.3g}; wrote {ckpt} {out}")


def main() -> None:
    torch.set_num_threads(1)
    for v in sys.argv[1:] or list(VARIANTS):
        make(v)


if __name__ == "__main__":
    main()
