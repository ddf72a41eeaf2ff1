#!/usr/bin/env bash
# The package as a user gets it, without the source tree: `python -m build` makes the sdist and,
# from it, the wheel; the wheel is installed into a clean venv and run from outside the checkout:
# `ckptsel --version` must print the one version (ckptsel.__version__); with no extra (no torch)
# the analysis runs on simulated records (simulate, analyze, verify, select), `run --dry-run` plans a
# study and `measure`, `run`, `quickstart` say which extra to install; then the CPU build
# of torch is installed first, as scripts/setup.sh does, then ckptsel[ml], and
# `ckptsel quickstart --fast` must run the embedded study to its report.
# Usage: bash scripts/wheel_smoke.sh [DIST_DIR] (DIST_DIR, if given, receives the wheel and the
# sdist). Most of its time is the quickstart (2-3 minutes on 2 idle cores); pip reuses its cache.
# CKPTSEL_QUICKSTART_OUT=DIR: the quickstart writes to DIR (a new or empty folder; its output goes
# to DIR.log) and both are kept; .ci/run hands them to tests/sim/test_quickstart.py
# (CKPTSEL_TEST_QUICKSTART=DIR), which then checks this run instead of running its own.
set -euo pipefail
dist_out=${1:+$(realpath -m "$1")}  # relative to where it was called from
cd "$(dirname "$0")/.."
repo=$(pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "wheel_smoke: $*"; }
fail() { [ -f "${2:-}" ] && tail -n 40 "$2"; echo "wheel_smoke: $1" >&2; exit 1; }
pip_in() { "$1/bin/python" -m pip install -q "${@:2}" >>"$work/pip.log" 2>&1 || fail "pip install ${*:2} failed" "$work/pip.log"; }

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/ckptsel/__init__.py)
[ -n "$version" ] || fail "no __version__ in src/ckptsel/__init__.py"

say "building the sdist and the wheel of ckptsel $version (python -m build)"
"$PY" -m venv "$work/build-env"
pip_in "$work/build-env" build
"$work/build-env/bin/python" -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 \
  || fail "python -m build failed" "$work/build.log"
wheel="$work/dist/ckptsel-$version-py3-none-any.whl"
sdist="$work/dist/ckptsel-$version.tar.gz"
[ -f "$wheel" ] && [ -f "$sdist" ] || { ls "$work/dist"; fail "expected $wheel and $sdist"; }

# what the wheel and the sdist hold: the package with its marker file and license, no tests
"$work/build-env/bin/python" - "$wheel" "$sdist" "$version" <<'PY'
import sys, tarfile, zipfile
wheel, sdist, version = sys.argv[1:]
names = zipfile.ZipFile(wheel).namelist()
need = ["ckptsel/__init__.py", "ckptsel/py.typed", "ckptsel/sim/embedded.py",
        f"ckptsel-{version}.dist-info/licenses/LICENSE", f"ckptsel-{version}.dist-info/entry_points.txt"]
missing = [n for n in need if n not in names]
stray = [n for n in names if not n.startswith(("ckptsel/", f"ckptsel-{version}.dist-info/"))]
meta = zipfile.ZipFile(wheel).read(f"ckptsel-{version}.dist-info/METADATA").decode()
assert f"\nVersion: {version}\n" in meta, "wheel METADATA carries another version"
members = tarfile.open(sdist).getnames()
for name in ("LICENSE", "README.md", "pyproject.toml", "CHANGELOG.md", "CITATION.cff"):
    if f"ckptsel-{version}/{name}" not in members:
        missing.append(f"sdist: {name}")
assert not missing and not stray, f"missing: {missing}; not ckptsel's: {stray[:5]}"
print(f"wheel_smoke: wheel {len(names)} files, sdist {len(members)} members: ok")
PY

say "installing the wheel alone (no extra, no torch) into a clean venv"
venv="$work/venv"
"$PY" -m venv "$venv"
pip_in "$venv" --upgrade pip
pip_in "$venv" "$wheel"
cd "$work"  # outside the checkout: nothing can come from the source tree
got=$("$venv/bin/ckptsel" --version)
[ "$got" = "ckptsel $version" ] || fail "ckptsel --version printed '$got', not 'ckptsel $version'"
"$venv/bin/python" -c "import ckptsel, sys; assert ckptsel.__file__.startswith(sys.prefix), ckptsel.__file__"
say "$got, imported from the venv"
! "$venv/bin/python" -c "import torch" 2>/dev/null || fail "torch is installed without the ml extra"
for cmd in "simulate sim-records" "analyze sim-records --out sim-results --no-report" \
  "verify sim-results" "select sim-records --trajectory llama3-8b-lora8-gsm8k-s42"; do
  # shellcheck disable=SC2086
  "$venv/bin/ckptsel" $cmd >"$work/analysis.log" 2>&1 || fail "ckptsel $cmd failed without torch" "$work/analysis.log"
