# voxrelay on the CPU: the WebSocket endpoint and browser page of `voxrelay serve`.
#
#   docker build -t voxrelay .
#   docker run --rm -p 8765:8765 voxrelay        # ws://HOST:8765/v1/voice, http://HOST:8765/
#
# Checked by tests/test_packaging.py and, where a Docker daemon runs, by
# `python -m scripts.container_check` (health check, then real turns over /v1/voice);
# docs/scaling.md has the build made where voxrelay is developed.

# Stage 1: the wheel, with the LLM's C kernels (llm/csrc) compiled by gcc.
FROM python:3.11-slim AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY voxrelay/__init__.py voxrelay/__init__.py
COPY asr asr
COPY llm llm
COPY tts tts
COPY ipc ipc
COPY pipeline pipeline
RUN pip wheel --no-cache-dir --no-deps -w /dist .

# Stage 2: what runs. libgomp1: the OpenMP runtime the C kernels link against (torch,
# CTranslate2 and onnxruntime bring their own).
FROM python:3.11-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends libgomp1 \
    && rm -rf /var/lib/apt/lists/*
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONUNBUFFERED=1
# torch first, as the Makefile installs it: the CPU build. Left to resolve as a dependency
# of voxrelay, pip would pull the multi-GB CUDA build from PyPI; this pin satisfies it.
# TORCH_INDEX_URL: a mirror of the PyTorch CPU index, where that one cannot be reached.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN pip install --index-url "$TORCH_INDEX_URL" torch==2.13.0
COPY --from=build /dist /dist
RUN pip install /dist/voxrelay-*.whl && rm -rf /dist
# The models live in the image (read-only at run time). `models fetch` with no names
# takes the manifest's default set; the downloaded archives are not needed after it.
ENV VOXRELAY_HOME=/opt/voxrelay
RUN voxrelay models fetch \
    && rm -rf "$VOXRELAY_HOME/downloads" \
    && chmod -R a+rX "$VOXRELAY_HOME"
RUN useradd --system --uid 10001 --create-home --home-dir /home/voxrelay voxrelay
USER voxrelay
WORKDIR /home/voxrelay
EXPOSE 8765
# Healthy: GET /metrics answers (the server listens only once all three stages have
# loaded their models) and reports every stage up. Behind a token, pass it as
# VOXRELAY_TOKEN (or VOXRELAY_SERVER_TOKEN), not --token, so this check can read it too.
HEALTHCHECK --interval=30s --timeout=5s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as u; t = os.environ.get('VOXRELAY_SERVER_TOKEN') or os.environ.get('VOXRELAY_TOKEN'); m = u.urlopen(u.Request('http://127.0.0.1:8765/metrics', headers={'Authorization': 'Bearer ' + t} if t else {}), timeout=4).read().decode(); ready = [x for x in m.splitlines() if x.startswith('voxrelay_stage_ready{')]; assert len(ready) == 3 and all(x.endswith(' 1.0') for x in ready), ready"]
CMD ["voxrelay", "serve", "--host", "0.0.0.0", "--port", "8765"]
