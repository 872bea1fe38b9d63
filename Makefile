# qmoe — the two commands: `make run` and `make test`. Everything drives CMake in build/.
BUILD      ?= build
BUILD_TYPE ?= Release
JOBS       ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_ARGS ?=

.PHONY: all build run test test-c install clean tools-check
all: build

tools-check:
	@scripts/require-tools.sh

$(BUILD)/CMakeCache.txt: | tools-check
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: tools-check $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

# The main job: the vendor sample's workload through the fastest kernel, verified against the
# reference on a sample of rows.
run: build
	$(BUILD)/tools/qmoe demo

# Every test. Fragments in mk/ add their suites as prerequisites of `test`, each after a lap-NAME
# that prints the time it starts (its builds included), so a log says what took how long. test-c
# leaves the tests labelled mpi and ggml to test-mpi and test-ggml, so make test runs each once.
test: lap-test-c test-c
	@echo "qmoe: make test: done at $$(date -u +%H:%M:%S)"
lap-%:
	@echo "qmoe: make test: $* from $$(date -u +%H:%M:%S)"
test-c: build venv
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -LE '^(mpi|ggml)$$'

install: build
	cmake --install $(BUILD) $(if $(PREFIX),--prefix $(PREFIX),)

clean:
	rm -rf $(BUILD) build-*

-include mk/*.mk
