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
from ckptsel.cli.output import JSON_SCHEMAS
from ckptsel.errors import CkptselError
from ckptsel.measure.watch import WatchSettings, list_folders, read_status
from ckptsel.train.checkpoints import checkpoint_readiness, discover_checkpoints, is_final_checkpoint

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

    def __init__(self, src: Path, put: Callable[[str, bytes], None], pause: float, hold: float, seen: Callable[[], bool] | None = None):
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
    from ckptsel.measure.watch import watch_run

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
        run_dir,
        config(),
        validation=case.run.validation,
        test=case.run.test,
        out=out,
        base=str(case.run.base),
        settings=WatchSettings(**FAST),
        on_progress=on_progress,
        on_status=lambda st: statuses.append(dict(st.waiting)),
    )
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
    from ckptsel.measure.watch import watch_run

    prefix = f"runs/{case.run.run_dir.name}"
    writer = Writer(case.run.run_dir, lambda rel, data: s3.fs.pipe_file(f"{s3.bucket}/{prefix}/{rel}", data), pause=0.2, hold=1.5)
    urls = {
        "base": s3.upload(case.run.base, "models", "base"),
        "validation": s3.upload(case.run.validation, "data", "validation.jsonl"),
        "test": s3.upload(case.run.test, "data", "test.jsonl"),
    }
    run, out = s3.url(prefix), s3.url("records")
    script = (
        "from ckptsel.measure import MeasureConfig\nfrom ckptsel.measure.watch import WatchSettings, watch_run\n"
        "watch_run({run!r}, MeasureConfig('gsm8k', batch_size=2, max_new_tokens=8, window=64),"
        " validation={validation!r}, test={test!r}, out={out!r}, base={base!r},"
        " settings=WatchSettings(poll=0.05, settle=0.4, timeout=150))\n"
    ).format(run=run, out=out, **urls)
    proc = subprocess.Popen(
        [sys.executable, "-c", script], env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
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
        run, config(), validation=urls["validation"], test=urls["test"], out=out, base=urls["base"], settings=WatchSettings(**FAST)
    )
    writer.join(10)
    assert writer.error is None and status.state == "done" and sorted(status.recorded) == list(STEPS)
    assert_same_records(case.records, out)
    assert read_status(out, case.run.run_dir.name)["state"] == "done"


def test_readiness_rules(case, tmp_path):
    """Each rule on its own, on a local copy of a checkpoint."""
    src = case.run.run_dir / "checkpoint-10"
    folder = tmp_path / "checkpoint-10"
    shutil.copytree(src, folder)
    loc = Location(folder)

    def files():
        return {p.name: FileInfo(p.stat().st_size, str(p.stat().st_mtime_ns)) for p in folder.iterdir()}

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
    assert is_final_checkpoint({"max_steps": 30}, 30) and not is_final_checkpoint({"max_steps": 30}, 20)
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
        (dict(poll=-1), "--poll"),
        (dict(settle="x"), "--settle"),
        (dict(until_step=1.5), "--until-step"),
        (dict(layout="deepspeed"), "unknown checkpoint layout"),
        (dict(marker="a/b"), "--marker"),
    ):
        with pytest.raises(CkptselError, match=said):
            WatchSettings(**bad)


def run_cli(args: list[str]) -> int:
    from ckptsel.cli.app import main

    try:
        main([str(a) for a in args])
    except SystemExit as exit_:
        return int(exit_.code or 0)
    return 0


def test_cli_watch_keeps_status_and_selection(case, tmp_path, capsys):
    """``ckptsel watch`` on a run being written: the one-shot records, ``status.json`` done,
    ``selection.json`` equal to ``ckptsel select`` on those records; a second watch continues
    (nothing measured again); ``--until-step`` stops there; bad options are one line, exit 2."""
    from ckptsel.workflows.advise.selection import SelectSettings, select_checkpoint

    name = case.run.run_dir.name
    run_dir, out = tmp_path / "runs" / name, tmp_path / "records"
    common = [
        "--task",
        "gsm8k",
        "--validation",
        case.run.validation,
        "--test",
        case.run.test,
        "--base",
        case.run.base,
        "--batch-size",
        "2",
        "--max-new-tokens",
        "8",
        "--no-progress",
    ]  # (the default window: select reads its NLL)
    once = tmp_path / "records-once"
    capsys.readouterr()
    assert run_cli(["measure", case.run.run_dir, "--out", once, *common, "--json"]) == 0
    measured = json.loads(capsys.readouterr().out)  # one object on stdout (issue 39)
    assert list(measured) == list(JSON_SCHEMAS["measure"]) and measured["records"] == str(once)
    assert measured["measured_steps"] == list(STEPS) and measured["reused_steps"] == []
    args = ["watch", run_dir, "--out", out, *common, "--poll", "0.05", "--settle", "0.4", "--timeout", "150", "--draws", "50"]
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
    for step in STEPS:  # what it is measuring, progress off (issue 39)
        assert f"measuring step {step}: 0/" in said
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
    capsys.readouterr()
    assert run_cli([*args, "--json"]) == 0  # started again: continues, measures nothing
    assert parts == {p: p.stat().st_mtime_ns for p in (out / ".parts").rglob("*.parquet")}
    said = capsys.readouterr()  # --json: one object on stdout, the status lines on stderr
    answer = json.loads(said.out)
    assert list(answer) == list(JSON_SCHEMAS["watch"]) and answer["done"] is True
    assert answer["status"] == json.loads((out / "watch" / name / "status.json").read_text())
    assert answer["selection"] == json.loads((out / "watch" / name / "selection.json").read_text())
    assert answer["selection_file"] == str(out / "watch" / name / "selection.json")
    assert f"done at step {STEPS[-1]}" in said.err
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


