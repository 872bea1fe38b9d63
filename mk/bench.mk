# The benchmark's peers and plots: `make bench-venv` installs oneMKL (for `qmoe bench --peer mkl`),
# oneDNN 3.x with its headers and matplotlib into $(BUILD)/bench-venv, and builds the oneDNN peer
# plugin there (lib/libqmoe_peer_onednn.so, next to libdnnl: `qmoe bench --peer onednn` loads it
# at run time, so neither the program nor the library links oneDNN); `make plot` turns qmoe bench
# JSON lines (BENCH_JSON) into a PNG (PLOT_PNG) with scripts/plot_bench.py.
BENCH_VENV ?= $(BUILD)/bench-venv
BENCH_JSON ?= $(BUILD)/bench.jsonl
PLOT_PNG ?= docs/performance-bench.png
ONEDNN_PEER := $(BENCH_VENV)/lib/libqmoe_peer_onednn.so
# The project's warnings (cmake/qmoe_warnings.cmake); CC=clang builds it with clang.
PEER_CFLAGS ?= -std=c11 -O2 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wvla

.PHONY: bench-venv plot
bench-venv:
	@scripts/venv.sh $(BENCH_VENV) bench/requirements.txt
	@$(MAKE) --no-print-directory $(ONEDNN_PEER)

# A sub-make: the venv's oneDNN headers exist only once the line above has run.
$(ONEDNN_PEER): bench/peer_onednn.c bench/peer_onednn.h bench/peer_time.h \
		$(BENCH_VENV)/include/oneapi/dnnl/dnnl.h
	$(CC) $(PEER_CFLAGS) -fPIC -shared -fvisibility=hidden -I$(BENCH_VENV)/include \
	  bench/peer_onednn.c -o $@.tmp -L$(BENCH_VENV)/lib -ldnnl -ldl \
	  -Wl,--no-undefined -Wl,-rpath,'$$ORIGIN'
	mv -f $@.tmp $@

plot: bench-venv
	$(BENCH_VENV)/bin/python scripts/plot_bench.py $(BENCH_JSON) -o $(PLOT_PNG)
