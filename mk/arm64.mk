# ARM64: the library, CLI and C tests cross-built for aarch64 (build-arm64, Debian's
# gcc-aarch64-linux-gnu) and the C test suite run under qemu-aarch64 on three CPU models, so each
# ARM kernel runs where the CPU has it and AUTO's choice changes with the model:
#   max         dot product + I8MM: neon_i8mm (AUTO), neon_dot, portable
#   cortex-a76  dot product only:   neon_dot (AUTO), portable
#   cortex-a57  plain ARMv8.0:      portable (AUTO)
# Part of `make test`. Every test whose program is an aarch64 binary runs (ctest starts it under
# the emulator); the tests that drive the programs from host tools are left out (the CLI
# cross-checks and pytest suites in the host's Python, valgrind, the install tests' host builds):
# ARM64_HOST_TESTS lists them from ctest's own description. ARM64_ONCE run on the first model
# only, the tests whose work no CPU model changes: the vendor sample's 16.8-million-line check
# (its group list is empty: no kernel runs in it), the sweeps that ask for the reference or the
# portable kernel by name, and the runtime's and parsers' tests that run no kernel (fences,
# queues, partitions, allocation counts, fast division, the safetensors reader). The soak test runs fewer operators (emulation is 10-50x slower). Then the ARM kernels'
# suites under ASan + UBSan (ARM64_SAN_*), and scripts/check-arm64-bits.sh: the ARM kernels'
# output files equal the x86 kernels' byte for byte.
ARM64_BUILD ?= build-arm64
ARM64_CPUS ?= max cortex-a76 cortex-a57
ARM64_ONCE ?= compat_sample_weight_nz test_reference test_kernel_portable test_fence test_fence_busy \
  test_runtime_workq test_runtime_alloc test_runtime_fastdiv test_partition cli_safetensors_read
ARM64_ENV = QMOE_SOAK_OPS=3000
ARM64_CMAKE_ARGS ?=
# The ARM kernels' own suites again under AddressSanitizer + UndefinedBehaviorSanitizer (the
# x86 sanitizer builds cannot run NEON code); leak checking stays with the x86 build (LeakSanitizer
# cannot stop the threads of an emulated process).
ARM64_SAN_BUILD ?= build-arm64-asan
ARM64_SAN_TESTS ?= test_kernel_neondot test_kernel_i8mm test_kernel_threads test_edge_rows \
  test_moe_swiglu
ARM64_SAN_ENV = ASAN_OPTIONS=detect_leaks=0:strict_string_checks=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ARM64_HOST_TESTS = ctest --test-dir $(ARM64_BUILD) --show-only=json-v1 | python3 -c \
  'import json, sys; print("|".join("^" + t["name"] + "$$" for t in json.load(sys.stdin)["tests"] \
   if "qemu" not in (t.get("command") or [""])[0]))'

.PHONY: test-arm64 arm64-tools-check
test: lap-test-arm64 test-arm64

ifeq ($(shell uname -m),aarch64)
# On an ARM64 machine the native build and `make test-c` run all of this on the real CPU.
test-arm64:
	@echo "test-arm64: this machine is aarch64; make test-c tests its kernels natively"
else

arm64-tools-check:
	@scripts/require-arm64.sh

$(ARM64_BUILD)/CMakeCache.txt: | arm64-tools-check
	cmake -S . -B $(ARM64_BUILD) -DCMAKE_TOOLCHAIN_FILE=$(abspath cmake/toolchain-aarch64.cmake) \
	  -DCMAKE_BUILD_TYPE=Release $(ARM64_CMAKE_ARGS)

$(ARM64_SAN_BUILD)/CMakeCache.txt: | arm64-tools-check
	cmake -S . -B $(ARM64_SAN_BUILD) -DCMAKE_TOOLCHAIN_FILE=$(abspath cmake/toolchain-aarch64.cmake) \
	  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DQMOE_SANITIZE=address,undefined -DQMOE_CHECKED=ON \
	  $(ARM64_CMAKE_ARGS)

# The host build ($(BUILD)) gives the x86 kernels' bits for scripts/check-arm64-bits.sh.
test-arm64: arm64-tools-check $(ARM64_BUILD)/CMakeCache.txt $(ARM64_SAN_BUILD)/CMakeCache.txt build
	cmake --build $(ARM64_BUILD) -j $(JOBS)
	cmake --build $(ARM64_SAN_BUILD) -j $(JOBS) --target $(ARM64_SAN_TESTS)
	@host=$$($(ARM64_HOST_TESTS)) || exit 1; first=1; status=0; for cpu in $(ARM64_CPUS); do \
	  exclude="$${host:-^$$}"; \
	  [ $$first = 1 ] || for t in $(ARM64_ONCE); do exclude="$$exclude|^$$t$$"; done; first=0; \
	  echo "== qemu-aarch64 -cpu $$cpu"; \
	  env $(ARM64_ENV) QEMU_CPU=$$cpu ctest --test-dir $(ARM64_BUILD) --output-on-failure \
	    -j $(JOBS) -E "$$exclude" || status=1; \
	done; \
	echo "== qemu-aarch64 -cpu max, ASan + UBSan: $(ARM64_SAN_TESTS)"; \
	env $(ARM64_SAN_ENV) QEMU_CPU=max ctest --test-dir $(ARM64_SAN_BUILD) --output-on-failure \
	  -j $(JOBS) -R "^($(shell echo $(ARM64_SAN_TESTS) | tr ' ' '|'))$$" || status=1; \
	scripts/check-arm64-bits.sh $(BUILD)/tools/qmoe $(ARM64_BUILD)/tools/qmoe \
	  $(ARM64_BUILD)/bits-check || status=1; \
	exit $$status
endif
