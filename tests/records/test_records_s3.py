"""Records folders on an object store (issue 21), against a real S3 API (moto's server on
127.0.0.1): units are single PUTs with the same bytes as local units; the read cache follows
ETags; concurrent writers of one unit lose no rows (conditional PUTs, not a lock); the
analysis's loaders read the same arrays as from a local folder; compact works there too."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest

from ckptsel import records
from ckptsel._util.locations import Location
from ckptsel.records import store
from ckptsel.records.cache import memo
from ckptsel.records.codec import read_table
from ckptsel.records.scan import read_frame
from ckptsel.records.schema import GENERATION_KEY, coerce_generations
from ckptsel.records.store import compact, upsert_records
from ckptsel.records.units import list_units, unit_path

import recordsgen as rg
from recordsgen import same_loads


@pytest.fixture(scope="module")
def study():
    trajs = rg.random_study(np.random.default_rng(11), n_configs=2, seeds=2)
    return rg.tables(trajs)


def test_units_on_s3_are_the_local_units(study, s3, tmp_path):
    gen, nll = study
    local, remote = tmp_path / "records", s3.url("records")
    upsert_records(local, generations=gen, nll=nll)
    upsert_records(remote, generations=gen, nll=nll)
    for kind in ("generations", "nll"):
        lu, ru = list_units(local, kind), list_units(remote, kind)
        assert [(u.trajectory, u.step) for u in lu] == [(u.trajectory, u.step) for u in ru]
        assert all(a.path.read_bytes() == b.path.read_bytes() for a, b in zip(lu, ru, strict=True))
        pd.testing.assert_frame_equal(read_frame(local, kind), read_frame(remote, kind))
    assert s3.fs.list_multipart_uploads(s3.bucket) == []  # every unit one PUT
    same_loads(local, remote)
    assert ".packs/generations/" in " ".join(s3.keys("records", "units"))  # one per trajectory


def test_packs_follow_etags(study, s3, monkeypatch):
    """On an object store a pack is an object and a unit's version its ETag: the writer
    rewrites the pack after its unit; a unit written without its pack (a writer killed in
    between) makes the pack stale, and readers read that trajectory's units."""
    gen, nll = study
    remote = s3.url("records")
    upsert_records(remote, generations=gen, nll=nll)
    first = read_frame(remote, "generations")
    traj, step = gen["trajectory"].iloc[0], int(gen["step"].iloc[0])
    packed = Location(s3.url("records", "units", ".packs", "generations", f"{traj}.parquet"))
    tag = packed.info().tag
    read_frame(remote, "generations")
    assert packed.info().tag == tag  # current: read, not rewritten
    rows = gen[(gen["trajectory"] == traj) & (gen["step"] == step)].head(2).assign(answer="zz")
    records.write_unit(remote, traj, step, generations=rows)  # same size, new ETag
    assert packed.info().tag != tag  # the writer rewrote the pack
    tag = packed.info().tag
    monkeypatch.setattr(store, "refresh_packs", lambda *a, **k: None)  # killed before the pack
    records.write_unit(remote, traj, step, generations=rows.assign(answer="yy"))
    monkeypatch.undo()
    with memo.uncached():  # the units themselves, for reference
        want = read_frame(remote, "generations")
    got = read_frame(remote, "generations")
    pd.testing.assert_frame_equal(got, want)
    changed = (got["answer"] != first["answer"]).sum()
    assert changed == 2 and set(got.loc[got["answer"] == "yy", "step"]) == {step}
    assert packed.info().tag != tag  # the reader refreshed the stale pack


def test_a_lost_race_is_merged_not_lost(study, s3, monkeypatch):
    """Two writers of one unit: the second one's conditional PUT fails (the ETag it read is
    stale), so it reads again and merges; both writers' rows are in the unit."""
    gen, _ = study
    remote = s3.url("records")
    traj, step = gen["trajectory"].iloc[0], int(gen["step"].iloc[0])
    rows = gen[(gen["trajectory"] == traj) & (gen["step"] == step)]
    a, b = rows.iloc[:3], rows.iloc[3:6]
    real_read = Location.read_tagged
    raced = []

    def read_then_someone_writes(self):
        got = real_read(self)
        if not raced and "units/generations" in str(self):
            raced.append(1)
            store._write_remote_unit(Location(remote), "generations", traj, step, coerce_generations(a), GENERATION_KEY)
        return got

    monkeypatch.setattr(Location, "read_tagged", read_then_someone_writes)
    records.write_unit(remote, traj, step, generations=b)
    monkeypatch.undo()
    unit = read_table(unit_path(remote, "generations", traj, step)).to_pandas()
    assert raced and sorted(unit["item_id"]) == sorted([*a["item_id"], *b["item_id"]])


def test_concurrent_writers_keep_every_row(study, s3, tmp_path):
    gen, nll = study
    remote = s3.url("records")
    traj, step = gen["trajectory"].iloc[0], int(gen["step"].iloc[0])
    rows = nll[(nll["trajectory"] == traj) & (nll["step"] == step)].reset_index(drop=True)
    chunks = [rows.iloc[i::4] for i in range(4)]
    errors = []

    def write(part):
        try:
            for k in range(len(part)):
                records.write_unit(remote, traj, step, nll=part.iloc[k : k + 1])
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=write, args=(c,)) for c in chunks]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    records.write_unit(tmp_path / "local", traj, step, nll=rows)
    pd.testing.assert_frame_equal(read_frame(remote, "nll"), read_frame(tmp_path / "local", "nll"))


def test_single_files_units_and_compact_on_s3(study, s3, tmp_path):
    gen, nll = study
    local = rg.write(tmp_path / "single", gen, nll)
    remote = s3.upload(local, "records")  # the single-file form, uploaded as is
    trajs = sorted(gen["trajectory"].unique())
    sel = gen["trajectory"] == trajs[0]
    changed = gen[sel].head(3).assign(answer="q", correct=False)
    records.write_unit(remote, trajs[0], int(changed["step"].iloc[0]), generations=changed)
    expected = gen.copy()
    expected.loc[changed.index, ["answer", "correct"]] = ["q", False]
    pd.testing.assert_frame_equal(
        read_frame(remote, "generations").drop(columns="text", errors="ignore"),
        read_frame(rg.write(tmp_path / "expected", expected, nll), "generations").drop(columns="text", errors="ignore"),
    )
    written = compact(remote)
    assert [w.name for w in written] == ["generations.parquet", "nll.parquet"]
    assert not [k for k in s3.keys("records") if k.startswith("units/")]
    same_loads(rg.write(tmp_path / "expected2", expected, nll), remote)
