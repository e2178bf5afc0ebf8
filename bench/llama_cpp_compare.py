#!/usr/bin/env python3
"""kvq against llama.cpp, side by side in one run, on the default model (issue #7, deliverable 3).

Runs llama.cpp's llama-bench (built by bench/llama_cpp_setup.sh from the llama-cpp-python sdist,
on the F32 or BF16 GGUF: the same weights kvq computes with) and `kvq bench`, with the same threads,
prefill length, decode contexts, decode steps and repeats, and prints one Markdown table with
kvq/llama.cpp ratios. Standard library only.

What is matched:
  prefill  llama-bench `-p P -n 0` (one batch of P tokens from an empty cache; -b/-ub default
           2048/512, so P <= 512 is one ubatch) vs `kvq bench --prefill P` (one forward of P
           tokens from an empty cache).
  decode   llama-bench `-p 0 -n N -d C` (the cache is filled to C tokens by an untimed prefill,
           then N single-token steps are timed) vs `kvq bench --contexts C --decode-steps N`
           (the cache is filled to C with synthetic keys/values, then N steps are timed). Decode
           time does not depend on the cached values.
  KV       llama.cpp -ctk X -ctv X with flash attention on (-fa 1); kvq --kv-cache Y, paired by
           --pairs (default f16=f16, q8_0=int8, q4_0=int4: same bits per element; q8_0/q4_0 also
           store one fp16 scale per 32 elements). A kvq format that `kvq bench` rejects is shown
           as n/a, with the reason, and llama.cpp still runs.
  timing   both engines take --repeats timed samples after a warm-up; the table shows tok/s of
           the best sample and the median, and the ratio kvq/llama.cpp of both (> 1: kvq faster).

llama-bench runs once per KV type and phase (prefill, decode), so -ctk/-ctv are paired rather
than crossed and the prefill is not repeated at every depth. The depth prefill of each context
runs once per KV type (llama-bench caches the state across repeats) and dominates the run time:
llama.cpp's CPU flash attention has a tiled prefill path only for F16/F32 K/V (ggml-cpu/ops.cpp
at this commit); with q8_0/q4_0 it walks the whole cache once per query row, dequantizing every
V row each time, so filling to 8192 takes 12-16 min per KV type on the 2-core development VM. Hence
the default contexts are 512,2048 (about 5 min); pass --contexts 512,2048,8192 for the issue's
8K point (about 35 min there).
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("KVQ_HOME", Path.home() / ".cache" / "kvq"))
DEFAULT_PAIRS = "f16=f16,q8_0=int8,q4_0=int4"


def log(msg):
    print(f"llama_cpp_compare: {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"llama_cpp_compare: error: {msg}", file=sys.stderr)
    sys.exit(1)


def int_list(text):
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a comma-separated list of integers")
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"'{text}': need positive integers")
    return values


def pair_list(text):
    pairs = []
    for item in text.split(","):
        if "=" not in item:
            raise argparse.ArgumentTypeError(f"'{item}': a pair is LLAMA_TYPE=KVQ_FORMAT, e.g. q8_0=int8")
        llama, kvq = item.split("=", 1)
        pairs.append((llama.strip(), kvq.strip()))
    return pairs


def parse_args():
    p = argparse.ArgumentParser(
        description="Prefill and decode tokens/s of kvq and llama.cpp on the same model, weights "
        "precision, threads and KV bits, with kvq/llama.cpp ratios, as one Markdown table.",
        epilog="Defaults take about 5 min on 2 cores. The issue's contexts: --contexts 512,2048,8192 "
        "(about 35 min on 2 cores: llama.cpp's untimed depth prefill to 8192 with q8_0/q4_0 KV and "
        "flash attention alone takes 12-16 min per KV type); more: --contexts 512,2048,8192,16384 "
        "--repeats 5 --decode-steps 32 --threads 1,2.",
    )
    p.add_argument("--threads", type=int_list, default=[1], help="thread counts, comma-separated (default 1)")
    p.add_argument("--prefill", type=int, default=512, help="prefill tokens (default 512; 0 skips)")
    p.add_argument("--contexts", type=int_list, default=[512, 2048],
                   help="decode contexts, comma-separated (default 512,2048; see below for 8192)")
    p.add_argument("--decode-steps", type=int, default=16, help="decode steps per repeat (default 16)")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats of every figure (default 3)")
    p.add_argument("--pairs", type=pair_list, default=pair_list(DEFAULT_PAIRS),
                   help=f"KV formats, llama.cpp type=kvq format (default {DEFAULT_PAIRS})")
    p.add_argument("--weights", choices=["f32", "bf16"], default="f32",
                   help="weight precision of both engines: llama.cpp's F32 or BF16 GGUF and kvq's "
                   "`bench --weights` (default f32)")
    p.add_argument("--kvq", type=Path, default=Path(os.environ.get("KVQ_BIN", REPO / "build" / "kvq")),
                   help="kvq binary (default $KVQ_BIN or build/kvq)")
    p.add_argument("--model", type=Path, default=HOME / "SmolLM2-135M-Instruct",
                   help="kvq model directory (default $KVQ_HOME/SmolLM2-135M-Instruct)")
    p.add_argument("--llama-bench", type=Path, help="llama-bench binary (default: from bench/llama_cpp_setup.sh)")
    p.add_argument("--gguf", type=Path, help="GGUF for llama-bench (default: from bench/llama_cpp_setup.sh)")
    p.add_argument("--kvq-args", default="", help="extra arguments for `kvq bench` (one shell-quoted string)")
    p.add_argument("--llama-args", default="", help="extra arguments for llama-bench (one shell-quoted string)")
    p.add_argument("--raw-dir", type=Path, help="also write both engines' raw JSON output here")
    p.add_argument("--skip-kvq", action="store_true", help="run llama.cpp only")
    p.add_argument("--skip-llama", action="store_true", help="run kvq only")
    a = p.parse_args()
    if a.prefill < 0 or a.decode_steps <= 0 or a.repeats <= 0:
        p.error("--prefill must be >= 0, --decode-steps and --repeats > 0")
    return a


def run(cmd, what):
    """Runs cmd, returns stdout; on failure prints the command and its stderr tail and exits."""
    log(f"{what}: {' '.join(shlex.quote(str(c)) for c in cmd)}")
    start = time.monotonic()
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        die(f"{what} failed (exit {proc.returncode}):\n{tail}")
    log(f"{what}: {time.monotonic() - start:.0f} s")
    return proc.stdout


def setup_paths(a):
    """Runs bench/llama_cpp_setup.sh (idempotent; builds on first use) and reads its KEY=VALUE lines."""
    if a.skip_llama:
        return {}
    if a.llama_bench and a.gguf:
        return {"LLAMA_BENCH": str(a.llama_bench), "GGUF": str(a.gguf)}
    setup = [REPO / "bench" / "llama_cpp_setup.sh"] + (["--no-bf16"] if a.weights == "f32" else [])
    out = run(setup, "llama.cpp setup")
    info = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    key = "LLAMA_F32_GGUF" if a.weights == "f32" else "LLAMA_BF16_GGUF"
    if key not in info:
        die(f"bench/llama_cpp_setup.sh did not report {key}")
    info["GGUF"] = str(a.gguf or info[key])
    if a.llama_bench:
        info["LLAMA_BENCH"] = str(a.llama_bench)
    return info


PROBE_MODEL = "/nonexistent-kvq-probe"


def probe_kvq_format(kvq, fmt):
    """None if `kvq bench` accepts --kv-cache fmt, else kvq's error message. kvq parses the flag
    before it opens the model, so an error that does not name the (missing) model directory is
    about the format; this costs milliseconds instead of a model load."""
    proc = subprocess.run([str(kvq), "bench", "--model", PROBE_MODEL, "--kv-cache", fmt],
                          capture_output=True, text=True)
    msg = (proc.stderr + proc.stdout).strip()
    if proc.returncode != 0 and PROBE_MODEL not in msg:
        return msg.splitlines()[-1] if msg else f"exit {proc.returncode}"
    return None


def samples_stats(tok_s):
    return {"best": max(tok_s), "median": statistics.median(tok_s), "n": len(tok_s)}


def run_llama(a, info, raw):
    """{(threads, phase, context, llama_type): stats}, phase 'prefill' (context 0) or 'decode'."""
    results = {}
    bench = info["LLAMA_BENCH"]
    extra = shlex.split(a.llama_args)
    threads = ",".join(map(str, a.threads))
    for llama_type in dict.fromkeys(t for t, _ in a.pairs):  # each llama.cpp type once
        jobs = []
        if a.prefill > 0:
            jobs.append(("prefill", ["-p", a.prefill, "-n", 0]))
        jobs.append(("decode", ["-p", 0, "-n", a.decode_steps, "-d", ",".join(map(str, a.contexts))]))
        for phase, shape in jobs:
            cmd = [bench, "-m", info["GGUF"], "-t", threads, "-fa", "1", "-ctk", llama_type, "-ctv", llama_type,
                   "-r", a.repeats, "-o", "json"] + shape + extra
            out = run(cmd, f"llama-bench {phase} {llama_type}")
            rows = json.loads(out)
            raw.setdefault("llama_bench", []).extend(rows)
            for r in rows:
                ctx = r["n_depth"] if phase == "decode" else 0
                results[(r["n_threads"], phase, ctx, llama_type)] = samples_stats(r["samples_ts"])
    return results


def run_kvq(a, formats, raw):
    """{(threads, phase, context, kvq_format): stats} from one `kvq bench --json`."""
    if not formats:
        return {}
    cmd = [a.kvq, "bench", "--model", a.model, "--prefill", max(a.prefill, 1),
           "--contexts", ",".join(map(str, a.contexts)), "--threads", ",".join(map(str, a.threads)),
           "--repeats", a.repeats, "--decode-steps", a.decode_steps, "--kv-cache", ",".join(formats),
           "--weights", a.weights, "--no-machine", "--json"] + shlex.split(a.kvq_args)
    report = json.loads(run(cmd, "kvq bench"))
    raw["kvq"] = report
    # Rows name their cache by kvq's label, which may add the scale granularity to the format as
    # typed ("int8" -> "int8:head"); newer kvq lists the caches in --kv-cache order under
    # "kv_caches", older kvq labels a row with the format exactly as typed.
    labels = [k.get("kv_cache") for k in report.get("kv_caches", [])]
    as_typed = dict(zip(labels, formats)) if len(labels) == len(formats) else {f: f for f in formats}
    results = {}
    rows = [("prefill", r) for r in report["prefill"] if a.prefill > 0] + [("decode", r) for r in report["decode"]]
    for phase, r in rows:
        if r["kv"] not in as_typed:
            die(f"kvq bench reported KV cache '{r['kv']}', not one of {formats}")
        ctx = r["context"] if phase == "decode" else 0
        results[(r["threads"], phase, ctx, as_typed[r["kv"]])] = {"best": r["tok_s_best"], "median": r["tok_s_median"]}
    return results


def fmt_ts(s):
    return f"{s['best']:.1f} / {s['median']:.1f}" if s else "—"


def fmt_ratio(k, l, key):
    return f"{k[key] / l[key]:.2f}×" if k and l and l[key] > 0 else "—"


def table(a, llama, kvq, unsupported):
    lines = [
        "| threads | test | KV llama.cpp / kvq | llama.cpp tok/s best / median | kvq tok/s best / median "
        "| kvq/llama.cpp best | kvq/llama.cpp median |",
        "|---:|---|---|---:|---:|---:|---:|",
    ]
    tests = ([("prefill", 0)] if a.prefill > 0 else []) + [("decode", c) for c in a.contexts]
    for t in a.threads:
        for phase, ctx in tests:
            for llama_type, fmt in a.pairs:
                l = llama.get((t, phase, ctx, llama_type))
                k = kvq.get((t, phase, ctx, fmt))
                name = f"prefill {a.prefill}" if phase == "prefill" else f"decode @ {ctx}"
                kcell = fmt_ts(k) if fmt not in unsupported else "n/a"
                lines.append(f"| {t} | {name} | {llama_type} / {fmt} | {fmt_ts(l)} | {kcell} "
                             f"| {fmt_ratio(k, l, 'best')} | {fmt_ratio(k, l, 'median')} |")
    return "\n".join(lines)


def describe_run(a, info):
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        kvq_rev = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                                 capture_output=True, text=True).stdout.strip() or "unknown"
    except OSError:
        kvq_rev = "unknown"
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return [
        f"Run {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on {cpu}, "
        f"{os.cpu_count()} CPUs ({platform.machine()}), load average at start {load}.",
        f"kvq {kvq_rev} ({a.kvq}, model {a.model}); llama.cpp {info.get('LLAMA_CPP_COMMIT', '?')[:12]} "
        f"from llama-cpp-python {info.get('LLAMA_CPP_PYTHON_VERSION', '?')} ({info.get('GGUF', '?')}).",
        f"threads {','.join(map(str, a.threads))}; prefill {a.prefill}; decode {a.decode_steps} steps at "
        f"contexts {','.join(map(str, a.contexts))}; {a.repeats} repeats; llama.cpp -fa 1, "
        f"weights {a.weights.upper()} in both engines.",
    ]


def main():
    a = parse_args()
    if not a.skip_kvq:
        if not os.access(a.kvq, os.X_OK):
            die(f"{a.kvq} not found or not executable (build kvq with scripts/setup.sh, or pass --kvq)")
        if not (a.model / "config.json").is_file():
            die(f"{a.model} is not a converted model directory (run scripts/fetch-model.sh, or pass --model)")
    info = setup_paths(a)
    header = describe_run(a, info)
    wall = time.monotonic()

    unsupported = {}
    if not a.skip_kvq:
        for _, fmt in a.pairs:
            reason = probe_kvq_format(a.kvq, fmt)
            if reason:
                unsupported[fmt] = reason
                log(f"kvq bench does not take --kv-cache {fmt}: {reason}")
    formats = [] if a.skip_kvq else list(dict.fromkeys(f for _, f in a.pairs if f not in unsupported))

    raw = {}
    kvq = run_kvq(a, formats, raw)
    llama = {} if a.skip_llama else run_llama(a, info, raw)
    minutes = (time.monotonic() - wall) / 60

    print("\n".join(header))
    print(f"Wall time {minutes:.1f} min; load average at end {' '.join(f'{x:.1f}' for x in os.getloadavg())}.")
    print()
    print(table(a, llama, kvq, unsupported))
    if unsupported:
        print()
        for fmt, reason in unsupported.items():
            print(f"n/a: `kvq bench --kv-cache {fmt}` is not available in this build ({reason}).  ")
    if a.raw_dir:
        a.raw_dir.mkdir(parents=True, exist_ok=True)
        (a.raw_dir / "llama_bench.json").write_text(json.dumps(raw.get("llama_bench", []), indent=2))
        (a.raw_dir / "kvq_bench.json").write_text(json.dumps(raw.get("kvq", {}), indent=2))
        log(f"raw JSON in {a.raw_dir}")


if __name__ == "__main__":
    main()
