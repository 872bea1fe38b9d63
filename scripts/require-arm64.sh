#!/usr/bin/env bash
# Checks the tools of the ARM64 cross build (make test-arm64): Debian's aarch64 cross compilers
# with the aarch64 C library, and qemu's user-mode emulator to run the tests. Installs what is
# missing from Debian's packages when run as root; otherwise says what to install and fails.
set -eu
missing=()
command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || missing+=(gcc-aarch64-linux-gnu)
command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || missing+=(g++-aarch64-linux-gnu)
# The C library and its headers for the target (the cross compilers pull them in; checked anyway,
# a partial install links nothing).
[ -e /usr/aarch64-linux-gnu/lib/libc.so.6 ] && [ -e /usr/aarch64-linux-gnu/include/stdio.h ] ||
  missing+=(libc6-dev-arm64-cross)
# qemu-user provides qemu-aarch64 (Debian 12); qemu-user-static its static twin.
command -v qemu-aarch64 >/dev/null 2>&1 || command -v qemu-aarch64-static >/dev/null 2>&1 ||
  missing+=(qemu-user)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "qmoe: installing ${missing[*]} from Debian's packages (ARM64 cross build)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
  exit 0
fi
echo "qmoe: the ARM64 cross build needs ${missing[*]} — install them" \
  "(e.g. sudo apt-get install ${missing[*]})" >&2
exit 1
