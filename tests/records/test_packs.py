"""Per-trajectory packs (issue 37, :mod:`ckptsel.records.cache.pack`): the writer keeps one file per
trajectory and kind holding its units' rows; readers use it only while it lists exactly the
trajectory's current unit versions, so a stale, missing or damaged pack never changes a number."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest

from ckptsel import records
from ckptsel.errors import CkptselError
from ckptsel.records import cache as seam
from ckptsel.records import load, store
from ckptsel.records.cache import memo, pack
from ckptsel.records.codec import read_schema
from ckptsel.records.load import load_test, load_validation
from ckptsel.records.provenance import read_provenance, unit_provenance
from ckptsel.records.scan import read_frame
from ckptsel.records.store import compact, upsert_records
from ckptsel.records.units import UNITS_DIR, list_units, one_listing, unit_path
from ckptsel.records.weights import CheckpointStamp, read_stamps
from ckptsel.workflows import analysis

import recordsgen as rg


@pytest.fixture(scope="module")
def study():
    return rg.tables(rg.random_study(np.random.default_rng(37), n_configs=2, seeds=2))


@pytest.fixture(scope="module")
def reference(study, tmp_path_factory):
    """summary.json of the study analysed from its single-file form (no units, no packs)."""
    tmp = tmp_path_factory.mktemp("ref")
    analysis.analyze(rg.write(tmp / "single", *study), tmp / "out")
    return (tmp / "out" / "summary.json").read_bytes()


def _summary(folder, out) -> bytes:
    """A first analysis of ``folder`` (its cache of loaded arrays removed first)."""
    shutil.rmtree(folder / memo.MEMO_DIR, ignore_errors=True)
    analysis.analyze(folder, out)
    return (out / "summary.json").read_bytes()


def _packs(folder, kind="generations") -> dict[str, object]:
    root = folder / UNITS_DIR / pack.PACKS_DIR / kind
    return {p.stem: p for p in sorted(root.glob("*.parquet"))}


def _is_current(folder, kind, traj) -> bool:
    units = list_units(folder, kind, traj)
    meta = read_schema(pack.pack_path(folder, kind, traj)).metadata
    return pack.current(meta, units) is not None


def _garble_units(folder) -> None:
    """Every generation and NLL unit overwritten with garbage of its size, its modification
    time put back: the listing is unchanged, but reading any unit would fail."""
    for kind in pack.PACKED_KINDS:
        for u in list_units(folder, kind):
            st = os.stat(u.path.local)
            u.path.local.write_bytes(b"\0" * st.st_size)
            os.utime(u.path.local, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_the_writer_keeps_packs_and_a_current_pack_opens_no_unit(study, reference, tmp_path):
    gen, nll = study
    folder = tmp_path / "r"
    prov = {"generations": unit_provenance(['{"engine":"hf","version":"1"}'])}
    stamp = CheckpointStamp(weights="sha256:ab", run_final_step=int(gen["step"].max()))
    upsert_records(folder, generations=gen, nll=nll, provenance=prov, checkpoint=stamp)
    trajs = sorted(gen["trajectory"].unique())
    for kind in pack.PACKED_KINDS:
        assert list(_packs(folder, kind)) == trajs
        assert all(_is_current(folder, kind, t) for t in trajs)
    assert not (folder / UNITS_DIR / pack.PACKS_DIR / "texts").exists()
    before = read_frame(folder, "generations")
    made_by = {k: read_provenance(folder, k) for k in pack.PACKED_KINDS}
    stamps = read_stamps(folder, "generations")
    _garble_units(folder)
    assert _summary(folder, tmp_path / "out") == reference  # no unit was read
    pd.testing.assert_frame_equal(read_frame(folder, "generations"), before)
    # provenance comes from the packs' metadata too
    assert {k: read_provenance(folder, k) for k in pack.PACKED_KINDS} == made_by
    assert all(len(p.measured_by) == 1 for p in made_by["generations"].values())
    assert read_stamps(folder, "generations") == stamps and stamps
    with memo.uncached(), pytest.raises(CkptselError, match="step-"):  # verify: the units
        load_validation(folder)


def _flip(gen, traj, step, n=3):
    rows = gen[(gen["trajectory"] == traj) & (gen["step"] == step) & (gen["split"] == "validation")]
    changed = rows.iloc[:n].assign(correct=~rows.iloc[:n]["correct"])
    expected = gen.copy()
    expected.loc[changed.index, "correct"] = changed["correct"]
    return changed, expected


def test_a_unit_replaced_or_added_after_its_pack_is_read_from_the_units(study, tmp_path, monkeypatch):
    """A writer killed between its unit and the pack (here: the pack refresh skipped) leaves
    a stale pack; the analysis reads that trajectory's units, and a reader that may write
    refreshes the pack."""
    gen, nll = study
    traj = sorted(gen["trajectory"].unique())[0]
    last = int(gen.loc[gen["trajectory"] == traj, "step"].max())
    held = (gen["trajectory"] == traj) & (gen["step"] == last)
    nheld = (nll["trajectory"] == traj) & (nll["step"] == last)
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen[~held], nll=nll[~nheld])
    steps = int(gen.loc[gen["trajectory"] == traj, "step"].nunique())
    monkeypatch.setattr(store, "refresh_packs", lambda *a, **k: None)  # killed before the pack
    upsert_records(folder, generations=gen[held], nll=nll[nheld])  # a unit added
    changed, expected = _flip(gen, traj, int(gen.loc[gen["trajectory"] == traj, "step"].min()))
    records.write_unit(folder, traj, int(changed["step"].iloc[0]), generations=changed)  # replaced
    monkeypatch.undo()
    meta = read_schema(pack.pack_path(folder, "generations", traj)).metadata
    assert len(json.loads(meta[pack.PACK_KEY])["units"]) == steps - 1  # the pack is stale
    want = _summary(rg.write(tmp_path / "expected", expected, nll), tmp_path / "want")
    assert _summary(folder, tmp_path / "got") == want
    assert not _is_current(folder, "generations", traj)  # analysis (filling the memo) left it
    for kind in pack.PACKED_KINDS:  # a reader that may write refreshes the packs it reads
        read_frame(folder, kind)
    assert _is_current(folder, "generations", traj) and _is_current(folder, "nll", traj)
    assert _summary(folder, tmp_path / "again") == want


@pytest.mark.parametrize("damage", ["deleted", "truncated", "bytes flipped", "foreign metadata"])
def test_a_missing_or_damaged_pack_gives_the_same_summary(study, reference, tmp_path, damage):
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    for kind in pack.PACKED_KINDS:
        for traj, path in _packs(folder, kind).items():
            data = path.read_bytes()
            if damage == "deleted":
                path.unlink()
            elif damage == "truncated":
                path.write_bytes(data[: len(data) // 2])
            elif damage == "bytes flipped":  # inside the pages: only the page CRCs can tell
                mid = len(data) // 3
                path.write_bytes(data[:mid] + bytes(b ^ 0x5A for b in data[mid : mid + 64]) + data[mid + 64 :])
            else:  # a pack of another trajectory's units
                other = [p for t, p in _packs(folder, kind).items() if t != traj][0]
                shutil.copyfile(other, path)
    assert _summary(folder, tmp_path / "out") == reference


def test_compact_keeps_every_row_and_drops_the_packs(study, reference, tmp_path):
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    before = read_frame(folder, "nll")
    compact(folder)
    assert not (folder / UNITS_DIR).exists()
    pd.testing.assert_frame_equal(read_frame(folder, "nll"), before)
    assert _summary(folder, tmp_path / "out") == reference


def test_rewriting_a_pack_reuses_its_current_rows(study, tmp_path, monkeypatch):
    """The writer's pack refresh reads only the units the old pack does not hold (the cost
    of recording a checkpoint stays one unit's, not the trajectory's)."""
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    traj = sorted(gen["trajectory"].unique())[1]
    step = int(gen.loc[gen["trajectory"] == traj, "step"].max())
    changed, expected = _flip(gen, traj, step)
    from ckptsel.records import scan

    read = []
    real = scan._unit_whole
    monkeypatch.setattr(scan, "_unit_whole", lambda u, *a: read.append(u.step) or real(u, *a))
    records.write_unit(folder, traj, step, generations=changed)
    assert read == [step]  # the generations pack: only the rewritten unit read
    assert _is_current(folder, "generations", traj)
    pd.testing.assert_frame_equal(read_frame(folder, "generations"), read_frame(rg.write(tmp_path / "e", expected, nll), "generations"))


def test_one_listing_lists_once_and_a_write_through_the_writer_is_seen(study, tmp_path):
    """Inside ``one_listing`` (one analysis) a kind's units are listed once: a unit file that
    appears behind it is not seen until the block ends; one written by the writer is."""
    gen, nll = study
    folder = tmp_path / "rec"
    first_traj = sorted(gen.trajectory.unique())[0]
    steps = sorted(gen[gen.trajectory == first_traj].step.unique())
    held = (gen.trajectory == first_traj) & (gen.step == steps[-1])
    upsert_records(folder, generations=gen[~held])
    every = [(u.trajectory, u.step) for u in list_units(folder, "generations")]
    unit = unit_path(folder, "generations", first_traj, steps[0]).local
    with one_listing():
        assert [(u.trajectory, u.step) for u in list_units(folder, "generations")] == every
        shutil.copy(unit, unit.with_name("step-999999.parquet"))  # not through the writer
        assert [(u.trajectory, u.step) for u in list_units(folder, "generations")] == every
        assert [u.step for u in list_units(folder, "generations", first_traj)] == steps[:-1]
        records.write_unit(folder, first_traj, int(steps[-1]), generations=gen[held])
        after = [u.step for u in list_units(folder, "generations", first_traj)]
        assert after == [*steps, 999999]
    os.remove(unit.with_name("step-999999.parquet"))
    assert [u.step for u in list_units(folder, "generations", first_traj)] == steps


def test_a_stray_folder_under_units_is_no_records(study, tmp_path):
    """Only ``units/<kind>/`` holds units: anything else there (the ``units/.cache/`` of the
    whole-folder read cache the packs replaced) is never read, so records read the same with
    it as without it, and the writer leaves it alone."""
    gen, nll = study
    clean, folder = tmp_path / "clean", tmp_path / "rec"
    stray = folder / UNITS_DIR / ".cache"
    stray.mkdir(parents=True)
    (stray / "generations.parquet").write_bytes(b"stale")
    for f in (clean, folder):
        upsert_records(f, generations=gen, nll=nll)
    assert _packs(folder) and _packs(folder).keys() == _packs(clean).keys()
    assert (stray / "generations.parquet").read_bytes() == b"stale"
    for kind in ("generations", "nll"):
        pd.testing.assert_frame_equal(read_frame(folder, kind), read_frame(clean, kind))
    a, b = load.load_validation(folder), load.load_validation(clean)
    assert [(v.trajectory, v.steps.tolist(), v.item_ids.tolist()) for v in a] == [
        (v.trajectory, v.steps.tolist(), v.item_ids.tolist()) for v in b
    ]


def test_a_unit_written_again_as_it_is_leaves_unit_and_pack_untouched(study, tmp_path):
    """``ckptsel run`` on a finished study writes every checkpoint's units again: the same
    bytes leave the unit file (its version) and so the trajectory's pack as they were."""
    gen, nll = study
    folder = tmp_path / "rec"
    upsert_records(folder, generations=gen, nll=nll)
    units = {u.path.local: u.tag for k in pack.PACKED_KINDS for u in list_units(folder, k)}
    packs = {p: p.read_bytes() for k in pack.PACKED_KINDS for p in _packs(folder, k).values()}
    upsert_records(folder, generations=gen, nll=nll)
    again = {u.path.local: u.tag for k in pack.PACKED_KINDS for u in list_units(folder, k)}
    assert again == units
    assert {p: p.read_bytes() for p in packs} == packs
    traj = sorted(gen.trajectory.unique())[0]
    mine = gen[gen.trajectory == traj]
    changed = mine[mine.step == mine.step.max()].copy()
    assert len(changed)
    changed["correct"] = ~changed["correct"].astype(bool)
    records.write_unit(folder, traj, int(changed.step.iloc[0]), generations=changed)
    assert _is_current(folder, "generations", traj)
    assert _packs(folder)[traj].read_bytes() != packs[_packs(folder)[traj]]


