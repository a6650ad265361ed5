# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv,
# the dependencies and the models first; the set-up is idempotent (seconds when done).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODELS_STAMP := $(VENV)/.models
DEMO_WAV := demo/ill-disposed.wav

.PHONY: setup models demo test test-all lint bench clean

setup: $(STAMP)

# torch comes first, from the CPU wheel on disk: installed later as a dependency,
# pip would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

models: $(MODELS_STAMP)

$(MODELS_STAMP): $(STAMP) pipeline/manifest.toml
	$(VENV)/bin/voxrelay models fetch tiny.en smollm2 joe testclips
	touch $@

demo: models
	$(VENV)/bin/voxrelay run --input $(DEMO_WAV) --output reply.wav --trace traces.jsonl

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy ipc pipeline

test: models lint
	$(PY) -m pytest -q

test-fast: models
	$(PY) -m pytest -q -m "not slow"

bench: models
	$(PY) -m bench

clean:
	rm -rf $(VENV) reply.wav traces.jsonl
