#!/usr/bin/env bash
# Checks for clang and its libFuzzer runtime (libclang_rt.fuzzer); installs them from Debian's
# packages when run as root, otherwise says what to install.
set -eu
CC_FUZZ=${CC_FUZZ:-clang}
has_fuzzer() {
  command -v "$CC_FUZZ" >/dev/null 2>&1 || return 1
  local dir rt
  rt=$("$CC_FUZZ" -print-runtime-dir 2>/dev/null || true)
  for dir in "$rt" $("$CC_FUZZ" -print-resource-dir 2>/dev/null)/lib/linux; do
    [ -n "$dir" ] && ls "$dir"/libclang_rt.fuzzer*.a >/dev/null 2>&1 && return 0
  done
  # Newer layouts name it by target triple; a link test settles it.
  local t
  t=$(mktemp -d)
  printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n){(void)d;(void)n;return 0;}\n' >"$t/f.c"
  "$CC_FUZZ" -fsanitize=fuzzer "$t/f.c" -o "$t/f" >/dev/null 2>&1 && { rm -rf "$t"; return 0; }
  rm -rf "$t"
  return 1
}
has_fuzzer && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # The compiler first: the runtime's package is named by its major version.
  if ! command -v "$CC_FUZZ" >/dev/null 2>&1; then
    echo "qmoe: installing clang for libFuzzer" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null
  fi
  v=$("$CC_FUZZ" --version 2>/dev/null | sed -n 's/.*clang version \([0-9][0-9]*\).*/\1/p' | head -1)
  if [ -z "$v" ]; then
    echo "qmoe: cannot tell the clang version of '$CC_FUZZ' (is it clang?)" >&2
    exit 1
  fi
  echo "qmoe: installing libclang-rt-$v-dev for libFuzzer" >&2
  # Older Debian releases ship the runtime in libclang-common-N-dev instead.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "libclang-rt-$v-dev" >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "libclang-common-$v-dev" >/dev/null
  has_fuzzer && exit 0
  echo "qmoe: $CC_FUZZ still cannot link -fsanitize=fuzzer after installing clang $v's runtime" >&2
  exit 1
fi
echo "qmoe: the fuzz harnesses need clang with libFuzzer (clang -fsanitize=fuzzer)." >&2
echo "      On Debian: sudo apt-get install clang libclang-rt-\$(clang --version | sed -n 's/.*version \\([0-9]*\\).*/\\1/p')-dev" >&2
exit 1
