#!/usr/bin/env bash
# Set up ckptsel in ./.venv on a fresh machine (CPU). Usage: bash scripts/setup.sh [--dev]
# The pinned CPU build of torch is installed first: a bare `torch` requirement would pull
# several GB of CUDA packages.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==2.13.0"
extras="ml"
# --dev: what the test suite exercises too (a local Ray cluster, trl's SFTTrainer, and the
# trackers --log writes to: MLflow (skinny), W&B, Trackio, whose tests run offline; inspect_ai,
# whose own log reader the ingest tests compare with)
[ "${1:-}" = "--dev" ] && extras="ml,ray,trl,dev,mlflow,wandb,trackio,inspect"
.venv/bin/python -m pip install -q -e ".[${extras}]"
echo "ckptsel installed in $(pwd)/.venv ($(.venv/bin/python -c 'import ckptsel; print(ckptsel.__version__)'))"
