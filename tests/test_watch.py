"""``watch``: measuring a run while a trainer writes it (issue 21). A background writer copies
the checkpoints in one file at a time with pauses, one folder left half-written for a while
(its marker already there, its weights cut short); the watcher measures each checkpoint only
once it is complete, finishes at the final step, and its records are the one-shot measure's,
byte for byte: in a local folder, and on S3 with the watcher killed and started again."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ckptsel._util.locations import FileInfo, Location
from ckptsel.errors import CkptselError
from ckptsel.measure import WatchSettings, list_folders, read_status
from ckptsel.train import checkpoint_readiness, discover_checkpoints, is_final_checkpoint

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from storagecase import STEPS, assert_same_records, config, tiny_case, units_of  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
HELD = 20  # the checkpoint left half-written for a while
FAST = dict(poll=0.05, settle=0.4, timeout=150)


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    return tiny_case(tmp_path_factory)


class Writer(threading.Thread):
    """Copies the run's checkpoints in as a trainer would: folder by folder, one file at a
    time with pauses, ``trainer_state.json`` (with ``max_steps``) last; the ``HELD`` folder
    gets its marker first and its weights in two halves ``hold`` seconds apart (or, with
    ``seen``, as soon as ``seen()`` says the watcher has reported that folder incomplete: the
    half-written state is then observed whatever the machine's load, at most ``hold`` s)."""

    def __init__(self, src: Path, put: Callable[[str, bytes], None], pause: float, hold: float,
                 seen: Callable[[], bool] | None = None):  # fmt: skip
        super().__init__(daemon=True)
        self.src, self.put, self.pause, self.hold, self.seen = src, put, pause, hold, seen
        self.complete_at: dict[int, float] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            for step in STEPS:
                self._folder(step)
                self.complete_at[step] = time.monotonic()
                time.sleep(self.pause)
        except BaseException as err:  # noqa: BLE001 - reported by the test
            self.error = err

    def _folder(self, step: int) -> None:
        folder = self.src / f"checkpoint-{step}"
        marker = json.dumps({"global_step": step, "max_steps": STEPS[-1]}).encode()
        files = sorted(p.name for p in folder.iterdir() if p.name != "trainer_state.json")
        if step == HELD:
            self.put(f"checkpoint-{step}/trainer_state.json", marker)
        for name in files:
            data = (folder / name).read_bytes()
            if step == HELD and name.endswith(".safetensors"):
                self.put(f"checkpoint-{step}/{name}", data[: len(data) // 2])
                self._hold()  # half a weights file, marker present: not complete
            self.put(f"checkpoint-{step}/{name}", data)
            time.sleep(self.pause)
        if step != HELD:
            self.put(f"checkpoint-{step}/trainer_state.json", marker)


    def _hold(self) -> None:
        end = time.monotonic() + self.hold
        while time.monotonic() < end and not (self.seen is not None and self.seen()):
            time.sleep(0.02)


def local_put(root: Path) -> Callable[[str, bytes], None]:
    def put(rel: str, data: bytes) -> None:  # in place, like the Trainer writes JSON files
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)

    return put


def test_watch_a_local_run_being_written(case, tmp_path):
    from ckptsel.measure import watch_run

    run_dir = tmp_path / "runs" / case.run.run_dir.name
    statuses: list[dict] = []

    def seen() -> bool:
        return any("weights not whole" in w.get(HELD, "") for w in statuses)

    writer = Writer(case.run.run_dir, local_put(run_dir), pause=0.05, hold=30.0, seen=seen)
    started = {}

    def on_progress(event):
        if event.kind == "step":
            started.setdefault(event.step, time.monotonic())

    writer.start()
    out = tmp_path / "records"
    status = watch_run(
        run_dir, config(), validation=case.run.validation, test=case.run.test, out=out,
        base=str(case.run.base), settings=WatchSettings(**FAST), on_progress=on_progress,
        on_status=lambda st: statuses.append(dict(st.waiting)),
    )  # fmt: skip
    writer.join(10)
    assert writer.error is None
    assert status.state == "done" and status.final_step == STEPS[-1]
    assert sorted(status.recorded) == list(STEPS) and not status.incomplete
    for step in STEPS:  # never before the folder was whole
        assert started[step] >= writer.complete_at[step], (step, started, writer.complete_at)
    assert any("weights not whole" in why for w in statuses for why in w.values())
    assert_same_records(case.records, out)
    saved = read_status(out, case.run.run_dir.name)
    assert saved["state"] == "done" and saved["recorded"] == list(STEPS)
    assert not (run_dir / "watch").exists()  # the run folder belongs to the trainer


def test_watch_s3_killed_and_restarted(case, s3, tmp_path):
    """The run uploaded to S3 file by file; the watcher runs in its own process, is killed
    once it has recorded something, and a second watcher finishes the job."""
    from ckptsel.measure import watch_run

    prefix = f"runs/{case.run.run_dir.name}"
    writer = Writer(
        case.run.run_dir,
        lambda rel, data: s3.fs.pipe_file(f"{s3.bucket}/{prefix}/{rel}", data),
        pause=0.2, hold=1.5,
    )  # fmt: skip
    urls = {
        "base": s3.upload(case.run.base, "models", "base"),
        "validation": s3.upload(case.run.validation, "data", "validation.jsonl"),
        "test": s3.upload(case.run.test, "data", "test.jsonl"),
    }
    run, out = s3.url(prefix), s3.url("records")
    script = (
        "from ckptsel.measure import MeasureConfig, WatchSettings, watch_run\n"
        "watch_run({run!r}, MeasureConfig('gsm8k', batch_size=2, max_new_tokens=8, window=64),"
        " validation={validation!r}, test={test!r}, out={out!r}, base={base!r},"
        " settings=WatchSettings(poll=0.05, settle=0.4, timeout=150))\n"
    ).format(run=run, out=out, **urls)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    writer.start()
    deadline = time.monotonic() + 150
    try:
        while not units_of(out) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None, f"ended before it was killed: {proc.stderr.read()[-3000:]}"
        proc.kill()
    finally:
        proc.wait()
    first = units_of(out)
    assert first and first < set(STEPS)
    status = watch_run(
        run, config(), validation=urls["validation"], test=urls["test"], out=out,
        base=urls["base"], settings=WatchSettings(**FAST),
    )  # fmt: skip
    writer.join(10)
    assert (
        writer.error is None and status.state == "done" and sorted(status.recorded) == list(STEPS)
    )
    assert_same_records(case.records, out)
    assert read_status(out, case.run.run_dir.name)["state"] == "done"


def test_readiness_rules(case, tmp_path):
    """Each rule on its own, on a local copy of a checkpoint."""
    src = case.run.run_dir / "checkpoint-10"
    folder = tmp_path / "checkpoint-10"
    shutil.copytree(src, folder)
    loc = Location(folder)

    def files():
        return {
            p.name: FileInfo(p.stat().st_size, str(p.stat().st_mtime_ns)) for p in folder.iterdir()
        }

    marker = "trainer_state.json"
    assert checkpoint_readiness(loc, 10, files(), marker)[0]
    (folder / marker).write_text('{"global_step": 1')  # written in place, half-way
    assert "not readable JSON" in checkpoint_readiness(loc, 10, files(), marker)[1]
    (folder / marker).write_text('{"global_step": 8}')
    assert "global_step 8" in checkpoint_readiness(loc, 10, files(), marker)[1]
    (folder / marker).unlink()
    assert checkpoint_readiness(loc, 10, files(), marker)[1] == f"no {marker} yet"
    assert checkpoint_readiness(loc, 10, files(), None)[0]  # no marker (torchtune)
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-64])
    assert "weights not whole" in checkpoint_readiness(loc, 10, files(), None)[1]
    weights.unlink()
    assert checkpoint_readiness(loc, 10, files(), None)[1] == "no weights yet"
    assert is_final_checkpoint({"max_steps": 30}, 30) and not is_final_checkpoint(
        {"max_steps": 30}, 20
    )
    stop = {"stateful_callbacks": {"TrainerControl": {"args": {"should_training_stop": True}}}}
    assert is_final_checkpoint(stop, 12) and is_final_checkpoint({}, 5, until_step=5)
    assert not is_final_checkpoint({}, 4, until_step=5) and not is_final_checkpoint({}, 4)


