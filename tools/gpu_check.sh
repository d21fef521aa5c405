#!/usr/bin/env bash
# GPU-only checks for a machine with an NVIDIA GPU (a few minutes):
# NVML discovery, two runners sharing one GPU at 0.3/0.3 within their fractions,
# suspend on GPU / resume on CPU / resume on GPU with consecutive steps, and the
# paper models' sampled step time and memory as YAML (for tfgshare/data/model_profiles.yaml).
# Usage: tools/gpu_check.sh [--allow-cpu] [--models M ...] [--batch-size N]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" tools/gpu_check.py "$@"
