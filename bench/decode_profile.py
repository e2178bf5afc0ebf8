#!/usr/bin/env python3
"""Where the time of one decode step goes, per KV format and context (issue 22).

Samples `kvq bench` with Linux perf (Debian's linux-perf; software cpu-clock sampling works in a VM
without hardware counters) and sorts the samples by the function they landed in: weight GEMV,
attention scores (K rows), P·V (V rows), softmax, KV write, pointwise layers, threading, kernel,
other. The synthetic fill of the cache to the context and the model load are not decode, so each
(format, context) runs twice, with --decode-steps SHORT and LONG, and the profile is the
difference of the two sample counts: exactly (LONG - SHORT) x 2 decode steps (a warm-up and one
timed repeat each), nothing else. ms per step comes from the LONG run's JSON.

  bench/decode_profile.py --model ~/.cache/kvq/SmolLM2-135M-Instruct \\
      --kv-cache bf16,fp8,int8,int4,nvfp4,int4_g32 --contexts 8192,16384 --threads 1 > profile.md

Run it on a quiet machine: sampling is per process, but memory bandwidth is shared.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter

# (category, regex on the sampled symbol); the first match wins.
CATEGORIES = [
    ("weight GEMV", r"gemv|batch_row|sgemm|widen_bf16"),
    ("K scores", r"dot_rows|DotRows|int8_query|Int8Query|scores"),
    ("P·V", r"axpy_rows|AxpyRows"),
    ("softmax", r"softmax|fast_exp|expf|__exp"),
    ("KV write", r"quantize|KvBuffer::write|encode|fix_dynamic"),
    ("norm/rope/act", r"rms_norm|rope|silu|swiglu|gelu|add_rows|residual|embedding"),
    ("threading", r"gomp|GOMP|omp_"),
    ("kernel", r"^\[k\]"),
]


def categorise(symbol):
    for name, pattern in CATEGORIES:
        if re.search(pattern, symbol):
            return name
    return "other"


def sample_counts(kvq, model, kv, context, threads, weights, steps, freq):
    """Samples per category of one `kvq bench` run, and its JSON report."""
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        cmd = ["perf", "record", "-q", "-F", str(freq), "-o", data, kvq, "bench", "--model", model,
               "--weights", weights, "--threads", str(threads), "--contexts", str(context),
               "--kv-cache", kv, "--repeats", "1", "--decode-steps", str(steps), "--prefill", "16",
               "--no-machine", "--json"]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
        report = json.loads(run.stdout)
        out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
                              "--stdio", "-F", "sample,symbol"],
                             capture_output=True, text=True, check=True).stdout
    counts = Counter()
    for line in out.splitlines():
        m = re.match(r"\s*(\d+)\s+(\[[.k]\])\s+(.*)", line)
        if not m:
            continue
        symbol = m.group(3).strip() if m.group(2) == "[.]" else "[k] " + m.group(3).strip()
        counts[categorise(symbol)] += int(m.group(1))
    return counts, report


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kvq", default="build/kvq")
    ap.add_argument("--model", required=True)
    ap.add_argument("--kv-cache", default="bf16,fp8,int8,int4,nvfp4,int4_g32")
    ap.add_argument("--contexts", default="8192,16384")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--weights", default="bf16")
    ap.add_argument("--short", type=int, default=4, help="decode steps of the baseline run")
    ap.add_argument("--long", type=int, default=24, help="decode steps of the profiled run")
    ap.add_argument("--freq", type=int, default=2999, help="perf samples per second")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        sys.exit("decode_profile: `perf` not found (apt-get install linux-perf)")
    names = [n for n, _ in CATEGORIES] + ["other"]
    print(f"Decode step profile: {args.weights} weights, {args.threads} thread(s), "
          f"{args.long - args.short} x 2 steps per row (perf cpu-clock {args.freq} Hz, "
          f"difference of a {args.long}- and a {args.short}-step run)\n")
    print("| context | KV | ms/step | " + " | ".join(names) + " |")
    print("|---:|---|---:|" + "---:|" * len(names))
    for context in [int(c) for c in args.contexts.split(",")]:
        for kv in args.kv_cache.split(","):
            base, _ = sample_counts(args.kvq, args.model, kv, context, args.threads, args.weights,
                                    args.short, args.freq)
            full, report = sample_counts(args.kvq, args.model, kv, context, args.threads,
                                         args.weights, args.long, args.freq)
            diff = {n: max(0, full[n] - base[n]) for n in names}
            total = sum(diff.values()) or 1
            ms = report["decode"][0]["seconds_per_token_min"] * 1e3
            cells = " | ".join(f"{100.0 * diff[n] / total:.1f} %" for n in names)
            print(f"| {context} | {kv} | {ms:.1f} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
