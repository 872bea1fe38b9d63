# `make test-torch`: the whole Python suite (tests/python) with PyTorch (CPU use), so the torch
# tests that `make test` skips run too. PyTorch comes from PyPI into a virtual environment of its
# own, $(VENV_TORCH); its wheel is large, which is why this is not part of `make test`.
# QMOE_REQUIRE_TORCH=1 turns the suite's "PyTorch is not installed" skips into failures.
VENV_TORCH ?= $(BUILD)/venv-torch
TORCH_PY_BUILD ?= $(BUILD)/py-wheel-torch
TORCH_STAMP := $(VENV_TORCH)/.qmoe-package.stamp
TORCH_REQS := tests/python/requirements.txt tests/python/requirements-torch.txt
TORCH_PY_SOURCES := pyproject.toml CMakeLists.txt $(wildcard cmake/*) \
  $(shell find python src include -type f -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: venv-torch test-torch

venv-torch:
	@scripts/venv.sh $(VENV_TORCH) $(TORCH_REQS)

$(TORCH_STAMP): $(TORCH_PY_SOURCES) $(TORCH_REQS) | venv-torch tools-check
	$(VENV_TORCH)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  --no-deps -C build-dir=$(abspath $(TORCH_PY_BUILD)) .
	@touch $@

# QMOE_LIBRARY is cleared so the suite tests the installed package's own libqmoe.so.
test-torch: venv-torch $(TORCH_STAMP)
	env -u QMOE_LIBRARY QMOE_REQUIRE_TORCH=1 $(VENV_TORCH)/bin/python -m pytest -q -rs \
	  -p no:cacheprovider tests/python
