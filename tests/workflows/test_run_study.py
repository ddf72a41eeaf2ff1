"""``ckptsel run STUDY.toml``: the study file's validation, pools, the runner's stages and
resumption, and the paper's three example studies end to end on a tiny local model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.cli.output import JSON_SCHEMAS
from ckptsel.data.pools import PoolSpec, build_pool, build_pools, rank_key, strata_counts
from ckptsel.errors import CkptselError
from ckptsel.study.spec import load_spec, load_study
from ckptsel.workflows.study_run.context import seed_of
from ckptsel.workflows.study_run.fingerprint import fingerprint_diff
from ckptsel.workflows.study_run.stages import stages_to_run

from tinyrun import MINIMAL, gsm_rows, jsonl, write  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    for name, n in (("train", 10), ("val", 6), ("test", 6)):
        jsonl(tmp_path / f"{name}.jsonl", gsm_rows(n))
    return tmp_path


# --------------------------------------------------------------------------- the study file


def test_minimal_schema2_file_loads(study_dir: Path) -> None:
    spec = load_spec(write(study_dir / "s.toml", MINIMAL))
    assert spec.validation.task == "gsm8k" and spec.test.files == ((study_dir / "test.jsonl"),)
    assert spec.trajectory_names() == ["a-s1"]
    assert spec.study.records_root == study_dir / "records"
    # `ckptsel train` reads the same file (its trained part)
    assert load_study(study_dir / "s.toml").configurations[0].name == "a"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("[test]\n", "[test]\ncolour = 1\n"), r"line 12: \[test\] colour: unknown key"),
        (("seeds = [1]", 'seeds = "1"'), r"line 4: \[study\] seeds: must be list"),
        (('file = "val.jsonl"', 'file = "nope.jsonl"'), r"line 10: \[validation\] file: file not found"),
        (("steps = 2", "steps = 2.5"), r"line 16: configurations\[0\] steps: must be int"),
        (("schema = 2", "schema = 7"), r"schema: unknown version 7"),
        (('task = "gsm8k"\nfile = "test', 'task = "gsm9k"\nfile = "test'), r"\[test\] task: unknown task"),
        (("[study]", "[stuyd]\nx = 1\n[study]"), r"stuyd: unknown table"),
    ],
)
def test_bad_study_file_names_key_and_line(study_dir: Path, edit, message: str) -> None:
    text = MINIMAL.replace(*edit, 1)
    assert text != MINIMAL
    with pytest.raises(CkptselError, match=message):
        load_spec(write(study_dir / "s.toml", text))


def test_schema1_file_is_refused_for_train_and_run(study_dir: Path) -> None:
    v1 = """[study]
