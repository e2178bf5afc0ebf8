#!/usr/bin/env python3
"""Decode speed of two kvq binaries, interleaved in one run (old, new, old, new, ...).

Each round runs `kvq bench --json` of binary A then binary B with the same options, so slow
phases of a shared machine hit both; the table gives, per (threads, KV cache, context), the best
and the median ms per token of each binary over all rounds, B's speed-up over A (min / min), each
binary's speed-up of the KV format over the first --kv-cache entry (its reference, normally bf16),
and that speed-up against the bandwidth ideal (bytes per token of the reference / of the format).
The machine's DRAM read GB/s is measured once by binary A's first run (kvq bench's probe).

  bench/ab_decode.py --a /work/old/build/kvq --b build/kvq --model ~/.cache/kvq/SmolLM2-135M-Instruct \\
      --kv-cache bf16,fp8,int8,int4 --contexts 8192,16384 --threads 1,2 --rounds 2
  bench/ab_decode.py ... --kv-cache bf16,int8,int4 --contexts 2048 --batch 16   # kvq serve's step

Check the load first (uptime): nothing else should run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def bench(kvq, args, threads, probe):
    cmd = [kvq, "bench", "--model", args.model, "--weights", args.weights, "--threads",
           str(threads), "--contexts", args.contexts, "--kv-cache", args.kv_cache, "--repeats",
           str(args.repeats), "--decode-steps", str(args.steps), "--prefill", "16", "--json"]
    if args.batch != 1:  # kvq bench --batch: binaries from before it have no such flag
        cmd += ["--batch", str(args.batch)]
    if not probe:
        cmd.append("--no-machine")
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"ab_decode: {' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--a", required=True, help="the old kvq binary")
    ap.add_argument("--b", required=True, help="the new kvq binary")
    ap.add_argument("--model", required=True)
    ap.add_argument("--weights", default="bf16")
    ap.add_argument("--kv-cache", default="bf16,fp8,int8,int4,nvfp4")
    ap.add_argument("--contexts", default="8192,16384")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1,
                    help="sequences per decode step (kvq bench --batch); ms/token = step / batch")
    args = ap.parse_args()

    samples = {}  # (binary, threads, kv, ctx) -> [seconds per token, min of each run]
    medians = {}
    bytes_per_token = {}
    dram = None
    for r in range(args.rounds):
        for threads in [int(t) for t in args.threads.split(",")]:
            for name, kvq in (("A", args.a), ("B", args.b)):
                rep = bench(kvq, args, threads, probe=dram is None)
                for m in rep.get("machine", []):
                    if m.get("dram_read_gbs"):
                        dram = m["dram_read_gbs"]
                for d in rep["decode"]:
                    key = (name, threads, d["kv"], d["context"])
                    samples.setdefault(key, []).append(d["seconds_per_token_min"])
                    medians.setdefault(key, []).append(d["seconds_per_token_median"])
                    bytes_per_token[(d["kv"], d["context"])] = d["bytes_per_token"]
                print(f"ab_decode: round {r + 1}, {threads} thread(s), {name} done",
                      file=sys.stderr, flush=True)

    kvs = []
    for (_, _, kv, _) in samples:
        if kv not in kvs:
            kvs.append(kv)
    ref = kvs[0]
    print(f"DRAM read (kvq bench probe, first run): {dram:.1f} GB/s\n" if dram else "")
    print("| threads | KV | context | A ms/token min / median | B ms/token min / median | B / A "
          f"| A vs {ref} | B vs {ref} | ideal vs {ref} | B of ideal | B GB/s (of DRAM) |")
    print("|---:|---|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for threads in [int(t) for t in args.threads.split(",")]:
        for ctx in [int(c) for c in args.contexts.split(",")]:
            for kv in kvs:
                a = min(samples[("A", threads, kv, ctx)])
                b = min(samples[("B", threads, kv, ctx)])
                am = statistics.median(medians[("A", threads, kv, ctx)])
                bm = statistics.median(medians[("B", threads, kv, ctx)])
                a_ref = min(samples[("A", threads, ref, ctx)])
                b_ref = min(samples[("B", threads, ref, ctx)])
                ideal = bytes_per_token[(ref, ctx)] / bytes_per_token[(kv, ctx)]
                gbs = bytes_per_token[(kv, ctx)] / b / 1e9
                of_dram = f" ({100 * gbs / dram:.0f} %)" if dram else ""
                print(f"| {threads} | {kv} | {ctx} | {a * 1e3:.1f} / {am * 1e3:.1f} | "
                      f"{b * 1e3:.1f} / {bm * 1e3:.1f} | {a / b:.2f}x | {a_ref / a:.2f}x | "
                      f"{b_ref / b:.2f}x | {ideal:.2f}x | {100 * (b_ref / b) / ideal:.0f} % | "
                      f"{gbs:.1f}{of_dram} |")


if __name__ == "__main__":
    main()
