# qmoe as a ggml backend (src/ggml, docs/ggml.md). The llama.cpp it plugs into is a released one,
# never a copy in this repository: the tree inside the PyPI sdist llama-cpp-python==0.3.36
# (vendor/llama.cpp: llama.cpp 0c1e570, ggml 0.25.3), downloaded with pip, checked against the
# sha256 recorded here (the digest of the file PyPI served on 2026-12-01), unpacked under
# $(GGML_DIR). Only the targets the backend needs are built, CPU only, Release, shared libraries
# (so libggml-qmoe.so and the tools share one libggml-base.so).
#   make ggml-llama   download + build llama.cpp's ggml, llama, test-backend-ops, llama-bench,
#                     llama-quantize and llama-perplexity
#   make ggml-backend build $(BUILD)/src/ggml/libggml-qmoe.so against that tree
#   make ggml-tsan    the backend's unit tests under ThreadSanitizer (part of test-ggml)
#   make ggml-asan    the backend's unit tests under AddressSanitizer + UBSan (part of test-ggml)
#   make test-ggml    the backend's unit tests, the layering check again with the backend's objects
#                     built (no cycle in src/ggml either), test-backend-ops -b QMOE -o MUL_MAT_ID / MUL_MAT in
#                     test mode, llama-bench on small Qwen3-MoE-shaped models, and the end-to-end
#                     KL check (tests/ggml/kl_check.py); each part timed (part of make test)
#   make bench-ggml   scripts/bench_ggml.py: QMOE against llama.cpp's CPU, side by side (not in make test)
# Without the package index the suite is reported as NOT RUN with the reason, and make test goes on.
GGML_DIR            ?= $(BUILD)/ggml
GGML_PYPI_VERSION   := 0.3.36
GGML_SDIST_SHA256   := 832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
GGML_LLAMA_SRC      := $(GGML_DIR)/llama_cpp_python-$(GGML_PYPI_VERSION)/vendor/llama.cpp
GGML_LLAMA_BUILD    ?= $(GGML_DIR)/llama-build
GGML_LLAMA_TARGETS  ?= ggml llama test-backend-ops llama-bench llama-quantize llama-perplexity
GGML_BACKEND_LIB    := $(BUILD)/src/ggml/libggml-qmoe.so
GGML_RESULT         := $(GGML_DIR)/test-ggml.result
GGML_VENV           ?= $(GGML_DIR)/venv
# -U__AMX_INT8__: the CPU backend's AMX code (ggml-cpu/amx, compiled in by -march=native on a CPU
# with AMX) crashes this release on such CPUs (SIGILL / SIGSEGV in ggml_backend_amx_mul_mat on
# ggml's worker threads, CPU backend alone, with or without QMOE; upstream issue 20824, PR 26954):
# it is compiled out, so the CPU backend there runs its AVX-512 code, as on a CPU without AMX.
GGML_LLAMA_CMAKE_ARGS ?= -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=OFF \
  -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF \
  -DCMAKE_C_FLAGS=-U__AMX_INT8__ -DCMAKE_CXX_FLAGS=-U__AMX_INT8__

.PHONY: ggml-fetch ggml-llama ggml-backend ggml-tsan ggml-asan test-ggml bench-ggml
# a comma, for a $(call) argument that holds one (address,undefined below)
, := ,
test: lap-test-ggml test-ggml

# Exit 3 from the fetch script means "the index cannot be reached": the callers below turn it
# into a NOT RUN report instead of a failure.
ggml-fetch:
	@src/ggml/fetch-llama-cpp.sh $(GGML_DIR) $(GGML_PYPI_VERSION) $(GGML_SDIST_SHA256) \
	  $(abspath $(VENV))/bin/python

