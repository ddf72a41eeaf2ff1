"""Hostile but fair inputs and situations (issue 9): one parametrized test per class of defect.

Classes: impossible or corrupted records; test-split NLL rows; results published whole (kills);
verify covers every output file; --out ownership; one-line errors instead of tracebacks;
smaller points (1-item pools, audit on 1-line pools, byte-identical reruns, measure names).
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import signal
import struct
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from ckptsel.cli.app import main
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.records.load import load_test, load_validation, uncached
from ckptsel.records.store import upsert_records
from ckptsel.results import publish
from ckptsel.workflows import analysis as pipeline

import recordsgen as rg

FAST = {"permutations": 10, "draws": 200}


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """Run ``ckptsel`` in-process; return its exit code and stderr."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    return code, capsys.readouterr().err


def assert_one_line_error(args: list[str], capsys, *needles: str, code: int = 2) -> str:
    got, err = run_cli(args, capsys)
    assert got == code, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:"), err
    assert "Traceback" not in err, err
    text = " ".join(ln.strip() for ln in lines)  # rich may wrap one long message
    for needle in needles:
        assert needle in text, text
    return text


def _make_study(folder: Path):
    rng = np.random.default_rng(9)
    gen, nll = rg.tables(rg.random_study(rng, n_configs=3, seeds=2, T=(3, 5), n_val=(30, 50), n_test=(20, 30)))
    nll = pd.concat([nll, _test_nll(gen, rng)], ignore_index=True)
    return folder, gen, nll, rg.write(folder / "records", gen, nll)


@pytest.fixture
def study(tmp_path):
    return _make_study(tmp_path)


@pytest.fixture(scope="module")
def analyzed(tmp_path_factory):
    """``analyzed(report)``: a copy, in the test's own folder, of one ``analyze`` of the study
    fixture's records (``--permutations 10 --draws 200``, with or without ``--no-report``),
    made once per module (it is the slow part of the verify cases). The records stay where
    the module's analysis read them (run.json names them; verify recomputes from them)."""
    import shutil

    base = tmp_path_factory.mktemp("analyzed")
    made: dict[bool, Path] = {}

    def copy(report: bool, to: Path) -> Path:
        if report not in made:
            rec = base / "records"
            if not rec.exists():
                _make_study(base)
            out = base / ("res-report" if report else "res-no-report")
            argv = ["analyze", rec, "--out", out, "--permutations", 10, "--draws", 200]
            try:
                main([str(a) for a in (argv if report else [*argv, "--no-report"])])
            except SystemExit as e:
                assert not e.code, f"analyze exited {e.code}"
            made[report] = out
        shutil.copytree(made[report], to, symlinks=True)
        return to

    return copy


