"""Records are tied to the checkpoint they were measured from (issue 30, items 6, 7, 10): a
checkpoint replaced on disk, or another run under the same trajectory name, is refused in
one line (or measured again with ``--replace``), never skipped as "already recorded"; the
analysis refuses a trajectory whose final checkpoint has no records; a watcher's
``selection.json`` never calls a checkpoint final before the run's final one is recorded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.errors import CkptselError
from ckptsel.records.codec import read_schema
from ckptsel.records.load import load_validation
from ckptsel.records.scan import read_frame
from ckptsel.records.store import compact
from ckptsel.records.units import list_units

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from clirun import run_cli as cli  # noqa: E402
from tinyrun import build_tiny_run, save_lora_checkpoints  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
STEPS = (10, 20, 30, 40, 50, 60)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("ident"), steps=STEPS, n_validation=6, n_test=4)


def config():
    from ckptsel.measure.config import MeasureConfig

    return MeasureConfig("gsm8k", batch_size=2, max_new_tokens=4, window=512)


def measure(run, run_dir: Path, out: Path, **kw):
    from ckptsel.measure.run import measure_run

    return measure_run(run_dir, config(), validation=run.validation, test=run.test, out=out, **kw)


def measure_args(run, run_dir: Path, out: Path, *extra: str) -> list[str]:
    return [
        "measure",
        str(run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        "2",
        "--max-new-tokens",
        "4",
        "--window",
        "512",
        "--no-progress",
        *extra,
    ]


def stamp(out: Path, step: int) -> dict:
    from ckptsel.records.weights import CHECKPOINT_KEY

    unit = next(u for u in list_units(out, "generations") if u.step == step)
    return json.loads(read_schema(unit.path).metadata[CHECKPOINT_KEY])


def small_run(run, tmp_path: Path, steps=(10, 20)) -> Path:
    """A run folder holding copies of some of the tiny run's checkpoints."""
    run_dir = tmp_path / "runs" / "traj"
    for step in steps:
        shutil.copytree(run.run_dir / f"checkpoint-{step}", run_dir / f"checkpoint-{step}")
    return run_dir


def test_replaced_checkpoint_is_refused_then_replaced(run, tmp_path, capsys):
    run_dir, out = small_run(run, tmp_path), tmp_path / "records"
    measure(run, run_dir, out)
    before = read_frame(out, "generations")
    # checkpoint-20 rewritten with other weights (a resumed run saving again, a copy over it)
    shutil.rmtree(run_dir / "checkpoint-20")
    save_lora_checkpoints(run.base, run_dir, [20], seed=7)
    code, said = cli(measure_args(run, run_dir, out), capsys)
    lines = [x for x in said.splitlines() if x.strip()]
    assert code == 2 and len(lines) == 1, said  # before: 0, "1 already recorded"
    from ckptsel.train.checkpoints import weights_fingerprint

    old = stamp(out, 20)["weights"]
    new = weights_fingerprint(run_dir / "checkpoint-20")
    assert new != old and stamp(out, 20)["run_final_step"] == 20
    assert "'traj' step 20" in said and old[:19] in said and new[:19] in said, said
    assert "already recorded" not in said
    compact(out)  # the single file keeps the fingerprints: still refused
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 2
    pd_after = read_frame(out, "generations")
    assert len(pd_after) == len(before)  # nothing written
    code, said = cli(measure_args(run, run_dir, out, "--replace"), capsys)
    assert code == 0 and "1 measured" in said, said
    assert stamp(out, 20)["weights"] == new and stamp(out, 10)["weights"] != new
    assert cli(measure_args(run, run_dir, out), capsys)[0] == 0  # now they agree


def test_another_run_under_the_same_name_is_refused(run, tmp_path, capsys):
    run_dir, out = small_run(run, tmp_path), tmp_path / "records"
    measure(run, run_dir, out)
    other = tmp_path / "other" / "traj"
    save_lora_checkpoints(run.base, other, [10, 20], seed=3)
    code, said = cli(measure_args(run, other, out), capsys)
    assert code == 2 and "'traj' step 10" in said and "--replace" in said, said


def test_records_without_fingerprint_are_accepted(run, tmp_path, capsys):
    """Older records (and ingested ones) carry no fingerprint: reused as before."""
    from ckptsel.records.store import upsert_records

    run_dir, out = small_run(run, tmp_path), tmp_path / "records"
    measure(run, run_dir, out)
    g, n = read_frame(out, "generations"), read_frame(out, "nll")
    shutil.rmtree(out / "units")
    upsert_records(out, generations=g, nll=n)  # no stamp, as before this change
    for part in (out / ".parts").rglob("*.parquet"):  # nor a checkpoint column (issue 38)
        frame = pd.read_parquet(part)
        frame.drop(columns=["checkpoint"]).to_parquet(part)
    shutil.rmtree(run_dir / "checkpoint-20")
    save_lora_checkpoints(run.base, run_dir, [20], seed=7)
    code, said = cli(measure_args(run, run_dir, out), capsys)
    assert code == 0 and "2 already recorded" in said, said


def test_killed_measurement_has_no_final(run, tmp_path, capsys):
    """Measurement stopped after 3 of 6 checkpoints: the analysis refuses, naming the final
    step the run folder held and the last recorded one."""
    out = tmp_path / "records"

    def killed(step: int) -> None:
        if step == 30:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        measure(run, run.run_dir, out, after_checkpoint=killed)
    assert sorted(set(read_frame(out, "generations")["step"])) == [10, 20, 30]
    with pytest.raises(CkptselError, match=r"final checkpoint \(step 60.*last recorded: step 30"):
        load_validation(out)
    code, said = cli(["analyze", str(out), "--out", str(tmp_path / "results")], capsys)
    assert code == 2 and "step 60" in said and "last recorded: step 30" in said, said
    # a study that declares the run ended at step 30 is believed
    (out / "final_steps.json").write_text(json.dumps({run.run_dir.name: 30}))
    assert load_validation(out)[0].steps[-1] == 30


def test_watch_selection_in_progress_is_never_final(run, tmp_path):
    """A watcher that stops before the run's final checkpoint (here: 2 of 6 written, the
    markers saying max_steps 60) leaves selection.json saying the run is in progress."""
    from ckptsel.measure.watch import WatchSettings
    from ckptsel.workflows.watching import watch_and_select

    run_dir, out = small_run(run, tmp_path, steps=(10, 20, 30)), tmp_path / "records"
    for step in (10, 20, 30):
        state = {"global_step": step, "max_steps": 60}
        (run_dir / f"checkpoint-{step}" / "trainer_state.json").write_text(json.dumps(state))
    # the watcher's clock advances only by its sleeps: the 20 s timeout passes without waiting
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    status = watch_and_select(
        run_dir,
        config(),
        validation=run.validation,
        test=run.test,
        out=out,
        settings=WatchSettings(poll=0.05, settle=0.1, timeout=20),
        sleep=sleep,
        clock=lambda: now[0],
    )
    assert now[0] >= 20  # stopped by the timeout, as before
    assert status.state == "stopped" and sorted(status.recorded) == [10, 20, 30]
    data = json.loads((out / "watch" / "traj" / "selection.json").read_text())
    assert data["status"] == "in progress" and data["state"] == "selected", data
    if data["state"] == "selected":
        assert data["final_step"] is None and data["last_recorded_step"] == 30
        assert data["recommendation"]["keep_final"] is None
        assert data["recommendation"]["provisional"] is True
    # the units of a run still training declare no final: its records still answer `select`
    assert stamp(out, 30)["run_final_step"] is None
