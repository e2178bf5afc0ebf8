#!/usr/bin/env bash
# Creates (or reuses) the reference Python venv used by tools/reference/*.py.
# The venv lives OUTSIDE the repository: ${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}.
# Idempotent: an existing venv is reused and `pip install` only fills in what is missing.
# Only needed to regenerate golden files; building and testing kvq never needs Python.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${KVQ_REFVENV:-$HOME/.cache/kvq/refvenv}"
python="${PYTHON:-python3}"

if [[ -x "$venv/bin/python" ]]; then
  echo "make_venv: reusing $venv"
else
  echo "make_venv: creating $venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/python" -m pip install --upgrade pip
fi

# torch from PyPI is the CUDA build on Linux; it runs on CPU as well (the goldens are made on CPU).
"$venv/bin/python" -m pip install -r "$here/requirements.txt"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
for p in ["torch", "transformers", "compressed-tensors", "llmcompressor", "gguf",
          "tokenizers", "numpy", "safetensors", "accelerate"]:
    print(f"  {p}=={md.version(p)}")
PY
echo "make_venv: done; run scripts as $venv/bin/python tools/reference/<script>.py"