base_model = "base"
task = "gsm8k"
train = "train.jsonl"
validation = "val.jsonl"
test = "test.jsonl"
seeds = [3]
[[configurations]]
name = "old"
steps = 4
"""
    path = write(study_dir / "v1.toml", v1)
    for load in (load_study, load_spec):
        with pytest.raises(CkptselError, match=r"v1\.toml: a schema-1 study file .*schema = 2"):
            load(path)
    v2 = (
        'schema = 2\n[study]\nbase_model = "base"\nseeds = [3]\n'
        '[train]\ntask = "gsm8k"\nfile = "train.jsonl"\n'
        '[validation]\ntask = "gsm8k"\nfile = "val.jsonl"\n'
        '[test]\ntask = "gsm8k"\nfile = "test.jsonl"\n'
        '[[configurations]]\nname = "old"\nsteps = 4\n'
    )  # the same study as the refusal says to write it
    path = write(study_dir / "v2.toml", v2)
    assert load_study(path).trajectories()[0][0] == "old-s3"
    spec = load_spec(path)
    assert spec.validation.files == (study_dir / "val.jsonl",) and spec.test.task == "gsm8k"


def test_overrides_apply_before_validation(study_dir: Path) -> None:
    path = write(study_dir / "s.toml", MINIMAL.replace('file = "val.jsonl"', 'file = "gone.jsonl"'))
    spec = load_spec(path, overrides=['validation.file="val.jsonl"', "configurations.steps=7"])
    assert spec.study.configurations[0].steps == 7
    with pytest.raises(CkptselError, match="SECTION.KEY=VALUE"):
        load_spec(path, overrides=["steps"])


# --------------------------------------------------------------------------- pools


def test_per_task_sample_is_the_smallest_hashes_brute_force(tmp_path: Path) -> None:
    a = jsonl(tmp_path / "a" / "x.jsonl", [{**r, "id": f"a{i}"} for i, r in enumerate(gsm_rows(30))])
    b = jsonl(tmp_path / "b" / "y.jsonl", [{**r, "id": f"b{i}"} for i, r in enumerate(gsm_rows(20))])
    spec = PoolSpec("gsm8k", (a, b), per_task=5, seed=9, where="[validation]")
    pool = build_pool(spec)
    for label, prefix, n in (("x", "a", 30), ("y", "b", 20)):
        want = sorted((f"{prefix}{i}" for i in range(n)), key=lambda i: rank_key(9, label, i))[:5]
        got = [it.item_id for it in pool if it.subtask == label]
        assert sorted(got) == sorted(want)
        assert got == sorted(got, key=lambda i: int(i[1:]))  # file order kept
    assert strata_counts(pool) == {"x": 5, "y": 5}
    assert build_pool(spec) == pool  # deterministic
    with pytest.raises(CkptselError, match=r"\[validation\] per_task = 25, but .*y.jsonl has only 20"):
        build_pool(PoolSpec("gsm8k", (a, b), per_task=25, where="[validation]"))


def test_validation_and_test_from_one_file_are_disjoint(tmp_path: Path) -> None:
    f = jsonl(tmp_path / "p.jsonl", gsm_rows(12))
    val, test = build_pools(PoolSpec("gsm8k", (f,), n=5, seed=1), PoolSpec("gsm8k", (f,), n=7, seed=1))
    assert not {it.item_id for it in val} & {it.item_id for it in test}
    assert len(val) == 5 and len(test) == 7
    with pytest.raises(CkptselError, match="n = 8, but"):
        build_pools(PoolSpec("gsm8k", (f,), n=5), PoolSpec("gsm8k", (f,), n=8))


def test_commonsense_mixture_sets_subtask(shared_data: Path) -> None:
    cs = shared_data / "commonsense"
    files = (cs / "boolq" / "test.json", cs / "piqa" / "test.json")
    pool = build_pool(PoolSpec("commonsense", files, per_task=4, seed=0))
    assert strata_counts(pool) == {"boolq": 4, "piqa": 4}


# --------------------------------------------------------------------------- runner pieces


def test_seed_and_stage_parsing() -> None:
    assert seed_of("runs/lora-r8-s42") == 42 and seed_of("x_seed7") == 7
    assert seed_of("x-seed-3") == 3 and seed_of("lora-r8") is None
    assert stages_to_run(until="train") == ("prepare", "train")
    assert stages_to_run(only="measure") == ("measure",)
    with pytest.raises(CkptselError, match="--until 'fit'"):
        stages_to_run(until="fit")


def test_fingerprint_diff_refuses_changes_not_additions() -> None:
    before = {"test": {"n": 5}, "seeds": [1, 2], "configurations": {"a": {"lr": 1}}}
    grown = {"test": {"n": 5}, "seeds": [1, 2, 3], "configurations": {"a": {"lr": 1}, "b": {}}}
    assert fingerprint_diff(before, grown) == []
    changed = {"test": {"n": 6}, "seeds": [2], "configurations": {"a": {"lr": 2}}}
    diffs = fingerprint_diff(before, changed)
    assert any("a': lr 1 -> 2" in d for d in diffs)
    assert any(d.startswith("seeds [1]") for d in diffs)
    assert any(d.startswith('test: {"n": 5} -> {"n": 6}') for d in diffs)


# --------------------------------------------------------------------------- what is left


def _record(records: Path, trajectory: str, step: int, cfg, pool) -> None:
    """What ``measure_run`` writes for one checkpoint, without a model: made-up texts and NLLs
    for the items its part cache lacks, then the checkpoint's contract rows."""
    from ckptsel.measure.frames import generation_frame, nll_frame
    from ckptsel.measure.parts import StepParts
    from ckptsel.measure.tokens import ResponseNll
    from ckptsel.records.store import upsert_records

    parts = StepParts(records, trajectory, step, cfg, pool)
    gens, nlls = [], []
    for split, its in pool.splits.items():
        hashes = {it.item_id: h for it, h in zip(its, pool.hashes[split], strict=True)}
        sel = [its[i] for i in parts.todo_gen[split]]
        g = generation_frame(
            sel, ["#### 1"] * len(sel), task=cfg.task_for(split), split=split, trajectory=trajectory, configuration="a", step=step
        )
        sel = [its[i] for i in parts.todo_nll[split]]
        n = nll_frame(sel, [{0: ResponseNll(1.5, 3)}] * len(sel), split=split, trajectory=trajectory, step=step)
        for frame, out in ((g, gens), (n, nlls)):
            if len(frame):
                out.append(frame.assign(item_hash=[hashes[i] for i in frame["item_id"]]))
    parts.add(gens, nlls)
    upsert_records(
        records, generations=parts.contract_generations(cfg.task, trajectory, "a", cfg.test_task), nll=parts.contract_nll(trajectory)
    )


