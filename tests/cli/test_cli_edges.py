"""The CLI's edges a newcomer meets first: ``--version``, help texts printed as written, and
commands that say what they are doing (``analyze``'s phases; ``quickstart``'s first line within
seconds, in a log, before any data or model work; library warnings shown once at the end)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

import ckptsel
from ckptsel.cli.app import main

REPO = Path(__file__).resolve().parents[2]


def _run(capsys, args: list[str]) -> str:
    capsys.readouterr()
    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None), capsys.readouterr()
    return capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_version(capsys, flag):
    assert _run(capsys, [flag]).strip() == f"ckptsel {ckptsel.__version__}"


def test_help_prints_brackets_literally(capsys):
    """Rich markup swallowed ``[log]`` ("the study file's  table"); help texts are escaped."""
    for args in (["--help"], ["run", "--help"]):
        text = " ".join(_run(capsys, args).replace("│", " ").split())
        assert "study file's [log] table" in text, text


def test_help_joins_docstring_lines(capsys):
    """A docstring's line breaks are not kept mid-sentence in ``--help`` (the terminal wraps)."""
    from ckptsel.cli.app import command_help
    from ckptsel.cli.ingest import inspect

    text = command_help(inspect)
    assert "\n\n" in text  # paragraphs kept
    assert all("\n" not in p for p in text.split("\n\n"))
    assert "(inspect eval --metadata step=80)" in text


def test_analyze_prints_its_phases(tmp_path, capsys):
    _run(capsys, ["simulate", str(tmp_path / "records")])
    out = _run(
        capsys,
        ["analyze", str(tmp_path / "records"), "--out", str(tmp_path / "results"), "--draws", "200", "--permutations", "10", "--no-report"],
    )
    phases = [line for line in out.splitlines() if line.startswith("analyze: ")]
    words = ["loading", "choosing", "freezing", "scoring", "bootstrap", "choosing the checkpoint to keep", "writing summary.json"]
    assert len(phases) == len(words), out
    for line, word in zip(phases, words, strict=True):
        assert re.match(rf"analyze: {word}.* \[\d+\.\d s\]$", line), line


def test_quickstart_says_its_first_line_within_10_s_in_a_log(tmp_path):
    """In a log (stdout a pipe, no terminal) the first line comes before torch loads, and the
    data and base-model lines before that work; the run is stopped there."""
    pytest.importorskip("torch")
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    # the console script's entry point (pyproject.toml: ckptsel.__main__:main)
    cmd = [sys.executable, "-m", "ckptsel", "quickstart", "--fast", "--out", str(tmp_path / "qs")]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[tuple[float, str]] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append((time.monotonic() - start, line.rstrip("\n")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline = start + 120
        while time.monotonic() < deadline and not any("pre-training" in s for _, s in lines):
            if proc.poll() is not None:
                break
            time.sleep(0.2)
    finally:
        proc.kill()
        proc.wait()
        reader.join(timeout=10)
    assert lines, "quickstart printed nothing"
    first_at, first = lines[0]
    assert first.startswith("quickstart: starting"), lines
    assert first_at < 10, f"first line after {first_at:.1f} s"
    said = [s for _, s in lines]
    assert said[1].startswith(f"quickstart --fast: study folder {tmp_path / 'qs'}"), said
    assert any(s.startswith("quickstart: writing the embedded task") for s in said), said
    assert any(s.startswith("quickstart: pre-training the tiny base model") for s in said), said


def test_pretraining_reports_its_steps(tmp_path):
    pytest.importorskip("torch")
    from ckptsel.sim import embedded as E

    task = E.EmbeddedConfig(n_original=60, variants=2, n_test=20, n_pretrain=100)
    cfg = E.BaseConfig(vocab_size=300, hidden_size=16, layers=1, heads=2, steps=3, batch_size=4)
    seen = []
    E.pretrain_base(tmp_path / "base", task, cfg, progress=lambda *a: seen.append(a))
    assert [(s, n) for s, n, _ in seen] == [(1, 3), (2, 3), (3, 3)]
    assert all(loss > 0 for *_, loss in seen)


def test_quickstart_shows_library_warnings_once_at_the_end(tmp_path, capsys, monkeypatch):
    import ckptsel.sim.quickstart

    def fake(out, **kwargs):
        for _ in range(3):
            warnings.warn("`foo` is deprecated", FutureWarning, stacklevel=1)
        kwargs["console"].print("the run's own line")

    monkeypatch.setattr(ckptsel.sim.quickstart, "run_quickstart", fake)
    out = _run(capsys, ["quickstart", "--fast", "--out", str(tmp_path / "qs")])
    lines = out.splitlines()
    assert lines[-3:-1] == ["the run's own line", "1 library warning during the run:"], out
    assert lines[-1].startswith("  FutureWarning: `foo` is deprecated ("), out
