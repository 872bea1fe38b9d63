#!/usr/bin/env bash
# The README's C example (its first ```c block) compiles against the headers, links the built
# libqmoe and runs: the example a newcomer copies is kept true by `make test` (ctest
# readme_example). Usage: readme_example.sh README.md CC INCLUDE_DIRS LIB_DIR OUT_DIR
set -euo pipefail
readme=$1 cc=$2 incs=$3 libdir=$4 out=$5
mkdir -p "$out"
awk '/^```c$/ {on = 1; next} /^```$/ && on {exit} on {print}' "$readme" > "$out/readme_example.c"
[ -s "$out/readme_example.c" ] || { echo "readme_example: no \`\`\`c block in $readme" >&2; exit 1; }
flags=()
for d in ${incs//;/ }; do flags+=(-I "$d"); done
"$cc" -std=c11 -Wall -Wextra -Werror "${flags[@]}" "$out/readme_example.c" -o "$out/readme_example" \
  -L "$libdir" -lqmoe -Wl,-rpath,"$libdir"
"$out/readme_example" | tee "$out/readme_example.out"
grep -q "^kernel .*, row 0: scale" "$out/readme_example.out"