ggml-llama: ggml-fetch
	@# configured again when the arguments change (the stamp holds the last ones)
	@if [ ! -f $(GGML_LLAMA_BUILD)/CMakeCache.txt ] || \
	    [ "$$(cat $(GGML_LLAMA_BUILD)/qmoe-cmake-args 2>/dev/null)" != '$(GGML_LLAMA_CMAKE_ARGS)' ]; then \
	  cmake -S $(GGML_LLAMA_SRC) -B $(GGML_LLAMA_BUILD) $(GGML_LLAMA_CMAKE_ARGS) >/dev/null && \
	  echo '$(GGML_LLAMA_CMAKE_ARGS)' >$(GGML_LLAMA_BUILD)/qmoe-cmake-args; fi
	@start=$$(date +%s); \
	cmake --build $(GGML_LLAMA_BUILD) -j $(JOBS) --target $(GGML_LLAMA_TARGETS); \
	echo "qmoe: ggml: llama.cpp targets ($(GGML_LLAMA_TARGETS)) up to date in $$(( $$(date +%s) - start )) s"

# The project's build, configured with the tree's paths, so the plain `make build` never needs
# llama.cpp (src/ggml/CMakeLists.txt is skipped while QMOE_LLAMA_CPP_DIR is empty).
ggml-backend: ggml-llama $(BUILD)/CMakeCache.txt
	@cmake -S . -B $(BUILD) -DQMOE_LLAMA_CPP_DIR=$(abspath $(GGML_LLAMA_SRC)) \
	  -DQMOE_LLAMA_CPP_BUILD_DIR=$(abspath $(GGML_LLAMA_BUILD)) >/dev/null
	cmake --build $(BUILD) -j $(JOBS) --target ggml-qmoe test_ggml_backend

# The backend's unit tests under a sanitizer, each in a build of its own, built with gcc: its
# sanitizer runtimes are shared libraries that a dlopen'ed module can use (clang links its
# runtime into executables only, out of reach of a module linked with --no-undefined).
#   ggml-tsan  ThreadSanitizer: two llama.cpp contexts on one weight at once
#              (tests/ggml/test_ggml_backend.c), on the backend's own pool (libgomp is not
#              instrumented: its barriers would read as races)
#   ggml-asan  AddressSanitizer + UndefinedBehaviorSanitizer: the buffer's weight lifetimes (a
#              gate / up pair's halves, rewrites, views) read no freed or foreign memory; leaks
#              are checked (LeakSanitizer) on the backend's own allocations. Without
#              detect_stack_use_after_return: gcc 12's fake stack frames do not keep the 64-byte
#              alignment it gives a local array that an AVX-512 load reads (pack_avx512vnni.c's
#              strip_index), so the aligned load faults there; the clang build (sanitize.mk)
#              checks use after return on the same code
# $(call ggml_san,NAME,SANITIZERS,CMAKE OPTIONS,ENVIRONMENT)
define ggml_san
ggml-$(1): ggml-llama
	@cmake -S . -B $$(GGML_DIR)/$(1)-build -DCMAKE_C_COMPILER=cc -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DQMOE_SANITIZE=$(2) $(3) -DQMOE_LLAMA_CPP_DIR=$$(abspath $$(GGML_LLAMA_SRC)) \
	  -DQMOE_LLAMA_CPP_BUILD_DIR=$$(abspath $$(GGML_LLAMA_BUILD)) $$(CMAKE_ARGS) >/dev/null
	cmake --build $$(GGML_DIR)/$(1)-build -j $$(JOBS) --target ggml-qmoe test_ggml_backend
	$(4) $$(GGML_DIR)/$(1)-build/tests/ggml/test_ggml_backend \
	  $$(GGML_DIR)/$(1)-build/src/ggml/libggml-qmoe.so
endef
$(eval $(call ggml_san,tsan,thread,-DQMOE_GGML_OPENMP=OFF,QMOE_LOAD_ORDERS=4 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1))
$(eval $(call ggml_san,asan,address$(,)undefined,,ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1))

