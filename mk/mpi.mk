# Expert parallelism on MPI (src/mpi, tests/mpi): `make test-mpi` runs the MPI tests of $(BUILD)
# (mpirun -np 1..4, a dying rank); part of `make test`. Open MPI comes from Debian's packages via
# scripts/require-mpi.sh, before the first configure so CMake's FindMPI sees it; without it the
# build goes on and the MPI parts are off.
.PHONY: mpi-check test-mpi
test: lap-test-mpi test-mpi

$(BUILD)/CMakeCache.txt: | mpi-check

mpi-check:
	@scripts/require-mpi.sh || echo "qmoe: going on without MPI: the MPI parts are off" >&2

# A build configured before MPI was installed is configured again to find it.
test-mpi: mpi-check build
	@if ! command -v mpirun >/dev/null 2>&1; then \
	  echo "qmoe: MPI not installed: no MPI tests to run" >&2; exit 0; fi; \
	if [ ! -d $(BUILD)/tests/mpi ]; then cmake -S . -B $(BUILD) >/dev/null && \
	  cmake --build $(BUILD) -j $(JOBS); fi; \
	if [ ! -d $(BUILD)/tests/mpi ]; then \
	  echo "qmoe: $(BUILD) is configured with the MPI parts off (QMOE_WITH_MPI=OFF)" >&2; exit 0; fi; \
	ctest --test-dir $(BUILD) -L mpi --output-on-failure -j $(JOBS)
