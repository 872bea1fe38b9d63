#!/usr/bin/env bash
# Tokens-per-expert sweep of `qmoe bench` for scripts/plot_bench.py: E experts, K, N fixed, each
# expert getting exactly T tokens for T in TOKENS; prepacked and raw weights, A8W8 and A8W4, and
# a peer (oneMKL by default) in the same runs. JSON lines on stdout.
# Usage: scripts/bench_sweep.sh [QMOE] (env: E K N TOKENS MODES REPEAT PEER)
set -eu
qmoe=${1:-build/tools/qmoe}
E=${E:-8} K=${K:-2048} N=${N:-1536}
TOKENS=${TOKENS:-"1 4 16 64 256 1024 4096"}
MODES=${MODES:-"a8w8 a8w4"}
REPEAT=${REPEAT:-5}
PEER=${PEER:-mkl}
for mode in $MODES; do
  for t in $TOKENS; do
    "$qmoe" bench --shape "$E,$((E * t)),$K,$N" --even --mode "$mode" --repeat "$REPEAT" \
      --dram-mb 256 ${PEER:+--peer "$PEER"} 2>/dev/null
    "$qmoe" bench --shape "$E,$((E * t)),$K,$N" --even --mode "$mode" --repeat "$REPEAT" \
      --dram-mb 256 --raw 2>/dev/null
  done
done
