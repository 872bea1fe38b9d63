# `make bench-kt`: KTransformers' CPU MoE kernels (PyPI kt-kernel: AMX INT8 and INT4 MoE) next to
# `qmoe bench moe` at the same shapes and thread count (docs/performance.md, "MoE layer: prefill
# breakdown and KTransformers"). kt-kernel needs PyTorch: its venv, $(VENV_KT), reads the torch of
# $(VENV_TORCH) (mk/torch.mk, PyPI torch) through a .pth file rather than downloading it again;
# kt-kernel itself is installed without its pinned dependencies (torch==2.9.1 and triton, a CUDA
# stack this CPU comparison does not use), its light ones by name. Results: $(KT_OUT), JSON lines.
VENV_KT    ?= $(BUILD)/venv-kt
KT_VERSION ?= 0.7.2
KT_MODEL   ?= qwen3-30b-a3b
KT_TOKENS  ?= 1,8,64,512,4096
KT_THREADS ?= 2
KT_SECONDS ?= 2
KT_OUT     ?= $(BUILD)/bench-kt.jsonl
KT_STAMP   := $(VENV_KT)/.qmoe-kt.stamp
KT_DEPS    := numpy gguf safetensors pyyaml rich typer httpx packaging tqdm

.PHONY: venv-kt bench-kt

venv-kt: $(KT_STAMP)

$(KT_STAMP): mk/kt.mk | venv-torch
	@python3 -m venv $(VENV_KT) || { echo "qmoe: python3 cannot make $(VENV_KT) (python3-venv missing?)" >&2; exit 1; }
	@$(VENV_TORCH)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > \
	  "$$($(VENV_KT)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/qmoe-torch.pth"
	$(VENV_KT)/bin/python -m pip install -q --disable-pip-version-check $(KT_DEPS)
	$(VENV_KT)/bin/python -m pip install -q --disable-pip-version-check --no-deps kt-kernel==$(KT_VERSION) || \
	  { echo "qmoe: pip could not install kt-kernel $(KT_VERSION) here (output above)" >&2; exit 1; }
	@touch $@

# Both sides: bf16 hidden states, A8W8 per channel against AMXInt8_MOE, A8W4 per channel against
# AMXInt4_MOE; the same routing recipe (top-k of random logits, rotated per run).
bench-kt: build venv-kt
	@rm -f $(KT_OUT)
	$(BUILD)/tools/qmoe bench moe --model $(KT_MODEL) --tokens $(KT_TOKENS) --threads $(KT_THREADS) \
	  --dtype bf16 --seconds $(KT_SECONDS) >> $(KT_OUT)
	$(VENV_KT)/bin/python scripts/bench_kt_kernel.py --model $(KT_MODEL) --tokens $(KT_TOKENS) \
	  --threads $(KT_THREADS) --mode int8 --seconds $(KT_SECONDS) >> $(KT_OUT)
	$(BUILD)/tools/qmoe bench moe --model $(KT_MODEL) --tokens $(KT_TOKENS) --threads $(KT_THREADS) \
	  --dtype bf16 --mode a8w4 --seconds $(KT_SECONDS) >> $(KT_OUT)
	$(VENV_KT)/bin/python scripts/bench_kt_kernel.py --model $(KT_MODEL) --tokens $(KT_TOKENS) \
	  --threads $(KT_THREADS) --mode int4 --seconds $(KT_SECONDS) >> $(KT_OUT)
	@cat $(KT_OUT)