def test_status_and_selection_current_after_every_checkpoint(case, tmp_path):
    """Issue 39: a writer thread puts checkpoint 10 in, then, once the watcher has recorded
    it, 20 and 30 (the final one) at the same moment, so one poll finds both ready. Read
    between checkpoints (when each starts to be measured, and as its items go), status.json
    names every checkpoint recorded so far and the one being measured with its progress, and
    selection.json holds a provisional answer (never 'measure the final checkpoint')."""
    from ckptsel.workflows.advise.selection import SelectSettings
    from ckptsel.workflows.watching import selection_path, watch_and_select

    name = case.run.run_dir.name
    run_dir, out = tmp_path / "runs" / name, tmp_path / "records"
    status_file = out / "watch" / name / "status.json"

    def written(step: int) -> bool:
        try:
            return step in json.loads(status_file.read_text())["recorded"]
        except (OSError, ValueError):
            return False

    def writer() -> None:
        put = local_put(tmp_path / "staging")
        for step in STEPS:
            marker = json.dumps({"global_step": step, "max_steps": STEPS[-1]}).encode()
            for f in (case.run.run_dir / f"checkpoint-{step}").iterdir():
                put(f"tmp-checkpoint-{step}/{f.name}", marker if f.name == "trainer_state.json" else f.read_bytes())
        run_dir.mkdir(parents=True)
        os.rename(tmp_path / "staging" / f"tmp-checkpoint-{STEPS[0]}", run_dir / f"checkpoint-{STEPS[0]}")
        end = time.monotonic() + 60
        while not written(STEPS[0]) and time.monotonic() < end:
            time.sleep(0.02)
        for step in STEPS[1:]:  # together: a poll finds them both complete
            os.rename(tmp_path / "staging" / f"tmp-checkpoint-{step}", run_dir / f"checkpoint-{step}")

    seen: list[tuple[str, int, dict, dict]] = []  # (event, step, status.json, selection.json)

    def on_progress(event) -> None:  # the files as a user reads them, between checkpoints
        if event.kind in ("step", "items"):
            sel = selection_path(out, name).local
            selection = json.loads(sel.read_text()) if sel.is_file() else {}
            seen.append((event.kind, event.step, json.loads(status_file.read_text()), selection))

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    from ckptsel.measure.config import MeasureConfig

    status = watch_and_select(  # the default window: select reads its NLL
        run_dir,
        MeasureConfig("gsm8k", batch_size=2, max_new_tokens=8),
        validation=case.run.validation,
        test=case.run.test,
        out=out,
        base=str(case.run.base),
        settings=WatchSettings(**FAST, progress_every=0.0),
        select_settings=SelectSettings(draws=20, partitions=4, bootstrap_partitions=2),
        on_progress=on_progress,
    )
    thread.join(10)
    assert status.state == "done" and sorted(status.recorded) == list(STEPS)
    starts = [(step, st, sel) for kind, step, st, sel in seen if kind == "step"]
    assert [step for step, _, _ in starts] == list(STEPS)
    for k, (step, st, sel) in enumerate(starts):
        assert st["recorded"] == list(STEPS[:k]), (step, st)  # every checkpoint so far
        assert list(st["measuring"]) == [str(step)] and st["measuring"][str(step)]["done"] == 0
        if k >= 2:  # two checkpoints recorded: a provisional answer, run in progress
            assert sel["state"] == "selected" and sel["status"] == "in progress", sel.get("reason")
            assert sel["recommendation"]["provisional"] is True
            assert sel["watch"]["recorded"] == list(STEPS[:k])
    items = [(step, st["measuring"][str(step)]) for kind, step, st, _ in seen if kind == "items"]
    for step in STEPS:  # its progress, written as it goes, counted up to its total
        done = [m["done"] for s, m in items if s == step]
        total = {m["total"] for s, m in items if s == step}
        assert len(done) > 1 and done == sorted(set(done)) and done[-1] == total.pop(), (step, items)
    saved = read_status(out, name)
    assert saved["measuring"] == {} and saved["recorded"] == list(STEPS)
    final = json.loads(selection_path(out, name).local.read_text())
    assert final["status"] == "complete" and final["state"] == "selected"
