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
test: fuzz-smoke

fuzz-build:
	@CC_FUZZ=$(FUZZ_CC) scripts/require-fuzz.sh
	@test -f $(FUZZ_BUILD)/CMakeCache.txt || \
	  cmake -S fuzz -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=$(FUZZ_CC) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(FUZZ_BUILD) -j $(JOBS)

# New inputs go to $(FUZZ_BUILD)/corpus/<harness> (the first directory); the committed seeds in
# fuzz/corpus/<harness> are read only. Crashes land in $(FUZZ_BUILD)/artifacts/.
define fuzz_run
	@mkdir -p $(FUZZ_BUILD)/artifacts
	@set -e; for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_BUILD)/corpus/$$f; \
	  echo "== $$f for $(1) s"; \
	  $(FUZZ_BUILD)/$$f $(FUZZ_FLAGS) -max_total_time=$(1) \
	    -artifact_prefix=$(FUZZ_BUILD)/artifacts/$$f- \
	    $(FUZZ_BUILD)/corpus/$$f fuzz/corpus/$$f 2>$(FUZZ_BUILD)/$$f.log || \
	    { tail -n 60 $(FUZZ_BUILD)/$$f.log; exit 1; }; \
	  grep -E '^stat::(number_of_executed_units|peak_rss_mb)' $(FUZZ_BUILD)/$$f.log; \
	  echo "corpus: $$(ls $(FUZZ_BUILD)/corpus/$$f | wc -l) files ($$(ls fuzz/corpus/$$f | wc -l) seeds)"; \
	done
endef

fuzz: fuzz-build
	$(call fuzz_run,$(FUZZ_SECONDS))

fuzz-smoke: fuzz-build
	$(call fuzz_run,$(FUZZ_SMOKE_SECONDS))
