# The project's Python virtual environment (build/venv), used by the NumPy cross-checks and pytest.
VENV ?= $(BUILD)/venv
VENV_REQS ?= tests/requirements.txt
.PHONY: venv
venv:
	@scripts/venv.sh $(VENV) $(VENV_REQS)
