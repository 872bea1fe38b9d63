# The runtime's checked configuration (QMOE_CHECKED: copy-queue discipline checks, poisoned
# staging buffers): a separate build in $(BUILD)-checked, running the runtime and operator tests.
# Not part of `make test`: its ASan + UBSan build (sanitize.mk) is the checked configuration and
# runs every test, these included, so a third build of the library bought no check of its own
# (about 100 s of a 2-core CI run).
CHECKED_BUILD ?= $(BUILD)-checked
CHECKED_TESTS ?= test_runtime_|test_stream|test_fence|test_trace|test_partition|test_reference|test_soak

.PHONY: test-checked
test-checked: tools-check
	cmake -S . -B $(CHECKED_BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DQMOE_CHECKED=ON \
	  -DQMOE_BUILD_TOOLS=OFF $(CMAKE_ARGS)
	cmake --build $(CHECKED_BUILD) -j $(JOBS)
	ctest --test-dir $(CHECKED_BUILD) --output-on-failure -j $(JOBS) -R '$(CHECKED_TESTS)'