done
say "the analysis without torch: simulate, analyze, verify, select ran"
# a study planned without torch (run --dry-run writes nothing), and the commands that need the
# [ml] extra refused in one line that names it (exit 2), writing nothing
mkdir -p study
"$venv/bin/python" - study <<'PY'
import json, pathlib, sys
d = pathlib.Path(sys.argv[1])
rows = [{"query": f"Ann has {a} pens and gets {a + 1} more. How many?",
         "response": f"The answer is: {2 * a + 1}", "original_question": f"q{a}"} for a in range(40)]
d.joinpath("pool.json").write_text(json.dumps(rows))
d.joinpath("test.jsonl").write_text("".join(
    json.dumps({"question": f"Bo has {a} cups; {a} more?", "answer": f"#### {2 * a}"}) + "\n" for a in range(6)))
d.joinpath("study.toml").write_text("""schema = 2
[study]
base_model = "base"
seeds = [1]
[pool]
task = "metamath"
file = "pool.json"
[test]
task = "gsm8k"
file = "test.jsonl"
[[configurations]]
name = "a"
steps = 2
save_every = 1
""")
PY
"$venv/bin/ckptsel" run study/study.toml --dry-run >"$work/dry.log" 2>&1 || fail "ckptsel run --dry-run failed without torch" "$work/dry.log"
grep -q "16 generations to do" "$work/dry.log" || fail "run --dry-run printed no plan" "$work/dry.log"
[ ! -e study/.ckptsel ] || fail "run --dry-run wrote study/.ckptsel"
mkdir -p run/checkpoint-1 && echo '{}' >run/checkpoint-1/config.json
for cmd in "measure run --task gsm8k --validation study/test.jsonl --test study/test.jsonl --out rec" \
  "run study/study.toml" "quickstart --fast --out qs"; do
  code=0
  # shellcheck disable=SC2086
  "$venv/bin/ckptsel" $cmd >"$work/ml.log" 2>&1 || code=$?
  [ "$code" = 2 ] && grep -q "pip install 'ckptsel\[ml\]'" "$work/ml.log" && ! grep -q Traceback "$work/ml.log" \
    || fail "ckptsel $cmd without torch: exit $code, not 2 with the [ml] hint" "$work/ml.log"
done
[ ! -e rec ] && [ ! -e qs ] && [ ! -e study/.ckptsel ] || fail "a refused command wrote files"
say "without torch: run --dry-run planned; measure, run and quickstart said pip install 'ckptsel[ml]'"

say "installing torch (CPU build first) and ckptsel[ml]"
pip_in "$venv" "torch==2.13.0"
pip_in "$venv" "${wheel}[ml]"
say "ckptsel quickstart --fast (from the wheel)"
start=$SECONDS
qs=$work/quickstart
if [ -n "${CKPTSEL_QUICKSTART_OUT:-}" ]; then
  qs=$(realpath -m "$CKPTSEL_QUICKSTART_OUT")
  [ ! -e "$qs" ] || [ -z "$(ls -A "$qs")" ] || fail "CKPTSEL_QUICKSTART_OUT=$qs is not empty"
  mkdir -p "$(dirname "$qs")"
fi
"$venv/bin/ckptsel" quickstart --fast --out "$qs" >"$qs.log" 2>&1 \
  || fail "ckptsel quickstart --fast failed" "$qs.log"
for f in results/summary.json results/report.html study.toml; do
  [ -s "$qs/$f" ] || fail "quickstart wrote no $f" "$qs.log"
done
tail -n 3 "$qs.log"
if [ -n "$dist_out" ]; then mkdir -p "$dist_out" && cp "$wheel" "$sdist" "$dist_out"/; fi
say "ok: wheel + sdist built; the wheel, in a clean venv, ran --version, the analysis without torch and quickstart --fast ($((SECONDS - start)) s)"
