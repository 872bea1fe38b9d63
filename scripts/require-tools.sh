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
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "qmoe: installing ${missing[*]} from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  exit 0
fi
echo "qmoe: missing build tools: ${missing[*]} — install them (e.g. sudo apt-get install ${missing[*]})" >&2
exit 1
