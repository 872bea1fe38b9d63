#!/usr/bin/env bash
# Runs each libFuzzer harness for SECONDS from its corpus and committed seeds, JOBS at a time
# (each is one process on one core: one after another left a core of a 2-core CI machine idle),
# then reports them in order: its stats and corpus size, or the tail of its log where it failed
# (a crash, a hang past -timeout, memory past -rss_limit_mb). Exit 1 when any failed.
# Usage: fuzz-run.sh BUILD_DIR SECONDS JOBS "FLAGS" FUZZER...
set -u
build=$1 secs=$2 jobs=$3 flags=$4
shift 4
mkdir -p "$build/artifacts"

run_one() {
  local f=$1
  mkdir -p "$build/corpus/$f"
  # shellcheck disable=SC2086 # FLAGS holds several options
  "$build/$f" $flags -max_total_time="$secs" -artifact_prefix="$build/artifacts/$f-" \
    "$build/corpus/$f" "fuzz/corpus/$f" 2>"$build/$f.log"
  echo $? >"$build/$f.rc"
}

running=0
for f in "$@"; do
  rm -f "$build/$f.rc"
  run_one "$f" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then
    wait -n
    running=$((running - 1))
  fi
done
wait

status=0
for f in "$@"; do
  echo "== $f for $secs s"
  if [ "$(cat "$build/$f.rc" 2>/dev/null)" != 0 ]; then
    tail -n 60 "$build/$f.log"
    status=1
    continue
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' "$build/$f.log"
  echo "corpus: $(ls "$build/corpus/$f" | wc -l) files ($(ls "fuzz/corpus/$f" | wc -l) seeds)"
done
exit $status
