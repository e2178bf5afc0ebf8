#!/usr/bin/env bash
# Runs every test from nothing: installs packages, builds (release and ASan+UBSan), fetches the
# default model, then runs ctest: all labels in the release build; unit, golden and the bad-input
# CLI suite under sanitizers.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh release
scripts/fetch-model.sh
export KVQ_REQUIRE_MODEL=1
jobs="$(nproc)"
# ctest runs `jobs` test processes at once: one thread each keeps the cores busy without
# oversubscribing them (spinning OpenMP threads of two processes on two cores slow both ~10x).
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
ctest --preset release -j "$jobs"
if [ "${KVQ_SKIP_ASAN:-0}" != "1" ]; then
  scripts/setup.sh asan
  ctest --preset asan -j "$jobs"
fi