def _test_nll(gen: pd.DataFrame) -> pd.DataFrame:
    """Valid test NLL rows (two windows, n_tokens constant per item) for every test generation."""
    test = gen[gen["split"] == "test"]
    tokens = test["item_id"].str[1:].astype(int).to_numpy() % 17 + 3
    return pd.concat(
        [
            pd.DataFrame(
                {
                    "trajectory": test["trajectory"].to_numpy(),
                    "step": test["step"].to_numpy(),
                    "split": "test",
                    "item_id": test["item_id"].to_numpy(),
                    "nll_sum": 0.25 * (tokens + w % 7),
                    "n_tokens": tokens + w % 7,
                    "window": w,
                }
            )
            for w in (512, 0)
        ],
        ignore_index=True,
    )


def _reads_no_test_nll_rows(monkeypatch):
    def refuse(records_dir):
        raise AssertionError("the test NLL rows were read")

    monkeypatch.setattr(load, "_test_nll_table", refuse)


def test_test_nll_is_checked_from_the_packs_proofs(study, tmp_path, monkeypatch):
    """The writer stores in each NLL pack what its test rows prove under the reader's checks;
    a first analysis then reads the proofs, not the rows, and loads exactly what reading the
    rows loads. A proof by other checking code, or ``verify``, reads the rows."""
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=pd.concat([nll, _test_nll(gen)], ignore_index=True))
    proofs = pack.proofs(folder, "nll", list_units(folder, "nll"))
    assert sorted(proofs) == sorted(gen["trajectory"].unique())
    for traj, proof in proofs.items():
        steps = sorted(gen.loc[(gen["trajectory"] == traj) & (gen["split"] == "test"), "step"].unique())
        assert proof["code"] == memo.code_digest() and proof["test"]["steps"] == steps
        assert load._proof_usable(traj, proof) and not load._proof_usable(f"not-{traj}", proof)
    with memo.uncached():
        expected = load_test(folder)
    with monkeypatch.context() as m:
        _reads_no_test_nll_rows(m)
        got = load_test(folder)
        with memo.uncached(), pytest.raises(AssertionError, match="were read"):  # verify: the rows
            load_test(folder)
        m.setattr(seam, "code_digest", lambda: "other code")  # (the loaders call it through the seam)
        shutil.rmtree(folder / memo.MEMO_DIR)
        with pytest.raises(AssertionError, match="were read"):
            load_test(folder)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        for name in ("trajectory", "configuration", "task"):
            assert getattr(a, name) == getattr(b, name)
        for name in ("steps", "item_ids", "subtasks", "correct", "answers", "groups"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))


