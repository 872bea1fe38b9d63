# The Python package (pyproject.toml, python/qmoe): `make test` installs it into the project's
# virtual environment ($(VENV), made by `make venv`) and runs its pytest suite (tests/python).
# As in mk/venv.mk: fragments are read in any order, and the stamp's rule needs VENV now.
VENV ?= $(BUILD)/venv
PY_BUILD ?= $(BUILD)/py-wheel
PY_STAMP := $(VENV)/.qmoe-package.stamp
# Everything that goes into the wheel; a change reinstalls the package, otherwise it is kept.
PY_SOURCES := pyproject.toml CMakeLists.txt $(wildcard cmake/*) \
  $(shell find python src include -type f -not -path '*/__pycache__/*' 2>/dev/null)

.PHONY: test-python python-install
test: lap-test-python test-python

# The venv also gets the Python suite's requirements, scikit-build-core among them, so the package
# builds there without an isolated environment (fast repeated installs, no download per run).
venv: VENV_REQS += tests/python/requirements.txt

$(PY_STAMP): $(PY_SOURCES) | venv tools-check
	$(VENV)/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation \
	  --no-deps -C build-dir=$(abspath $(PY_BUILD)) .
	@touch $@

python-install: $(PY_STAMP)

# QMOE_LIBRARY is cleared so the suite tests the installed package's own libqmoe.so.
test-python: $(PY_STAMP)
	env -u QMOE_LIBRARY $(VENV)/bin/python -m pytest -q -p no:cacheprovider tests/python
