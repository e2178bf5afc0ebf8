#!/usr/bin/env bash
# Runs every test from nothing: installs packages, builds (release and ASan+UBSan), fetches the
# default model, then runs ctest: all labels in the release build; unit, golden and the bad-input
# CLI suite under sanitizers; and the fuzz regression (tests/fuzz: each harness replays its corpus
# and fuzzes 30 s).
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
if [ "${KVQ_SKIP_FUZZ:-0}" != "1" ]; then
  rc=0
  scripts/setup.sh fuzz || rc=$?
  if [ "$rc" -eq 2 ]; then
    echo "test.sh: SKIPPED the fuzz_regression tests: clang with libFuzzer is not available (see above)"
  elif [ "$rc" -ne 0 ]; then
    exit "$rc"
  else
    ctest --preset fuzz -j "$jobs"
  fi
fi
