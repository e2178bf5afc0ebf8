#!/usr/bin/env bash
# llama.cpp's own KV-cache quantization quality on the weights and text kvq measures (issue 17
# item 6): llama-perplexity on the F32 GGUF that bench/llama_cpp_setup.sh writes (bit-identical to
# kvq's fp32 weights), WikiText-2 test, ctx 512, flash attention on. One f16-KV run saves the
# base log-probabilities (--kl-divergence-base); every quantized KV type (-ctk = -ctv) then runs
# with --kl-divergence against it, once with llama.cpp's KV rotation (PR 21038, "rotate
# activations": attn_rot_k / attn_rot_v, a Hadamard rotation auto-enabled for a quantized cache
# when the head size is a multiple of 64) and once with it switched off. The switch is found in
# the vendored source (a getenv(...ROT...DISABLE) in src/llama-kv-cache.cpp, else an --...rot...
# flag in common/arg.cpp), reported, and checked against each run's "attn_rot_k = N" log line.
#
# Token windows: llama-perplexity tokenizes the whole file, cuts consecutive n_ctx-token chunks
# (the first token of each replaced by BOS when the model adds one) and scores only the second
# half of each chunk (`first = n_ctx/2`, hard-coded in tools/perplexity/perplexity.cpp; no option
# scores whole chunks for PPL or KLD — --ppl-stride is a separate PPL-only mode), so --chunks 8
# at -c 512 scores 8 x 255 = 2,040 tokens, against kvq's 8 x 511 = 4,088 (every token of each
# 512-token window after the first). The numbers are comparable in kind, not token for token.
#
# Writes to --out (default /tmp/llama-kld): one log per run, results.md (Markdown table) and
# results.json. The base logits file holds n_vocab x uint16 per scored token: about 200 MB for 8
# chunks, about 15 GB for the whole test set (--chunks 0).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/llama_cpp_kld.sh [--chunks N] [--out DIR] [--threads N] [--types T1,T2]
                              [--text FILE] [--jobs N]

Runs llama.cpp's llama-perplexity (built by bench/llama_cpp_setup.sh) on the F32 GGUF with
-c 512 -fa on: an f16 KV baseline saving its logits, then for each KV type (K and V both) a
--kl-divergence run with llama.cpp's KV rotation on (its default) and off. Prints and writes a
Markdown table (PPL, dPPL % vs the f16 run, mean KLD +- its SE, same top-1 %) and JSON.

  --chunks N    512-token chunks to score (default 8, kvq compare's 8 windows; 0 = all)
  --out DIR     output directory (default /tmp/llama-kld)
  --threads N   llama.cpp threads (default 2)
  --types LIST  KV cache types, comma separated (default q8_0,q4_0)
  --text FILE   text (default /work/shared/data/wikitext-2-raw/wiki.test.raw, else
                $KVQ_DATA/wikitext-2-raw/wiki.test.raw)
  --jobs N      compile jobs for bench/llama_cpp_setup.sh if it has to build (default 2)

Environment: KVQ_HOME, KVQ_DATA (as for bench/llama_cpp_setup.sh).
EOF
}

chunks=8
out=/tmp/llama-kld
threads=2
types=q8_0,q4_0
text=""
jobs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --chunks|--out|--threads|--types|--text|--jobs)
      [ $# -ge 2 ] || { echo "llama_cpp_kld: error: $1 needs a value" >&2; exit 2; }
      case "$1" in
        --chunks) chunks="$2" ;; --out) out="$2" ;; --threads) threads="$2" ;;
        --types) types="$2" ;; --text) text="$2" ;; --jobs) jobs="$2" ;;
      esac
      shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "llama_cpp_kld: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
log() { echo "llama_cpp_kld: $*" >&2; }
die() { echo "llama_cpp_kld: error: $*" >&2; exit 1; }
case "$chunks" in ''|*[!0-9]*) die "--chunks must be a number >= 0" ;; esac
case "$threads" in ''|*[!0-9]*) die "--threads must be a positive number" ;; esac

repo="$(cd "$(dirname "$0")/.." && pwd)"
if [ -z "$text" ]; then
  text=/work/shared/data/wikitext-2-raw/wiki.test.raw
  [ -f "$text" ] || text="${KVQ_DATA:-$repo/../shared/data}/wikitext-2-raw/wiki.test.raw"
fi
[ -f "$text" ] || die "text file $text not found (--text)"

