#!/usr/bin/env bash
# Builds the peer for bench/llama_cpp_compare.sh: llama.cpp's llama-bench and llama-quantize
# from the llama-cpp-python sdist on PyPI (its vendor/llama.cpp holds the full llama.cpp source),
# and converts the default model's GGUF to F32 (and BF16) so llama.cpp runs at the same weight
# precision as kvq. Everything lands in ${KVQ_HOME:-~/.cache/kvq}/llama.cpp/, outside the repo;
# nothing here is committed. Idempotent: a second run only checks and prints the paths.
#
# Pinned: llama-cpp-python 0.3.36 (sdist sha256 below), whose vendor/llama.cpp is llama.cpp
# commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f (2026-10-01). Got with
#   pip download --no-binary :all: --no-deps llama-cpp-python
# on 2026-12-02; set LLAMA_CPP_PYTHON_VERSION (and LLAMA_CPP_PYTHON_SHA256, or "" to skip the
# check) to try another release.
#
# Build: CPU only, Release, -DGGML_NATIVE=ON (same -march=native as kvq), static libraries,
# OpenMP threads (llama.cpp's default), no BLAS (llama.cpp's default CPU build), no HTTPS/curl
# (this version dropped LLAMA_CURL: it only warns "deprecated and will be ignored"; the
# download code now hangs off LLAMA_OPENSSL, switched off here). Six targets are built:
# llama-bench, llama-quantize, llama-perplexity (bench/llama_cpp_kld.sh), llama-server and
# llama-batched-bench (issue 19's throughput side by side, bench/serve_vs_llama.sh) and
# llama-tokenize (tokenizer goldens); the first two took 22 min (1335 s) with -j2 on the 2-core
# development VM, shared with other builds (the server, built later alongside other work, was
# not timed).
#
# Weights: `llama-quantize --allow-requantize in.gguf out.gguf F32` dequantizes every Q4_1
# tensor (d * q + m, fp16 d and m widened to fp32) and copies the F32 norms. Checked with
# --verify (gguf-py): every tensor of the F32 GGUF is bit-identical to gguf-py's dequantization
# of the Q4_1 GGUF, which is what `kvq convert` writes into the fp32 safetensors of
# ${KVQ_HOME}/SmolLM2-135M-Instruct (up to the q/k row permutation the GGUF format applies for
# RoPE), so both engines compute with the same fp32 weights. BF16 rounds those to bf16 (the
# precision of kvq's opt-in bf16 weights).
set -euo pipefail

usage() {
  cat <<'EOF'
usage: bench/llama_cpp_setup.sh [--jobs N] [--no-bf16] [--verify] [--rebuild]

Downloads the llama-cpp-python sdist (pinned version) into ${KVQ_HOME:-~/.cache/kvq}/llama.cpp/,
builds llama-bench, llama-quantize, llama-perplexity, llama-server, llama-batched-bench and
llama-tokenize there (CPU, Release, GGML_NATIVE=ON), and converts the
default model's Q4_1 GGUF to F32 and BF16 GGUFs next to it. Re-running is a no-op.

  --jobs N    parallel compile jobs (default 2)
  --no-bf16   skip the BF16 GGUF
  --verify    check with gguf-py that the F32 GGUF holds exactly the dequantized Q4_1 weights
              (needs a python with the gguf package: $KVQ_PYTHON, else the reference venv
              ${KVQ_HOME}/refvenv/bin/python, else python3)
  --rebuild   reconfigure and rebuild llama.cpp even if the binaries exist

Environment: KVQ_HOME, LLAMA_CPP_PYTHON_VERSION, LLAMA_CPP_PYTHON_SHA256, KVQ_PYTHON.
Prints the paths last, as shell assignments (LLAMA_BENCH=..., LLAMA_F32_GGUF=..., ...).
EOF
}

jobs=2
bf16=1
verify=0
rebuild=0
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) [ $# -ge 2 ] || { echo "llama_cpp_setup: error: --jobs needs a value" >&2; exit 2; }
            jobs="$2"; shift 2 ;;
    --no-bf16) bf16=0; shift ;;
    --verify) verify=1; shift ;;
    --rebuild) rebuild=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "llama_cpp_setup: error: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

repo="$(cd "$(dirname "$0")/.." && pwd)"
home="${KVQ_HOME:-$HOME/.cache/kvq}"
version="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
sha256="${LLAMA_CPP_PYTHON_SHA256-832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e}"
[ "$version" = "0.3.36" ] || sha256="${LLAMA_CPP_PYTHON_SHA256-}"
cache="$home/llama.cpp"
sdist="$cache/llama_cpp_python-$version.tar.gz"
src="$cache/llama_cpp_python-$version/vendor/llama.cpp"
build="$cache/build-$version"
gguf="$home/SmolLM2-135M-Instruct.Q4_1.gguf"
f32="$cache/SmolLM2-135M-Instruct.F32.gguf"
bf16_gguf="$cache/SmolLM2-135M-Instruct.BF16.gguf"
log() { echo "llama_cpp_setup: $*" >&2; }
die() { echo "llama_cpp_setup: error: $*" >&2; exit 1; }

for tool in cmake python3 tar sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || die "'$tool' not found (scripts/setup.sh installs the toolchain)"
done
mkdir -p "$cache"

