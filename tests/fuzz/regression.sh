#!/usr/bin/env bash
# One fuzz_regression test (tests/fuzz/CMakeLists.txt): replays every file of the committed corpus
# (seeds and crash-* inputs found before), then fuzzes for SECONDS. Fails on any crash, sanitizer
# report, leak, uncaught non-kvq exception, input over 1 s or over 2 GB of memory.
#   regression.sh HARNESS CORPUS_DIR SCRATCH_DIR ARTIFACT_DIR SECONDS
set -euo pipefail
harness="$1" corpus="$2" scratch="$3" artifacts="$4" seconds="$5"
rm -rf "$scratch" "$artifacts"  # the findings of an earlier run stay only until the next
mkdir -p "$scratch" "$artifacts"
# The harnesses write each input to a scratch file: in memory where there is /dev/shm.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
# The first directory receives new inputs: a scratch one, so the source tree stays untouched.
rc=0
"$harness" -max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 \
  -artifact_prefix="$artifacts/" -print_final_stats=1 "$scratch" "$corpus" || rc=$?
[ "$rc" -eq 0 ] && exit 0
# libFuzzer's timeout is wall-clock time: a busy machine can deschedule the harness past 1 s. A
# timeout input that runs under the limit when replayed three times is reported, not failed.
shopt -s nullglob
timeouts=("$artifacts"/timeout-*)
others=("$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/oom-* "$artifacts"/slow-unit-*)
if [ "${#timeouts[@]}" -gt 0 ] && [ "${#others[@]}" -eq 0 ] &&
  "$harness" -timeout=1 -runs=3 "${timeouts[@]}"; then
  echo "regression.sh: WARNING: ${timeouts[*]} timed out under load but not when replayed"
  exit 0
fi
exit "$rc"
