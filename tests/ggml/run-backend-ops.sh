#!/usr/bin/env bash
# ggml's own oracle for the QMOE backend: test-backend-ops in test mode (each case computed on
# QMOE and on ggml's CPU backend, compared with ggml's NMSE threshold) over the MUL_MAT_ID and
# MUL_MAT cases of the weight types the backend takes, the float32 SWIGLU (GLU) cases, and ggml's
# fused FFN / MoE graphs of those types (MUL_MAT_ID_FUSION, MUL_MAT_VEC_FUSION: the matmuls with
# their biases, GLUs and weighting, taken whole: src/ggml/elementwise.c). Passes
# when every such case ran and is OK: a FAIL or a "not supported" fails it, and so does a run with
# no case.
# Two test-backend-ops processes run at once: it gives each backend hardware_concurrency() / 2
# threads and makes its random quantized weights on one thread, so on 2 cores one process leaves
# a core idle. Three q4_K MUL_MAT_ID cases (128 matrices of 4096 x 2048, "src1 f16 overflow")
# take 105-176 s each there, nearly all of it in ggml's reference q4_K quantizer making the test
# data, and the other 326 about 20 s: two of the three are one set, everything else the other.
# Usage: run-backend-ops.sh TEST_BACKEND_OPS LIBGGML_QMOE LOG_DIR
set -uf # -f: the case regexes hold ? and ( )
tbo=$1 lib=$2 logs=$3
types='q8_0|q4_0|mxfp4|q6_K|q4_K|q5_K'
mkdir -p "$logs"
for f in "$tbo" "$lib"; do
  [ -e "$f" ] || { echo "qmoe: ggml: $f is missing" >&2; exit 1; }
done
lib=$(realpath "$lib")

# run NAME OP PARAM TYPES [MORE]: one test-backend-ops run of the cases whose parameters match
# "PARAM=(TYPES),MORE" (a regex) into $logs/test-backend-ops-NAME.log, its exit status and
# seconds in .rc / .secs
run() {
  local name=$1 op=$2 param=$3 tt=$4 more=${5:-} log=$logs/test-backend-ops-$1.log start
  start=$(date +%s)
  # -o takes exact op names first, so MUL_MAT does not also pick MUL_MAT_ID
  GGML_BACKEND_PATH=$lib "$tbo" test -b QMOE -o "$op" -p "$param=($tt),$more" >"$log.raw" 2>&1
  echo $? >"$log.rc"
  sed 's/\x1b\[[0-9;]*m//g' "$log.raw" >"$log" && rm -f "$log.raw" # no colours
  echo $(( $(date +%s) - start )) >"$log.secs"
}

# check NAME OP PARAM TYPES [MORE]: the counts of a finished run; 1 when it did not pass
check() {
  local name=$1 op=$2 param=$3 tt=$4 log=$logs/test-backend-ops-$1.log
  local rc secs cases ok failed unsupported noref
  rc=$(cat "$log.rc") secs=$(cat "$log.secs")
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
    return 1
  fi
  return 0
}

big='type_b=f32,n_mats=128,n_used=4,b=0,m=4096,n=(32|64),k=2048,'
sets=("MUL_MAT_ID-big MUL_MAT_ID type_a q4_K $big"
      "MUL_MAT_ID MUL_MAT_ID type_a $types (?!$big)"
      "MUL_MAT MUL_MAT type_a $types"
      "SWIGLU SWIGLU type f32"
      "MUL_MAT_ID_FUSION MUL_MAT_ID_FUSION type_a $types"
      "MUL_MAT_VEC_FUSION MUL_MAT_VEC_FUSION type $types")
start=$(date +%s)
run ${sets[0]} &
first=$!
for s in "${sets[@]:1}"; do run $s; done
wait $first
status=0 total=0
for s in "${sets[@]}"; do check $s || status=1; done
echo "qmoe: ggml: test-backend-ops: $(( $(date +%s) - start )) s in all (two processes at once)"
if [ $status = 0 ]; then echo "qmoe: ggml: PASSED ($total cases)"; else echo "qmoe: ggml: FAILED"; fi
exit $status
