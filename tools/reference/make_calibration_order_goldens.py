#!/usr/bin/env python3
"""Calibration-order goldens: which samples llm-compressor's oneshot calibrates on, in which
order, when the dataset holds more than num_calibration_samples — and the k/v scales that come out.

Reference: llmcompressor 0.14.0.1 + compressed-tensors 0.19.0, CPU, fp32, batch size 1, the
pipeline oneshot infers (sequential: what a user gets; its sample draw differs from "basic"'s,
see below). The model preparation is make_calibration_goldens.py's.

Data: all 7,473 rows of GSM8K train, rendered as llm-compressor's kv-cache example does
(apply_chat_template([user: question, assistant: answer], tokenize=False), then
tokenizer(text, max_length=MAX_LEN, truncation=True, add_special_tokens=False)); MAX_LEN 256 so
that truncated samples tie in length. oneshot(num_calibration_samples=NUM_SAMPLES) is run twice:
  - shuffle_calibration_samples=False: its LengthAwareSampler (longest first);
  - shuffle_calibration_samples=True (its default) right after torch.manual_seed(SEED): its
    RandomSampler seeds itself from torch's global generator, so the seed set just before
    oneshot decides the samples. The sequential pipeline iterates the DataLoader twice (one
    sample to trace the model, then the pass it caches and calibrates on) and every iteration
    draws the DataLoader's base seed, then the sampler's: the calibrated samples come from the
    fourth int64 draw after the seed (pipeline="basic" iterates once: the second). Checked here.
Recipe tests/data/lifecycle/recipes/kv_fp8_head_minmax.yaml: the moving-average minmax observer,
whose scales depend on the order as well as the selection.

The rows fed (recorded with a hook on embed_tokens and matched to the dataset) and every layer's
k/v scales go to tests/data/lifecycle/calibration_order_goldens.json.

Run (from the repository root; a few CPU minutes):
  ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}/bin/python tools/reference/make_calibration_order_goldens.py
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from make_calibration_goldens import ensure_model, gsm8k_token_ids, write_atomic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "tests" / "data" / "lifecycle" / "calibration_order_goldens.json"
RECIPE = REPO / "tests" / "data" / "lifecycle" / "recipes" / "kv_fp8_head_minmax.yaml"
PACKAGES = ["torch", "transformers", "compressed-tensors", "llmcompressor", "datasets"]
NUM_SAMPLES = 16
MAX_LEN = 256
SEED = 1234


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default="/root/.cache/kvq/SmolLM2-135M-Instruct")
    ap.add_argument("--gguf", default="/root/.cache/kvq/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--tmp-model", default="/tmp/kvq_ref_smollm2_fp32")
    ap.add_argument("--gsm8k", default="/work/shared/data/gsm8k/train.jsonl")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from datasets import Dataset
    from llmcompressor import oneshot
    from torch.utils.data import RandomSampler
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_path = ensure_model(Path(args.model_dir), Path(args.gguf), Path(args.tmp_model))
    tok = AutoTokenizer.from_pretrained(str(model_path))
    ids = gsm8k_token_ids(tok, args.gsm8k, MAX_LEN)
    ds = Dataset.from_dict({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]})
    lengths = [len(x) for x in ids]

    golden = {
        "what": "llm-compressor oneshot: the GSM8K train rows it calibrates on, in feed order, "
                "and the kv_fp8_head_minmax k/v scales, for both shuffle_calibration_samples",
        "versions": {p: importlib.metadata.version(p) for p in PACKAGES},
        "dataset": "gsm8k train.jsonl, all rows, chat template user/assistant, "
                   "add_special_tokens=False",
        "rows": len(ids),
        "num_calibration_samples": NUM_SAMPLES,
        "max_seq_length": MAX_LEN,
        "recipe": RECIPE.name,
        "runs": {},
    }
    for shuffle in (False, True):
        model = AutoModelForCausalLM.from_pretrained(str(model_path), dtype=torch.float32)
        seen: list[list[int]] = []
        h = model.model.embed_tokens.register_forward_hook(
            lambda _m, inp, _o: seen.append(inp[0][0].tolist()))
        if shuffle:
            torch.manual_seed(SEED)
        oneshot(model=model, dataset=ds, recipe=str(RECIPE), max_seq_length=MAX_LEN,
                num_calibration_samples=NUM_SAMPLES, shuffle_calibration_samples=shuffle,
                batch_size=1)
        h.remove()
        # The sequential pipeline runs the embedding's subgraph twice (calibrate, propagate).
        assert len(seen) == 2 * NUM_SAMPLES and seen[:NUM_SAMPLES] == seen[NUM_SAMPLES:]
        fed = []
        for s in seen[:NUM_SAMPLES]:
            candidates = [i for i, x in enumerate(ids) if x == s]
            assert len(candidates) == 1, "a fed sample matches several rows"
            fed.append(candidates[0])
        if shuffle:
            torch.manual_seed(SEED)
            for _ in range(3):
                torch.empty((), dtype=torch.int64).random_()
            assert fed == list(RandomSampler(range(len(ids)), num_samples=NUM_SAMPLES)), fed
        else:
            order = torch.argsort(torch.tensor(lengths), descending=True).tolist()
            assert fed == order[:NUM_SAMPLES], fed
        layers = []
        for layer in model.model.layers:
            a = layer.self_attn
            layers.append({f"{b}_scale": a.__getattr__(f"{b}_scale").detach().float().flatten().tolist()
                           for b in ("k", "v")})
        golden["runs"]["shuffled" if shuffle else "longest_first"] = {
            "shuffle_calibration_samples": shuffle,
            "seed": SEED if shuffle else None,
            "pipeline": "sequential (inferred)",
            "fed_rows": fed,
            "fed_lengths": [lengths[i] for i in fed],
            "layers": layers,
        }
    write_atomic(OUT, json.dumps(golden) + "\n")
    print("wrote", OUT)


if __name__ == "__main__":
    main()
