"""One version, said the same everywhere a user reads it: ckptsel.__version__ (what pyproject's
dynamic version, the wheel and `ckptsel --version` read), CITATION.cff, the newest release of
CHANGELOG.md and the wheel the README installs; the license pyproject declares is LICENSE's.
(scripts/wheel_smoke.sh builds the wheel and checks it in CI.)"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import ckptsel

from clirun import run_cli

REPO = Path(__file__).resolve().parents[2]


def test_pyproject_reads_the_one_version():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ckptsel.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", ckptsel.__version__)
    # the package imports tomllib (Python 3.11+): the wheel must not promise 3.10
    assert project["project"]["requires-python"] == ">=3.11"


def test_version_is_the_same_everywhere(capsys):
    version = ckptsel.__version__
    cff = (REPO / "CITATION.cff").read_text()
    assert re.search(r"^version: (.+)$", cff, re.MULTILINE)[1] == version
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d\d-\d\d$", (REPO / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert releases and releases[0] == version, releases
    wheels = set(re.findall(r"ckptsel-([\d.]+)-py3-none-any\.whl", (REPO / "README.md").read_text()))
    assert wheels == {version}, wheels
    code, out = run_cli(["--version"], capsys)
    assert code == 0 and out.strip() == f"ckptsel {version}"


def test_license_and_citation():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert (REPO / "LICENSE").read_text().startswith("MIT License\n")
    cff = (REPO / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in cff and "license: MIT" in cff
    # the paper whose method ckptsel implements (../shared/paper)
    assert 'title: "From Checkpoint Variation to Selection Gains in Supervised Fine-Tuning"' in cff