def _delete_records(records: Path) -> None:
    """The contract records (and their read cache) gone, the part cache kept."""
    import shutil

    for p in records.iterdir():
        if p.name != ".parts":
            shutil.rmtree(p) if p.is_dir() else p.unlink()


def test_left_to_measure_reads_parts_and_records(study_dir: Path) -> None:
    """One answer per checkpoint: items to generate and to score come from the part cache
    (by content hash), item rows to record from the contract records; no model is loaded."""
    from ckptsel.data.tasks import load_items
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.parts import ItemPool, RecordedItems, left_to_measure

    records = study_dir / "records"
    cfg = MeasureConfig(task="gsm8k", device="cpu")
    val = load_items("gsm8k", study_dir / "val.jsonl")
    test = load_items("gsm8k", study_dir / "test.jsonl")
    pool = ItemPool.load("gsm8k", val, test)
    first = left_to_measure(records, "t", [1, 2], cfg, pool)
    assert [(c.step, c.generate, c.score, c.unrecorded) for c in first] == [(1, 12, 12, 24), (2, 12, 12, 24)]
    _record(records, "t", 1, cfg, pool)
    one, two = left_to_measure(records, "t", [1, 2], cfg, pool)
    assert one.done and (one.generate, one.score, one.unrecorded) == (0, 0, 0)
    assert not two.done and two.generate == 12
    # the records read once for several trajectories answer the same
    recorded = RecordedItems.read(records, pool)
    assert left_to_measure(records, "t", [1, 2], cfg, pool, recorded) == [one, two]
    # parts there, records deleted: nothing to measure, but the rows are still to write
    _delete_records(records)
    (one,) = left_to_measure(records, "t", [1], cfg, pool)
    assert (one.generate, one.score, one.unrecorded) == (0, 0, 24) and not one.done
    _record(records, "t", 1, cfg, pool)
    assert left_to_measure(records, "t", [1], cfg, pool)[0].done
    # an item changed since (same id, another answer): that item is measured again
    changed = [*test[:-1], replace(test[-1], reference="999")]
    (one,) = left_to_measure(records, "t", [1], cfg, ItemPool.load("gsm8k", val, changed))
    assert (one.generate, one.score, one.unrecorded) == (1, 1, 0)
    # measure --only: the other kind is neither measured nor required in the records
    nll_only = MeasureConfig(task="gsm8k", device="cpu", only="nll")
    assert left_to_measure(records, "u", [1], nll_only, pool)[0].generate == 0


def _fake_checkpoints(folder: Path, steps: list[int]) -> None:
    """Checkpoint folders that count as saved (nothing here loads them)."""
    for step in steps:
        write(folder / f"checkpoint-{step}" / "adapter_config.json", "{}")
        write(folder / f"checkpoint-{step}" / "adapter_model.safetensors", "x")


