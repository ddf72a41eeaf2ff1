"""Records as write-once per-checkpoint units (issue 13): the same analysis inputs from units,
single files or both; concurrent producers; kills mid-write; the read cache; compact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ckptsel import records
from ckptsel.errors import CkptselError
from ckptsel.records.load import load_validation
from ckptsel.records.scan import read_frame, read_rows
from ckptsel.records.store import compact, upsert_records
from ckptsel.records.units import UNITS_DIR, list_units, unit_path

import recordsgen as rg
from clirun import run_cli  # noqa: E402
from recordsgen import same_loads  # noqa: E402

SRC = str(Path(records.__file__).parents[2])


@pytest.fixture(scope="module")
def study():
    trajs = rg.random_study(np.random.default_rng(7), n_configs=3, seeds=2)
    return rg.tables(trajs)


def _units(folder: Path, gen: pd.DataFrame, nll: pd.DataFrame) -> Path:
    upsert_records(folder, generations=gen, nll=nll)
    return folder


def test_units_single_file_and_mixed_load_the_same(study, tmp_path):
    gen, nll = study
    single = rg.write(tmp_path / "single", gen, nll)
    units = _units(tmp_path / "units", gen, nll)
    assert not (units / "generations.parquet").exists()
    n_units = gen.groupby(["trajectory", "step"]).ngroups
    assert len(list_units(units, "generations")) == n_units
    assert len(list_units(units, "nll")) == n_units
    same_loads(single, units)
    # mixed: half the trajectories as single files, the rest as units
    trajs = sorted(gen["trajectory"].unique())
    half = gen["trajectory"].isin(trajs[::2])
    nhalf = nll["trajectory"].isin(trajs[::2])
    mixed = rg.write(tmp_path / "mixed", gen[half], nll[nhalf])
    _units(mixed, gen[~half], nll[~nhalf])
    same_loads(single, mixed)
    # every row once, in the single file's order
    pd.testing.assert_frame_equal(read_frame(mixed, "generations"), read_frame(single, "generations"))
    pd.testing.assert_frame_equal(read_frame(units, "nll"), read_frame(single, "nll"))


def test_analyze_summary_identical_on_units(study, tmp_path):
    from ckptsel.workflows import analysis as pipeline

    gen, nll = study
    single = rg.write(tmp_path / "single", gen, nll)
    units = _units(tmp_path / "units", gen, nll)
    pipeline.analyze(single, tmp_path / "res-single")
    pipeline.analyze(units, tmp_path / "res-units")
    a = json.loads((tmp_path / "res-single" / "summary.json").read_text())
    b = json.loads((tmp_path / "res-units" / "summary.json").read_text())
    assert a == b


def test_summary_bytes_do_not_depend_on_how_the_records_are_stored(tmp_path):
    """The same records as one file whose rows are in no particular order (a valid single file
    another tool wrote) and as write-once units load their trajectories in different orders;
    summary.json is byte-identical all the same (the keep table's rows sorted by trajectory)."""
    from ckptsel.workflows import analysis as pipeline

    trajs = rg.random_study(np.random.default_rng(7), n_configs=3, seeds=2)
    for t, name in zip(trajs, ["b-run", "A_run", "a.run", "Z+run", "a,run", "a-run"], strict=True):
        t.name = name
    gen, nll = rg.tables(trajs)
    for name in ("b-run", "A_run"):  # a validation item missing at one checkpoint: excluded, counted
        row = gen[(gen.trajectory == name) & (gen.split == "validation")].index[0]
        gen = gen.drop(index=row)
    single = tmp_path / "single"
    single.mkdir()
    gen.sample(frac=1.0, random_state=0).to_parquet(single / "generations.parquet", index=False)
    nll.sample(frac=1.0, random_state=0).to_parquet(single / "nll.parquet", index=False)
    units = _units(tmp_path / "units", gen, nll)
    orders = [[v.trajectory for v in load_validation(d)] for d in (single, units)]
    assert orders[0] != orders[1]  # the storage orders differ
    out = {}
    for name, folder in (("single", single), ("units", units)):
        summary = pipeline.analyze(folder, tmp_path / f"res-{name}", permutations=10, draws=200)
        out[name] = (tmp_path / f"res-{name}" / "summary.json").read_bytes()
        kept = [row.trajectory for row in summary.keep.trajectories]
        assert kept == sorted(kept) == sorted(orders[0])
        assert list(summary.to_dict()["population"]["validation_exclusions"]["by_trajectory"]) == ["A_run", "b-run"]
    assert out["single"] == out["units"]


def test_rewrite_replaces_exactly_its_unit_and_cache_follows(study, tmp_path):
    gen, nll = study
    folder = _units(tmp_path / "r", gen, nll)
    load_validation(folder)  # builds the read cache
    traj, step = gen["trajectory"].iloc[0], int(gen["step"].iloc[0])
    others = {u.path: u.path.read_bytes() for u in list_units(folder, "generations") if (u.trajectory, u.step) != (traj, step)}
    rows = gen[(gen["trajectory"] == traj) & (gen["step"] == step)].copy()
    flip = rows[rows["split"] == "validation"].index[:3]
    rows.loc[flip, "correct"] = ~rows.loc[flip, "correct"]
    # only some rows of the unit: the others of that unit are kept (upsert within the unit)
    records.write_unit(folder, traj, step, generations=rows.loc[flip])
    assert {p: p.read_bytes() for p in others} == others
    expected = gen.copy()
    expected.loc[flip, "correct"] = ~expected.loc[flip, "correct"]
    same_loads(rg.write(tmp_path / "expected", expected, nll), folder)


def test_a_unit_supersedes_the_single_files_rows_of_its_checkpoint(study, tmp_path):
    gen, nll = study
    folder = rg.write(tmp_path / "legacy", gen, nll)
    before = (folder / "generations.parquet").read_bytes()
    traj, step = gen["trajectory"].iloc[-1], int(gen["step"].iloc[-1])
    sel = (gen["trajectory"] == traj) & (gen["step"] == step) & (gen["split"] == "test")
    changed = gen[sel].head(2).assign(answer="zzz", correct=False)
    records.write_unit(folder, traj, step, generations=changed)
    assert (folder / "generations.parquet").read_bytes() == before  # never rewritten
    unit = pd.read_parquet(unit_path(folder, "generations", traj, step))
    assert len(unit) == int(((gen["trajectory"] == traj) & (gen["step"] == step)).sum())
    expected = gen.copy()
    expected.loc[changed.index, ["answer", "correct"]] = ["zzz", False]
    same_loads(rg.write(tmp_path / "expected", expected, nll), folder)


def test_duplicate_keys_and_bad_units_are_clear_errors(study, tmp_path, capsys):
    gen, nll = study
    folder = _units(tmp_path / "d", gen, nll)
    traj, step = gen["trajectory"].iloc[0], int(gen["step"].iloc[0])
    path = unit_path(folder, "generations", traj, step)
    rows = pd.read_parquet(path)
    # a hand-made unit holding another checkpoint's rows duplicates that checkpoint's keys
    other = unit_path(folder, "generations", traj, step + 100000)
    rows.to_parquet(other, index=False)
    with pytest.raises(CkptselError, match="duplicated record"):
        load_validation(folder)
    other.unlink()
    rows.drop(columns="answer").to_parquet(other, index=False)
    with pytest.raises(CkptselError, match=rf"{other.name}.*missing column\(s\) answer"):
        load_validation(folder)
    other.write_bytes(b"not parquet")
    with pytest.raises(CkptselError, match=other.name):
        load_validation(folder)
    other.unlink()
    rows.assign(split="train").to_parquet(other, index=False)
    with pytest.raises(CkptselError, match="unknown split name"):
        load_validation(folder)
    other.unlink()
    # a negative step no average has: refused naming the file, not skipped (its rows would vanish)
    bad = unit_path(folder, "generations", traj, -7000)
    rows.assign(step=-7000).to_parquet(bad, index=False)
    with pytest.raises(CkptselError, match=r"step--7000\.parquet: step -7000 is negative and not an average's"):
        load_validation(folder)
    assert run_cli(["analyze", folder, "--out", tmp_path / "res"], capsys)[0] == 2
    bad.unlink()
    with pytest.raises(CkptselError, match="given to write_unit"):
        records.write_unit(folder, traj, step + 1, generations=rows)
    with pytest.raises(CkptselError, match="trajectory name"):
        records.write_unit(folder, "../x", step, generations=rows)
    load_validation(folder)


def test_texts_live_apart_and_compact_writes_single_files(study, tmp_path):
    gen, nll = study
    folder = tmp_path / "t"
    with_text = gen.assign(text=("answer " + gen["item_id"]).astype("string"))
    _units(folder, with_text, nll)
    unit = next(iter(list_units(folder, "generations")))
    assert "text" not in pd.read_parquet(unit.path).columns
    assert len(list_units(folder, "texts")) == len(list_units(folder, "generations"))
    full = read_frame(folder, "generations")
    assert (full["text"] == "answer " + full["item_id"]).all()
    nll_before = read_frame(folder, "nll")
    compact(folder)
    assert not (folder / UNITS_DIR).exists()
    single = pd.read_parquet(folder / "generations.parquet")
    pd.testing.assert_frame_equal(single, full)
    pd.testing.assert_frame_equal(pd.read_parquet(folder / "nll.parquet"), nll_before)
    same_loads(rg.write(tmp_path / "ref", gen, nll), folder)


def test_compact_command(study, tmp_path):
    from typer.testing import CliRunner

    from ckptsel.cli import app

    gen, nll = study
    folder = _units(tmp_path / "c", gen, nll)

    res = CliRunner().invoke(app, ["records", "compact", str(folder)])
    assert res.exit_code == 0, res.output
    assert (folder / "generations.parquet").is_file() and not (folder / "units").exists()
    res = CliRunner().invoke(app, ["records", "compact", str(tmp_path / "none")])
    assert res.exit_code != 0


WRITER = r"""
import sys, time
import pandas as pd
sys.path.insert(0, sys.argv[1])
from ckptsel import records
folder, traj, first, n, rows = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
for step in range(first, first + n):
    gen = pd.DataFrame({
        "trajectory": traj, "configuration": "c", "task": "t", "step": step,
        "split": ["validation", "test"] * (rows // 2), "item_id": [f"i{k:06d}" for k in range(rows)],
        "group": "g", "subtask": "", "answer": "a", "correct": True,
        "text": "x" * 1500})
    records.write_unit(folder, traj, step, generations=gen)
    print(step, flush=True)
"""


def _writer(folder: Path, traj: str, first: int, n: int, rows: int) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, SRC, str(folder), traj, str(first), str(n), str(rows)], stdout=subprocess.PIPE, text=True
    )


