#!/usr/bin/env bash
# Builds the `fuzz` preset (clang, libFuzzer, ASan+UBSan) and fuzzes each harness of tests/fuzz/
# in turn for SECONDS (default 60), at the lowest CPU priority. New interesting inputs go to a
# work corpus (build-fuzz/fuzz-corpus/<harness>/, kept between runs, seeded from the committed
# one); a crash, leak, timeout (an input over 1 s) or out-of-memory (over 2 GB) input is written
# into tests/fuzz/corpus/<harness>/ as crash-* / leak-* / timeout-* / oom-*: fix it at its root,
# then commit the file (it becomes a regression input of `ctest --preset fuzz`).
#
# libFuzzer's timeout is wall-clock time: on a loaded machine a niced harness can be descheduled
# past 1 s. A timeout input is therefore replayed at once, un-niced; when every replay runs well
# under the limit, it is moved to build-fuzz/fuzz-unconfirmed/ (reported, not a finding) and
# fuzzing goes on for the time left. FUZZ_TIMEOUT=S (default 1) raises libFuzzer's own timeout for
# a campaign beside other work: a harness that shares the CPU is then not restarted at every
# descheduling; every input that takes over 1 s of wall time still is reported (libFuzzer's
# slow-unit-* artifacts, -report_slow_units=1), replayed un-niced and counted a finding only when
# it takes over 1 s again.
#   tools/fuzz.sh [SECONDS] [HARNESS...]     e.g. tools/fuzz.sh 60; tools/fuzz.sh 600 gguf recipe
# FUZZ_RUNS=N also stops a harness once it has run N inputs (the issue's 10 million: a niced
# campaign on a shared machine then takes only the CPU the others leave, e.g.
# FUZZ_RUNS=10000000 tools/fuzz.sh 36000 dataset recipe). FUZZ_CPU_SECONDS=S stops it once it has
# used S CPU seconds (the issue's other bound, a CPU-hour: FUZZ_CPU_SECONDS=3600), checked
# between segments of at most 10 minutes.
# Prints per harness: executions, exec/s (per wall second), CPU seconds, coverage, findings.
# Exits 1 if any harness found something.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
harnesses=("$@")
[ "${#harnesses[@]}" -gt 0 ] || harnesses=(safetensors gguf config tokenizer recipe dataset chat_template)
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$(nproc)"
# The harnesses write each input to a scratch file: in memory where there is /dev/shm.
[ -d /dev/shm ] && [ -w /dev/shm ] && export TMPDIR=/dev/shm
status=0
for h in "${harnesses[@]}"; do
  corpus="tests/fuzz/corpus/$h"
  work="build-fuzz/fuzz-corpus/$h"
  logdir="build-fuzz/fuzz-logs"
  mkdir -p "$work" "$logdir" build-fuzz/fuzz-unconfirmed
  echo "fuzz: $h for ${seconds}s (logs $logdir/$h.*.log)"
  start=$(date +%s) execs=0 cpu=0 segment=0 found=""
  while :; do
    left=$((seconds - ($(date +%s) - start)))
    [ "$left" -gt 0 ] || break
    runs=-1
    if [ -n "${FUZZ_RUNS:-}" ]; then
      runs=$((FUZZ_RUNS - execs))
      [ "$runs" -gt 0 ] || break
    fi
    if [ -n "${FUZZ_CPU_SECONDS:-}" ]; then
      awk -v c="$cpu" -v m="$FUZZ_CPU_SECONDS" 'BEGIN { exit !(c >= m) }' && break
      [ "$left" -gt 600 ] && left=600
    fi
    segment=$((segment + 1))
    log="$logdir/$h.$segment.log"
    before=$(ls "$corpus" | sort)
    rc=0
    /usr/bin/time -f "%U %S" -o "$log.time" nice -n 19 "build-fuzz/tests/fuzz/fuzz_$h" \
      -max_total_time="$left" -runs="$runs" -timeout="${FUZZ_TIMEOUT:-1}" -report_slow_units=1 \
      -rss_limit_mb=2048 -artifact_prefix="$corpus/" \
      -print_final_stats=1 "$work" "$corpus" >"$log" 2>&1 || rc=$?
    execs=$((execs + $(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)))
    cpu=$(tail -1 "$log.time" | awk -v c="$cpu" '{print c + $1 + $2}')  # after "exited with ..."
    # Inputs over 1 s of wall time: a finding only if they take over 1 s again, un-niced.
    for f in $(cd "$corpus" && ls -d slow-unit-* 2>/dev/null); do
      if "build-fuzz/tests/fuzz/fuzz_$h" -timeout=1 -runs=3 "$corpus/$f" >"$log.replay" 2>&1; then
        mv "$corpus/$f" build-fuzz/fuzz-unconfirmed/
      else
        echo "fuzz: $h: $f takes over 1 s when replayed"
        mv "$corpus/$f" "$corpus/timeout-${f#slow-unit-}"
        found="$found timeout-${f#slow-unit-}"
      fi
    done
    [ -n "$found" ] && break
    if [ "$rc" -eq 0 ]; then
      # A segment cut at 10 minutes for the CPU check goes on; one that ran out of time or
      # runs is the end.
      [ -n "${FUZZ_CPU_SECONDS:-}" ] && [ "$left" -eq 600 ] && continue
      break
    fi
    new=$(comm -13 <(echo "$before") <(ls "$corpus" | sort))
    if [ -n "$new" ] && [ "$(echo "$new" | grep -cv '^timeout-')" -eq 0 ]; then
      confirmed=""
      for f in $new; do
        if "build-fuzz/tests/fuzz/fuzz_$h" -timeout=1 -runs=3 "$corpus/$f" >"$log.replay" 2>&1; then
          echo "fuzz: $h: $f took over 1 s under load but not when replayed: build-fuzz/fuzz-unconfirmed/"
          mv "$corpus/$f" build-fuzz/fuzz-unconfirmed/
        else
          confirmed="$confirmed $f"
        fi
      done
      [ -z "$confirmed" ] && continue
    fi
    found="$found $new"
    break
  done
  wall=$(($(date +%s) - start))
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+ corp: [0-9]+" "$logdir/$h.$segment.log" | tail -1 || true)
  echo "fuzz: $h: $execs executions in ${wall}s ($((execs / (wall > 0 ? wall : 1))) exec/s), ${cpu} CPU s, $cov"
  if [ -n "$found" ]; then
    echo "fuzz: $h FOUND: $found (in $corpus/; see $logdir/$h.$segment.log)"
    status=1
  elif [ "$rc" -ne 0 ]; then
    echo "fuzz: $h: the harness failed without an artifact; see $logdir/$h.$segment.log"
    status=1
  fi
done
exit "$status"
