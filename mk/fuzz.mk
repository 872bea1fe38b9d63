# libFuzzer harnesses (fuzz/): `make fuzz` runs each for FUZZ_SECONDS; `make test` runs each for
# FUZZ_SMOKE_SECONDS from the committed seeds so CI keeps them building and alive.
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 6
FUZZ_CC ?= clang
FUZZERS := fuzz_plan fuzz_moe_ops fuzz_grouped_matmul fuzz_op fuzz_prepack $(if $(wildcard tools/npy.c),fuzz_npy) \
  $(if $(wildcard tools/safetensors_read.c),fuzz_safetensors)
# -timeout: a hang is a bug; -rss_limit_mb: so is unbounded memory.
FUZZ_FLAGS ?= -timeout=20 -rss_limit_mb=2048 -print_final_stats=1

.PHONY: fuzz fuzz-smoke fuzz-build
test: lap-fuzz-smoke fuzz-smoke

fuzz-build:
	@CC_FUZZ=$(FUZZ_CC) scripts/require-fuzz.sh
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || \
	  cmake -S fuzz -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# New inputs go to $(FUZZ_BUILD)/corpus/<harness> (the first directory); the committed seeds in
# fuzz/corpus/<harness> are read only. Crashes land in $(FUZZ_BUILD)/artifacts/.
# $(call fuzz_run,SECONDS): every harness, $(JOBS) at a time (scripts/fuzz-run.sh)
define fuzz_run
	@scripts/fuzz-run.sh $(FUZZ_BUILD) $(1) $(JOBS) "$(FUZZ_FLAGS)" $(FUZZERS)
endef

fuzz: fuzz-build
	$(call fuzz_run,$(FUZZ_SECONDS))

fuzz-smoke: fuzz-build
	$(call fuzz_run,$(FUZZ_SMOKE_SECONDS))
