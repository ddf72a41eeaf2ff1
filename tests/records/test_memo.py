"""The cache of loaded arrays (issue 23 part 4, :mod:`ckptsel.records.cache.memo`): a second load
reads no record and gives the very same arrays; any change to the records, the declared final
steps or the cache file is noticed; errors are never cached; summary.json is the same."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ckptsel import records
from ckptsel.errors import CkptselError
from ckptsel.records import load, provenance
from ckptsel.records.cache import memo
from ckptsel.records.load import load_test, load_validation
from ckptsel.records.schema import FINAL_STEPS_FILE
from ckptsel.records.store import upsert_records
from ckptsel.workflows import analysis

import recordsgen as rg


@pytest.fixture(scope="module")
def study():
    return rg.tables(rg.random_study(np.random.default_rng(11), n_configs=3, seeds=2))


def _loads(folder):
    v = load_validation(folder)
    return v, load_test(folder, v)


def _assert_same(a, b) -> None:
    """Field by field, dtypes included (answer codes too: the cache keeps them as computed)."""
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert type(x) is type(y)
        for name, value in vars(x).items():
            other = getattr(y, name)
            if isinstance(value, np.ndarray):  # memory order too: it decides float sums' order
                assert value.dtype == other.dtype and value.shape == other.shape, name
                assert value.strides == other.strides, name
                np.testing.assert_array_equal(value, other)
            elif isinstance(value, dict) and value and isinstance(next(iter(value.values())), np.ndarray):
                assert list(value) == list(other), name
                for k in value:
                    assert value[k].dtype == other[k].dtype and value[k].strides == other[k].strides
                    np.testing.assert_array_equal(value[k], other[k])
            else:
                assert value == other, name


def _no_records_read(monkeypatch):
    def refuse(*_a, **_k):
        raise AssertionError("records were read although the cache is current")

    for name in ("_validation_records", "_test_records"):
        monkeypatch.setattr(load, name, refuse)
    monkeypatch.setattr(provenance, "read_provenance", refuse)


def test_a_second_load_reads_no_record_and_gives_the_same_arrays(study, tmp_path, monkeypatch):
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    v1, t1 = _loads(folder)
    prov1 = provenance.study_provenance(folder)
    assert sorted(p.name for p in (folder / memo.MEMO_DIR).iterdir()) == [
        "declared-finals.arrays",
        "provenance.arrays",
        "test.arrays",
        "validation.arrays",
    ]
    with monkeypatch.context() as m:
        _no_records_read(m)
        v2, t2 = _loads(folder)
        assert provenance.study_provenance(folder) == prov1
    _assert_same(v1, v2)
    _assert_same(t1, t2)
    assert all(x.correct.flags.writeable and x.answers.flags.writeable for x in v2 + t2)
    # the single-file form is cached the same way, beside its files
    single = rg.write(tmp_path / "single", gen, nll)
    s1 = _loads(single)
    with monkeypatch.context() as m:
        _no_records_read(m)
        s2 = _loads(single)
    for a, b in zip(s1, s2, strict=True):
        _assert_same(a, b)


def test_changed_records_or_final_steps_are_read_again(study, tmp_path):
    gen, nll = study
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    v1, _ = _loads(folder)
    # one validation answer flipped in one unit: the next load sees it
    traj, step = v1[0].trajectory, int(v1[0].steps[0])
    rows = gen[(gen.trajectory == traj) & (gen.step == step) & (gen.split == "validation")].head(1)
    rows = rows.assign(correct=~rows["correct"])
    records.write_unit(folder, traj, step, generations=rows)
    v2, _ = _loads(folder)
    i = list(v2[0].item_ids).index(rows["item_id"].iloc[0])
    assert v2[0].correct[0, i] != v1[0].correct[0, i]
    assert (v2[0].correct != v1[0].correct).sum() == 1
    # a declared final step the records lack is refused, although the records did not change
    (folder / FINAL_STEPS_FILE).write_text(json.dumps({traj: 999_999}))
    with pytest.raises(CkptselError, match="final checkpoint"):
        load_validation(folder)
    (folder / FINAL_STEPS_FILE).unlink()
    _assert_same(load_validation(folder), v2)


def test_bad_records_raise_every_time_and_cache_nothing(study, tmp_path):
    gen, nll = study
    bad = nll.copy()
    bad.loc[bad.index[3], "nll_sum"] = np.nan
    folder = rg.write(tmp_path / "bad", gen, bad)
    for _ in range(2):
        with pytest.raises(CkptselError, match="NaN"):
            load_validation(folder)
    assert not (folder / memo.MEMO_DIR / "validation.arrays").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate", "foreign", "empty"])
def test_a_damaged_cache_file_is_computed_again(study, tmp_path, damage):
    gen, nll = study
    folder = rg.write(tmp_path / "r", gen, nll)
    v1, t1 = _loads(folder)
    path = folder / memo.MEMO_DIR / "test.arrays"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[-5] ^= 0xFF
    elif damage == "truncate":
        data = data[: len(data) // 2]
    elif damage == "foreign":
        data = bytearray(b"PK\x03\x04 not ours" * 10)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    v2, t2 = _loads(folder)
    _assert_same(t1, t2)
    _assert_same(v1, v2)
    assert memo._read(path, memo.source_key(records.load.as_location(folder), "test")) is not None


def test_records_that_change_while_loading_are_not_cached(study, tmp_path, monkeypatch):
    gen, nll = study
    folder = rg.write(tmp_path / "r", gen, nll)
    compute = load._validation_records

    def with_a_write(records_dir):
        out = compute(records_dir)
        traj = out[0].trajectory
        rows = gen[(gen.trajectory == traj) & (gen.split == "validation")].head(1)
        records.write_unit(folder, traj, int(rows.step.iloc[0]), generations=rows)
        return out

    monkeypatch.setattr(load, "_validation_records", with_a_write)
    load_validation(folder)
    assert not (folder / memo.MEMO_DIR / "validation.arrays").exists()


def test_a_folder_the_cache_cannot_be_written_in_loads_all_the_same(study, tmp_path):
    gen, nll = study
    folder = rg.write(tmp_path / "r", gen, nll)
    (folder / memo.MEMO_DIR).write_text("a file where the cache folder would go")
    v1, t1 = _loads(folder)
    v2, t2 = _loads(folder)
    _assert_same(v1, v2)
    _assert_same(t1, t2)
    assert (folder / memo.MEMO_DIR).is_file()


def test_summary_is_byte_identical_from_the_records_and_from_the_cache(tmp_path):
    # NLLs that are not dyadic: float sums whose last bits depend on the order of additions
    trajs = rg.random_study(np.random.default_rng(12), n_configs=3, seeds=2, dyadic=False)
    gen, nll = rg.tables(trajs)
    folder = tmp_path / "r"
    upsert_records(folder, generations=gen, nll=nll)
    analysis.analyze(folder, tmp_path / "cold")
    assert (folder / memo.MEMO_DIR / "test.arrays").exists()
    analysis.analyze(folder, tmp_path / "warm")
    cold = sorted(p.relative_to(tmp_path / "cold") for p in (tmp_path / "cold").rglob("*") if p.is_file())
    assert "tables/checkpoint_curves.csv" in {str(p) for p in cold}
    for name in cold:  # every table too (the NLL curves sum rows of F-ordered matrices)
        if name.name not in ("manifest.json", "run.json"):
            assert (tmp_path / "cold" / name).read_bytes() == (tmp_path / "warm" / name).read_bytes(), name