# 1. The sdist.
if [ ! -f "$sdist" ]; then
  tmp="$(mktemp -d "$cache/.download.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  log "downloading llama-cpp-python==$version sdist from PyPI (about 75 MB)"
  python3 -m pip download --quiet --no-binary :all: --no-deps --disable-pip-version-check \
    "llama-cpp-python==$version" -d "$tmp" || die "pip download of llama-cpp-python==$version failed"
  [ -f "$tmp/$(basename "$sdist")" ] || die "pip did not produce $(basename "$sdist") (got: $(ls "$tmp"))"
  mv "$tmp/$(basename "$sdist")" "$sdist"
fi
if [ -n "$sha256" ] && ! echo "$sha256  $sdist" | sha256sum -c --status; then
  die "sha256 mismatch for $sdist (expected $sha256; delete the file to re-download)"
fi

# 2. Unpacked source.
if [ ! -f "$src/CMakeLists.txt" ]; then
  log "unpacking $(basename "$sdist")"
  tar -xzf "$sdist" -C "$cache"
  [ -f "$src/CMakeLists.txt" ] || die "$sdist has no vendor/llama.cpp/CMakeLists.txt"
fi

# 3. The llama.cpp tools.
targets=(llama-bench llama-quantize llama-perplexity llama-server llama-batched-bench llama-tokenize)
bench_bin="$build/bin/llama-bench"
quant_bin="$build/bin/llama-quantize"
missing=0
for t in "${targets[@]}"; do [ -x "$build/bin/$t" ] || missing=1; done
if [ "$rebuild" = 1 ] || [ "$missing" = 1 ]; then
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  log "configuring llama.cpp in $build"
  cmake -S "$src" -B "$build" "${generator[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DGGML_RPC=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >"$build.configure.log" 2>&1 \
    || die "cmake configure failed; see $build.configure.log"
  log "building ${targets[*]} with -j$jobs (log: $build.build.log)"
  start=$(date +%s)
  cmake --build "$build" --target "${targets[@]}" -j "$jobs" >"$build.build.log" 2>&1 \
    || die "build failed; see $build.build.log"
  log "built in $(( $(date +%s) - start )) s"
fi

# 4. The model's GGUF (scripts/fetch-model.sh downloads it, checks its sha256, and converts it
#    for kvq; it needs kvq built for the conversion).
if [ ! -f "$gguf" ]; then
  log "$gguf missing: running scripts/fetch-model.sh"
  "$repo/scripts/fetch-model.sh" || [ -f "$gguf" ] || die "scripts/fetch-model.sh failed"
  [ -f "$gguf" ] || die "$gguf still missing after scripts/fetch-model.sh"
fi

# 5. Same-precision weights for llama.cpp. Written to a temporary name first so an interrupted
#    run never leaves a truncated GGUF that a later run would take as done.
convert() {  # convert TYPE OUT
  [ -f "$2" ] && return 0
  log "llama-quantize --allow-requantize $(basename "$gguf") -> $(basename "$2") ($1)"
  "$quant_bin" --allow-requantize "$gguf" "$2.tmp" "$1" >"$2.log" 2>&1 \
    || { rm -f "$2.tmp"; die "llama-quantize to $1 failed; see $2.log"; }
  mv "$2.tmp" "$2"
}
convert F32 "$f32"
[ "$bf16" = 1 ] && convert BF16 "$bf16_gguf"

# 6. Optional check: the F32 GGUF is exactly the dequantized Q4_1 GGUF.
if [ "$verify" = 1 ]; then
  py="${KVQ_PYTHON:-}"
  [ -z "$py" ] && [ -x "$home/refvenv/bin/python" ] && py="$home/refvenv/bin/python"
  [ -z "$py" ] && py=python3
  "$py" -c "import gguf, numpy" 2>/dev/null || die "--verify needs numpy and gguf in $py (set KVQ_PYTHON)"
  "$py" - "$gguf" "$f32" <<'PY' || die "--verify: the F32 GGUF differs from the dequantized Q4_1 weights"
import sys
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

q = {t.name: t for t in GGUFReader(sys.argv[1]).tensors}
f = {t.name: t for t in GGUFReader(sys.argv[2]).tensors}
assert q.keys() == f.keys(), "tensor names differ"
types, bad = {}, 0
for name, t in q.items():
    ref = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(-1)
    got = np.asarray(f[name].data, dtype=np.float32).reshape(-1)
    types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    if ref.shape != got.shape or not np.array_equal(ref.view(np.uint32), got.view(np.uint32)):
        diff = float(np.max(np.abs(ref - got))) if ref.shape == got.shape else float("nan")
        print(f"  {name}: {t.tensor_type.name} -> F32 differs (max |diff| {diff:.3g})")
        bad += 1
print(f"verify: {len(q)} tensors ({types}); {len(q) - bad} bit-identical, {bad} differ")
sys.exit(1 if bad else 0)
PY
fi

echo "LLAMA_CPP_PYTHON_VERSION=$version"
echo "LLAMA_CPP_COMMIT=$(git -C "$src" rev-parse HEAD 2>/dev/null || echo unknown)"
echo "LLAMA_BENCH=$bench_bin"
echo "LLAMA_QUANTIZE=$quant_bin"
echo "LLAMA_PERPLEXITY=$build/bin/llama-perplexity"
echo "LLAMA_SERVER=$build/bin/llama-server"
echo "LLAMA_BATCHED_BENCH=$build/bin/llama-batched-bench"
echo "LLAMA_TOKENIZE=$build/bin/llama-tokenize"
echo "LLAMA_F32_GGUF=$f32"
[ -f "$bf16_gguf" ] && echo "LLAMA_BF16_GGUF=$bf16_gguf"
exit 0
