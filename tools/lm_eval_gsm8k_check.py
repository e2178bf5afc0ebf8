#!/usr/bin/env python3
"""Compares lm-eval's GSM8K answers from `kvq serve` with `kvq eval --task gsm8k` (issue 19).

tools/lm_eval_serve.sh logs lm-eval's samples (samples_gsm8k_kvq_*.jsonl: the generation of each
test question in "resps"); `kvq eval --task gsm8k --cache DIR` journals its own generations
(DIR/gsm8k-<scheme>-<key>.jsonl: "index", "generation"). Both are lm-eval's gsm8k task with the
chat template and few-shot as multiturn, greedy, so each question's text must be equal; this
prints the questions that differ and exits 1 when any does.

  tools/lm_eval_gsm8k_check.py lm_eval_out/M-auto/*/samples_gsm8k_kvq_*.jsonl \\
      /tmp/kvq-eval-cache/gsm8k-baseline-*.jsonl
"""
import glob
import json
import sys


def one(pattern):
    paths = glob.glob(pattern)
    if len(paths) != 1:
        sys.exit(f"{pattern}: matches {len(paths)} files")
    return [json.loads(line) for line in open(paths[0], encoding="utf-8") if line.strip()]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lm = {s["doc_id"]: s["resps"][0][0] for s in one(sys.argv[1])}
    kvq = {r["index"]: r["generation"] for r in one(sys.argv[2])}
    common = sorted(set(lm) & set(kvq))
    differ = [i for i in common if lm[i] != kvq[i]]
    for i in differ[:10]:
        print(f"question {i}:\n  lm-eval: {lm[i]!r}\n  kvq:     {kvq[i]!r}")
    print(json.dumps({"lm_eval_questions": len(lm), "kvq_questions": len(kvq),
                      "compared": len(common), "equal": len(common) - len(differ),
                      "differ": len(differ)}))
    sys.exit(1 if differ or not common else 0)


if __name__ == "__main__":
    main()