def test_layouts_and_settings(case, tmp_path):
    run = tmp_path / "run"
    for step in STEPS:  # torchtune's epoch_<n> folders; dot files and tmp folders ignored
        shutil.copytree(case.run.run_dir / f"checkpoint-{step}", run / f"epoch_{step}")
    (run / "tmp-checkpoint-40").mkdir()
    (run / "tmp-checkpoint-40" / "x").write_text("x")
    assert [c.step for c in discover_checkpoints(run, layout="torchtune")] == list(STEPS)
    assert sorted(list_folders(Location(run), "torchtune")) == list(STEPS)
    assert list_folders(Location(run), "hf") == {}
    with pytest.raises(CkptselError, match="no checkpoint-<step> folders"):
        discover_checkpoints(run)
    for bad, said in (
        (dict(poll=-1), "--poll"), (dict(settle="x"), "--settle"), (dict(until_step=1.5), "--until-step"),
        (dict(layout="deepspeed"), "unknown checkpoint layout"), (dict(marker="a/b"), "--marker"),
    ):  # fmt: skip
        with pytest.raises(CkptselError, match=said):
            WatchSettings(**bad)


def run_cli(args: list[str]) -> int:
    from ckptsel.cli import main

    try:
        main([str(a) for a in args])
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def test_cli_watch_keeps_status_and_selection(case, tmp_path, capsys):
    """``ckptsel watch`` on a run being written: the one-shot records, ``status.json`` done,
    ``selection.json`` equal to ``ckptsel select`` on those records; a second watch continues
    (nothing measured again); ``--until-step`` stops there; bad options are one line, exit 2."""
    from ckptsel.workflows import SelectSettings, select_checkpoint

    name = case.run.run_dir.name
    run_dir, out = tmp_path / "runs" / name, tmp_path / "records"
    common = [
        "--task", "gsm8k", "--validation", case.run.validation, "--test", case.run.test,
        "--base", case.run.base, "--batch-size", "2", "--max-new-tokens", "8", "--no-progress",
    ]  # fmt: skip  (the default window: select reads its NLL)
    once = tmp_path / "records-once"
    assert run_cli(["measure", case.run.run_dir, "--out", once, *common]) == 0
    args = ["watch", run_dir, "--out", out, *common, "--poll", "0.05", "--settle", "0.4",
            "--timeout", "150", "--draws", "50"]  # fmt: skip
    status_file = out / "watch" / name / "status.json"

    def seen() -> bool:  # the watcher has said so in its status file
        try:
            waiting = json.loads(status_file.read_text())["waiting"]
        except (OSError, ValueError, KeyError):
            return False
        return "weights not whole" in waiting.get(str(HELD), "")

    writer = Writer(case.run.run_dir, local_put(run_dir), pause=0.05, hold=30.0, seen=seen)
    writer.start()
    assert run_cli(args) == 0
    writer.join(10)
    said = capsys.readouterr().out
    assert "weights not whole" in said and f"done at step {STEPS[-1]}" in said
    assert_same_records(once, out)
    status = json.loads((out / "watch" / name / "status.json").read_text())
    assert status["state"] == "done" and status["recorded"] == list(STEPS)
    selection = json.loads((out / "watch" / name / "selection.json").read_text())
    answer = select_checkpoint(out, name, settings=SelectSettings(draws=50)).to_dict()
    assert selection.pop("watch") == {"recorded": list(STEPS), "final": True}
    assert selection.pop("status") == "complete"
    assert selection == {"state": "selected", "rule": "accuracy", **answer}
    assert f"keep checkpoint-{answer['recommendation']['keep_step']}" in said

    parts = {p: p.stat().st_mtime_ns for p in (out / ".parts").rglob("*.parquet")}
    assert run_cli(args) == 0  # started again: continues from the records, measures nothing
    assert parts == {p: p.stat().st_mtime_ns for p in (out / ".parts").rglob("*.parquet")}
    assert_same_records(once, out)

    until_out = tmp_path / "records-until"
    argv = [a if a != out else until_out for a in args] + ["--until-step", "20"]
    assert run_cli(argv) == 0
    assert units_of(until_out) == {10, 20}
    assert json.loads((until_out / "watch" / name / "status.json").read_text())["final_step"] == 20
    capsys.readouterr()
    for bad, said in ((["--poll", "-1"], "--poll"), (["--rule", "best"], "unknown rule")):
        assert run_cli(args + bad) == 2
        err = capsys.readouterr().err.strip()
        assert said in err and len(err.splitlines()) == 1
