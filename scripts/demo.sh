#!/usr/bin/env bash
# The main job on the default model, from nothing: build kvq, fetch + convert SmolLM2-135M,
# then `kvq compare`: calibrate every default scheme (KV and Q/K/V, FP8 tensor / head, INT8,
# INT4, NVFP4) on GSM8K train and measure what each costs (WikiText-2 perplexity, KL divergence
# and top-1 agreement against the unquantized model, KV bytes per token, decode speed), with
# paired significance tests. Writes kvq-compare/results.{md,json} and
# kvq-compare/kld_vs_bits.{png,svg}; a second run reuses the cached calibrations and baseline.
# Builds only the CLI (the tests are scripts/test.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release kvq
scripts/fetch-model.sh
home="${KVQ_HOME:-$HOME/.cache/kvq}"
build/kvq compare --model "$home/SmolLM2-135M-Instruct" --data ../shared/data --out kvq-compare "$@"
