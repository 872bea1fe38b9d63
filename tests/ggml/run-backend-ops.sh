#!/usr/bin/env bash
# ggml's own oracle for the QMOE backend: test-backend-ops in test mode (each case computed on
# QMOE and on ggml's CPU backend, compared with ggml's NMSE threshold) over the MUL_MAT_ID and
# MUL_MAT cases of the weight types the backend takes, and the float32 SWIGLU (GLU) cases. Passes when every such case ran and is
# OK: a FAIL or a "not supported" fails it, and so does a run with no case.
# Usage: run-backend-ops.sh TEST_BACKEND_OPS LIBGGML_QMOE LOG_DIR
set -u
tbo=$1 lib=$2 logs=$3
types='q8_0|q4_0|mxfp4|q6_K|q4_K|q5_K'
mkdir -p "$logs"
for f in "$tbo" "$lib"; do
  [ -e "$f" ] || { echo "qmoe: ggml: $f is missing" >&2; exit 1; }
done
status=0
total=0
for op in MUL_MAT_ID MUL_MAT SWIGLU; do
  log=$logs/test-backend-ops-$op.log
  start=$(date +%s)
  if [ $op = SWIGLU ]; then param=type tt=f32; else param=type_a tt=$types; fi
  # -o takes exact op names first, so MUL_MAT does not also pick MUL_MAT_ID
  GGML_BACKEND_PATH=$(realpath "$lib") "$tbo" test -b QMOE -o "$op" -p "$param=($tt)," \
    >"$log.raw" 2>&1
  rc=$?
  sed 's/\x1b\[[0-9;]*m//g' "$log.raw" >"$log" && rm -f "$log.raw" # no colours
  secs=$(( $(date +%s) - start ))
  # one line per case, "<op>(<params>): <status>"; a failing one starts with its error
  grep -E "$op\($param=($tt),[^)]*\): " "$log" >"$log.cases"
  cases=$(wc -l <"$log.cases")
  ok=$(grep -c '): OK$' "$log.cases")
  failed=$(grep -c '): FAIL' "$log.cases")
  unsupported=$(grep -c 'not supported \[QMOE' "$log.cases")
  # cases ggml's CPU backend, the reference, cannot compute (q8_0 x f16 activations): no oracle
  noref=$(grep 'not supported \[CPU\]' "$log.cases" | wc -l)
  total=$((total + ok))
  echo "qmoe: ggml: test-backend-ops -b QMOE -o $op ($tt): $ok of $((cases - noref)) cases OK," \
    "$failed failed, $unsupported not supported by QMOE ($noref more that the CPU reference" \
    "does not compute), exit $rc, ${secs} s (log: $log)"
  if [ "$rc" != 0 ] || [ "$ok" = 0 ] || [ "$ok" != "$((cases - noref))" ] || [ "$failed" != 0 ] ||
     [ "$unsupported" != 0 ] || ! grep -q "Backend QMOE: .*OK" "$log"; then
    grep -E "FAIL|not supported \[QMOE" "$log.cases" | head -n 20 >&2
    status=1
  fi
done
if [ $status = 0 ]; then echo "qmoe: ggml: PASSED ($total cases)"; else echo "qmoe: ggml: FAILED"; fi
exit $status
