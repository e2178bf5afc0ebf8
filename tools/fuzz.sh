#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan) and fuzzes each harness of tests/fuzz/
# in turn, SECONDS each (default 60), at the lowest CPU priority. New interesting inputs go to a
# work corpus (build-fuzz/fuzz-corpus/<harness>/, seeded from the committed one); a crash, leak,
# timeout (> 1 s) or out-of-memory (> 2 GB) input is written into tests/fuzz/corpus/<harness>/ as
# crash-* / leak-* / timeout-* / oom-*: fix it at its root, then commit the file (it becomes a
# regression input of `ctest --preset fuzz`).
#   tools/fuzz.sh [SECONDS] [HARNESS...]     e.g. tools/fuzz.sh 60; tools/fuzz.sh 600 gguf recipe
# Prints each harness's final libFuzzer statistics; exits 1 if any harness found something.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
harnesses=("$@")
[ "${#harnesses[@]}" -gt 0 ] || harnesses=(safetensors gguf config tokenizer recipe dataset chat_template)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
status=0
for h in "${harnesses[@]}"; do
  corpus="tests/fuzz/corpus/$h"
  work="build-fuzz/fuzz-corpus/$h"
  log="build-fuzz/fuzz-logs/$h.log"
  mkdir -p "$work" "$(dirname "$log")"
  echo "fuzz: $h for ${seconds}s (log $log)"
  if ! nice -n 19 "build-fuzz/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=1 \
    -rss_limit_mb=2048 -artifact_prefix="$corpus/" -print_final_stats=1 "$work" "$corpus" \
    >"$log" 2>&1; then
    echo "fuzz: $h FOUND A PROBLEM; see $log and the new file(s) in $corpus/"
    status=1
  fi
  grep -E "^(stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb)|DONE|ERROR|SUMMARY" "$log" || true
  grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1 || true
done
exit "$status"
