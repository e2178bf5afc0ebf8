#!/usr/bin/env python3
"""Calibration goldens: llm-compressor `oneshot` q/k/v scales on the default model.

Reference: llmcompressor 0.14.0.1 + compressed-tensors 0.19.0 (versions recorded in the golden),
CPU, fp32, batch size 1, pipeline="basic". oneshot would infer the "sequential" pipeline; both
run calibration under DisableQuantization and compute qparams from the accumulated observer
statistics at the epoch end, so for attention/kv-only recipes they give the same scales — the
sequential one is ~60x slower on CPU (each decoder layer is traced and replayed per sample).

Model: the converted HF directory (`kvq convert` output, default /root/.cache/kvq/
SmolLM2-135M-Instruct). When it does not exist yet, transformers converts the GGUF (it
dequantizes every tensor and un-permutes the q/k rows) and saves an fp32 HF directory to
--tmp-model; the weights are the same dequantized GGUF values either way.

Data: GSM8K train (/work/shared/data/gsm8k/train.jsonl), rows 0..63 in file order (no shuffle;
the selection is recorded as `sample_indices`). Each row is rendered as llm-compressor's
kv-cache example does it: apply_chat_template([user: question, assistant: answer],
tokenize=False) then tokenizer(text, max_length=512, truncation=True, add_special_tokens=False).
The token ids of every sample, in the order the calibration pipeline fed them to the model
(recorded with a hook on embed_tokens; the sampler reorders them by length), are written to the
golden so kvq calibrates on exactly the same tokens in the same order (order matters for the
moving-average `minmax` observer).

Recipes: tests/data/lifecycle/recipes/*.yaml (the same files the C++ tests load).

Writes (atomically):
  tests/data/lifecycle/calibration_goldens.json   samples + per recipe per layer q/k/v scales
  tests/data/lifecycle/lc_quantization_config_<recipe>.json  the `quantization_config` object
      of the checkpoint llm-compressor saved (json.dump(indent=2, sort_keys=True) text)
and keeps the saved checkpoints in /tmp/kvq_lc_ckpt_<recipe> for the interop test.

Run (from the repository root; a few CPU minutes):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_calibration_goldens.py
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "data" / "lifecycle"
RECIPES = [
    "kv_fp8_tensor_static_minmax",
    "kv_fp8_head_static_minmax",
    "kv_fp8_head_minmax",
    "attn_fp8_head_static_minmax",
]
SAVE_CHECKPOINT = {"kv_fp8_head_static_minmax", "attn_fp8_head_static_minmax"}
ONE_RUN_DOC = (
    "One real llm-compressor oneshot run (recipe attn_fp8_head_static_minmax: q+k+v, real "
    "hooks, real observers, saved checkpoint). The kv-only recipes' scales come from extra "
    "llm-compressor Observer instances (registry classes, same args as the recipes) fed the very "
    "tensors the run's calibrate_key_hook / calibrate_value_hook receive, then get_qparams(): "
    "kv-only recipes calibrate exactly these k/v states because 0.14.0.1 calibrates with "
    "quantization disabled. Checked: the side attn_head static_minmax scales equal the real "
    "run's k/v scales bit for bit.")
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "datasets"]
NUM_SAMPLES = 64
MAX_LEN = 512


def ensure_model(model_dir: Path, gguf: Path, tmp_model: Path) -> Path:
    if (model_dir / "config.json").exists():
        return model_dir
    if (tmp_model / "config.json").exists():
        return tmp_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tmp_model.mkdir(parents=True, exist_ok=True)
    # A GGUF-loaded model refuses save_pretrained (hf_quantizer GGUF): rebuild a plain fp32
    # LlamaForCausalLM from the same config and the dequantized state dict.
    cfg = model.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    plain = type(model)(cfg).to(torch.float32)
    plain.load_state_dict(model.state_dict())
    plain.save_pretrained(str(tmp_model))
    tok.save_pretrained(str(tmp_model))
    return tmp_model


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def gsm8k_token_ids(tok, path: str, max_len: int) -> list[list[int]]:
    """Every GSM8K row of `path` as llm-compressor's kv-cache example feeds it: the chat template
    over [user: question, assistant: answer] as text, then tokenized without special tokens and
    truncated to max_len."""
    ids = []
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        text = tok.apply_chat_template(
            [{"role": "user", "content": r["question"]},
             {"role": "assistant", "content": r["answer"]}],
            tokenize=False,
        )
        ids.append(tok(text, padding=False, max_length=max_len, truncation=True,
                       add_special_tokens=False)["input_ids"])
    return ids


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default="/root/.cache/kvq/SmolLM2-135M-Instruct")
    ap.add_argument("--gguf", default="/root/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--tmp-model", default="/tmp/kvq_ref_smollm2_fp32")
    ap.add_argument("--gsm8k", default="/work/shared/data/gsm8k/train.jsonl")
    ap.add_argument("--recipes", nargs="*", default=RECIPES)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)

    from datasets import Dataset
    from llmcompressor import oneshot
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_path = ensure_model(Path(args.model_dir), Path(args.gguf), Path(args.tmp_model))
    tok = AutoTokenizer.from_pretrained(str(model_path))
    ids = gsm8k_token_ids(tok, args.gsm8k, MAX_LEN)[:NUM_SAMPLES]
    ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})

    golden = {
        "what": "llm-compressor oneshot q/k/v scales (fp32 model), per recipe, per layer",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "model_source": str(model_path),
        "dataset": "gsm8k train.jsonl rows sample_indices, chat template user/assistant, "
                   "add_special_tokens=False, max_length 512",
        "sample_indices": list(range(NUM_SAMPLES)),
        "max_seq_length": MAX_LEN,
        "samples_rendered": ids,
        "method": ONE_RUN_DOC,
        "recipes": {},
    }
    from compressed_tensors.quantization import QuantizationArgs
    from llmcompressor.modifiers.quantization.quantization import mixin
    from llmcompressor.observers import Observer

    model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
    n_layers = len(model.model.layers)
    # Side observers: the real llm-compressor observer classes, fed the exact tensors the real
    # calibration hooks receive (same call, same order).
    side_specs = {
        "kv_fp8_tensor_static_minmax": ("tensor", "static_minmax"),
        "kv_fp8_head_static_minmax": ("attn_head", "static_minmax"),
        "kv_fp8_head_minmax": ("attn_head", "minmax"),
    }
    side = {}
    for rname, (strategy, obs) in side_specs.items():
        for i in range(n_layers):
            for b in ("k", "v"):
                a = QuantizationArgs(num_bits=8, type="float", strategy=strategy,
                                     symmetric=True, dynamic=False, observer=obs)
                side[(rname, i, b)] = Observer.load_from_registry(obs, base_name=b, args=a)
    layer_of = {id(l.self_attn): i for i, l in enumerate(model.model.layers)}
    orig_k, orig_v = mixin.calibrate_key_hook, mixin.calibrate_value_hook

    def key_hook(module, states):
        for rname in side_specs:
            side[(rname, layer_of[id(module)], "k")](states)
        return orig_k(module, states)

    def value_hook(module, states):
        for rname in side_specs:
            side[(rname, layer_of[id(module)], "v")](states)
        return orig_v(module, states)

    mixin.calibrate_key_hook, mixin.calibrate_value_hook = key_hook, value_hook
    seen: list[list[int]] = []

    def rec(_m, inp, _out):
        seen.append(inp[0][0].tolist())

    h = model.model.embed_tokens.register_forward_hook(rec)
    name = "attn_fp8_head_static_minmax"
    oneshot(model=model, dataset=ds, recipe=str(OUT_DIR / "recipes" / f"{name}.yaml"),
            max_seq_length=MAX_LEN, num_calibration_samples=NUM_SAMPLES,
            shuffle_calibration_samples=False, batch_size=1, pipeline="basic")
    h.remove()
    mixin.calibrate_key_hook, mixin.calibrate_value_hook = orig_k, orig_v
    assert len(seen) == NUM_SAMPLES, len(seen)

    def entry(t):
        vals = t.detach().float().flatten().tolist()
        e = {"values": vals, "shape": list(t.shape), "dtype": str(t.dtype)}
        # torch.empty garbage (never written by update_qparams): keep the golden valid JSON and
        # say so instead of storing it.
        if t.dtype.is_floating_point and "zero_point" not in str(t) and any(
                not math.isfinite(v) or v <= 1e-30 or v > 1e6 for v in vals):
            e = {"uncalibrated_in_reference": True, "shape": list(t.shape), "dtype": str(t.dtype)}
        return e

    layers = []
    for layer in model.model.layers:
        a = layer.self_attn
        d = {}
        for b in ("q", "k", "v"):
            d[f"{b}_scale"] = entry(getattr(a, f"{b}_scale"))
            if hasattr(a, f"{b}_zero_point"):
                d[f"{b}_zero_point"] = entry(getattr(a, f"{b}_zero_point"))
        layers.append(d)
    golden["recipes"][name] = {"layers": layers, "source": "oneshot (real run)"}
    for rname in side_specs:
        layers = []
        for i in range(n_layers):
            d = {}
            for b in ("k", "v"):
                d[f"{b}_scale"] = entry(side[(rname, i, b)].get_qparams()["scale"])
            layers.append(d)
        golden["recipes"][rname] = {"layers": layers, "source": "side observers of the same run"}
    # The side static_minmax attn_head observers must agree with the real run's k/v scales.
    for i in range(n_layers):
        for b in ("k", "v"):
            assert golden["recipes"]["kv_fp8_head_static_minmax"]["layers"][i][f"{b}_scale"]["values"] == \
                golden["recipes"][name]["layers"][i][f"{b}_scale"]["values"], (i, b)

    ckpt = Path(f"/tmp/kvq_lc_ckpt_{name}")
    shutil.rmtree(ckpt, ignore_errors=True)
    model.save_pretrained(str(ckpt))
    tok.save_pretrained(str(ckpt))
    qc = json.load(open(ckpt / "config.json"))["quantization_config"]
    write_atomic(OUT_DIR / f"lc_quantization_config_{name}.json",
                 json.dumps(qc, indent=2, sort_keys=True) + "\n")
    golden["feed_order"] = [ids.index(s) for s in seen]
    write_atomic(OUT_DIR / "calibration_goldens.json", json.dumps(golden) + "\n")
    print("wrote", OUT_DIR / "calibration_goldens.json")


if __name__ == "__main__":
    main()
