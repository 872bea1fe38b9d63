#!/usr/bin/env bash
# Creates (or refreshes) the project's virtual environment with the test dependencies.
# Usage: scripts/venv.sh VENV_DIR REQUIREMENTS...
set -eu
venv=$1; shift
py=$(command -v python3 || true)
if [ -z "$py" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-venv >/dev/null
    py=$(command -v python3)
  else
    echo "qmoe: python3 is missing — install python3 and python3-venv" >&2; exit 1
  fi
fi
# Only a virtual environment (or nothing) is ever removed below.
if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then
  echo "qmoe: $venv exists and is not a virtual environment; remove it or choose another VENV" >&2
  exit 1
fi
# A venv without pip is broken (python3 -m venv without python3-venv on Debian leaves one behind):
# it is made again rather than trusted.
if ! "$venv/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$venv"
  if ! "$py" -m venv "$venv" 2>/dev/null; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      ver=$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      DEBIAN_FRONTEND=noninteractive apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python$ver-venv" >/dev/null || \
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
      rm -rf "$venv"; "$py" -m venv "$venv"
    else
      rm -rf "$venv"
      echo "qmoe: python3 cannot create a virtual environment — install python3-venv" >&2; exit 1
    fi
  fi
fi
stamp="$venv/.requirements.stamp"
want=$(cat "$@" | sha256sum | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null
  for r in "$@"; do "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$r"; done
  echo "$want" > "$stamp"
fi