def test_finished_and_plan_agree_on_what_is_left(study_dir: Path) -> None:
    """``--workers`` skips exactly the trajectories with every checkpoint there and nothing left
    to measure or record; ``--dry-run`` counts generations from the same answer."""
    from ckptsel.workflows.study_run.context import StudyContext
    from ckptsel.workflows.study_run.plan import finished, item_pool, plan, what_is_left

    spec = load_spec(write(study_dir / "s.toml", MINIMAL))
    ctx = StudyContext(spec, device="cpu", log=lambda m: None)
    (traj,) = ctx.trajectories
    assert traj.expected_steps == (1, 2)
    assert finished(ctx, [traj]) == set()  # not trained
    _fake_checkpoints(traj.folder, [1])
    pool = item_pool(ctx)
    _record(ctx.records_dir, traj.name, 1, ctx.measure_config, pool)
    assert finished(ctx, [traj]) == set()  # checkpoint 2 is still to train
    (row,) = plan(ctx)
    assert (row["checkpoints"], row["trained"], row["generations_todo"]) == (2, 1, 12)
    assert row["generations_done"] == 12
    _fake_checkpoints(traj.folder, [2])
    _record(ctx.records_dir, traj.name, 2, ctx.measure_config, pool)
    assert finished(ctx, [traj]) == {"a-s1"}
    assert plan(ctx)[0]["generations_todo"] == 0
    # the records deleted, the part cache kept: not finished (measure writes the rows again)
    _delete_records(ctx.records_dir)
    (left,) = what_is_left(ctx, [traj])
    assert left.trained and not left.finished
    assert [c.unrecorded for c in left.checkpoints] == [24, 24]
    assert finished(ctx, [traj]) == set()
    assert plan(ctx)[0]["generations_todo"] == 0  # nothing to generate: the parts hold it all
    for step in (1, 2):
        _record(ctx.records_dir, traj.name, step, ctx.measure_config, pool)
    assert finished(ctx, [traj]) == {"a-s1"}
    # an edited test item: a new context sees it, and that item is to measure again
    rows = gsm_rows(6)
    rows[2]["answer"] = "x\n#### 77"
    jsonl(study_dir / "test.jsonl", rows)
    ctx = StudyContext(spec, device="cpu", log=lambda m: None)
    (left,) = what_is_left(ctx, list(ctx.trajectories))
    assert [(c.generate, c.score) for c in left.checkpoints] == [(1, 1), (1, 1)]
    assert finished(ctx, list(ctx.trajectories)) == set()
    assert plan(ctx)[0]["generations_todo"] == 2


