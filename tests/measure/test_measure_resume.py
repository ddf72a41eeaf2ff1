"""Measurement is resumable and lossless: a killed job restarted gives exactly the records
of an uninterrupted one; runs append to a shared records folder; changed settings or items
are re-measured, unchanged ones reused."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.errors import CkptselError
from ckptsel.records.scan import read_frame

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from tinyrun import build_tiny_run, save_lora_checkpoints, write_jsonl  # noqa: E402

STEPS = (10, 20, 30, 40, 50)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("resume"), steps=STEPS, n_validation=8, n_test=6)


def args_for(run, out: Path, run_dir: Path | None = None, max_new: int = 8) -> list[str]:
    return [
        "measure",
        str(run_dir or run.run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        "1",
        "--max-new-tokens",
        str(max_new),
        "--window",
        "64",
        "--no-progress",
    ]


def cli(args: list[str], capsys=None) -> tuple[int, str]:
    from ckptsel.cli.app import main

    code = 0
    try:
        main(args)
    except SystemExit as e:
        code = int(e.code or 0)
    return code, (capsys.readouterr().out if capsys else "")


def read(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    return read_frame(out, "generations"), read_frame(out, "nll")


@pytest.fixture(scope="module")
def uninterrupted(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("clean") / "records"
    assert cli(args_for(run, out))[0] == 0
    return (*read(out), out)


def copy_records(uninterrupted, tmp_path: Path) -> Path:
    """A private copy of the uninterrupted run's records (contract files + parts)."""
    out = tmp_path / "records"
    shutil.copytree(uninterrupted[2], out)
    return out


def recorded_steps(out: Path) -> set[int]:
    try:
        return set(read_frame(out, "generations")["step"])
    except (FileNotFoundError, OSError, ValueError, CkptselError):  # nothing recorded yet
        return set()


def test_killed_run_resumes_to_identical_records(run, uninterrupted, tmp_path, capsys):
    out = tmp_path / "records"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ckptsel", *args_for(run, out)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    try:
        while not recorded_steps(out) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before it could be killed: {proc.stderr.read()[-2000:]}"
        proc.kill()
    finally:
        proc.wait()
    partial = recorded_steps(out)
    assert partial and partial < set(STEPS), partial  # killed mid-way, with something recorded
    g, n = read(out)  # what is there is complete and valid
    assert set(n["step"]) <= set(STEPS) and not g.duplicated(["step", "split", "item_id"]).any()

    code, said = cli(args_for(run, out), capsys)
    assert code == 0 and "already recorded" in said
    g, n = read(out)
    pd.testing.assert_frame_equal(g, uninterrupted[0])
    pd.testing.assert_frame_equal(n, uninterrupted[1])


def test_rerun_reuses_everything_and_changes_nothing(run, uninterrupted, tmp_path, capsys):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    out = copy_records(uninterrupted, tmp_path)
    res = measure_run(
        run.run_dir, MeasureConfig("gsm8k", batch_size=3, max_new_tokens=8, window=64), validation=run.validation, test=run.test, out=out
    )
    assert res.measured_steps == [] and res.reused_steps == list(STEPS) and res.model_loads == 0
    g, n = read(out)
    pd.testing.assert_frame_equal(g, uninterrupted[0])
    pd.testing.assert_frame_equal(n, uninterrupted[1])

    # a different decoding setting is a different measurement: generation again, NLL reused
    # (with the batch size the records were measured with: another one would mix provenances)
    res = measure_run(
        run.run_dir, MeasureConfig("gsm8k", batch_size=1, max_new_tokens=3, window=64), validation=run.validation, test=run.test, out=out
    )
    assert res.generated_items == 14 * len(STEPS) and res.scored_items == 0
    g, n = read(out)
    pd.testing.assert_frame_equal(n, uninterrupted[1])
    assert len(g) == len(uninterrupted[0]) and not g["text"].equals(uninterrupted[0]["text"])


def test_edited_item_is_remeasured_alone(run, uninterrupted, tmp_path):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    from tinyrun import make_gsm8k_rows

    out = copy_records(uninterrupted, tmp_path)
    kw = dict(test=run.test, out=out)
    config = MeasureConfig("gsm8k", batch_size=1, max_new_tokens=8, window=64)
    before = read(out)
    rows = make_gsm8k_rows(8, seed=0)
    rows[2]["question"] = rows[2]["question"].replace("How many", "Now how many")
    edited = write_jsonl(tmp_path / "validation.jsonl", rows)
    res = measure_run(run.run_dir, config, validation=edited, **kw)
    assert res.generated_items == len(STEPS) and res.scored_items == len(STEPS)
    after = read(out)
    changed = after[1]["nll_sum"] != before[1]["nll_sum"]
    assert set(after[1].loc[changed, "item_id"]) == {"gsm8k-2"}
    assert set(after[1].loc[changed, "split"]) == {"validation"}


def test_second_trajectory_appends_and_keeps_the_first(run, uninterrupted, tmp_path, capsys):
    out = copy_records(uninterrupted, tmp_path)
    run_b = run.run_dir.parent / "run-b"
    if not run_b.exists():
        save_lora_checkpoints(run.base, run_b, [7, 14], seed=5)
    assert cli([*args_for(run, out, run_dir=run_b), "--configuration", "cfg-b"])[0] == 0
    g, n = read(out)
    assert set(g["trajectory"]) == {"run-a", "run-b"}
    a_g = g[g["trajectory"] == "run-a"].reset_index(drop=True)
    a_n = n[n["trajectory"] == "run-a"].reset_index(drop=True)
    pd.testing.assert_frame_equal(a_g, uninterrupted[0])
    pd.testing.assert_frame_equal(a_n, uninterrupted[1])
    b = g[g["trajectory"] == "run-b"]
    assert sorted(b["step"].unique()) == [7, 14] and set(b["configuration"]) == {"cfg-b"}
    assert len(n[n["trajectory"] == "run-b"]) == 2 * 14 * 2