def test_a_pack_proves_nothing_of_rows_that_fail_a_check(study, tmp_path):
    """Rows that fail a check get no proof (the reader reads them and names the problem);
    rows complete on their own but short of the generations get a proof the reader finds
    does not hold (then it reads the rows too, and refuses)."""
    gen, nll = study
    test = _test_nll(gen)
    traj, item = test["trajectory"].iloc[0], test["item_id"].iloc[0]
    nan = test.copy()
    nan.loc[0, "nll_sum"] = np.nan
    short = test[~((test["trajectory"] == traj) & (test["item_id"] == item))]
    for name, rows, proven, needle in (("nan", nan, False, "nll_sum"), ("short", short, True, "record missing")):
        folder = tmp_path / name
        upsert_records(folder, generations=gen, nll=pd.concat([nll, rows], ignore_index=True))
        meta = json.loads(read_schema(pack.pack_path(folder, "nll", traj)).metadata[pack.PACK_KEY])
        assert ("test" in meta["proof"]) is proven, name
        with pytest.raises(CkptselError, match=needle) as err:
            load_test(folder)
        assert repr(traj) in str(err.value)


def test_a_unit_replaced_at_the_same_size_and_time_is_a_new_version(study, tmp_path):
    """A unit's local version is its size, modification time and inode: a rewrite (always a new
    file, renamed into place) within the clock's granularity at the same size is still seen.
    (Issue 49: the pack also records the units' contents, so a rewrite of the very same bytes
    is the same unit and its pack stays current; other bytes of the same size are not.)"""
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    unit = list_units(folder, "generations")[0]
    assert _is_current(folder, "generations", unit.trajectory)
    st = os.stat(unit.path.local)
    original = unit.path.local.read_bytes()
    for i, (data, current) in enumerate(((original, True), (original[:-9] + b"\1" + original[-8:], False))):
        os.link(unit.path.local, tmp_path / f"kept-{i}")  # (no inode of a version reused)
        temp = unit.path.local.with_name("replacement.tmp")
        temp.write_bytes(data)
        os.replace(temp, unit.path.local)
        os.utime(unit.path.local, ns=(st.st_atime_ns, st.st_mtime_ns))
        again = list_units(folder, "generations")[0]
        assert (again.size, again.tag.split(".")[0]) == (unit.size, unit.tag.split(".")[0])
        assert again.tag != unit.tag  # a new version ...
        assert _is_current(folder, "generations", unit.trajectory) is current  # ... of these bytes?


