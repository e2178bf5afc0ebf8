#!/usr/bin/env python3
"""Paired difference of two `kvq perplexity --json` runs over the same windows (stdlib only).

  bench/paired_nll.py BASE.json OTHER.json [--resamples 10000] [--seed 0]

Prints each run's PPL and the mean ΔNLL per scored token (OTHER - BASE) with a 95 % paired
bootstrap interval over windows (resampling whole windows, as `kvq compare` does), and ΔPPL.
Both runs must score the same windows (same text, ctx, stride, max-windows, decode-from).
"""
import argparse
import json
import random
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    a, b = (json.load(open(p)) for p in (args.base, args.other))
    for key in ("ctx", "stride", "decode_from", "tokens_scored", "windows", "text_tokens"):
        if a.get(key) != b.get(key):
            sys.exit(f"paired_nll: the runs differ in {key}: {a.get(key)} vs {b.get(key)}")
    diff = [y - x for x, y in zip(a["window_nll_sum"], b["window_nll_sum"])]
    n = a["tokens_scored"]
    rng = random.Random(args.seed)
    boot = sorted(sum(diff[rng.randrange(len(diff))] for _ in diff) / n
                  for _ in range(args.resamples))
    lo, hi = boot[int(0.025 * args.resamples)], boot[int(0.975 * args.resamples) - 1]
    for name, r in (("base", a), ("other", b)):
        print(f"{name:5s} {r.get('kv_cache', '?'):16s} PPL {r['ppl']:.4f}  NLL {r['nll']:.6f}")
    sig = "" if lo <= 0 <= hi else "  (significant at 5%)"
    print(f"ΔNLL {sum(diff) / n:+.6f} nats/token, 95% CI [{lo:+.6f}, {hi:+.6f}] over "
          f"{len(diff)} windows / {n} tokens; ΔPPL {b['ppl'] - a['ppl']:+.4f}{sig}")


if __name__ == "__main__":
    main()
