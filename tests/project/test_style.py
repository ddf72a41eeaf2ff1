"""The code as the formatter writes it (issue 49): ``ruff format --check`` and ``ruff check``
pass over the package, the tests, the benchmarks, the scripts and the docs' hooks, at the
settings in ``pyproject.toml`` (140 columns, no magic trailing comma; ruff pinned in the dev
extra, since its formatter's style changes between releases), and no line turns the formatter
off."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TREES = ["src", "tests", "benchmarks", "scripts", "docs"]
MARKERS = ("fmt: " + "skip", "fmt: " + "off")  # (spelled apart: this file holds no marker)


def _ruff() -> list[str]:
    here = Path(sys.executable).with_name("ruff")
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (the dev extra installs it)")
    return [found]


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_ruff_passes(command):
    done = subprocess.run([*_ruff(), *command, *TREES], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_no_marker_argues_with_the_formatter():
    marked = [
        f"{p.relative_to(ROOT)}:{n}"
        for tree in TREES
        for p in sorted((ROOT / tree).rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if any(m in line for m in MARKERS)
    ]
    assert not marked, "formatter markers: " + ", ".join(marked[:20])