def _test_nll(gen: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """Valid test-split NLL rows (both windows) for every test generation row."""
    test = gen[gen.split == "test"]
    tokens = test.item_id.str[1:].astype(int).to_numpy() % 17 + 3  # constant per item
    frames = [
        pd.DataFrame(
            {
                "trajectory": test.trajectory.to_numpy(),
                "step": test.step.to_numpy(),
                "split": "test",
                "item_id": test.item_id.to_numpy(),
                "nll_sum": rng.uniform(0.5, 30.0, len(test)),
                "n_tokens": tokens + extra,
                "window": window,
            }
        )
        for window, extra in ((512, 0), (0, 5))
    ]
    return pd.concat(frames, ignore_index=True)


def _first(df: pd.DataFrame, split: str) -> int:
    return int(df.index[df.split == split][0])


# ============================================================== 1. impossible / corrupted records
def _negative_nll(rec, gen, nll):
    nll.loc[_first(nll, "validation"), "nll_sum"] = -3.5
    rg.write(rec, gen, nll)
    return "never negative"


def _garbage_in_nll(rec, gen, nll):
    path = rec / "nll.parquet"
    data = bytearray(path.read_bytes())
    mid = len(data) // 2
    data[mid : mid + 2048] = random.Random(0).randbytes(2048)
    path.write_bytes(bytes(data))
    return "nll.parquet"


def _negative_step(rec, gen, nll):
    traj = gen.trajectory.iloc[-1]
    gen.loc[gen.trajectory == traj, "step"] -= 10_000
    nll.loc[nll.trajectory == traj, "step"] -= 10_000
    rg.write(rec, gen, nll)
    return f"trajectory {traj!r}"


def _final_steps_unknown(rec, gen, nll):
    (rec / "final_steps.json").write_text(json.dumps({"no-such-run": 10}))
    return "no-such-run"


@pytest.mark.parametrize("breaker", [_negative_nll, _garbage_in_nll, _negative_step, _final_steps_unknown], ids=lambda f: f.__name__)
def test_impossible_or_corrupted_records_are_rejected(study, breaker, capsys):
    tmp, gen, nll, rec = study
    needle = breaker(rec, gen.copy(), nll.copy())
    text = assert_one_line_error(["analyze", rec, "--out", tmp / "res", "--permutations", 10, "--draws", 200], capsys, needle)
    assert not (tmp / "res").exists()
    if breaker is _negative_step:
        assert "negative step" in text


# ============================================================== 2. test-split NLL rows
def _t_nan(gen, nll):
    nll.loc[_first(nll, "test"), "nll_sum"] = np.nan
    return "nll_sum"


def _t_inf(gen, nll):
    nll.loc[_first(nll, "test"), "nll_sum"] = np.inf
    return "NaN/inf"


def _t_negative_nll(gen, nll):
    nll.loc[_first(nll, "test"), "nll_sum"] = -1.0
    return "never negative"


def _t_negative_tokens(gen, nll):
    nll.loc[_first(nll, "test"), "n_tokens"] = -4
    return "negative n_tokens"


def _t_duplicate(gen, nll):
    return pd.concat([nll, nll.loc[[_first(nll, "test")]]], ignore_index=True), "duplicated"


def _t_varying_tokens(gen, nll):
    r = _first(nll, "test")
    row = nll.loc[r]
    same = (nll.split == "test") & (nll.trajectory == row.trajectory) & (nll.item_id == row.item_id) & (nll.window == row.window)
    other = nll.index[same & (nll.step != row.step)][0]
    nll.loc[other, "n_tokens"] = nll.loc[other, "n_tokens"] + 7
    return "n_tokens differ"


def _t_missing_item(gen, nll):
    return nll.drop(index=_first(nll, "test")), "test NLL record missing"


def _t_only_in_nll(gen, nll):
    extra = nll[(nll.split == "test") & (nll.trajectory == nll.trajectory.iloc[0])].copy()
    extra["trajectory"] = "ghost-run"
    return pd.concat([nll, extra], ignore_index=True), "ghost-run"


def _t_item_without_nll(gen, nll):
    """Every test NLL row of one item of one trajectory gone (the rest complete)."""
    r = nll.loc[_first(nll, "test")]
    gone = (nll.split == "test") & (nll.trajectory == r.trajectory) & (nll.item_id == r.item_id)
    return nll[~gone], "test NLL record missing"


def _t_checkpoint_without_nll(gen, nll):
    """Every test NLL row of one checkpoint of one trajectory gone (the rest complete)."""
    r = nll.loc[_first(nll, "test")]
    gone = (nll.split == "test") & (nll.trajectory == r.trajectory) & (nll.step == r.step)
    return nll[~gone], "disagree on its test checkpoints"


@pytest.mark.parametrize(
    "breaker",
    [
        _t_nan,
        _t_inf,
        _t_negative_nll,
        _t_negative_tokens,
        _t_duplicate,
        _t_varying_tokens,
        _t_missing_item,
        _t_only_in_nll,
        _t_item_without_nll,
        _t_checkpoint_without_nll,
    ],
    ids=lambda f: f.__name__,
)
@pytest.mark.parametrize("layout", ["single", "units", "units-no-packs"])
def test_test_split_nll_rows_are_validated(study, breaker, layout, capsys):
    """In single files, and in units as ``measure`` writes them: then each trajectory's pack
    carries what its test NLL rows prove (records.checks.prove_test_nll) and the first analysis
    reads the proofs, not the rows; without packs (units copied, or another producer's) each
    trajectory's rows are proven from its own units. The refusals are the same."""
    tmp, gen, nll, rec = study
    nll = nll.copy()
    got = breaker(gen, nll)
    nll, needle = got if isinstance(got, tuple) else (nll, got)
    if layout == "single":
        rg.write(rec, gen, nll)
    else:
        rec = tmp / "units-records"
        if breaker is _t_duplicate:  # the writer itself refuses these rows
            with pytest.raises(CkptselError, match="duplicate record key"):
                upsert_records(rec, generations=gen, nll=nll)
            return
        upsert_records(rec, generations=gen, nll=nll)
        if layout == "units-no-packs":
            packs = [p for p in rec.rglob(".packs") if p.is_dir()]
            assert packs
            for p in packs:
                shutil.rmtree(p)
    load_validation(rec)  # validation rows are fine: the test rows are what is wrong
    first = assert_one_line_error(["analyze", rec, "--out", tmp / "res", "--permutations", 10, "--draws", 200], capsys, needle)
    assert not (tmp / "res").exists()
    if layout != "single":  # the same line as when the rows themselves are read
        with uncached(), pytest.raises(CkptselError) as err:
            load_validation(rec)
            load_test(rec)
        assert " ".join(str(err.value).split()) in " ".join(first.split())


def _rewrite_unit(path: Path, table: pa.Table) -> None:
    """``table`` written over the unit at ``path`` as another producer would: a row group per split."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    with pq.ParquetWriter(path, table.schema) as writer:
        for split in ("test", "validation"):
            writer.write_table(table.filter(pc.equal(table.column("split"), split)))


@pytest.mark.parametrize("case", ["names-another-trajectory", "holds-another-steps-rows"])
def test_units_without_packs_refuse_test_nll_rows_that_belong_elsewhere(study, case, capsys):
    """Without packs each trajectory's test NLL is proven from its own units' rows: a unit whose
    test rows name another trajectory, or repeat another unit's test rows, is refused as the
    whole-table check refuses it (the key duplicated), never proven."""
    import pyarrow.parquet as pq

    from ckptsel.records.units import list_units

    tmp, gen, nll, _ = study
    rec = tmp / "units-records"
    upsert_records(rec, generations=gen, nll=nll)
    shutil.rmtree(rec / "units" / ".packs")
    found = list_units(rec, "nll")
    a = found[0]
    rows = pq.read_table(a.path.local)
    test = pa.compute.equal(rows.column("split"), "test").to_numpy(zero_copy_only=False)
    assert test.any()
    if case == "names-another-trajectory":
        b = next(u for u in found if u.trajectory != a.trajectory)
        names = pa.array(np.where(test, b.trajectory, a.trajectory))
        rows = rows.set_column(rows.column_names.index("trajectory"), "trajectory", names)
    else:
        other = next(u for u in found if u.trajectory == a.trajectory and u.step != a.step)
        theirs = pq.read_table(other.path.local)
        rows = pa.concat_tables([rows, theirs.filter(pa.compute.equal(theirs.column("split"), "test"))])
    _rewrite_unit(a.path.local, rows)
    load_validation(rec)  # the validation rows are fine
    assert_one_line_error(["analyze", rec, "--out", tmp / "res", "--permutations", 10, "--draws", 200], capsys, "duplicated record")
    assert not (tmp / "res").exists()


# ============================================================== 3. published whole; verify covers every file
def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _analyze_argv(rec: Path, out: Path, seed: int) -> list[str]:
    return ["analyze", str(rec), "--out", str(out), "--permutations", "10", "--draws", "200", "--seed", str(seed)]


def _child(argv: list[str]) -> None:  # the CLI's analyze, in a forked process
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    main(argv)


def _run(argv: list[str]):
    """Start ``ckptsel analyze`` as a forked child (imports already done: each run is short)."""
    import multiprocessing

    proc = multiprocessing.get_context("fork").Process(target=_child, args=(argv,))
    proc.start()
    return proc


def _run_to_end(argv: list[str]) -> float:
    start = time.perf_counter()
    proc = _run(argv)
    proc.join()
    assert proc.exitcode == 0
    return time.perf_counter() - start


def _kill_many(study, kills: int, budget_s: float) -> None:
    """SIGKILL ``analyze`` (report included) at random moments; after each kill ``--out`` must
    be wholly the old or wholly the new folder, and its manifest must then check out."""
    import ckptsel.report.figures  # noqa: F401 - imported once, before the children fork
    import ckptsel.report.html  # noqa: F401

    tmp, _, _, rec = study
    out = tmp / "res"
    # the two folders a killed run may leave: wholly old (seed 1) or wholly new (seed 2)
    _run_to_end(_analyze_argv(rec, out, 1))
    duration = max(_run_to_end(_analyze_argv(rec, tmp / "ref2", 2)), 0.5)
    snaps = {1: _snapshot(out), 2: _snapshot(tmp / "ref2")}
    rng = random.Random(0)
    current, swaps, t0 = 1, 0, time.perf_counter()
    for k in range(kills):
        if time.perf_counter() - t0 > budget_s:
            break
        target = 3 - current
        proc = _run(_analyze_argv(rec, out, target))
        # anywhere in the run (most of it is the report), or around the swap at its end
        time.sleep(duration * (rng.uniform(0.02, 1.0) if k % 2 else rng.uniform(0.85, 1.4)))
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        now = _snapshot(out)
        assert now in (snaps[current], snaps[target]), f"kill {k}: a mixed results folder"
        publish.check_manifest(out)  # every file matches its SHA-256 exactly then
        if now == snaps[target]:
            current, swaps = target, swaps + 1
        stray = [p.name for p in tmp.iterdir() if p.name.startswith(".res.")]
        assert len(stray) <= 1, stray  # at most the killed run's own staging folder
    # the next run removes what killed runs left behind, and verify passes
    _run_to_end(_analyze_argv(rec, out, 1))
    assert not [p.name for p in tmp.iterdir() if p.name.startswith(".res.")]
    assert _snapshot(out) == snaps[1]
    assert pipeline.verify(out)[3].startswith("manifest:")  # after the protocol, choices, results lines
    print(f"kills: {k + 1}, new folder after {swaps} of them, run: {duration:.1f} s")
    assert k >= 5


def test_kill_analyze_at_random_points_leaves_old_or_new_folder(study):
    _kill_many(study, kills=30, budget_s=18)


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("CKPTSEL_SLOW"), reason="long kill run: set CKPTSEL_SLOW=1")
def test_kill_analyze_many_times(study):
    _kill_many(study, kills=100, budget_s=400)


def test_interrupted_fallback_swap_is_repaired(study, monkeypatch):
    """Where the file system lacks RENAME_EXCHANGE: a kill between the two renames leaves no
    folder at --out for a moment; the next run puts the old folder back before anything else."""
    tmp, _, _, rec = study
    out = tmp / "res"
    pipeline.analyze(rec, out, **FAST)
    before = _snapshot(out)
    old = tmp / f".res.old-{2**22 + 12345}-dead"  # a pid that cannot exist
    os.rename(out, old)  # the first rename of a killed swap
    publish.clean_stray(out)
    assert _snapshot(out) == before and not old.exists()
    monkeypatch.setattr(publish, "_exchange", lambda a, b: False)
    pipeline.analyze(rec, out, **FAST, seed=5)
    assert json.loads((out / "summary.json").read_text())["seed"] == 5
    assert not [p for p in tmp.iterdir() if p.name.startswith(".res.")]


def _edit_text(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8").replace("accuracy", "accuracY", 1), encoding="utf-8")


def _edit_parquet(path: Path) -> None:
    df = pd.read_parquet(path)
    col = next(c for c in df.columns if df[c].dtype.kind == "f")
    df.loc[0, col] = df.loc[0, col] + 1.0
    df.to_parquet(path, index=False)


def _edit_bytes(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "rel, edit",
    [
        ("tables/main.md", _edit_text),
        ("tables/per_trajectory.parquet", _edit_parquet),
        ("tables/per_trajectory.csv", _edit_text),
        ("report.html", _edit_text),
        ("figures/budget_curves_G.svg", _edit_bytes),
        ("figures/budget_curves_G.png", _edit_bytes),
        ("manifest-entry", None),
    ],
)
def test_verify_checks_every_output_file(analyzed, tmp_path, rel, edit, capsys):
    out = analyzed(True, tmp_path / "res")  # `analyze REC --out res --permutations 10 --draws 200`
    assert run_cli(["verify", out], capsys)[0] == 0
    if edit is None:  # an edited file whose manifest entry was "fixed" too: recomputation finds it
        rel = "tables/main.md"
        _edit_text(out / rel)
        manifest = json.loads((out / "manifest.json").read_text())
        manifest["files"][rel] = publish.sha256_file(out / rel)
        (out / "manifest.json").write_text(json.dumps(manifest))
    else:
        edit(out / rel)
    text = assert_one_line_error(["verify", out], capsys, rel, code=1)
    assert "differ" in text


def test_rerun_gives_a_byte_identical_results_folder(study, capsys):
    tmp, _, _, rec = study
    snaps = []
    for name in ("a", "b", "a"):  # a fresh folder, another one, then over the first
        code, err = run_cli(["analyze", rec, "--out", tmp / name, "--permutations", 10, "--draws", 200], capsys)
        assert code == 0, err
        snaps.append(_snapshot(tmp / name))
    first, b, a = snaps
    assert any(k.endswith(".svg") for k in a) and "report.html" in a and "manifest.json" in a
    assert a == first
    # run.json names the records folder (same here); every other byte is the same as well
    assert a == b


# ============================================================== 4. --out ownership
def _user_folder(tmp: Path) -> Path:
    folder = tmp / "mine"
    (folder / "notes").mkdir(parents=True)
    (folder / "notes" / "todo.txt").write_text("my notes\n")
    (folder / "data.csv").write_text("a,b\n1,2\n")
    return folder


@pytest.mark.parametrize("case", ["refused", "summary_file", "tables_file", "force_keeps", "force_collision"])
def test_out_never_overwrites_files_it_did_not_write(study, case, capsys):
    tmp, _, _, rec = study
    out = _user_folder(tmp)
    args = ["analyze", rec, "--out", out, "--permutations", 10, "--draws", 200, "--no-report"]
    if case == "summary_file":
        (out / "summary.json").write_text('{"mine": true}\n')
    if case == "tables_file":
        (out / "tables").write_text("not a folder\n")
    if case == "force_collision":
        (out / "tables").mkdir()
        (out / "tables" / "main.md").write_text("my own table\n")
    before = _snapshot(out)
    inodes = {rel: os.stat(out / rel).st_ino for rel in before}
    if case == "force_keeps":
        code, err = run_cli([*args, "--force"], capsys)
        assert code == 0, err
        after = _snapshot(out)
        assert {k: after[k] for k in before} == before  # kept, byte for byte
        assert {rel: os.stat(out / rel).st_ino for rel in before} == inodes  # the very same files
        assert "summary.json" in after and "manifest.json" in after
        assert "data.csv" not in json.loads(after["manifest.json"])["files"]
        assert pipeline.verify(out)[3].startswith("manifest:")  # after the protocol, choices, results lines
        code, err = run_cli(args, capsys)  # now a results folder: a rerun needs no --force
        assert code == 0, err and _snapshot(out)["data.csv"] == before["data.csv"]
        return
    extra = ["--force"] if case in ("summary_file", "tables_file", "force_collision") else []
    needle = {
        "refused": "not a ckptsel results folder",
        "summary_file": "summary.json",
        "tables_file": "tables",
        "force_collision": "main.md",
    }[case]
    assert_one_line_error([*args, *extra], capsys, needle)
    assert _snapshot(out) == before
    assert not [p for p in tmp.iterdir() if ".staging-" in p.name]


# ============================================================== 5. one-line errors, checked up front
def _safetensors(path: Path, truncate: bool) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
    data = struct.pack("<Q", len(header)) + header + bytes(64)
    path.write_bytes(data[:-20] if truncate else data)


def _case(name: str, tmp: Path, rec: Path, capsys, analyzed):  # noqa: C901 - one arm per case
    """Prepare one bad situation; return (argv, needle, exit code)."""
    analyze = ["analyze", rec, "--out", tmp / "res", "--permutations", 10, "--draws", 200, "--no-report"]
    if name == "confidence":
        return [*analyze, "--confidence", "1.5"], "--confidence", 2
    if name == "seed_negative":
        return [*analyze, "--seed", "-1"], "--seed", 2
    if name == "seed_huge":
        return [*analyze, "--seed", str(2**70)], "--seed", 2
    if name == "out_under_a_file":
        (tmp / "afile").write_text("x")
        return (["analyze", rec, "--out", tmp / "afile" / "res", "--permutations", 10, "--draws", 200], "afile", 2)
    if name == "out_unwritable":
        return (["analyze", rec, "--out", "/proc/ckptsel-results", "--permutations", 10, "--draws", 200], "/proc/ckptsel-results", 2)
    if name == "select_huge_draws":
        return ["select", rec, "--trajectory", "c0-s0", "--draws", str(10**9)], "--draws", 2
    if name == "split_out_is_a_file":
        data = tmp / "data.jsonl"
        data.write_text("".join(json.dumps({"question": f"q{k}", "answer": "1"}) + "\n" for k in range(20)))
        (tmp / "taken").write_text("mine\n")
        return ["split", data, "--out", tmp / "taken"], "taken", 2
    if name in ("samples_binary", "samples_corrupt_gz"):
        sub = tmp / "evals" / "checkpoint-100" / "__work__base"
        sub.mkdir(parents=True)
        stamp = "2025-03-04T05-06-07.123456"
        if name == "samples_binary":
            path = sub / f"samples_gsm8k_{stamp}.jsonl"
            path.write_bytes(bytes(range(256)) * 8)
        else:
            path = sub / f"samples_gsm8k_{stamp}.jsonl.gz"
            path.write_bytes(gzip.compress(b'{"doc_id": 0}\n' * 50)[:-30] + b"\x00" * 7)
        return (
            [
                "ingest",
                "lm-eval",
                tmp / "evals" / "checkpoint-100",
                "--out",
                tmp / "rec2",
                "--task",
                "gsm8k",
                "--trajectory",
                "t",
                "--configuration",
                "c",
            ],
            path.name,
            2,
        )
    if name == "out_name_too_long":  # the system refuses the name: one line naming it
        return [*analyze[:2], "--out", tmp / ("a" * 300), *analyze[4:]], "File name too long", 2
    if name == "simulate_url":  # Path() would have made it a local s3:/ folder
        return ["simulate", "s3://bucket/sim"], "not a URL", 2
    if name == "step_beyond_int64":
        run = tmp / "run"
        (run / "checkpoint-99999999999999999999").mkdir(parents=True)
        (tmp / "items.jsonl").write_text(json.dumps({"question": "q", "answer": "#### 1"}) + "\n")
        items = ["--validation", tmp / "items.jsonl", "--test", tmp / "items.jsonl"]
        return ["measure", run, "--out", tmp / "m", "--task", "gsm8k", *items], "beyond", 2
    if name in ("train_device_tpu", "run_device_tpu"):
        return [name.split("_")[0], tmp / "study.toml", "--device", "tpu"], "--device 'tpu'", 2
    if name in ("train_device_cuda", "run_device_cuda"):
        import torch

        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA")
        return [name.split("_")[0], tmp / "study.toml", "--device", "cuda"], "no CUDA device", 2
    if name.startswith("verify_"):  # the module's `analyze` (as `analyze` above), copied
        res = analyzed(False, tmp / "res")
        target, content = {
            "verify_summary_not_json": ("summary.json", b"{not json"),
            "verify_summary_a_list": ("summary.json", b"[1, 2]\n"),
            "verify_summary_binary": ("summary.json", bytes(range(256))),
            "verify_run_not_json": ("run.json", b"\x00\x01"),
            "verify_run_no_records": ("run.json", b"{}\n"),
            "verify_hash_not_json": ("choices/choices.sha256", b"garbage"),
            "verify_hash_no_settings": ("choices/choices.sha256", b'{"sha256": "00"}\n'),
            "verify_choices_garbage": ("choices/choices.parquet", b"PAR1 not really PAR1"),
            "verify_manifest_garbage": ("manifest.json", b"[]"),
        }[name]
        (res / target).write_bytes(content)
        return ["verify", res], target.split("/")[-1], None
    raise AssertionError(name)


@pytest.mark.parametrize(
    "name",
    [
        "confidence",
        "seed_negative",
        "seed_huge",
        "out_under_a_file",
        "out_unwritable",
        "select_huge_draws",
        "split_out_is_a_file",
        "samples_binary",
        "samples_corrupt_gz",
        "verify_summary_not_json",
        "verify_summary_a_list",
        "verify_summary_binary",
        "verify_run_not_json",
        "verify_run_no_records",
        "verify_hash_not_json",
        "verify_hash_no_settings",
        "verify_choices_garbage",
        "verify_manifest_garbage",
        "out_name_too_long",
        "simulate_url",
        "step_beyond_int64",
        "train_device_tpu",
        "run_device_tpu",
        "train_device_cuda",
        "run_device_cuda",
    ],
)
def test_bad_settings_and_files_give_one_line_errors(study, name, capsys, analyzed):
    tmp, _, _, rec = study
    argv, needle, code = _case(name, tmp, rec, capsys, analyzed)
    got, err = run_cli(argv, capsys)
    assert got in ((1, 2) if code is None else (code,)), err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and lines[0].startswith("error:") and "Traceback" not in err, err
    assert needle in " ".join(ln.strip() for ln in lines), err
    if name.startswith(("confidence", "seed")):
        assert not (tmp / "res").exists()  # checked before any work


def test_weights_are_checked_before_anything_is_measured(tmp_path):
    from ckptsel.train.checkpoints import discover_checkpoints

    run = tmp_path / "run"
    for step in (10, 20, 30):
        ck = run / f"checkpoint-{step}"
        ck.mkdir(parents=True)
        (ck / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/base"}))
        _safetensors(ck / "adapter_model.safetensors", truncate=step == 30)
    with pytest.raises(CkptselError, match=r"checkpoint-30/adapter_model.safetensors: truncated"):
        discover_checkpoints(run)
    _safetensors(run / "checkpoint-30" / "adapter_model.safetensors", truncate=False)
    assert [c.step for c in discover_checkpoints(run)] == [10, 20, 30]


# ============================================================== 6. smaller points
def _one_test_item(tmp, gen, nll, rec):
    keep = gen.item_id.isin(sorted(gen[gen.split == "test"].item_id.unique())[:1]) | (gen.split == "validation")
    rg.write(rec, gen[keep], nll[nll.item_id.isin(gen[keep].item_id.unique())])
    with _no_warnings():  # no NumPy RuntimeWarning, and no silent empty matched_half
        with pytest.raises(CkptselError, match="only 1 test item"):
            pipeline.analyze(rec, tmp / "res", **FAST)


class _no_warnings:
    def __enter__(self):
        import warnings

        self._cm = warnings.catch_warnings()
        self._cm.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        return self._cm.__exit__(*exc)


def _audit_one_line_pools(tmp, gen, nll, rec):
    from ckptsel.data.audit.run import audit_pools

    q = "how many apples are left over now in the basket"
    result = audit_pools({"train": [q], "validation": [q.replace("apples", "pears")], "test": [q + " today"]})
    assert result.control_ok and all(p.ok for p in result.planted)
    assert {"exact", "case_punct"} <= {p.kind for p in result.planted}


def _measure_name_taken(tmp, gen, nll, rec):
    from types import SimpleNamespace

    from ckptsel.measure.run import _check_trajectory_identity

    table = pa.Table.from_pandas(gen[["trajectory", "configuration", "task", "split"]])
    traj, conf, task = gen.iloc[0][["trajectory", "configuration", "task"]]
    config = SimpleNamespace(task_for=lambda split: task)  # simulated tasks are not registered
    _check_trajectory_identity(table, rec, traj, conf, config)  # same identity: fine
    with pytest.raises(CkptselError, match=f"trajectory {traj!r} is already recorded with configuration"):
        _check_trajectory_identity(table, rec, traj, "another-config", config)
    with pytest.raises(CkptselError, match=f"trajectory {traj!r} is already recorded with task"):
        _check_trajectory_identity(table, rec, traj, conf, SimpleNamespace(task_for=lambda s: task + "-other" * (s == "test")))


def _negative_steps_named_right(tmp, gen, nll, rec):
    traj = sorted(gen.trajectory.unique())[1]
    gen, nll = gen.copy(), nll.copy()
    test_rows = (nll.trajectory == traj) & (nll.split == "test")
    nll.loc[test_rows, "step"] = -nll.loc[test_rows, "step"] - 1_000  # negative steps (not an average's) in one trajectory's test rows
    rg.write(rec, gen, nll)
    with pytest.raises(CkptselError, match=f"trajectory {traj!r}, step -\\d+: negative step") as err:
        pipeline.analyze(rec, tmp / "res", **FAST)
    step = int(str(err.value).split("step ")[1].split(":")[0])
    assert step in set(nll.loc[test_rows, "step"])  # a step that exists, of the right trajectory


@pytest.mark.parametrize(
    "check", [_one_test_item, _audit_one_line_pools, _measure_name_taken, _negative_steps_named_right], ids=lambda f: f.__name__
)
def test_smaller_points(study, check):
    tmp, gen, nll, rec = study
    check(tmp, gen, nll, rec)


def test_verify_names_a_missing_manifest(study):
    tmp, _, _, rec = study
    out = tmp / "res"
    pipeline.analyze(rec, out, **FAST)
    (out / "manifest.json").unlink()
    with pytest.raises(VerificationError, match="manifest.json: not found"):
        pipeline.verify(out)


# ============================================================== 6. storage and trackers: one line (issue 30)
def _storage_env(monkeypatch, tmp: Path, case: str) -> None:
    """The environment of one storage failure; s3fs's cached filesystems forgotten."""
    s3fs = pytest.importorskip("s3fs")
    for key in list(os.environ):
        if key.startswith("AWS_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp / "no-aws-credentials"))
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # no retries: an unreachable endpoint fails at once
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")  # nothing listens on port 1
    if case != "no_credentials":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    if case == "unknown_profile":
        monkeypatch.setenv("AWS_PROFILE", "nope")
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.mark.parametrize(
    ("case", "needle"),
    [
        ("no_credentials", "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE"),
        ("unknown_profile", "AWS_PROFILE='nope' is not a profile"),
        ("endpoint_unreachable", "cannot reach the storage endpoint http://127.0.0.1:1"),
    ],
)
@pytest.mark.parametrize("command", ["analyze", "verify", "analyze_out"])
def test_storage_failures_are_one_line_naming_the_url(study, monkeypatch, capsys, case, needle, command):
    tmp, _, _, rec = study
    _storage_env(monkeypatch, tmp, case)
    argv = {
        "analyze": ["analyze", "s3://bucket/records", "--out", tmp / "res", "--no-report"],
        "verify": ["verify", "s3://bucket/results"],
        "analyze_out": ["analyze", rec, "--out", "s3://bucket/results", "--no-report"],
    }[command]
    assert_one_line_error(argv, capsys, needle, "s3://bucket/")
    assert not (tmp / "res").exists()


def test_a_missing_bucket_is_one_line_naming_it(study, s3, capsys):
    tmp, _, _, rec = study
    nobucket = f"{s3.bucket}-missing"
    argv = ["analyze", f"s3://{nobucket}/records", "--out", tmp / "res", "--no-report"]
    assert_one_line_error(argv, capsys, f"the bucket {nobucket!r} does not exist")
    argv = ["analyze", rec, "--out", f"s3://{nobucket}/results", "--no-report", *_fast_args()]
    assert_one_line_error(argv, capsys, f"the bucket {nobucket!r} does not exist")


def _fast_args() -> list[str]:
    return ["--permutations", "10", "--draws", "200"]


def test_a_tracking_store_mlflow_refuses_is_one_line(study, monkeypatch, capsys):
    """MLflow 3 refuses a file:// tracking store as its client is made; the results are
    already written by then, and the refusal is one line naming the store."""
    pytest.importorskip("mlflow")
    tmp, _, _, rec = study
    uri = (tmp / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    argv = ["analyze", rec, "--out", tmp / "res", "--no-report", *_fast_args(), "--log", "mlflow"]
    got, err = run_cli(argv, capsys)
    if got == 0:
        pytest.skip("this MLflow still accepts a file:// store")
    assert got == 2 and "Traceback" not in err, err
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines[0].startswith(f"error: MLflow ({uri})"), err
    assert (tmp / "res" / "summary.json").is_file()
