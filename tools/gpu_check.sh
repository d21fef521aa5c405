#!/usr/bin/env bash
# GPU-only checks for a machine with an NVIDIA GPU (at most about 10 minutes):
# NVML discovery, two runners sharing one GPU at 0.3/0.3 within their fractions,
# suspend on GPU / resume on CPU / resume on GPU with consecutive steps,
# `tfgshare profile` of the paper's four models at two batch sizes with --colocate for two
# pairs, and `tfgshare reproduce four-models --scale small` under fifo and fgs; it ends with
# one block ready to paste into docs/reproduction.md.
# Usage: tools/gpu_check.sh [--allow-cpu] [--models M ...] [--profile-batch-sizes A,B]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" exec "$PY" tools/gpu_check.py "$@"
