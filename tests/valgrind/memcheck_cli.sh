#!/usr/bin/env bash
# memcheck_cli.sh VALGRIND QMOE WORKDIR: `qmoe gen` then the `qmoe run` line it prints, both under
# valgrind memcheck with full leak checking; any error or definite/indirect leak fails the test.
# "Possibly lost" is not counted: the process-wide default device (stream NULL) lives until exit
# by design, and its running threads' stacks and TLS show up as possibly lost.
set -euo pipefail
valgrind=$1 qmoe=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
vg=("$valgrind" --quiet --error-exitcode=99 --leak-check=full --show-leak-kinds=definite,indirect
    --errors-for-leak-kinds=definite,indirect --track-origins=yes)
for mode in a8w8 a8w4; do
  dir=$work/$mode
  "${vg[@]}" "$qmoe" gen --out "$dir" --mode "$mode" --E 3 --M 12 --K 64 --N 128 --seed 7 \
    >"$work/gen-$mode.txt"
  line=$(grep -E '(^|[ /])qmoe run ' "$work/gen-$mode.txt" | tail -n 1)
  [ -n "$line" ] || { echo "qmoe gen printed no 'qmoe run' line:"; cat "$work/gen-$mode.txt"; exit 1; }
  args=${line#*qmoe run }
  # shellcheck disable=SC2086  # the printed line is a plain word list (paths without spaces)
  "${vg[@]}" "$qmoe" run $args
  out=$(sed -n 's/.* --out \([^ ]*\).*/\1/p' <<<"$line")
  scale=$(sed -n 's/.* --out-scale \([^ ]*\).*/\1/p' <<<"$line")
  for f in "$out" "$scale"; do [ -s "$f" ] || { echo "qmoe run wrote no '$f'"; exit 1; }; done
  echo "valgrind: qmoe gen + run ($mode): no errors, no leaks"
done
