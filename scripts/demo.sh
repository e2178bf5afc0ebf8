#!/usr/bin/env bash
# The main job on the default model, from nothing: build, fetch + convert the model, inspect it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
scripts/fetch-model.sh
home="${KVQ_HOME:-$HOME/.cache/kvq}"
build/kvq inspect "$home/SmolLM2-135M-Instruct"