def test_a_copied_folder_reuses_its_packs(study, reference, tmp_path, monkeypatch):
    """Issue 49: ``cp -r`` gives every unit a new file (new modification time and inode), but
    the packs record the units' contents too: the copy's first analysis reads its packs, opens
    no unit for its rows, and gives the same summary.json; the writer there reuses the packs'
    rows too (only a unit of other bytes is read again)."""
    from ckptsel.records import scan

    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    copied = tmp_path / "copy"
    shutil.copytree(folder, copied)
    trajs = sorted(gen["trajectory"].unique())
    for kind in pack.PACKED_KINDS:
        versions = {u.tag for u in list_units(folder, kind)}
        assert not versions & {u.tag for u in list_units(copied, kind)}  # all new versions
        assert all(_is_current(copied, kind, t) for t in trajs)
    opened = []
    real = scan._read_local
    monkeypatch.setattr(scan, "_read_local", lambda u, *a: opened.append(u.path) or real(u, *a))
    assert _summary(copied, tmp_path / "out") == reference
    assert opened == []  # every row from the packs
    read = []
    whole = scan._unit_whole
    monkeypatch.setattr(scan, "_unit_whole", lambda u, *a: read.append(u.step) or whole(u, *a))
    for kind in pack.PACKED_KINDS:
        assert store.refresh_pack(copied, kind, trajs[0], force=True)
    assert read == []  # the old pack's rows reused: its units' contents are the same


