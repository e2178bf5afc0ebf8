#!/usr/bin/env python3
"""The performance tables of docs/benchmarks.md from one command (stdlib only).

Runs, in one invocation on the same machine state:
  1. bench/bench_kernels: the decode attention kernel alone over the packed cache, every KV
     format at the given contexts, with BM_StreamRead (DRAM read bandwidth) in the same run;
  2. `kvq bench --json`: end-to-end prefill and decode per KV format, with the DRAM / sgemm
     probes of the same run, for each weight dtype;
  3. optionally bench/llama_cpp_compare.py (--llama): the side-by-side table against llama.cpp.
and prints one Markdown document: kernel ms / GB/s / % of DRAM, end-to-end speed-up of every KV
format over the 16-bit cache next to the bandwidth-ideal ratio (bytes read per step) and the
fraction of it reached, prefill tok/s and % of the sgemm peak.

  bench/perf_report.py                         # 1 thread, contexts 8192,16384, bf16 weights
  bench/perf_report.py --threads 2 --weights f32,bf16 --llama > report.md
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# quant::KvFormat order, then bench_kernels' +q8 variants (opt-in int8-query scores).
FORMATS = ["f32", "bf16", "f16", "fp8", "int8", "int4", "nvfp4", "int8+q8", "int4+q8", "nvfp4+q8"]
# Bytes of one K row + one V row (head_dim 64, values + in-row scales), as in formats.h.
PAIR_BYTES = {"f32": 512, "bf16": 256, "f16": 256, "fp8": 128, "int8": 128, "int4": 64,
              "nvfp4": 72, "int8+q8": 128, "int4+q8": 64, "nvfp4+q8": 72}
KV_HEADS = 3  # the kernel benchmark's layer: 9 query heads over 3 kv heads


def run(cmd, env=None):
    print("$ " + " ".join(cmd), file=sys.stderr)
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(f"perf_report: {' '.join(cmd[:2])} failed:\n{res.stderr[-2000:]}")
    return res.stdout


def kernel_table(args):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    ctx = "|".join(str(c) for c in args.contexts)
    out = run([str(args.bench_kernels), "--benchmark_repetitions=3",
               "--benchmark_report_aggregates_only=true", "--benchmark_format=json",
               f"--benchmark_filter=BM_DecodeAttention/fmt:[0-9]+/ctx:({ctx})|BM_StreamRead"],
              env)
    agg = {}
    for b in json.loads(out)["benchmarks"]:
        agg[(b["run_name"].replace("/real_time", ""), b.get("aggregate_name"))] = b
    stream = agg[("BM_StreamRead", "median")]["bytes_per_second"] / 1e9
    lines = [f"### Decode attention kernel alone ({args.threads} thread(s))", "",
             f"`bench_kernels`, min / median of 3; DRAM read (`BM_StreamRead`, median, same run): "
             f"{stream:.2f} GB/s. GB/s = packed K+V bytes of {KV_HEADS} kv heads × ctx rows / min "
             "time.", "",
             "| KV format | ctx | ms min | ms median | GB/s | of DRAM |", "|---|---:|---:|---:|---:|---:|"]
    for i, fmt in enumerate(FORMATS):
        for c in args.contexts:
            name = f"BM_DecodeAttention/fmt:{i}/ctx:{c}"
            if (name, "min") not in agg:
                continue
            mn = agg[(name, "min")]["real_time"] / 1e6  # ns -> ms
            md = agg[(name, "median")]["real_time"] / 1e6
            gbs = KV_HEADS * c * PAIR_BYTES[fmt] / (mn / 1e3) / 1e9
            lines.append(f"| {fmt} | {c} | {mn:.3f} | {md:.3f} | {gbs:.2f} | {gbs / stream:.0%} |")
    return lines


def e2e_tables(args, weights):
    q8 = ["int8", "int8+q8", "int4", "int4+q8", "nvfp4", "nvfp4+q8"]
    kv = (["bf16", "fp8"] if weights == "bf16" else ["f32", "bf16", "fp8"]) + q8
    out = run([str(args.kvq), "bench", "--model", str(args.model), "--json", "--weights", weights,
               "--kv-cache", ",".join(kv), "--contexts", ",".join(map(str, args.contexts)),
               "--threads", str(args.threads), "--prefill", str(args.prefill), "--repeats",
               str(args.repeats)])
    j = json.loads(out)
    m = j["machine"][0]
    ref_kv = "bf16"  # the 16-bit cache every low-bit format is set against
    lines = [f"### End to end, {weights} weights ({args.threads} thread(s))", "",
             f"`kvq bench`; DRAM read {m['dram_read_gbs']:.1f} GB/s and sgemm "
             f"{m['sgemm_gflops']:.1f} GFLOP/s measured in the same run. Ideal speed-up = bytes "
             f"read per step with a {ref_kv} cache / with this cache (weights + KV).", "",
             "| context | KV | ms/token min / median | MB read/token | of DRAM | speed-up vs "
             f"{ref_kv} KV | ideal | of ideal |", "|---:|---|---:|---:|---:|---:|---:|---:|"]
    # Low-bit caches come back as "fp8:head" (dynamic per-head scales): keyed by the format.
    # "int8:head+q8" -> "int8+q8".
    rows = {(d["context"], d["kv"].split(":")[0] + ("+q8" if d["kv"].endswith("+q8") else "")): d
            for d in j["decode"]}
    for c in args.contexts:
        base = rows.get((c, ref_kv))
        for k in kv:
            d = rows.get((c, k))
            if d is None:
                continue
            line = (f"| {c} | {k} | {d['seconds_per_token_min'] * 1e3:.2f} / "
                    f"{d['seconds_per_token_median'] * 1e3:.2f} | {d['bytes_per_token'] / 1e6:.1f} "
                    f"| {d['dram_fraction']:.0%} |")
            if base is None or k == ref_kv:
                line += " 1.00× | 1.00× | — |"
            else:
                speed = base["seconds_per_token_min"] / d["seconds_per_token_min"]
                ideal = base["bytes_per_token"] / d["bytes_per_token"]
                line += f" {speed:.2f}× | {ideal:.2f}× | {speed / ideal:.0%} |"
            lines.append(line)
    lines += ["", f"Prefill {args.prefill} tokens:", "",
              "| KV | tok/s best / median | GFLOP/s | of sgemm peak |", "|---|---:|---:|---:|"]
    for p in j["prefill"]:
        lines.append(f"| {p['kv']} | {p['tok_s_best']:.1f} / {p['tok_s_median']:.1f} | "
                     f"{p['gflops_best']:.1f} | {p['sgemm_fraction']:.0%} |")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--contexts", default="8192,16384")
    ap.add_argument("--weights", default="bf16", help="comma-separated: f32, bf16")
    ap.add_argument("--prefill", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kvq", default=os.environ.get("KVQ_BIN", str(ROOT / "build/kvq")))
    ap.add_argument("--bench-kernels", default=str(ROOT / "build/bench/bench_kernels"))
    home = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache/kvq"))
    ap.add_argument("--model", default=str(home / "SmolLM2-135M-Instruct"))
    ap.add_argument("--llama", action="store_true",
                    help="also run bench/llama_cpp_compare.py (llama.cpp built by its setup)")
    args = ap.parse_args()
    args.contexts = [int(c) for c in args.contexts.split(",")]
    for path in (args.kvq, args.bench_kernels):
        if not Path(path).exists():
            sys.exit(f"perf_report: {path} not found (build with scripts/setup.sh release)")

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    doc = [f"Load average at start: {load}.", ""]
    doc += kernel_table(args) + [""]
    for w in args.weights.split(","):
        doc += e2e_tables(args, w) + [""]
    if args.llama:
        doc += ["### Against llama.cpp", "",
                run([sys.executable, str(ROOT / "bench/llama_cpp_compare.py"), "--threads",
                     str(args.threads), "--kvq", args.kvq])]
    print("\n".join(doc))


if __name__ == "__main__":
    main()
