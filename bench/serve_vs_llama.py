#!/usr/bin/env python3
"""Serving throughput, kvq serve against llama.cpp's llama-server, same weights, one run (issue 19).

For each server configuration (kvq with each --kv-cache, llama-server with each -ctk/-ctv pair)
the script starts the server, runs bench/serve_load.py's rounds (N streaming clients, random
prompt token ids, greedy, ignore_eos) for every client count, stops it, and goes on to the next;
the configurations alternate kvq / llama.cpp so slow drifts of the machine hit both. One Markdown
table at the end (output tokens/s, TTFT and ITL p50 / p99), ratios against the first
configuration of each engine and kvq against llama.cpp at matching KV bits.

  bench/llama_cpp_setup.sh            # llama-server and the F32 GGUF of the default model
  bench/serve_vs_llama.py --model ~/.cache/kvq/SmolLM2-135M-Instruct \\
      --gguf ~/.cache/kvq/llama.cpp/SmolLM2-135M-Instruct.F32.gguf --threads 2 \\
      --clients 1,4,16 --kvq-kv bf16,int8,int4 --llama-kv f16,q8_0,q4_0

kvq only (no --gguf), 16 clients at ~2048 context, bf16 weights, formats repeated to see the noise;
the "full-batch decode" columns are the decode tokens/s while all 16 were decoding (serve_load):

  bench/serve_vs_llama.py --model ~/.cache/kvq/SmolLM2-135M-Instruct --weights bf16 \
      --clients 16 --prompt-tokens 1792 --max-tokens 512 --kvq-kv bf16,int8,bf16,int8

Pairs for the "vs llama.cpp" column: bf16 ~ f16, int8* / fp8* ~ q8_0, int4* / nvfp4 ~ q4_0.
Timings mean something only on a quiet machine (the load average is printed; no build running).
"""
import argparse
import json
import os
import random
import subprocess
import sys
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import serve_load  # noqa: E402