def test_concurrent_processes_write_one_folder(tmp_path):
    folder = tmp_path / "shared"
    # three trajectories in parallel, and two processes on different steps of one trajectory
    procs = [_writer(folder, f"traj{k}", 0, 4, 40) for k in range(3)]
    procs += [_writer(folder, "traj0", 100, 4, 40)]
    for p in procs:
        assert p.wait(timeout=120) == 0
    units = list_units(folder, "generations")
    assert sorted((u.trajectory, u.step) for u in units) == sorted(
        [(f"traj{k}", s) for k in range(3) for s in range(4)] + [("traj0", s) for s in range(100, 104)]
    )
    full = read_frame(folder, "generations")
    assert len(full) == 16 * 40 and full["text"].str.len().eq(1500).all()
    assert not [p for p in folder.rglob("*.tmp")]


def test_sigkill_mid_write_leaves_complete_units_only(tmp_path):
    folder = tmp_path / "killed"
    proc = _writer(folder, "big", 0, 1000, 20000)
    # wait for a few units, then kill at an arbitrary point of a later write
    for _ in range(3):
        assert proc.stdout.readline()
    time.sleep(0.37)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    units = list_units(folder, "generations")
    assert len(units) >= 3
    for kind in ("generations", "texts"):
        for u in list_units(folder, kind):
            assert len(pd.read_parquet(u.path)) == 20000  # complete, never half a unit
    full = read_frame(folder, "generations")
    assert len(full) == 20000 * len(units)
    assert set(full["step"]) == {u.step for u in units}


