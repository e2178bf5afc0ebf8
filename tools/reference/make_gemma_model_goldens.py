#!/usr/bin/env python3
"""Engine goldens for gemma-3-270m (base, Q4_K_M GGUF from scripts/fetch-model.sh --gemma).

Reference: transformers loading the GGUF directly (it dequantizes every tensor and subtracts 1
from the norm weights), Gemma3ForCausalLM, attn_implementation="eager", fp32, CPU.

Writes tests/data/engine/gemma3_golden.json (small; the logits themselves would be megabytes):
Token ids are llama.cpp's (llama-tokenize on the same GGUF, see make_gemma_tokenizer_goldens.py):
the tokenizer Gemma was trained with and kvq's; transformers 5.17's GGUF tokenizer splits words
differently.
  prompts[]: text, ids (= [<bos>] + llama-tokenize's ids without BOS) and, per position:
             logsumexp of the logits (fp64), argmax, the top-5 ids and logits, and the logits at
             SAMPLE_IDS.
  ppl:       wiki.test.raw read as bytes, tokenized once as a whole with <bos> first (stream =
             [<bos>] + ids); window i = stream[i*CTX, (i+1)*CTX) with its first token replaced by
             <bos> (llama-perplexity's convention; window 0 already starts with it), for
             i < WINDOWS, each from a fresh cache (what `kvq perplexity --ctx CTX --max-windows
             WINDOWS` does for a tokenizer that adds BOS); per window the sum of the CTX-1
             next-token NLLs (fp64) and ppl = exp(total / (WINDOWS*(CTX-1))). CTX >
             sliding_window, so the sliding layers' window is exercised.

Usage: /root/.cache/kvq/refvenv/bin/python tools/reference/make_gemma_model_goldens.py
           [--gguf PATH] [--wikitext PATH] [--llama-tokenize PATH]
"""

import argparse
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
import transformers
from make_gemma_tokenizer_goldens import tokenize
from transformers import AutoModelForCausalLM

ROOT = Path(__file__).resolve().parents[2]
KVQ_HOME = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache" / "kvq"))
PROMPTS = [
    "The capital of France is",
    "Robert Boulter is an English film and television actor. He had a guest-starring role",
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
]
SAMPLE_IDS = [int(x) for x in np.random.default_rng(0).choice(262144, 16, replace=False)]
CTX = 1024
WINDOWS = 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", type=Path, default=KVQ_HOME / "gemma-3-270m-q4_k_m.gguf")
    ap.add_argument("--wikitext", type=Path,
                    default=ROOT.parent / "shared" / "data" / "wikitext-2-raw" / "wiki.test.raw")
    ap.add_argument("--llama-tokenize", type=Path,
                    default=KVQ_HOME / "llama.cpp" / "build-0.3.36" / "bin" / "llama-tokenize")
    ap.add_argument("--out", type=Path,
                    default=ROOT / "tests" / "data" / "engine" / "gemma3_golden.json")
    args = ap.parse_args()
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / args.gguf.name).symlink_to(args.gguf.resolve())
        model = AutoModelForCausalLM.from_pretrained(d, gguf_file=args.gguf.name,
                                                     torch_dtype=torch.float32,
                                                     attn_implementation="eager")
    model.eval()
    bos = model.config.bos_token_id
    prompts = []
    with torch.no_grad():
        for text in PROMPTS:
            ids = [bos] + tokenize(args.llama_tokenize, args.gguf, text)
            logits = model(torch.tensor([ids])).logits[0].double()
            lse = torch.logsumexp(logits, dim=-1)
            top = torch.topk(logits, 5, dim=-1)
            prompts.append({
                "text": text,
                "ids": ids,
                "logsumexp": lse.tolist(),
                "argmax": logits.argmax(-1).tolist(),
                "top5_ids": top.indices.tolist(),
                "top5_logits": top.values.tolist(),
                "sample_logits": logits[:, SAMPLE_IDS].tolist(),
            })
            print(text[:40], "->", logits[-1].argmax().item())
        text = args.wikitext.read_bytes().decode("utf-8")
        all_ids = tokenize(args.llama_tokenize, args.gguf, text)
        stream = [bos] + all_ids
        nll_sums = []
        for w in range(WINDOWS):
            window = torch.tensor([[bos] + stream[w * CTX + 1:(w + 1) * CTX]])
            logits = model(window).logits[0].double()
            nll = torch.nn.functional.cross_entropy(logits[:-1], window[0, 1:], reduction="sum")
            nll_sums.append(nll.item())
            print(f"window {w}: ppl {math.exp(nll.item() / (CTX - 1)):.6f}")
    ppl = math.exp(sum(nll_sums) / (WINDOWS * (CTX - 1)))
    print(f"ppl over {WINDOWS} x {CTX}: {ppl:.6f} ({len(all_ids)} tokens in the file)")
    out = {
        "generator": "tools/reference/make_gemma_model_goldens.py",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "reference": "AutoModelForCausalLM.from_pretrained(dir, gguf_file=gemma-3-270m-q4_k_m.gguf, "
                     "torch_dtype=float32, attn_implementation='eager'), CPU",
        "sample_ids": SAMPLE_IDS,
        "prompts": prompts,
        "tokenizer": "llama-tokenize (llama.cpp), see make_gemma_tokenizer_goldens.py",
        "ppl": {"ctx": CTX, "windows": WINDOWS, "file_tokens": len(all_ids), "bos": bos,
                "window_first_ids": [[bos] + stream[w * CTX + 1:w * CTX + 8]
                                     for w in range(WINDOWS)],
                "window_nll_sum": nll_sums, "ppl": ppl},
    }
    args.out.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
