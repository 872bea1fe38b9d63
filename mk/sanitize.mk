# Sanitizer builds: the whole C test suite under AddressSanitizer + UndefinedBehaviorSanitizer
# (build-asan) and under ThreadSanitizer (build-tsan). Both are part of `make test`.
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
SAN_CC ?= $(shell command -v clang >/dev/null 2>&1 && echo clang || echo cc)
# Python suites load the library into an uninstrumented interpreter (the sanitizer runtime would
# have to be preloaded into python itself), and valgrind cannot run sanitizer-instrumented
# programs; both are covered by the normal build.
SAN_CTEST_EXCLUDE ?= python|pytest|valgrind
# The soak test runs fewer operators under sanitizers (each op is 5-20x slower there).
SAN_ENV = QMOE_SOAK_OPS=3000 \
  ASAN_OPTIONS=detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1

.PHONY: test-asan test-tsan sanitize
test: lap-test-asan test-asan lap-test-tsan test-tsan
sanitize: test-asan test-tsan

$(ASAN_BUILD)/CMakeCache.txt: | tools-check
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DQMOE_SANITIZE=address,undefined -DQMOE_CHECKED=ON $(CMAKE_ARGS)

$(TSAN_BUILD)/CMakeCache.txt: | tools-check
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_C_COMPILER=$(SAN_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DQMOE_SANITIZE=thread $(CMAKE_ARGS)

# The command-line suites drive the program from Python: they use the project's venv.
test-asan: $(ASAN_BUILD)/CMakeCache.txt venv
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	ln -sfn $(abspath $(VENV)) $(ASAN_BUILD)/venv
	env $(SAN_ENV) ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS) \
	  -E '$(SAN_CTEST_EXCLUDE)'

test-tsan: $(TSAN_BUILD)/CMakeCache.txt venv
	cmake --build $(TSAN_BUILD) -j $(JOBS)
	ln -sfn $(abspath $(VENV)) $(TSAN_BUILD)/venv
	env $(SAN_ENV) ctest --test-dir $(TSAN_BUILD) --output-on-failure -j $(JOBS) \
	  -E '$(SAN_CTEST_EXCLUDE)'
