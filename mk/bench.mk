# The benchmark's peers and plots: `make bench-venv` installs oneMKL (for `qmoe bench --peer mkl`,
# found at run time next to the program) and matplotlib into $(BUILD)/bench-venv; `make plot`
# turns qmoe bench JSON lines (BENCH_JSON) into a PNG (PLOT_PNG) with scripts/plot_bench.py.
BENCH_VENV ?= $(BUILD)/bench-venv
BENCH_JSON ?= $(BUILD)/bench.jsonl
PLOT_PNG ?= docs/performance-bench.png

.PHONY: bench-venv plot
bench-venv:
	@scripts/venv.sh $(BENCH_VENV) bench/requirements.txt

plot: bench-venv
	$(BENCH_VENV)/bin/python scripts/plot_bench.py $(BENCH_JSON) -o $(PLOT_PNG)
