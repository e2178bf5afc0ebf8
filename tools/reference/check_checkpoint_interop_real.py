#!/usr/bin/env python3
"""Checkpoint interop on the default model (SmolLM2-135M-Instruct), both directions.

(A) transformers (+ compressed-tensors) loads a checkpoint kvq saved: kvq's FP8 attn_head KV
    checkpoint (examples/recipes/kv_fp8_head.yaml, 16 GSM8K-train samples of <= 128 tokens) is
    made by the C++ model test InteropReal.TransformersLoadsKvqCheckpoint
    (tests/model/lifecycle/interop_real_test.cc), which this script runs with
    KVQ_INTEROP_REAL_SAVE_DIR; transformers loads it (fp32, eager attention) and computes the
    last-position logits of PROMPTS with compressed-tensors' kv fake quantization.
(B) kvq loads checkpoints llm-compressor saved: `oneshot` with examples/recipes/kv_fp8_head.yaml
    and kv_fp8_tensor.yaml (kv-only: llm-compressor 0.14.0.1 never writes q_scale for attention
    config groups) on the fp32 model, calibration data GSM8K train rows 0..15 rendered as in
    make_calibration_goldens.py (chat template user/assistant, add_special_tokens=False) with
    max_length 128 — the same tokens kvq's unshuffled loader gives the model test — CPU, batch
    size 1, pipeline "basic"; model.save_pretrained + tokenizer.save_pretrained into
    WORK/lc_<recipe>; transformers loads each directory back and computes the same logits.
kvq's side of every case is measured by running the model tests with KVQ_INTEROP_REAL_DUMP_DIR
(kvq's token ids and last-position logits, with the quantization and with it disabled; for (B)
on the very directories llm-compressor wrote, KVQ_LC_REAL_CHECKPOINTS=WORK). The script checks
that kvq's token ids equal transformers' tokenizer's and records every max |logit diff| (full
vocabulary), for the quantized forward and for both sides with the quantization disabled.

The FP8 k/v forward is chaotic under fp32 rounding noise (an element within rounding noise of
an FP8 code midpoint rounds either way depending on summation order; each flip perturbs all
later layers). To show the size of that effect the script measures `reference_self_noise`:
transformers against itself with the k_proj, v_proj and down_proj weights scaled by
1 + 1e-7·N(0,1) (NOISE_SEEDS seeds, max per prompt). The pass criteria are: quantization off
<= 1e-3 (TOLERANCE); FP8 k/v <= QUANTIZED_TOLERANCE (the order of the self-noise); scales
equal; llm-compressor's weights equal the source's.

Writes (atomically):
  tests/data/lifecycle/interop_real.json
      versions, prompts (text + ids), per case: scales (as stored in the file, and whether
      transformers registered exactly those), measured logits max |diff| per prompt (quantized
      and quantization off), reference_self_noise, quantization_effect (transformers' quantized
      vs unquantized logits); (B) also llm-compressor's config.json verbatim, whether its
      model.safetensors holds the default model's tensors bit for bit plus exactly the k/v
      scales, and how far its k/v scales are from kvq's checkpoint's (same samples;
      informational).
  tests/data/lifecycle/interop_real.safetensors   [3, 576] fp32 each: transformers' final-norm
      hidden state at the last position of every prompt (logits = hidden · lm_headᵀ; the error
      of that reconstruction against transformers' own logits is recorded):
        kvq_fp8_head.last_hidden      kvq's checkpoint
        lc_<recipe>.last_hidden       llm-compressor's checkpoints
        unquantized.last_hidden       quantization disabled (the same for all three: same
                                      weights; checked)
Then it runs the model tests once more as CI does (no environment) as a final check.

Run (from the repository root; needs a build and the converted default model; ~2 CPU minutes):
  cmake --preset release && cmake --build build --target test_model_lifecycle
  CUDA_VISIBLE_DEVICES= OMP_NUM_THREADS=1 ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python \\
      tools/reference/check_checkpoint_interop_real.py [--test-binary build/tests/test_model_lifecycle]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import torch  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "lifecycle"
OUT_JSON = DATA / "interop_real.json"
OUT_ST = DATA / "interop_real.safetensors"
HOME = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache" / "kvq"))
# The same texts as kPrompts in tests/model/lifecycle/interop_real_test.cc.
PROMPTS = [
    "Hello my name is",
    "The capital of France is",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in "
    "May. How many clips did Natalia sell altogether in April and May?",
]
LC_RECIPES = ["kv_fp8_head", "kv_fp8_tensor"]
NUM_SAMPLES = 16
MAX_LEN = 128
TOLERANCE = 1e-3
QUANTIZED_TOLERANCE = 0.5
NOISE_SEEDS = 4
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "safetensors",
            "datasets", "tokenizers"]
QPARAM_SUFFIXES = ("q_scale", "k_scale", "v_scale", "q_zero_point", "k_zero_point",
                   "v_zero_point")


def run_tests(binary: Path, gtest_filter: str, env_extra: dict[str, str]) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", KVQ_REQUIRE_MODEL="1", **env_extra)
    cmd = [str(binary), f"--gtest_filter={gtest_filter}"]
    print("+", " ".join(f"{k}={v}" for k, v in env_extra.items()), *cmd, flush=True)
    r = subprocess.run(cmd, env=env)
    if r.returncode != 0:
        sys.exit(f"{cmd} failed with {r.returncode}")


def load_dump(path: Path) -> tuple[list[list[int]], torch.Tensor, torch.Tensor]:
    """kvq's ids, quantized and unquantized last-position logits [P, vocab]."""
    from safetensors.torch import load_file
    d = load_file(str(path))
    return ([d[f"ids.{i}"].tolist() for i in range(len(PROMPTS))], d["logits"],
            d["logits_unquantized"])


