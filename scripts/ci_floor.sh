#!/usr/bin/env bash
# The oldest transformers ckptsel claims (pyproject: transformers>=4.56), tested: a venv with
# that version, then the measurement tests that touch transformers' model, cache and generate
# APIs (every architecture of tests/archmodels.py in float32, eager, the issue-29 seams). 2-3 min
# of tests on 2 CPU cores. Usage: bash scripts/ci_floor.sh
#   CKPTSEL_FLOOR_VENV=DIR   where the venv lives (default /tmp/ckptsel-tf-floor; reused)
#   CKPTSEL_FLOOR_REUSE=SITE a site-packages that already has torch, peft & co. (e.g.
#                            .venv/lib/python3.11/site-packages): only transformers is
#                            installed over it (a cheap local run), not the full extras
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOR="4.56"  # keep equal to the floor in pyproject.toml
VENV=${CKPTSEL_FLOOR_VENV:-/tmp/ckptsel-tf-floor}
PY=${PYTHON:-python3}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if [ -n "${CKPTSEL_FLOOR_REUSE:-}" ]; then
  site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$CKPTSEL_FLOOR_REUSE" >"$site/zz_floor_reuse.pth"  # after the venv's own packages
  "$VENV/bin/python" -m pip install -q "transformers==$FLOOR.*"
else
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q "torch==2.13.0"  # see scripts/setup.sh
  echo "transformers==$FLOOR.*" >"$VENV/floor-constraints.txt"
  "$VENV/bin/python" -m pip install -q -c "$VENV/floor-constraints.txt" -e ".[ml,dev]"
fi
"$VENV/bin/python" - "$FLOOR" <<'PY'
import sys

import transformers

assert transformers.__version__.startswith(sys.argv[1] + "."), transformers.__version__
print("transformers", transformers.__version__)
PY
PYTHONPATH=src "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
  tests/measure/test_family_seams.py tests/measure/test_architectures.py -k "not bfloat16 and not sdpa"
