#!/usr/bin/env bash
# Checks the build tools; installs what is missing from Debian's packages when run as root.
set -eu
missing=()
command -v cmake >/dev/null 2>&1 || missing+=(cmake)
command -v cc >/dev/null 2>&1 || missing+=(gcc)
command -v c++ >/dev/null 2>&1 || missing+=(g++)
command -v make >/dev/null 2>&1 || missing+=(make)
if command -v cmake >/dev/null 2>&1; then
  v=$(cmake --version | awk 'NR==1{print $3}')
  if [ "$(printf '%s\n3.20\n' "$v" | sort -V | head -1)" != "3.20" ]; then
    echo "qmoe: cmake $v is older than 3.20" >&2
    missing+=(cmake)
  fi
fi
# Optional: without them CMake leaves out the suites that need them (and says so).
optional=()
command -v valgrind >/dev/null 2>&1 || optional+=(valgrind)
command -v pkg-config >/dev/null 2>&1 || optional+=(pkg-config)
[ ${#missing[@]} -eq 0 ] && [ ${#optional[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "qmoe: installing ${missing[*]} ${optional[*]} from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  if [ ${#missing[@]} -gt 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  for p in "${optional[@]}"; do # valgrind is not packaged for every architecture
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null ||
      echo "qmoe: could not install $p; the tests that need it are left out" >&2
  done
  exit 0
fi
if [ ${#optional[@]} -gt 0 ]; then
  echo "qmoe: ${optional[*]} not found: the tests that need them (valgrind leak checks," \
    "the pkg-config build) are left out — install them (e.g. sudo apt-get install" \
    "${optional[*]})" >&2
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "qmoe: missing build tools: ${missing[*]} — install them (e.g. sudo apt-get install ${missing[*]})" >&2
exit 1
