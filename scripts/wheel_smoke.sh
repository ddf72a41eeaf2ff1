#!/usr/bin/env bash
# The package as a user gets it, without the source tree: `python -m build` makes the sdist and,
# from it, the wheel; the wheel is installed into a clean venv (the CPU build of torch first, as
# scripts/setup.sh does, then ckptsel[ml]); from outside the checkout, `ckptsel --version` must
# print the one version (ckptsel.__version__) and `ckptsel quickstart --fast` must run the
# embedded study to its report. Usage: bash scripts/wheel_smoke.sh [DIST_DIR]
# (DIST_DIR, if given, receives the built wheel and sdist). About 4-5 minutes on 2 cores, most of
# it the quickstart; pip reuses its cache for torch.
set -euo pipefail
dist_out=${1:+$(realpath -m "$1")}  # relative to where it was called from
cd "$(dirname "$0")/.."
repo=$(pwd)
PY=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
say() { echo "wheel_smoke: $*"; }

version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' src/ckptsel/__init__.py)
[ -n "$version" ] || { echo "wheel_smoke: no __version__ in src/ckptsel/__init__.py" >&2; exit 1; }

say "building the sdist and the wheel of ckptsel $version (python -m build)"
"$PY" -m venv "$work/build-env"
"$work/build-env/bin/python" -m pip install -q build
"$work/build-env/bin/python" -m build --outdir "$work/dist" "$repo" >"$work/build.log" 2>&1 \
  || { cat "$work/build.log"; exit 1; }
wheel="$work/dist/ckptsel-$version-py3-none-any.whl"
sdist="$work/dist/ckptsel-$version.tar.gz"
[ -f "$wheel" ] && [ -f "$sdist" ] || { ls "$work/dist"; echo "wheel_smoke: expected $wheel and $sdist" >&2; exit 1; }

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

say "installing the wheel into a clean venv (CPU torch first)"
"$PY" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q "torch==2.13.0"
"$work/venv/bin/python" -m pip install -q "${wheel}[ml]"

cd "$work"  # outside the checkout: nothing can come from the source tree
got=$("$work/venv/bin/ckptsel" --version)
[ "$got" = "ckptsel $version" ] || { echo "wheel_smoke: ckptsel --version printed '$got', not 'ckptsel $version'" >&2; exit 1; }
"$work/venv/bin/python" -c "import ckptsel, sys; assert ckptsel.__file__.startswith(sys.prefix), ckptsel.__file__"
say "$got, imported from the venv"

say "ckptsel quickstart --fast (from the wheel)"
start=$SECONDS
"$work/venv/bin/ckptsel" quickstart --fast --out "$work/quickstart" >"$work/quickstart.log" 2>&1 \
  || { tail -n 40 "$work/quickstart.log"; exit 1; }
for f in results/summary.json results/report.html study.toml; do
  [ -s "$work/quickstart/$f" ] || { tail -n 40 "$work/quickstart.log"; echo "wheel_smoke: quickstart wrote no $f" >&2; exit 1; }
done
tail -n 3 "$work/quickstart.log"
if [ -n "$dist_out" ]; then mkdir -p "$dist_out" && cp "$wheel" "$sdist" "$dist_out"/; fi
say "ok: wheel + sdist built, the wheel installed in a clean venv, --version and quickstart --fast ran ($((SECONDS - start)) s quickstart)"