def test_a_packs_footer_is_read_once_per_listing_and_again_once_rewritten(study, tmp_path, monkeypatch):
    """Provenance and the test-NLL proofs both read the NLL packs' footers, on threads: inside
    one analysis (one_listing) each footer is read once; a pack rewritten meanwhile (a
    reader refreshing a stale one) is read anew."""
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=pd.concat([nll, _test_nll(gen)], ignore_index=True))
    trajs = sorted(gen["trajectory"].unique())
    reads: list[str] = []
    real = pack.read_schema
    monkeypatch.setattr(pack, "read_schema", lambda p, *a, **k: (reads.append(str(p)), real(p, *a, **k))[1])
    with one_listing():
        assert read_provenance(folder, "nll")
        units = list_units(folder, "nll")
        assert sorted(pack.proofs(folder, "nll", units)) == trajs
        assert len(reads) == len(trajs) == len(set(reads))  # each footer once
        store.refresh_pack(folder, "nll", trajs[0], force=True)  # rewritten in the block
        assert sorted(pack.proofs(folder, "nll", units)) == trajs
        assert reads.count(str(pack.pack_path(folder, "nll", trajs[0]))) == 2
    assert len(reads) == len(trajs) + 1


def test_without_packs_each_units_footer_is_read_once_per_listing(study, tmp_path, monkeypatch):
    """Provenance and checkpoint stamps both ask for the units' metadata: inside one listing
    (one analysis) a unit's own footer is read once, and a unit rewritten meanwhile is read
    anew by the next listing."""
    gen, nll = study
    folder = tmp_path / "r"
    prov = {"generations": unit_provenance(['{"engine":"hf","version":"1"}'])}
    stamp = CheckpointStamp(weights="sha256:ab", run_final_step=int(gen["step"].max()))
    upsert_records(folder, generations=gen, nll=nll, provenance=prov, checkpoint=stamp)
    shutil.rmtree(folder / UNITS_DIR / pack.PACKS_DIR)
    read = []
    real = pack.read_schema
    own = lambda path: pack.PACKS_DIR not in str(path) and read.append(str(path))  # noqa: E731 - a unit's own footer
    monkeypatch.setattr(pack, "read_schema", lambda path: own(path) or real(path))
    n_units = len(list_units(folder, "generations"))
    with one_listing():
        made_by, stamps = read_provenance(folder, "generations"), read_stamps(folder, "generations")
        assert read_provenance(folder, "generations") == made_by and read_stamps(folder, "generations") == stamps
    assert len(read) == len(set(read)) == n_units and stamps
    with one_listing():
        assert read_provenance(folder, "generations") == made_by
    assert len(read) == 2 * n_units  # the next listing reads them again