# --------------------------------------------------------------------------- tiny-model studies


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, shared_data: Path):
    """A tiny base model and a MetaMathQA-format pool made of real GSM8K train questions."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import sys as _sys

    _sys.path.insert(0, str(Path(__file__).parents[1]))
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import gsm8k_response

    from tinyrun import build_tiny_base

    root = tmp_path_factory.mktemp("tiny-study")
    rows = [json.loads(x) for x in (shared_data / "gsm8k" / "train.jsonl").open().readlines()[:240]]
    meta = [
        {"query": r["question"], "response": gsm8k_response(r["answer"]), "type": "GSM_Rephrased", "original_question": r["question"]}
        for r in rows
    ]
    pool = write(root / "metamath.json", json.dumps(meta))
    texts = [format_prompt(m["query"]) + " " + m["response"] for m in meta]
    for f in ("boolq/train.json", "piqa/test.json", "ARC-Easy/test.json"):
        recs = json.loads((shared_data / "commonsense" / f).read_text())[:60]
        texts += [format_prompt(r["instruction"]) + " " + r["output"] for r in recs]
    for line in (shared_data / "math500" / "test.jsonl").open().readlines()[:60]:
        r = json.loads(line)
        texts.append(format_prompt(r["problem"]) + " " + r["solution"])
    base = build_tiny_base(root / "base", texts)
    return {"base": base, "pool": pool, "root": root, "data": shared_data}


def sizes(tiny: dict, extra: list[str] = ()) -> list[str]:
    """The override that runs an example on the tiny model: base model and sizes only."""
    sets = [
        f'study.base_model="{tiny["base"]}"',
        "study.seeds=[1]",
        "measure.max_new_tokens=4",
        "measure.batch_size=16",
        'measure.device="cpu"',
        'measure.backend="hf"',
        "configurations.save_every=1",
        "configurations.batch_size=4",
        "configurations.micro_batch=4",
        "configurations.max_length=256",
        "analysis.draws=200",
        *extra,
    ]
    return [a for s in sets for a in ("--set", s)]


def cli(args: list[str]) -> None:
    from ckptsel.cli.app import main

    try:
        main(args)
    except SystemExit as exc:
        assert exc.code in (0, None), f"ckptsel {' '.join(args)} exited {exc.code}"


MATH_SIZES = ['pool.file="{pool}"', "validation.n=4", "test.n=4", "configurations.steps=2"]


def run_example(tiny: dict, name: str, extra: list[str], work: Path) -> Path:
    args = ["run", str(EXAMPLES / f"{name}.toml"), "--workdir", str(work), *sizes(tiny, extra)]
    cli(args)
    return work


@pytest.mark.usefixtures("one_thread")
def test_gsm8k_example_end_to_end_and_direct_analysis_agrees(tiny: dict, tmp_path: Path, capsys):
    """MetaMathQA validation, GSM8K test: the study's summary equals the same records
    analysed directly, and a re-run does nothing new and rewrites the same summary."""
    from ckptsel.records.scan import read_frame
    from ckptsel.workflows.analysis import analyze

    extra = [s.format(pool=tiny["pool"]) for s in MATH_SIZES]
    work = run_example(tiny, "gsm8k", extra, tmp_path / "g")
    summary = (work / "results" / "summary.json").read_bytes()
    gen = read_frame(work / "records", "generations")
    tasks = gen.groupby("split")["task"].unique().map(list).to_dict()
    assert tasks == {"test": ["gsm8k"], "validation": ["metamath"]}
    assert gen.groupby("trajectory").size().nunique() == 1
    assert len(gen) == 4 * 2 * 8  # 4 configurations x 2 checkpoints x (4 + 4) items
    assert not gen.duplicated(["trajectory", "step", "split", "item_id"]).any()
    assert (work / ".ckptsel" / "audit" / "audit.json").is_file()
    analyze(work / "records", tmp_path / "direct", draws=200)
    assert (tmp_path / "direct" / "summary.json").read_bytes() == summary
    capsys.readouterr()
    cli(["run", str(EXAMPLES / "gsm8k.toml"), "--workdir", str(work), "--dry-run", *sizes(tiny, extra)])
    plan = capsys.readouterr().out
    assert "0 generations to do, 64 already recorded" in plan
    cli(["run", str(EXAMPLES / "gsm8k.toml"), "--workdir", str(work), "--json", *sizes(tiny, extra)])
    said = capsys.readouterr()
    out = said.err  # with --json the log goes to stderr, stdout is one JSON object (issue 39)
    assert "2 measured" not in out and out.count("0 measured, 2 already recorded") == 4
    assert (work / "results" / "summary.json").read_bytes() == summary
    answer = json.loads(said.out)
    assert list(answer) == list(JSON_SCHEMAS["run"])
    assert answer["summary"] == json.loads(summary) and answer["results_dir"] == str(work / "results")
    assert answer["stages"] == ["prepare", "train", "measure", "analyze"] and answer["plan"] is None
    # a change that invalidates the records is refused, with the difference
    with pytest.raises(CkptselError, match=r"test: .*\"n\": 4.* -> .*\"n\": 5"):
        from ckptsel.workflows.study_run.job import StudyRun

        spec = load_spec(EXAMPLES / "gsm8k.toml", overrides=[*sizes_plain(tiny, extra), "test.n=5"], workdir=work)
        StudyRun(spec, log=lambda m: None).run(("prepare",))


def sizes_plain(tiny: dict, extra: list[str]) -> list[str]:
    return sizes(tiny, extra)[1::2]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_math_example_end_to_end(tiny: dict, tmp_path: Path) -> None:
    from ckptsel.records.scan import read_frame

    extra = [s.format(pool=tiny["pool"]) for s in MATH_SIZES]
    work = run_example(tiny, "math", extra, tmp_path / "m")
    gen = read_frame(work / "records", "generations")
    assert set(gen.loc[gen["split"] == "test", "task"]) == {"math"}
    assert json.loads((work / "results" / "summary.json").read_text())["population"]


@pytest.mark.slow
@pytest.mark.usefixtures("one_thread")
def test_commonsense_example_end_to_end(tiny: dict, tmp_path: Path) -> None:
    from ckptsel.records.scan import read_frame

    train = tiny["data"] / "commonsense" / "boolq" / "train.json"
    extra = [f'train.file="{train}"', "validation.per_task=2", "test.per_task=2", "configurations.epochs=0.0009"]
    work = run_example(tiny, "commonsense", extra, tmp_path / "c")
    strata = json.loads((work / ".ckptsel" / "pools" / "strata.json").read_text())
    assert set(strata["test"].values()) == {2} and len(strata["test"]) == 8
    gen = read_frame(work / "records", "generations")
    per = gen[gen["split"] == "test"].groupby("subtask")["item_id"].nunique()
    assert per.to_dict() == dict.fromkeys(strata["test"], 2)
    assert (work / "results" / "summary.json").is_file()


KILL_STUDY = """schema = 2
[study]
base_model = "{base}"
seeds = [1, 2]
[pool]
task = "metamath"
file = "{pool}"
[validation]
n = 4
[test]
task = "gsm8k"
file = "{test}"
n = 4
[measure]
max_new_tokens = 4
batch_size = 16
device = "cpu"
[analysis]
draws = 200
[[configurations]]
name = "r4"
rank = 4
steps = 3
save_every = 1
batch_size = 4
micro_batch = 4
max_length = 256
[[configurations]]
name = "r8"
rank = 8
steps = 3
save_every = 1
batch_size = 4
micro_batch = 4
max_length = 256
"""


def _run_until(study: Path, work: Path, marker: str | None, extra: tuple[str, ...] = (), lines=None) -> int:
    """``ckptsel run`` in a subprocess; SIGKILL once a line containing ``marker`` appears
    (``lines``: a list that gets the output lines)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "ckptsel", "run", str(study), "--workdir", str(work), *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if lines is not None:
            lines.append(line)
        if marker is not None and marker in line:
            time.sleep(0.3)
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return -9
    return proc.wait()