def self_noise(load, path: Path, ids: list[list[int]], base: torch.Tensor) -> list[float]:
    """Max |logit diff| per prompt of the reference against itself with the k/v/down_proj
    weights scaled by 1 + 1e-7·N(0,1) (fp32 rounding-level noise), over NOISE_SEEDS seeds."""
    worst = [0.0] * len(ids)
    for seed in range(NOISE_SEEDS):
        m = load(path)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for layer in m.model.layers:
                for lin in (layer.self_attn.k_proj, layer.self_attn.v_proj, layer.mlp.down_proj):
                    lin.weight.mul_(1 + 1e-7 * torch.randn(lin.weight.shape, generator=g))
        logits, _ = last_position(m, ids)
        worst = [max(w, d) for w, d in zip(worst, max_diffs(logits, base))]
    return worst


def last_position(model, ids: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits [P, vocab] and final-norm hidden states [P, hidden] at the last position."""
    hidden = []
    h = model.model.norm.register_forward_hook(lambda _m, _i, out: hidden.append(out[0, -1]))
    logits = []
    with torch.no_grad():
        for x in ids:
            logits.append(model(torch.tensor([x])).logits[0, -1].float())
    h.remove()
    return torch.stack(logits), torch.stack(hidden).float()


def scales_of(path: Path) -> tuple[dict[str, list[float]], dict[str, torch.Tensor]]:
    from safetensors import safe_open
    f = safe_open(str(path / "model.safetensors"), "pt")
    tensors = {k: f.get_tensor(k) for k in f.keys() if k.endswith(QPARAM_SUFFIXES)}
    return {k: v.float().flatten().tolist() for k, v in tensors.items()}, tensors


def registered_equal(model, file_tensors: dict[str, torch.Tensor]) -> bool:
    """transformers registered exactly the file's q/k/v params (same names, dtype, values)."""
    params = {n: p for n, p in model.named_parameters() if n.endswith(QPARAM_SUFFIXES)}
    return sorted(params) == sorted(file_tensors) and all(
        torch.equal(params[n].detach().to(file_tensors[n].dtype), file_tensors[n])
        for n in params)


def max_diffs(a: torch.Tensor, b: torch.Tensor) -> list[float]:
    return [float((a[i] - b[i]).abs().max()) for i in range(a.shape[0])]


def write_atomic(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".")
    os.close(fd)
    write(tmp)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=str(HOME / "SmolLM2-135M-Instruct"))
    ap.add_argument("--test-binary", default=str(REPO / "build" / "tests" / "test_model_lifecycle"))
    ap.add_argument("--gsm8k", default=str(REPO.parent / "shared" / "data" / "gsm8k" /
                                           "train.jsonl"))
    ap.add_argument("--work", default="/tmp/kvq_interop_real")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    from compressed_tensors.quantization import disable_quantization
    from datasets import Dataset
    from llmcompressor import oneshot
    from safetensors import safe_open
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir, work, binary = Path(args.model_dir), Path(args.work), Path(args.test_binary)
    shutil.rmtree(work, ignore_errors=True)
    (work / "dump").mkdir(parents=True)
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    ids = [tok(p, add_special_tokens=False)["input_ids"] for p in PROMPTS]

    def load(path: Path):
        m = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32,
                                                 attn_implementation="eager")
        return m.eval()

    rec = {
        "what": "checkpoint interop on the default model: transformers + compressed-tensors vs "
                "kvq fake-quant, last-position logits of 3 prompts",
        "generator": "tools/reference/check_checkpoint_interop_real.py",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "python": platform.python_version(),
        "model": model_dir.name,
        "dtype": "float32",
        "attn_implementation": "eager",
                "prompts": [{"text": t, "ids": x} for t, x in zip(PROMPTS, ids)],
    }
    goldens: dict[str, torch.Tensor] = {}
    failures = []
    logits_of: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # case -> (quantized, plain)

    def reference(case: str, path: Path) -> dict:
        """transformers on one checkpoint directory: scales, logits, hidden states, noise."""
        m = load(path)
        scales, tensors = scales_of(path)
        logits, hidden = last_position(m, ids)
        w = m.get_output_embeddings().weight.detach().double()
        out = {
            "quantization_status": sorted({str(getattr(l.self_attn, "quantization_status", None))
                                           for l in m.model.layers}),
            "scales_loaded_equal": registered_equal(m, tensors),
            "scale_dtype": "/".join(sorted({str(t.dtype).removeprefix("torch.")
                                            for t in tensors.values()})),
            "scale_shape": (lambda s: list(next(iter(s))) if len(s) == 1 else None)(
                {tuple(t.shape) for t in tensors.values()}),
            "scales": scales,
            "hidden_to_logits_max_abs_error":
                float((hidden.double() @ w.T - logits.double()).abs().max()),
        }
        m.apply(disable_quantization)
        plain, plain_hidden = last_position(m, ids)
        del m
        out["quantization_effect"] = max_diffs(logits, plain)
        out["reference_self_noise"] = self_noise(load, path, ids, logits)
        goldens[f"{case}.last_hidden"] = hidden.contiguous()
        if "unquantized.last_hidden" not in goldens:
            goldens["unquantized.last_hidden"] = plain_hidden.contiguous()
        # Same weights in every checkpoint: the same unquantized forward, bit for bit.
        out["unquantized_equal_recorded"] = torch.equal(goldens["unquantized.last_hidden"],
                                                        plain_hidden)
        logits_of[case] = (logits, plain)
        return out

    def measure(case: str, r: dict) -> None:
        """kvq's dumped logits of `case` against transformers'; records and checks."""
        kvq_ids, q, plain = load_dump(work / "dump" / f"{case}.safetensors")
        if kvq_ids != ids:
            sys.exit(f"kvq's token ids differ from transformers': {kvq_ids} vs {ids}")
        r["logits_max_abs_diff"] = max_diffs(q, logits_of[case][0])
        r["logits_max_abs_diff_unquantized"] = max_diffs(plain, logits_of[case][1])
        ok = (r["scales_loaded_equal"] and r["unquantized_equal_recorded"]
              and r["hidden_to_logits_max_abs_error"] <= 1e-4
              and max(r["logits_max_abs_diff_unquantized"]) <= TOLERANCE
              and max(r["logits_max_abs_diff"]) <= QUANTIZED_TOLERANCE
              and r.get("weights_equal_source", True)
              and r["scale_dtype"] == "float32" and r["scale_shape"])
        if not ok:
            failures.append(f"{case}: " + json.dumps(
                {k: v for k, v in r.items() if k not in ("config", "scales")}))

    # (A) kvq's checkpoint in transformers.
    kvq_ckpt = work / "kvq_ckpt"
    run_tests(binary, "InteropReal.TransformersLoadsKvqCheckpoint",
              {"KVQ_INTEROP_REAL_SAVE_DIR": str(kvq_ckpt),
               "KVQ_INTEROP_REAL_DUMP_DIR": str(work / "dump")})
    rec["kvq_checkpoint"] = {
        "recipe": "examples/recipes/kv_fp8_head.yaml",
        "calibration": f"gsm8k train rows 0..{NUM_SAMPLES - 1}, max length {MAX_LEN} (kvq)",
        **reference("kvq_fp8_head", kvq_ckpt),
    }
    measure("kvq_fp8_head", rec["kvq_checkpoint"])

    # (B) llm-compressor's checkpoints: oneshot, save, reload in transformers.
    rows = [json.loads(l) for l in open(args.gsm8k) if l.strip()][:NUM_SAMPLES]
    calib = []
    for r in rows:
        text = tok.apply_chat_template(
            [{"role": "user", "content": r["question"]},
             {"role": "assistant", "content": r["answer"]}], tokenize=False)
        calib.append(tok(text, padding=False, max_length=MAX_LEN, truncation=True,
                         add_special_tokens=False)["input_ids"])
    ds = Dataset.from_dict({"input_ids": calib, "attention_mask": [[1] * len(x) for x in calib]})
    src = safe_open(str(model_dir / "model.safetensors"), "pt")
    src_config = json.load(open(model_dir / "config.json"))
    rec["llm_compressor"] = {}
    for recipe in LC_RECIPES:
        out = work / f"lc_{recipe}"
        m = load(model_dir)
        oneshot(model=m, processor=tok, dataset=ds,
                recipe=str(REPO / "examples" / "recipes" / f"{recipe}.yaml"),
                max_seq_length=MAX_LEN, num_calibration_samples=NUM_SAMPLES,
                shuffle_calibration_samples=False, batch_size=1, pipeline="basic")
        m.save_pretrained(str(out))
        tok.save_pretrained(str(out))
        del m
        f = safe_open(str(out / "model.safetensors"), "pt")
        r = reference(f"lc_{recipe}", out)
        config = json.load(open(out / "config.json"))
        rec["llm_compressor"][recipe] = {
            "recipe": f"examples/recipes/{recipe}.yaml",
            "calibration": f"gsm8k train rows 0..{NUM_SAMPLES - 1}, chat template, "
                           f"add_special_tokens=False, max_length {MAX_LEN}",
            "files": sorted(os.listdir(out)),
            "config": config,
            "config_keys_changed": sorted(k for k in set(config) | set(src_config)
                                          if config.get(k) != src_config.get(k)),
            "weights_equal_source":
                sorted(src.keys()) == sorted(k for k in f.keys() if k not in r["scales"])
                and all(torch.equal(src.get_tensor(k), f.get_tensor(k)) for k in src.keys()),
            "scales_max_rel_diff_vs_kvq_checkpoint": max(
                abs(a - b) / b for n in r["scales"]
                for a, b in zip(r["scales"][n], rec["kvq_checkpoint"]["scales"][n]))
            if recipe == "kv_fp8_head" else None,
            **r,
        }

    # kvq on the directories llm-compressor wrote.
    run_tests(binary, "InteropReal.KvqLoadsLlmCompressorCheckpoint*",
              {"KVQ_LC_REAL_CHECKPOINTS": str(work),
               "KVQ_INTEROP_REAL_DUMP_DIR": str(work / "dump")})
    for recipe in LC_RECIPES:
        measure(f"lc_{recipe}", rec["llm_compressor"][recipe])

    rec["tolerance_unquantized"] = TOLERANCE
    rec["tolerance_fp8_kv"] = QUANTIZED_TOLERANCE
    rec["failures"] = failures
    rec["pass"] = not failures
    write_atomic(OUT_JSON, lambda p: Path(p).write_text(json.dumps(rec, indent=1) + "\n"))
    # One metadata key: safetensors writes the metadata map in hash order.
    write_atomic(OUT_ST, lambda p: save_file(dict(sorted(goldens.items())), p, metadata={
        "info": json.dumps({"generator": rec["generator"], "versions": rec["versions"]})}))
    cases = [("kvq checkpoint (A)", rec["kvq_checkpoint"])] + [
        (f"llm-compressor {r} (B)", rec["llm_compressor"][r]) for r in LC_RECIPES]
    for name, r in cases:
        fmt = lambda xs: " ".join("%.3g" % x for x in xs)  # noqa: E731
        print(f"{name}: max |logit diff| per prompt: quantization off {fmt(r['logits_max_abs_diff_unquantized'])}"
              f" | FP8 k/v {fmt(r['logits_max_abs_diff'])} | reference self-noise "
              f"{fmt(r['reference_self_noise'])} | quantization effect "
              f"{fmt(r['quantization_effect'])}")
    print("wrote", OUT_JSON, OUT_ST)
    if failures:
        sys.exit("FAILED: " + "; ".join(failures))
    # As CI runs it: kvq's checkpoint re-created, llm-compressor's rebuilt from the goldens.
    run_tests(binary, "InteropReal.*", {})

if __name__ == "__main__":
    main()