def llama_peer(kv):
    if kv.startswith(("int8", "fp8")):
        return "q8_0"
    if kv.startswith(("int4", "nvfp4")):
        return "q4_0"
    return {"bf16": "f16", "f16": "f16", "f32": "f32"}.get(kv.split(":")[0], "")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kvq", default="build/kvq")
    p.add_argument("--model", required=True, help="kvq's model directory")
    p.add_argument("--weights", default="f32", help="kvq serve --weights")
    p.add_argument("--llama-server",
                   default=os.path.expanduser("~/.cache/kvq/llama.cpp/build-0.3.36/bin/llama-server"))
    p.add_argument("--gguf", default="", help="llama.cpp's GGUF (empty: kvq only)")
    p.add_argument("--kvq-kv", default="bf16,int8,int4", help="kvq --kv-cache values")
    p.add_argument("--llama-kv", default="f16,q8_0,q4_0", help="llama-server -ctk/-ctv values")
    p.add_argument("--kvq-prefill-step-ms", default="100",
                   help="kvq serve --prefill-step-ms values; each --kvq-kv runs with each")
    p.add_argument("--clients", default="1,4,16")
    p.add_argument("--requests", type=int, default=1, help="requests per client per round")
    p.add_argument("--prompt-tokens", type=int, default=512)
    p.add_argument("--max-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--port", type=int, default=8141)
    p.add_argument("--json", default="", help="append one JSON line per round")
    args = p.parse_args()
    clients = [int(c) for c in args.clients.split(",")]
    max_n = max(clients)
    per_seq = args.prompt_tokens + args.max_tokens + 16
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads))

    configs = []
    kvq_kv = [k for k in args.kvq_kv.split(",") if k]
    llama_kv = [k for k in args.llama_kv.split(",") if k] if args.gguf else []
    steps = [int(s) for s in args.kvq_prefill_step_ms.split(",") if s]
    for i in range(max(len(kvq_kv), len(llama_kv))):
        for step in steps if i < len(kvq_kv) else []:
            kv = kvq_kv[i]
            # The budget holds max_n sequences of per_seq tokens at f32 (4 bytes per value).
            configs.append(("kvq", kv, step, [
                args.kvq, "serve", "--model", args.model, "--weights", args.weights,
                "--kv-cache", kv, "--max-seqs", str(max_n), "--max-queue", str(4 * max_n),
                "--ctx", str(per_seq), "--kv-cache-memory", "4096", "--port", str(args.port),
                "--prefill-step-ms", str(step)]))
        if i < len(llama_kv):
            kv = llama_kv[i]
            configs.append(("llama.cpp", kv, None, [
                args.llama_server, "-m", args.gguf, "--port", str(args.port), "-t",
                str(args.threads), "-tb", str(args.threads), "-np", str(max_n), "-c",
                str(per_seq * max_n), "-fa", "on", "-ctk", kv, "-ctv", kv, "--no-warmup"]))

    print(f"serve_vs_llama: load average {os.getloadavg()[0]:.2f} at start", file=sys.stderr)
    rows = []
    for engine, kv, step, cmd in configs:
        log = f"/tmp/serve_vs_llama-{engine}-{kv.replace(':', '_').replace('/', '_')}.log"
        with open(log, "w") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            serve_load.wait_healthy(proc, args.port, log)
            for n in clients:
                load = SimpleNamespace(url=f"http://127.0.0.1:{args.port}", model="",
                                       requests=args.requests, prompt_tokens=args.prompt_tokens,
                                       max_tokens=args.max_tokens, vocab=49152, chat="")
                row = serve_load.run_round(load, n, random.Random(n))
                row.update(engine=engine, kv=kv, prefill_step_ms=step,
                           load_avg=os.getloadavg()[0])
                rows.append(row)
                print(f"  {engine:9} {kv:10} {'' if step is None else step:>5} N={n:<3} {row['output_tok_s']:8.1f} tok/s "
                      f"TTFT p50 {row['ttft_p50_s']:.3f}s ITL p50 {row['itl_p50_s'] * 1e3:.1f}ms "
                      f"decode {row['decode_tok_s'] or float('nan'):.1f} tok/s "
                      f"errors {row['errors']}", file=sys.stderr, flush=True)
                if row["first_error"]:
                    print(f"    first error: {row['first_error']}", file=sys.stderr)
                if args.json:
                    with open(args.json, "a") as jf:
                        jf.write(json.dumps(row) + "\n")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()

    def find(engine, kv, n, step=None):
        return next((r for r in rows if r["engine"] == engine and r["kv"] == kv
                     and r["clients"] == n and (step is None or r["prefill_step_ms"] == step)),
                    None)

    print(f"prompt {args.prompt_tokens} tokens, {args.max_tokens} new, {args.requests} request(s)"
          f" per client, {args.threads} threads; load average {os.getloadavg()[0]:.2f} at the end\n")
    print("| engine | KV | prefill step (ms) | clients | output tok/s | TTFT p50 / p99 (s) "
          "| ITL p50 / p99 (ms) | vs engine's first KV | kvq vs llama.cpp | full-batch decode "
          "tok/s | decode vs first KV |")
    print("|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|")
    for r in rows:
        step = r["prefill_step_ms"]
        first_kv = kvq_kv[0] if r["engine"] == "kvq" else llama_kv[0]
        base = find(r["engine"], first_kv, r["clients"], step)
        peer = find("llama.cpp", llama_peer(r["kv"]), r["clients"]) if r["engine"] == "kvq" else None
        vs_peer = f"{r['output_tok_s'] / peer['output_tok_s']:.2f}x ({peer['kv']})" if peer else ""
        # serve_load's decode tok/s while every client decoded (--requests 1), if that window
        # was not empty.
        dec, dec_base = r.get("decode_tok_s"), base.get("decode_tok_s")
        dec_s = f"{dec:.1f}" if dec else ""
        dec_vs = f"{dec / dec_base:.2f}x" if dec and dec_base else ""
        print(f"| {r['engine']} | {r['kv']} | {'' if step is None else step} | {r['clients']} | "
              f"{r['output_tok_s']:.1f} | "
              f"{r['ttft_p50_s']:.3f} / {r['ttft_p99_s']:.3f} | "
              f"{r['itl_p50_s'] * 1e3:.1f} / {r['itl_p99_s'] * 1e3:.1f} | "
              f"{r['output_tok_s'] / base['output_tok_s']:.2f}x | {vs_peer} | {dec_s} | {dec_vs} |")


if __name__ == "__main__":
    main()