@pytest.fixture(scope="module")
def kill_ref(tiny: dict, tmp_path_factory) -> tuple[Path, Path]:
    """The 2 configurations x 2 seeds study file and its uninterrupted run (``--workers 1``)."""
    root = tmp_path_factory.mktemp("kill")
    test_file = tiny["data"] / "gsm8k" / "test.jsonl"
    study = write(root / "study.toml", KILL_STUDY.format(base=tiny["base"], pool=tiny["pool"], test=test_file))
    assert _run_until(study, root / "ref", None) == 0
    return study, root / "ref"


def _same_records(ref: Path, got: Path) -> None:
    from ckptsel.records.scan import read_frame

    key = ["trajectory", "step", "split", "item_id"]
    for kind, k in (("generations", key), ("nll", [*key, "window"])):
        a = read_frame(ref / "records", kind).sort_values(k).reset_index(drop=True)
        b = read_frame(got / "records", kind).sort_values(k).reset_index(drop=True)
        assert not b.duplicated(k).any()
        pd.testing.assert_frame_equal(a[k], b[k])


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_summary(kill_ref, tmp_path: Path) -> None:
    study, ref = kill_ref
    work = tmp_path / "killed"
    for marker in ("prepare: validation", "train: r4-s1", "measure: r4-s1", "measure: r8-s2"):
        assert _run_until(study, work, marker) == -9
    assert _run_until(study, work, None) == 0
    got = work
    assert (got / "results" / "summary.json").read_bytes() == (ref / "results" / "summary.json").read_bytes()
    _same_records(ref, got)


def test_workers_give_the_same_records_and_summary(kill_ref, tmp_path: Path) -> None:
    """``--workers 2`` trains + measures trajectories in two spawned processes: the same
    records and the same summary.json bytes as ``--workers 1``; a log gets one line per stage
    and trajectory; a re-run skips every trajectory without measuring anything."""
    from ckptsel.records.scan import read_frame

    study, ref = kill_ref
    lines: list[str] = []
    assert _run_until(study, tmp_path / "w2", None, ("--workers", "2"), lines) == 0
    out = "".join(lines)
    assert (tmp_path / "w2" / "results" / "summary.json").read_bytes() == (ref / "results" / "summary.json").read_bytes()
    _same_records(ref, tmp_path / "w2")
    for name in ("r4-s1", "r4-s2", "r8-s1", "r8-s2"):
        assert out.count(f"train: {name}: trained") == 1, out
        assert out.count(f"measure: {name}: 3 checkpoints, 3 measured, 0 already") == 1, out
    assert "\r" not in out and "it/s" not in out
    before = read_frame(tmp_path / "w2" / "records", "generations")
    lines.clear()
    assert _run_until(study, tmp_path / "w2", None, ("--workers", "2"), lines) == 0
    again = "".join(lines)
    assert "already done, skipped: r4-s1, r4-s2, r8-s1, r8-s2" in again
    assert "measured" not in again
    pd.testing.assert_frame_equal(read_frame(tmp_path / "w2" / "records", "generations"), before)
    with pytest.raises(CkptselError, match="--workers must be an integer >= 1"):
        from ckptsel.workflows.study_run.job import StudyRun

        StudyRun(load_spec(study), workers=0)


