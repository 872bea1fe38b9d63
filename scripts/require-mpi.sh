#!/usr/bin/env bash
# Checks for MPI (Open MPI from Debian: libopenmpi-dev for mpicc and the headers, openmpi-bin for
# mpirun); installs them from Debian's packages when run as root, otherwise says what to install.
# MPI is optional: without it the build goes on and the MPI parts (libqmoe_mpi, its tests) are off.
set -eu
has_mpi() {
  command -v mpicc >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1
}
has_mpi && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "qmoe: installing libopenmpi-dev openmpi-bin from Debian's packages" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin >/dev/null &&
    has_mpi; then
    exit 0
  fi
  echo "qmoe: could not install Open MPI; the MPI parts are off" >&2
  exit 1
fi
echo "qmoe: MPI not found: the MPI parts (libqmoe_mpi, make test-mpi) are off —" \
  "install it (e.g. sudo apt-get install libopenmpi-dev openmpi-bin)" >&2
exit 1