# 1. The binaries and the F32 GGUF (idempotent: a no-op once built).
setup_out="$("$repo/bench/llama_cpp_setup.sh" --no-bf16 --jobs "$jobs")" || die "bench/llama_cpp_setup.sh failed"
getvar() { printf '%s\n' "$setup_out" | sed -n "s/^$1=//p" | head -n 1; }
ppl_bin="$(getvar LLAMA_PERPLEXITY)"
f32="$(getvar LLAMA_F32_GGUF)"
version="$(getvar LLAMA_CPP_PYTHON_VERSION)"
[ -x "$ppl_bin" ] || die "llama-perplexity not built ($ppl_bin)"
[ -f "$f32" ] || die "F32 GGUF missing ($f32)"
src="$(dirname "$(dirname "$ppl_bin")")"
src="${src%/build-*}/llama_cpp_python-$version/vendor/llama.cpp"
[ -f "$src/src/llama-kv-cache.cpp" ] || die "vendored llama.cpp source not found at $src"
commit="$(getvar LLAMA_CPP_COMMIT)"
# Without a git checkout, fall back on the version -> commit pin in bench/llama_cpp_setup.sh.
if [ -z "$commit" ] || [ "$commit" = unknown ]; then
  commit="$(grep -o 'commit [0-9a-f]\{40\}' "$repo/bench/llama_cpp_setup.sh" | head -n 1 | cut -d' ' -f2)"
  [ "$version" = "0.3.36" ] || commit="unknown (llama-cpp-python $version)"
fi

# 2. The KV-rotation switch, from the vendored source.
rot_env="$(grep -ohE 'getenv\("LLAMA_[A-Z_]*ROT[A-Z_]*DISABLE[A-Z_]*"\)' "$src/src/llama-kv-cache.cpp" "$src"/src/*.cpp 2>/dev/null \
  | head -n 1 | sed -E 's/getenv\("([A-Z_]+)"\)/\1/')" || true
rot_flag=""
if [ -z "$rot_env" ]; then
  rot_flag="$(grep -ohE '"--no-[a-z-]*rot[a-z-]*"' "$src/common/arg.cpp" | head -n 1 | tr -d '"')" || true
fi
if [ -n "$rot_env" ]; then
  rot_switch="env $rot_env=1"
  grep -n "getenv(\"$rot_env\")" "$src/src/llama-kv-cache.cpp" | head -n 1 | sed 's/^/  llama-kv-cache.cpp:/' >&2 || true
elif [ -n "$rot_flag" ]; then
  rot_switch="flag $rot_flag"
else
  die "no KV-rotation switch found in $src (grep src/*.cpp for getenv(...ROT...DISABLE), common/arg.cpp for --no-...rot...)"
fi
log "llama.cpp $commit; KV rotation switched off with: $rot_switch"

mkdir -p "$out"
base="$out/base-f16.kld"
chunk_args=()
[ "$chunks" -gt 0 ] && chunk_args=(--chunks "$chunks")
# -v: the "llama_kv_cache: attn_rot_k = N" lines are info-level, printed only at full verbosity.
common=(-m "$f32" -c 512 -fa on -t "$threads" "${chunk_args[@]}" -v)
: >"$out/commands.txt"

run() {  # run NAME ROT(on|off|-) ARGS...: llama-perplexity, log to $out/NAME.log
  local name="$1" rot="$2"; shift 2
  local envs=() extra=()
  if [ "$rot" = off ]; then
    if [ -n "$rot_env" ]; then envs=("$rot_env=1"); else extra=("$rot_flag"); fi
  fi
  local cmd=(env "${envs[@]}" "$ppl_bin" "${common[@]}" "$@" "${extra[@]}")
  printf '%s\n' "${envs[*]:+${envs[*]} }llama-perplexity ${common[*]} $* ${extra[*]}" | sed 's/  */ /g' >>"$out/commands.txt"
  log "$name: ${envs[*]:+${envs[*]} }llama-perplexity ... $*${extra[*]:+ ${extra[*]}}"
  "${cmd[@]}" >"$out/$name.log" 2>&1 || die "$name failed; see $out/$name.log"
}

# 3. The f16 baseline (its logits saved), then each type with rotation on and off.
if [ -s "$base" ] && grep -q "Final estimate" "$out/f16.log" 2>/dev/null \
   && [ "$(cat "$out/base.args" 2>/dev/null)" = "--chunks $chunks -f $text" ]; then
  log "f16 baseline: reusing $base"
  cat "$out/base.cmd" >>"$out/commands.txt"
else
  rm -f "$base"
  run f16 - -ctk f16 -ctv f16 -f "$text" --kl-divergence-base "$base"
  printf -- '--chunks %s -f %s\n' "$chunks" "$text" >"$out/base.args"
  tail -n 1 "$out/commands.txt" >"$out/base.cmd"
fi
names=(f16)
IFS=',' read -r -a type_list <<<"$types"
for t in "${type_list[@]}"; do
  for rot in on off; do
    run "$t-rot-$rot" "$rot" -ctk "$t" -ctv "$t" --kl-divergence-base "$base" --kl-divergence
    names+=("$t-rot-$rot")
  done
done

# 4. Parse the logs into a table and JSON.
python3 - "$out" "$commit" "$rot_switch" "$chunks" "$text" "${names[@]}" <<'PY'
import json, os, re, sys