@pytest.mark.usefixtures("one_thread")
def test_existing_run_folders_by_pattern(tiny: dict, tmp_path: Path, capsys) -> None:
    """Trajectories trained elsewhere: a glob per configuration, seeds from folder names;
    ``--dry-run`` shows the plan, ``--until measure`` stops before the analysis."""
    from ckptsel.records.scan import read_frame

    from tinyrun import save_lora_checkpoints

    for folder, seed in (("a-s1", 1), ("a-s2", 2), ("b_seed1", 3), ("b_seed2", 4)):
        save_lora_checkpoints(tiny["base"], tmp_path / "ext" / folder, [5, 10], seed=seed)
    data = tiny["data"] / "gsm8k"
    study = write(
        tmp_path / "s.toml",
        f"""schema = 2
[study]
base_model = "{tiny["base"]}"
[validation]
task = "gsm8k"
file = "{data / "train.jsonl"}"
n = 3
[test]
task = "gsm8k"
file = "{data / "test.jsonl"}"
n = 3
[measure]
max_new_tokens = 4
device = "cpu"
[[configurations]]
name = "lora-a"
runs = "ext/a-s*"
[[configurations]]
name = "lora-b"
runs = "ext/b_seed*"
""",
    )
    capsys.readouterr()
    cli(["run", str(study), "--dry-run"])
    plan = capsys.readouterr().out
    for name in ("lora-a-s1", "lora-a-s2", "lora-b-s1", "lora-b-s2"):
        assert name in plan
    assert "4 trajectories x 8 checkpoints in all x 6 items: 48 generations to do" in plan
    cli(["run", str(study), "--dry-run", "--json"])  # the same plan, as JSON (issue 39)
    answer = json.loads(capsys.readouterr().out)
    assert list(answer) == list(JSON_SCHEMAS["run"]) and answer["dry_run"] is True
    assert sorted(r["trajectory"] for r in answer["plan"]) == ["lora-a-s1", "lora-a-s2", "lora-b-s1", "lora-b-s2"]
    assert sum(r["generations_todo"] for r in answer["plan"]) == 48 and answer["summary"] is None
    cli(["run", str(study), "--until", "measure"])
    gen = read_frame(tmp_path / "records", "generations")
    assert sorted(gen["trajectory"].unique()) == ["lora-a-s1", "lora-a-s2", "lora-b-s1", "lora-b-s2"]
    assert set(gen["configuration"]) == {"lora-a", "lora-b"} and len(gen) == 48
    assert not (tmp_path / "results").exists()
    with pytest.raises(CkptselError, match="matches no folder"):
        from ckptsel.workflows.study_run.job import StudyRun

        spec = load_spec(study, overrides=['configurations.runs="ext/zz*"'])
        StudyRun(spec, log=lambda m: None).trajectories()


