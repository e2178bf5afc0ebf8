#!/usr/bin/env python3
"""Recomputes lm-eval's WikiText-2 score of `kvq serve` with kvq's own forward (issue 19).

tools/lm_eval_serve.sh runs lm-eval's wikitext task (loglikelihood_rolling) against the server:
lm-eval tokenizes every article through the server's /tokenize, cuts it into its rolling windows
(lm_eval.utils.get_rolling_token_windows: the first window opens with a prefix token, the
tokenizer's bos or else eos, every window predicts up to max_length - 1 tokens, one token of
context) and sums the echoed prompt logprobs. This script scores the same strings (taken from
lm-eval's logged samples) with the same windows through `import kvq` — one fresh cache per
window, no HTTP — and prints both per-article totals and both word perplexities, so a
difference in the server's path (chunked prefill, batching, logprob plumbing) would show.

  PYTHONPATH=build/python python3 tools/lm_eval_wikitext_check.py \\
      --model ~/.cache/kvq/SmolLM2-135M-Instruct --kv-cache auto \\
      --samples lm_eval_out/SmolLM2-135M-Instruct-auto/*/samples_wikitext_kvq_*.jsonl
"""
import argparse
import glob
import json
import math
import re
import sys

import numpy as np

import kvq


def rolling_windows(tokens, prefix, max_seq_len):
    """lm_eval.utils.get_rolling_token_windows(context_len=1) + make_disjoint_window."""
    if not tokens:
        return
    first = min(max_seq_len, len(tokens))
    yield [prefix], tokens[:first]  # context [prefix], predict tokens[:first]
    predicted = first
    while predicted < len(tokens):
        n = min(len(tokens) - predicted, max_seq_len)
        end = predicted + n
        window = tokens[end - max_seq_len - 1:end - 1]
        pred = tokens[end - n:end]
        yield window[:len(window) - (len(pred) - 1)], pred
        predicted += n


def log_softmax_rows(logits):
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--kv-cache", default="auto", help="the server's --kv-cache")
    p.add_argument("--samples", required=True, help="lm-eval's samples_wikitext_kvq_*.jsonl")
    p.add_argument("--max-length", type=int, default=2048, help="lm-eval's max_length")
    p.add_argument("--limit", type=int, default=0, help="articles (0: all logged)")
    args = p.parse_args()

    paths = glob.glob(args.samples)
    if len(paths) != 1:
        sys.exit(f"--samples matches {len(paths)} files: {args.samples}")
    samples = [json.loads(line) for line in open(paths[0], encoding="utf-8")]
    samples.sort(key=lambda s: s["doc_id"])
    if args.limit:
        samples = samples[:args.limit]

    model = kvq.load_model(args.model)
    cfg = json.load(open(f"{args.model}/tokenizer_config.json", encoding="utf-8"))

    def special_id(key):
        tok = cfg.get(key)
        tok = tok.get("content") if isinstance(tok, dict) else tok
        ids = model.encode(tok) if tok else []
        return ids[0] if len(ids) == 1 else None

    prefix = special_id("bos_token") or special_id("eos_token")  # lm-eval's remote backend
    print(f"prefix token {prefix}, max_length {args.max_length}, {len(samples)} articles",
          file=sys.stderr)

    lm_total = kvq_total = 0.0
    words = tokens_scored = 0
    worst = 0.0
    for s in samples:
        text = s["arguments"]["gen_args_0"]["arg_0"]
        ids = model.encode(text)
        total = 0.0
        for context, pred in rolling_windows(ids, prefix, args.max_length - 1):
            inp = context + pred[:-1]
            cache = model.make_cache(capacity=len(inp), kv_cache=args.kv_cache)
            logits = np.asarray(model.forward(inp, cache), dtype=np.float64)  # [len(inp), vocab]
            lp = log_softmax_rows(logits[len(context) - 1:])  # rows predicting pred
            total += float(lp[np.arange(len(pred)), pred].sum())
            tokens_scored += len(pred)
        lm = float(s["resps"][0][0])
        lm_total += lm
        kvq_total += total
        worst = max(worst, abs(lm - total) / max(abs(lm), 1e-30))
        words += len(re.split(r"\s+", s["doc"]["page"]))  # lm-eval counts the original words
        print(f"  doc {s['doc_id']:3d}: {len(ids):6d} tokens  lm-eval {lm:14.4f}  "
              f"kvq {total:14.4f}  rel diff {abs(lm - total) / max(abs(lm), 1e-30):.2e}",
              file=sys.stderr)
    print(json.dumps({
        "articles": len(samples), "tokens_scored": tokens_scored, "words": words,
        "lm_eval_loglikelihood": lm_total, "kvq_loglikelihood": kvq_total,
        "max_rel_diff_per_article": worst,
        "lm_eval_word_perplexity": math.exp(-lm_total / words),
        "kvq_word_perplexity": math.exp(-kvq_total / words),
        "kvq_token_perplexity": math.exp(-kvq_total / tokens_scored)}, indent=2))


if __name__ == "__main__":
    main()