def test_trajectory_filtered_reads_match_full_reads(study, tmp_path):
    """``read_rows`` with a trajectory filter (measure's start-up checks) reads just those
    trajectories (their packs), and returns what the full read filtered does."""
    gen, nll = study
    trajs = sorted(gen["trajectory"].unique())
    half = gen["trajectory"].isin(trajs[::2])
    nhalf = nll["trajectory"].isin(trajs[::2])
    mixed = rg.write(tmp_path / "mixed", gen[half], nll[nhalf])
    _units(mixed, gen[~half], nll[~nhalf])
    cols = ["trajectory", "step", "split", "item_id", "correct"]
    for kind, key in (("generations", cols), ("nll", ["trajectory", "step", "split", "item_id", "window", "nll_sum"])):
        for wanted in ([trajs[0]], [trajs[1]], trajs[:3], ["no-such-trajectory"]):
            filters = [("trajectory", "=", wanted[0])] if len(wanted) == 1 else [("trajectory", "in", wanted)]
            got = read_rows(mixed, kind, columns=key, filters=filters).to_pandas()
            full = read_rows(mixed, kind, columns=key).to_pandas()
            want = full[full["trajectory"].isin(wanted)].reset_index(drop=True)
            order = key[:-1]
            pd.testing.assert_frame_equal(got.sort_values(order, ignore_index=True), want.sort_values(order, ignore_index=True))
            assert len(got) == int((gen if kind == "generations" else nll)["trajectory"].isin(wanted).sum())


def test_another_producers_nested_column_does_not_mislead_the_split_statistics(study, tmp_path):
    """A unit written by another producer with a nested column before ``split`` (leaf columns
    then sit one index further than the top-level ones): the reader takes each row group's
    split from the ``split`` leaf's statistics, not from the leaf at ``split``'s top-level
    index (here a constant ``"test"``, which would have read the validation rows as test)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    gen, nll = study
    plain = _units(tmp_path / "plain", gen, nll)
    other = _units(tmp_path / "other", gen, nll)
    for u in list_units(other, "generations"):
        rows = pq.read_table(u.path.local)
        i = rows.column_names.index("split")
        extra = pa.StructArray.from_arrays([pa.array(["a"] * rows.num_rows), pa.array(["test"] * rows.num_rows)], names=["x", "y"])
        rows = rows.add_column(i, "extra", extra)
        with pq.ParquetWriter(u.path.local, rows.schema) as writer:  # one row group per split
            for split in ("test", "validation"):
                writer.write_table(rows.filter(pa.compute.equal(rows.column("split"), split)))
    assert pq.ParquetFile(u.path.local).metadata.num_row_groups == 2
    same_loads(plain, other)
