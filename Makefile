# Two commands on a fresh machine: `make demo` and `make test`. Both set up .venv,
# the dependencies and the models first; the set-up is idempotent (seconds when done).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODELS_STAMP := $(VENV)/.models
DEMO_WAV := demo/ill-disposed.wav

.PHONY: setup models system-deps demo test test-fast lint bench soak clean vllm-check

setup: $(STAMP)

# torch comes first, from the CPU wheel on disk: installed later as a dependency,
# pip would pull a multi-GB CUDA build.
$(STAMP): pyproject.toml setup.py $(wildcard llm/csrc/*)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check --upgrade pip
	$(PY) -m pip install -q --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $@

models: $(MODELS_STAMP)

# base too: `make bench` compares it with tiny.en and a test decodes with it (~5 s, 270 MB).
$(MODELS_STAMP): $(STAMP) pipeline/manifest.toml
	$(VENV)/bin/voxrelay models fetch tiny.en base smollm2 joe smart-turn testclips naturalclips
	touch $@

# System packages the slow tests drive: headless Chromium (the browser page),
# PortAudio + ALSA (`voxrelay mic`), the SIP peers (SIPp, baresip, tshark). Installed
# only when missing, and only as root with apt; otherwise those tests skip and say why.
# `make demo` does not need them.
SYSTEM_DEPS := chromium chromium-driver libportaudio2 alsa-utils sip-tester baresip-core tshark
system-deps:
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/aplay ] \
		&& [ -x /usr/bin/sipp ] && [ -x /usr/bin/baresip ] && [ -x /usr/bin/tshark ] \
		&& ldconfig -p | grep -q libportaudio.so.2; then \
		echo "system-deps: present"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends $(SYSTEM_DEPS); \
	else \
		echo "system-deps: missing, not root or no apt-get: the browser, mic and SIP tests skip" \
			"(apt-get install $(SYSTEM_DEPS))"; \
	fi

demo: models
	$(VENV)/bin/voxrelay run --input $(DEMO_WAV) --output reply.wav --trace traces.jsonl

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy voxrelay/ipc voxrelay/pipeline

# A wall-clock cap on the whole run: a hang outside any one test (pytest-timeout covers
# those), e.g. at interpreter exit, fails here in minutes instead of running out CI's clock.
test: models system-deps lint
	timeout --kill-after=60 45m $(PY) -m pytest -q
	$(MAKE) vllm-check

# The `vllm` backend against the real vLLM (the `vllm` extra's pin, 0.32.0), which
# installs on a CPU box though its engine needs CUDA: in a venv of its own (5.8 GB; its
# dependencies are not the main venv's), the backend's tests, so the names and
# signatures it calls are checked against the package (docs/llm.md). PyPI's
# torchvision, torchaudio and torchcodec, which it pulls, do not load beside the CPU
# torch ("operator torchvision::nms does not exist"); vLLM imports them only if present.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check torch==2.13.0 vllm==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e .
	$(VLLM_VENV)/bin/pip install -q --disable-pip-version-check pytest pytest-timeout \
		hypothesis gguf==0.19.0 soxr threadpoolctl pyzmq websockets prometheus-client
	touch $@

vllm-check: models $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -c "from vllm.v1.engine.async_llm import AsyncLLM"
	timeout 10m $(VLLM_VENV)/bin/python -m pytest -q -p no:cacheprovider \
		tests/llm/test_vllm_backend.py

test-fast: models
	$(PY) -m pytest -q -m "not slow"

bench: models
	$(PY) -m bench

# Long forms of the soak and fuzz tests (their short forms run in `make test`): 500 turns
# in one session and across sessions, 10,000 inputs per fuzz target. About an hour.
soak: models
	VOXRELAY_SOAK=1 $(PY) -m pytest -q -s -m soak --timeout=14400

clean:
	rm -rf $(VENV) $(VLLM_VENV) reply.wav traces.jsonl
