#!/usr/bin/env bash
# The LLM engine's GPU check, ONE prepared run for a session whose task is lent a GPU
# machine (docs/llm.md, "CUDA graphs"). That machine has python3 with a CUDA torch,
# numpy, tokenizers, jinja2, pytest, but not `gguf`, no network, and the device tool
# carries at most 64 MiB: SmolLM2's 98 MB GGUF does not fit, an 8-layer cut does.
#
# Prepare here (CPU box), once:
#   mkdir -p .gpu && grep -qx '/.gpu/' .git/info/exclude || echo /.gpu/ >> .git/info/exclude
#   .venv/bin/python -m bench.gguf_trim --layers 8 --out .gpu/model.gguf
#   .venv/bin/pip download gguf==0.19.0 --no-deps -d .gpu
# Then: run(command="bash scripts/gpu_check.sh", carry=[".gpu"], timeout_s=540)
# It runs the gpu-marked tests, then bench/gpu.py (CUDA-graph vs eager decode tok/s,
# TTFT), and leaves nvidia-smi.txt, pytest.log and gpu.json in $OUT. ~3-5 minutes.
# GPU_CHECK_DRY_RUN=1 runs the same plumbing on a CPU box (tests skip, few tokens).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}

# Not `pip install -e .`: the project pins the CPU torch, and the machine cannot fetch.
site=$(mktemp -d)
"$PY" -m zipfile -e .gpu/gguf-*.whl "$site" || exit 2
export PYTHONPATH="$PWD:$site"
export VOXRELAY_HOME=$(mktemp -d)
model_dir="$VOXRELAY_HOME/models/smollm2-135m-instruct"
mkdir -p "$model_dir" && ln -s "$PWD/.gpu/model.gguf" "$model_dir/model.gguf"
echo ok >"$model_dir/.complete"

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
timeout 300 "$PY" -m pytest -q -s -m gpu -p no:cacheprovider \
    tests/llm/test_gpu.py tests/llm/test_cuda_graph.py 2>&1 | tee "$OUT/pytest.log"
tests_status=${PIPESTATUS[0]}
dry=()
[ "${GPU_CHECK_DRY_RUN:-0}" = 1 ] && dry=(--dry-run)
timeout 200 "$PY" -m bench.gpu --model .gpu/model.gguf --out "$OUT/gpu.json" "${dry[@]}" 2>&1 \
    | tee "$OUT/bench.log"
bench_status=${PIPESTATUS[0]}
echo "gpu_check: tests exit $tests_status, bench exit $bench_status, results in $OUT"
[ "$tests_status" = 0 ] && [ "$bench_status" = 0 ]
