#!/usr/bin/env bash
# Fetches the llama.cpp tree the ggml backend is built against: the sdist of PyPI
# llama-cpp-python==$version (its vendor/llama.cpp), checked against a recorded sha256 and
# unpacked under DEST. Nothing of it is ever committed.
# Usage: fetch-llama-cpp.sh DEST VERSION SHA256 [PYTHON]
# Exit 0: DEST/llama_cpp_python-VERSION/vendor/llama.cpp is ready.
# Exit 3: the package index cannot be reached (or pip is missing): the caller reports the ggml
#         suite as not run, with the message printed here.
# Exit 1: anything else (a digest that differs is an error, never a reason to skip).
set -eu
dest=$1 version=$2 want=$3 py=${4:-}
name=llama_cpp_python-$version
tree=$dest/$name/vendor/llama.cpp
stamp=$dest/$name/.qmoe-unpacked
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -f "$tree/ggml/src/ggml-backend-impl.h" ]; then
  exit 0
fi
mkdir -p "$dest"
sdist=$dest/$name.tar.gz
if [ ! -f "$sdist" ] || [ "$(sha256sum "$sdist" | cut -d' ' -f1)" != "$want" ]; then
  if [ -z "$py" ] || ! "$py" -m pip --version >/dev/null 2>&1; then py=python3; fi
  if ! command -v "$py" >/dev/null 2>&1 || ! "$py" -m pip --version >/dev/null 2>&1; then
    echo "qmoe: ggml: pip is missing (python3 -m pip): cannot download llama-cpp-python==$version" >&2
    exit 3
  fi
  tmp=$(mktemp -d "$dest/dl.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  if ! "$py" -m pip download --no-deps --no-binary :all: --retries 2 --timeout 20 \
      -d "$tmp" "llama-cpp-python==$version" >"$tmp/pip.log" 2>&1; then
    tail -n 5 "$tmp/pip.log" >&2
    echo "qmoe: ggml: cannot download the sdist llama-cpp-python==$version from the package index" \
      "(pip download failed; see above): the llama.cpp tree is missing" >&2
    exit 3
  fi
  if [ ! -f "$tmp/$name.tar.gz" ]; then
    echo "qmoe: ggml: pip download did not leave $name.tar.gz" >&2; exit 1
  fi
  mv -f "$tmp/$name.tar.gz" "$sdist"
fi
got=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "qmoe: ggml: $sdist has sha256 $got, expected $want: refusing to build it" >&2
  exit 1
fi
rm -rf "${dest:?}/$name"
tar -xzf "$sdist" -C "$dest" "$name/vendor/llama.cpp"
if [ ! -f "$tree/ggml/src/ggml-backend-impl.h" ]; then
  echo "qmoe: ggml: $sdist holds no vendor/llama.cpp/ggml/src/ggml-backend-impl.h" >&2; exit 1
fi
echo "$want" >"$stamp"
