#!/usr/bin/env bash
# One fuzz_regression test (tests/fuzz/CMakeLists.txt): replays every file of the committed corpus
# (seeds and crash-* inputs found before), then fuzzes for SECONDS. Fails on any crash, sanitizer
# report, leak, uncaught non-kvq exception, input over 1 s or over 2 GB of memory.
#   regression.sh HARNESS CORPUS_DIR SCRATCH_DIR ARTIFACT_DIR SECONDS
set -euo pipefail
harness="$1" corpus="$2" scratch="$3" artifacts="$4" seconds="$5"
rm -rf "$scratch"
mkdir -p "$scratch" "$artifacts"
# The harnesses write each input to a scratch file: in memory where there is /dev/shm.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
# The first directory receives new inputs: a scratch one, so the source tree stays untouched.
exec "$harness" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "$scratch" "$corpus"
