#!/usr/bin/env bash
# llama.cpp end to end with the QMOE backend, as a user runs it: a small model of Qwen3-MoE's
# structure (random weights, q8_0 and q4_0, written by make_moe_gguf.py) through llama-bench with
# GGML_BACKEND_PATH. Passes when the tool runs prompt and generation to the end, reports the QMOE
# backend, and the loader put weights in QMOE's buffer type (its "QMOE model buffer size" line).
# Numerics are test-backend-ops' job; this checks the loader's and the scheduler's paths.
# Usage: run-llama-smoke.sh LLAMA_BIN_DIR LIBGGML_QMOE LLAMA_TREE PYTHON OUT_DIR
set -u
bin=$1 lib=$2 tree=$3 py=$4 out=$5
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
status=0
for type in q8_0 q4_0; do
  model=$out/tiny-moe-$type.gguf log=$out/llama-bench-$type.log
  if ! PYTHONPATH=$tree/gguf-py "$py" "$here/make_moe_gguf.py" "$model" --type "$type" >"$log" 2>&1; then
    cat "$log" >&2; echo "qmoe: ggml: writing $model failed" >&2; status=1; continue
  fi
  # OMP_WAIT_POLICY=passive: ggml's OpenMP threads would otherwise spin on the cores qmoe's
  # threads run on (docs/ggml.md)
  OMP_WAIT_POLICY=passive GGML_BACKEND_PATH=$(realpath "$lib") "$bin/llama-bench" -v -m "$model" \
    -p 32 -n 4 -t 2 -r 1 -o md >>"$log" 2>&1
  rc=$?
  placed=$(grep -c "QMOE model buffer size" "$log")
  rows=$(grep -cE "^\| qwen3moe .*\| QMOE " "$log")
  echo "qmoe: ggml: llama-bench on a $type Qwen3-MoE-shaped model with QMOE: exit $rc," \
    "weights in QMOE buffers: $([ "$placed" -gt 0 ] && echo yes || echo no), $rows of 2 tests ran (log: $log)"
  if [ "$rc" != 0 ] || [ "$placed" = 0 ] || [ "$rows" != 2 ]; then tail -n 20 "$log" >&2; status=1; fi
done
exit $status