out, commit, rot_switch, chunks, text = sys.argv[1:6]
names = sys.argv[6:]
num = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

def grab(pat, s, n=1):
    m = re.search(pat, s)
    return tuple(float(m.group(i + 1)) for i in range(n)) if m else None

rows = []
for name in names:
    s = open(os.path.join(out, name + ".log"), encoding="utf-8", errors="replace").read()
    rot_k = grab(r"attn_rot_k = (\d+)", s)
    rot_v = grab(r"attn_rot_v = (\d+)", s)
    row = {"run": name, "kv": "f16" if name == "f16" else name.split("-rot-")[0],
           "rotation": None if name == "f16" else name.split("-rot-")[1],
           "attn_rot_k": int(rot_k[0]) if rot_k else None,
           "attn_rot_v": int(rot_v[0]) if rot_v else None}
    m = re.search(r"computing over (\d+) chunks|calculating perplexity over (\d+) chunks", s)
    if name == "f16":
        ppl = grab(r"Final estimate: PPL = " + num + r"\s*\+/-\s*" + num, s, 2)
        row.update(ppl=ppl[0] if ppl else None, ppl_se=ppl[1] if ppl else None,
                   kld=0.0, kld_se=0.0, top1_pct=100.0, top1_se=0.0)
        if m:
            row["chunks"] = int(m.group(1) or m.group(2))
    else:
        ppl = grab(r"Mean PPL\(Q\)\s*:\s*" + num + r"\s*±\s*" + num, s, 2)
        kld = grab(r"Mean\s+KLD:\s*" + num + r"\s*±\s*" + num, s, 2)
        top = grab(r"Same top p:\s*" + num + r"\s*±\s*" + num + r"\s*%", s, 2)
        row.update(ppl=ppl[0] if ppl else None, ppl_se=ppl[1] if ppl else None,
                   kld=kld[0] if kld else None, kld_se=kld[1] if kld else None,
                   top1_pct=top[0] if top else None, top1_se=top[1] if top else None)
    rows.append(row)

base_ppl = rows[0]["ppl"]
for r in rows:
    if r["ppl"] is not None and base_ppl:
        r["dppl"] = r["ppl"] - base_ppl
        r["dppl_pct"] = 100.0 * (r["ppl"] / base_ppl - 1.0)
    # The log says whether rotation was really on: it must match the run's label.
    if r["rotation"] is not None:
        want = 1 if r["rotation"] == "on" else 0
        r["rotation_checked"] = (r["attn_rot_k"] == want and r["attn_rot_v"] == want)

def f(x, fmt):
    return "n/a" if x is None else format(x, fmt)

lines = ["| KV cache (K = V) | rotation | PPL (± SE) | ΔPPL vs f16 | KLD (± SE) | same top-1 (± SE) |",
         "|---|---|---|---|---|---|"]
for r in rows:
    rot = "–" if r["rotation"] is None else (r["rotation"] + ("" if r.get("rotation_checked", True) else " (log disagrees!)"))
    dppl = "–" if r["run"] == "f16" else f"{r['dppl']:+.3f} ({r['dppl_pct']:+.2f} %)" if "dppl" in r else "n/a"
    kld = "0" if r["run"] == "f16" else f"{f(r['kld'], '.5f')} ± {f(r['kld_se'], '.5f')}"
    top = "100 %" if r["run"] == "f16" else f"{f(r['top1_pct'], '.2f')} ± {f(r['top1_se'], '.2f')} %"
    lines.append(f"| {r['kv']} | {rot} | {f(r['ppl'], '.3f')} ± {f(r['ppl_se'], '.3f')} | {dppl} | {kld} | {top} |")
table = "\n".join(lines)
meta = {"llama_cpp_commit": commit, "rotation_off_switch": rot_switch,
        "chunks": int(chunks), "ctx": 512, "flash_attn": "on", "text": text,
        "scored_tokens_per_chunk": 512 - 512 // 2 - 1,
        "commands": open(os.path.join(out, "commands.txt")).read().splitlines()}
with open(os.path.join(out, "results.json"), "w") as fh:
    json.dump({**meta, "rows": rows}, fh, indent=2)
md = (f"llama.cpp {commit}, llama-perplexity -c 512 -fa on, "
      f"{'all' if chunks == '0' else chunks} chunks of {os.path.basename(text)}; rotation off: {rot_switch}\n\n{table}\n")
with open(os.path.join(out, "results.md"), "w") as fh:
    fh.write(md)
print(md)
bad = [r["run"] for r in rows if r["ppl"] is None or r.get("rotation_checked") is False]
if bad:
    print(f"llama_cpp_kld: error: could not parse or verify: {', '.join(bad)}", file=sys.stderr)
    sys.exit(1)
PY
log "wrote $out/results.md and $out/results.json"