# One shell: a NOT RUN (no index) ends the suite there with the reason, written to
# $(GGML_RESULT) and printed, and make test goes on; any other failure fails it. `lap` adds the
# seconds since the previous part to the times line (the last line of the result).
test-ggml:
	@rm -f $(GGML_RESULT); mkdir -p $(GGML_DIR); \
	src/ggml/fetch-llama-cpp.sh $(GGML_DIR) $(GGML_PYPI_VERSION) $(GGML_SDIST_SHA256) \
	  $(abspath $(VENV))/bin/python 2>$(GGML_DIR)/fetch.err; rc=$$?; \
	if [ $$rc = 3 ]; then cat $(GGML_DIR)/fetch.err >&2; \
	  reason=$$(tail -n 1 $(GGML_DIR)/fetch.err); echo "NOT RUN: $$reason" >$(GGML_RESULT); \
	  echo "qmoe: ggml suite NOT RUN (not passed): $$reason" >&2; exit 0; fi; \
	if [ $$rc != 0 ]; then cat $(GGML_DIR)/fetch.err >&2; exit $$rc; fi; \
	start=$$(date +%s); t=$$start; times=""; \
	lap() { now=$$(date +%s); times="$$times, $$1 $$((now - t)) s"; t=$$now; }; \
	$(MAKE) --no-print-directory ggml-llama && lap "llama.cpp build" && \
	$(MAKE) --no-print-directory ggml-backend && lap "backend build" && \
	ctest --test-dir $(BUILD) -L ggml --output-on-failure -j $(JOBS) && \
	ctest --test-dir $(BUILD) -R '^layers$$' --output-on-failure && lap "unit tests" && \
	$(MAKE) --no-print-directory ggml-tsan && lap "unit tests under TSan" && \
	$(MAKE) --no-print-directory ggml-asan && lap "unit tests under ASan + UBSan" && \
	tests/ggml/run-backend-ops.sh $(GGML_LLAMA_BUILD)/bin/test-backend-ops $(GGML_BACKEND_LIB) \
	  $(GGML_DIR)/logs >$(GGML_RESULT); rc=$$?; lap "test-backend-ops"; \
	if [ -f $(GGML_RESULT) ] && ! scripts/venv.sh $(GGML_VENV) tests/ggml/requirements.txt >/dev/null; then \
	  echo "qmoe: ggml: llama-bench smoke and KL check NOT RUN: numpy / PyYAML cannot be installed into $(GGML_VENV)" \
	    >>$(GGML_RESULT); \
	elif [ -f $(GGML_RESULT) ]; then lap "venv"; \
	  tests/ggml/run-llama-smoke.sh $(GGML_LLAMA_BUILD)/bin $(GGML_BACKEND_LIB) $(GGML_LLAMA_SRC) \
	    $(GGML_VENV)/bin/python $(GGML_DIR)/smoke >>$(GGML_RESULT) || rc=1; lap "llama-bench smoke"; \
	  PYTHONPATH=$(abspath $(GGML_LLAMA_SRC))/gguf-py $(GGML_VENV)/bin/python tests/ggml/kl_check.py \
	    $(GGML_LLAMA_BUILD)/bin $(GGML_BACKEND_LIB) $(GGML_DIR)/kl >>$(GGML_RESULT) || rc=1; \
	  lap "KL check"; fi; \
	[ -f $(GGML_RESULT) ] && echo "qmoe: ggml: times: total $$(( $$(date +%s) - start )) s$$times" \
	  >>$(GGML_RESULT); \
	cat $(GGML_RESULT) 2>/dev/null; \
	echo "qmoe: ggml suite: $$(( $$(date +%s) - start )) s (with the llama.cpp build when it was not built yet)"; \
	exit $$rc

# Side by side with llama.cpp's CPU backend (scripts/bench_ggml.py; the models are cached under
# $(GGML_DIR)/bench-models). Not part of make test: it takes minutes and wants a quiet machine.
BENCH_GGML_ARGS ?=
bench-ggml: ggml-backend
	@scripts/venv.sh $(GGML_VENV) tests/ggml/requirements.txt >/dev/null
	PYTHONPATH=$(abspath $(GGML_LLAMA_SRC))/gguf-py $(GGML_VENV)/bin/python scripts/bench_ggml.py \
	  --bin $(GGML_LLAMA_BUILD)/bin --lib $(GGML_BACKEND_LIB) --models $(GGML_DIR)/bench-models \
	  --out $(GGML_DIR)/bench $(BENCH_GGML_ARGS)