def test_lm_eval_sample_folders_are_ingested(study_dir: Path, capsys) -> None:
    """Trajectories evaluated by lm-evaluation-harness: ``<folder>/<split>/checkpoint-<step>``."""
    sys.path.insert(0, str(Path(__file__).parents[1]))
    from ckptsel.records.scan import read_frame
    from lmevalcase import gsm8k_checkpoint

    for k, folder in enumerate(("a-s1", "a-s2", "b-s1", "b-s2")):
        for split in ("validation", "test"):
            for step in (100, 200):
                ok = [(step + k + i) % 3 != 0 for i in range(3)]
                gsm8k_checkpoint(
                    study_dir / "evals" / folder / split / f"checkpoint-{step}", [f"#### {x}" for x in ("18", "1234", "5")], ok
                )
    text = MINIMAL.split("[[configurations]]")[0].replace("[train]\n", "").replace('task = "gsm8k"\nfile = "train.jsonl"\n', "", 1)
    text += "".join(f'[[configurations]]\nname = "{c}"\nlm_eval = "evals/{c}-s*"\nfilter = "strict-match"\n' for c in ("a", "b"))
    study = write(study_dir / "s.toml", text)
    cli(["run", str(study), "--until", "measure"])
    gen = read_frame(study_dir / "records", "generations")
    assert len(gen) == 4 * 2 * 2 * 3 and set(gen["split"]) == {"validation", "test"}
    assert sorted(gen["trajectory"].unique()) == ["a-s1", "a-s2", "b-s1", "b-s2"]
    cli(["run", str(study), "--only", "measure"])  # again: the same rows, none duplicated
    again = read_frame(study_dir / "records", "generations")
    assert len(again) == len(gen)
    with pytest.raises(CkptselError, match="drop this key"):
        load_spec(study, overrides=["configurations.rank=4"])


def test_watch_measures_while_training_to_the_same_summary(kill_ref, tmp_path: Path) -> None:
    """``ckptsel run --watch``: training in the background, each checkpoint measured as it
    lands; the same records and summary.json bytes as the stage-by-stage run, and each
    trajectory's selection.json kept in the records folder."""
    study, ref = kill_ref
    lines: list[str] = []
    work = tmp_path / "watch"
    assert _run_until(study, work, None, ("--watch",), lines) == 0, "".join(lines)
    out = "".join(lines)
    assert (work / "results" / "summary.json").read_bytes() == (ref / "results" / "summary.json").read_bytes()
    _same_records(ref, work)
    for name in ("r4-s1", "r4-s2", "r8-s1", "r8-s2"):
        assert out.count(f"measure: {name}: watched, 3 checkpoints recorded") == 1, out
        sel = json.loads((work / "records" / "watch" / name / "selection.json").read_text())
        assert sel["watch"]["final"] and sel["trajectory"] == name
    assert _run_until(study, work, None, ("--watch", "--workers", "2"), lines) == 2


@pytest.mark.usefixtures("one_thread")
def test_a_study_frozen_before_training_is_said_and_verified(tiny: dict, tmp_path: Path, capsys):
    """protocol freeze → run: summary.json, the report and the terminal say "protocol frozen at …
    (hash …), before training", the results hold the protocol, and verify checks the chain."""
    for name, n in (("train", 10), ("val", 6), ("test", 6)):
        jsonl(tmp_path / f"{name}.jsonl", gsm_rows(n))
    text = MINIMAL.replace('"base"', json.dumps(str(tiny["base"]))) + (
        "batch_size = 4\nmicro_batch = 4\nmax_length = 256\n"  # (the configuration "a")
        '[[configurations]]\nname = "b"\nlr = 1e-3\nsteps = 2\nsave_every = 1\n'
        "batch_size = 4\nmicro_batch = 4\nmax_length = 256\n"
        '[measure]\nmax_new_tokens = 4\nbatch_size = 16\ndevice = "cpu"\nbackend = "hf"\n'
        "[analysis]\ndraws = 200\n"
    )
    study = write(tmp_path / "s.toml", text)
    cli(["protocol", "freeze", str(study)])
    record = json.loads((tmp_path / "s.toml.protocol.json").read_text())
    cli(["run", str(study)])
    out = capsys.readouterr().out
    status = f"protocol frozen at {record['frozen_at']} (hash {record['sha256'][:12]}), before training"
    assert f"s.toml: {status}" in out and f"results in {tmp_path / 'results'}; {status}" in out
    res = tmp_path / "results"
    assert json.loads((res / "summary.json").read_text())["protocol"]["status"] == status
    assert f"<b>Protocol:</b> {status}" in (res / "report.html").read_text()
    assert (res / "protocol.json").read_bytes() == (tmp_path / "s.toml.protocol.json").read_bytes()
    cli(["verify", str(res)])
    assert "unedited, SHA-256" in capsys.readouterr().out
