"""End-to-end ``ckptsel quickstart --fast`` into a tmp folder (the slowest test of the suite:
a few minutes on 2 CPU cores). Checks every stage's artifacts and that the tiny model really
learns and that its checkpoints differ.

With ``CKPTSEL_TEST_QUICKSTART=DIR`` the checks run on a quickstart already made: DIR is the
``--out`` folder of a finished ``ckptsel quickstart --fast`` and ``DIR.log`` its output (what
``scripts/wheel_smoke.sh`` keeps with ``CKPTSEL_QUICKSTART_OUT=DIR``; ``.ci/run`` runs it before
the suite, so CI runs the quickstart once, from the wheel). The tests reuse and extend that
folder (a second run, ``ckptsel run`` on it): hand them a throwaway one."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.cli import app
from ckptsel.records.scan import read_frame
from ckptsel.train.checkpoints import checkpoint_steps

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    from typer.testing import CliRunner

    made = os.environ.get("CKPTSEL_TEST_QUICKSTART")
    if made:  # a finished `ckptsel quickstart --fast --out DIR >DIR.log` (scripts/wheel_smoke.sh)
        out = Path(made).resolve()
        log = out.with_name(out.name + ".log")
        for need in (out / "results" / "summary.json", log):
            assert need.is_file(), f"CKPTSEL_TEST_QUICKSTART={made}: no {need} (see this module's docstring)"
        return out, log.read_text(encoding="utf-8")
    out = tmp_path_factory.mktemp("qs") / "study"
    result = CliRunner().invoke(app, ["quickstart", "--fast", "--out", str(out)])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return out, result.output


def test_quickstart_artifacts(quick):

    from ckptsel.choose.frozen import load_frozen
    from ckptsel.study.spec import load_study

    out, output = quick
    study = load_study(out / "study.toml")
    trajectories = study.trajectories()
    assert len({c.name for _, c, _ in trajectories}) >= 5 and len(study.seeds) == 3
    assert {c.adaptation for _, c, _ in trajectories} == {"lora", "full"}
    finals = json.loads((out / "final_steps.json").read_text())
    gen = read_frame(out / "records", "generations")
    nll = read_frame(out / "records", "nll")
    for name, _, _ in trajectories:
        steps = checkpoint_steps(out / "runs" / name)
        assert len(steps) >= 10 and steps[-1] == finals[name]
        for split in ("validation", "test"):
            g = gen[(gen.trajectory == name) & (gen.split == split)]
            assert sorted(g.step.unique()) == [-3, *steps], (name, split)  # the average of the last 3, then the checkpoints
            n = nll[(nll.trajectory == name) & (nll.split == split)]
            assert sorted(n.step.unique()) == [-3, *steps]
    # validation groups hold several variants (the one-variant-per-group sensitivity needs it)
    val = gen[(gen.split == "validation")]
    assert val.groupby("group").item_id.nunique().max() > 1
    # frozen choices with a valid hash (load_frozen verifies it), summary and report
    frozen = load_frozen(out / "results" / "choices")
    assert len(frozen.sha256) == 64
    summary = json.loads((out / "results" / "summary.json").read_text())
    assert summary["schema"] == 1
    assert summary["population"]["trajectories"] == 15
    assert "mean_last3" in summary["budget"] and "G" in summary["budget"]["mean_last3"]["full"]  # average or select?
    assert "mean_last3" in output
    assert summary["population"]["configurations"] == 5
    # enough configurations: the few-configurations caution does not fire
    assert not any("configuration(s)" in w for w in summary["warnings"]), summary["warnings"]
    assert set(summary["budget"]) >= {"accuracy", "agreement", "nll", "last"}
    assert (out / "results" / "report.html").is_file()
    assert str(out / "results" / "report.html") in output.replace("\n", "")
    # split and audit by `ckptsel run`'s prepare stage, in the study's state folder
    assert (out / ".ckptsel" / "split" / "lineage.json").is_file()
    assert (out / ".ckptsel" / "audit" / "audit.json").is_file()
    assert "median best-to-worst" in output and "the paper's is 3.5 pp" in output
    # the three claims in plain words, as report.html reads them
    assert "More validation data helps?" in output
    assert "Beats matched-NLL selection?" in output
    assert "Beats simply keeping the final checkpoint?" in output
    # a log (no TTY) gets lines per stage and trajectory, not progress-bar updates
    assert "\r" not in output and "it/s" not in output
    assert output.count(": 10 checkpoints and 1 average(s), 11 measured, 0 already recorded") == 15


def test_quickstart_base_knows_the_format_and_checkpoints_differ_by_points(quick):
    """Like an instruction-tuned model, the base already answers in the format (it solves a
    good share of the test pool); SFT changes test accuracy, and checkpoints of a trajectory
    differ by points, not tens of points (BENCHMARKS.md has the measured spreads)."""
    out, _ = quick
    q = json.loads((out / "results" / "quickstart.json").read_text())
    assert q["base_test_accuracy_pp"] > 20.0, q
    assert q["final_test_accuracy_pp"] != q["base_test_accuracy_pp"], q
    assert 1.0 <= q["median_best_to_worst_spread_pp"] <= 20.0, q
    assert q["configurations"] == 5 and q["paper_median_spread_pp"] == 3.5
    assert set(q["cpu_seconds"]) == set(q["seconds"])


def test_quickstart_second_run_reuses_everything(quick):
    from rich.console import Console

    from ckptsel.sim.quickstart import run_quickstart

    out, _ = quick
    ck = out / "runs" / "full-lr3e-4-s42"
    before = {p: p.stat().st_mtime_ns for p in ck.rglob("*") if p.is_file()}
    rec = _records_bytes(out / "records")
    base = (out / "base" / "model.safetensors").stat().st_mtime_ns
    console = Console(record=True, width=200)
    res = run_quickstart(out, fast=True, analyze=False, console=console)
    text = console.export_text()
    assert "skipped" in text
    assert {p: p.stat().st_mtime_ns for p in ck.rglob("*") if p.is_file()} == before
    assert (out / "base" / "model.safetensors").stat().st_mtime_ns == base
    assert _records_bytes(out / "records") == rec
    assert res.median_spread > 0


def test_quickstart_refuses_to_mix_studies(quick, tmp_path):
    from ckptsel.errors import CkptselError
    from ckptsel.sim.quickstart import run_quickstart

    out, _ = quick
    with pytest.raises(CkptselError, match=r"other settings \(--fast\)"):
        run_quickstart(out, fast=False, analyze=False)
    (tmp_path / "mine.txt").write_text("not a study")
    with pytest.raises(CkptselError, match="not a quickstart folder"):
        run_quickstart(tmp_path, fast=True, analyze=False)
    assert not (tmp_path / "quickstart_plan.json").exists()


def test_quickstart_is_ckptsel_run_on_its_study_file(quick, capsys):
    """The quickstart wrote a schema-2 study file (MetaMathQA pool split into train +
    validation, the GSM8K-format test file read by the gsm8k task: no rewritten test file);
    `ckptsel run` on it in the finished folder measures nothing new and rewrites the same
    summary.json, byte for byte."""
    import tomllib

    from ckptsel.cli.app import main
    from ckptsel.study.spec import load_spec

    out, _ = quick
    data = tomllib.loads((out / "study.toml").read_text())
    assert data["schema"] == 2 and data["test"] == {"task": "gsm8k", "file": "data/test.jsonl"}
    assert data["pool"]["task"] == "metamath" and data["pool"]["file"] == "data/metamath.json"
    assert not (out / "data" / "test_measure.json").exists()
    spec = load_spec(out / "study.toml")
    assert spec.study.base_model == str(out / "base") and spec.workdir == out
    gen = read_frame(out / "records", "generations")
    assert gen.groupby("split")["task"].unique().map(list).to_dict() == {"test": ["gsm8k"], "validation": ["metamath"]}
    summary = (out / "results" / "summary.json").read_bytes()
    rec = _records_bytes(out / "records")
    capsys.readouterr()
    try:
        main(["run", str(out / "study.toml")])
    except SystemExit as exc:
        assert exc.code in (0, None)
    text = capsys.readouterr().out
    assert text.count("10 checkpoints and 1 average(s), 0 measured, 11 already recorded") == 15, text
    assert ": trained," not in text and "resumed from" not in text
    assert (out / "results" / "summary.json").read_bytes() == summary
    assert _records_bytes(out / "records") == rec
    assert (out / "results" / "quickstart.json").is_file()  # the quickstart's own file is kept


def _records_bytes(folder):
    """Every records file's bytes, single file and units (not the read or part caches)."""
    return {
        p.relative_to(folder): p.read_bytes()
        for p in sorted(folder.rglob("*.parquet"))
        if ".cache" not in p.parts and ".parts" not in p.parts
    }
