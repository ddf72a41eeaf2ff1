"""Every bad input of SPEC §2 gets one clear error (exit 2) naming what is wrong, and writes nothing."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ckptsel.cli.app import main
from ckptsel.records.load import load_test, load_validation

import recordsgen as rg


@pytest.fixture
def study():
    rng = np.random.default_rng(5)
    return rg.tables(rg.random_study(rng, n_configs=2, seeds=2, T=(3, 4), n_val=(40, 41), n_test=(20, 21)))


def run_cli(records, out, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(records), "--out", str(out), "--permutations", "5", "--draws", "50"])
    return exc.value.code, capsys.readouterr().err


def check_rejected(tmp_path, capsys, gen, nll, *expected):
    records = rg.write(tmp_path / "records", gen, nll)
    out = tmp_path / "results"
    code, err = run_cli(records, out, capsys)
    assert code == 2, err
    for text in expected:
        assert text in err, err
    assert not out.exists(), "nothing may be written for bad input"


def test_good_study_is_accepted(tmp_path, study):
    gen, nll = study
    records = rg.write(tmp_path / "records", gen, nll)
    val = load_validation(records)
    test = load_test(records, val)
    assert len(val) == len(test) == 4
    assert val[0].correct.shape == (len(val[0].steps), 40)


def test_duplicated_key(tmp_path, capsys, study):
    gen, nll = study
    gen = pd.concat([gen, gen.iloc[[7]]], ignore_index=True)
    row = gen.iloc[7]
    check_rejected(tmp_path, capsys, gen, nll, "duplicated record", row["trajectory"], f"step {row['step']}", row["item_id"])


def test_duplicated_nll_key(tmp_path, capsys, study):
    gen, nll = study
    nll = pd.concat([nll, nll.iloc[[3]]], ignore_index=True)
    check_rejected(tmp_path, capsys, gen, nll, "nll.parquet", "duplicated record", nll.iloc[3]["item_id"])


def test_unknown_split(tmp_path, capsys, study):
    gen, nll = study
    gen.loc[5, "split"] = "dev"
    check_rejected(tmp_path, capsys, gen, nll, "generations.parquet", "unknown split", "dev")


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_nan_or_inf_nll(tmp_path, capsys, study, bad):
    gen, nll = study
    nll.loc[11, "nll_sum"] = bad
    r = nll.iloc[11]
    check_rejected(tmp_path, capsys, gen, nll, "NaN/inf", r["trajectory"], f"step {r['step']}", r["item_id"])


def test_negative_token_count(tmp_path, capsys, study):
    gen, nll = study
    nll.loc[4, "n_tokens"] = -3
    check_rejected(tmp_path, capsys, gen, nll, "negative n_tokens", nll.iloc[4]["item_id"])


def test_token_counts_differ_across_checkpoints(tmp_path, capsys, study):
    gen, nll = study
    first = nll[(nll.split == "validation") & (nll.window == 512)].index[0]
    nll.loc[first, "n_tokens"] += 1
    r = nll.loc[first]
    check_rejected(tmp_path, capsys, gen, nll, "n_tokens differ across checkpoints", r["trajectory"], r["item_id"])


def test_generation_and_nll_disagree_on_checkpoints(tmp_path, capsys, study):
    gen, nll = study
    traj = gen.trajectory.iloc[0]
    last = gen[gen.trajectory == traj].step.max()
    nll = nll[~((nll.trajectory == traj) & (nll.step == last))]
    check_rejected(tmp_path, capsys, gen, nll, traj, "disagree on its validation checkpoints", str(last))


def test_missing_test_item_is_an_error(tmp_path, capsys, study):
    gen, nll = study
    idx = gen[gen.split == "test"].index[3]
    r = gen.loc[idx]
    gen = gen.drop(index=idx)
    check_rejected(tmp_path, capsys, gen, nll, "test item missing", r["trajectory"], f"step {r['step']}", r["item_id"])


def test_missing_column(tmp_path, capsys, study):
    gen, nll = study
    check_rejected(tmp_path, capsys, gen.drop(columns=["correct"]), nll, "generations.parquet", "missing column", "correct")


def test_unreadable_file(tmp_path, capsys, study):
    gen, nll = study
    records = rg.write(tmp_path / "records", gen, nll)
    (records / "nll.parquet").write_text("not parquet")
    code, err = run_cli(records, tmp_path / "results", capsys)
    assert code == 2 and "nll.parquet" in err and "not a readable Parquet file" in err


def test_missing_declared_final_checkpoint(tmp_path, capsys, study):
    gen, nll = study
    traj = gen.trajectory.iloc[0]
    final = gen[gen.trajectory == traj].step.max()
    records = rg.write(tmp_path / "records", gen, nll)
    (records / "final_steps.json").write_text(json.dumps({traj: int(final) + 25}))
    code, err = run_cli(records, tmp_path / "results", capsys)
    assert code == 2 and "invalid trajectory" in err and traj in err and str(int(final) + 25) in err
    assert not (tmp_path / "results").exists()


def test_validation_items_incomplete_or_empty_are_excluded_and_counted(tmp_path, study):
    gen, nll = study
    traj = gen.trajectory.iloc[0]
    v = gen[(gen.trajectory == traj) & (gen.split == "validation")]
    missing_gen = v.item_id.iloc[0]
    gen = gen.drop(index=v.index[0])  # one checkpoint lacks a generation of this item
    nv = nll[(nll.trajectory == traj) & (nll.split == "validation")]
    items = sorted(nv.item_id.unique())
    missing_nll, empty = items[5], items[6]
    nll = nll.drop(index=nv[nv.item_id == missing_nll].index[:1])
    nll.loc[(nll.trajectory == traj) & (nll.item_id == empty) & (nll.split == "validation"), "n_tokens"] = 0
    records = rg.write(tmp_path / "records", gen, nll)
    val = {x.trajectory: x for x in load_validation(records)}[traj]
    assert val.exclusions == {"missing_generation": 1, "missing_nll": 1, "empty_response": 1}
    assert missing_gen not in val.item_ids and missing_nll not in val.item_ids and empty not in val.item_ids
    assert len(val.item_ids) == 37
    from ckptsel.workflows.analysis import analyze

    s = analyze(records, tmp_path / "out", permutations=5, draws=50)
    assert s.population.validation_exclusions.total == 3
    assert s.population.validation_exclusions.by_trajectory == {traj: 3}


def test_trajectories_of_one_task_must_share_the_test_pool(tmp_path, capsys, study):
    gen, nll = study
    traj = gen.trajectory.iloc[0]
    mask = (gen.trajectory == traj) & (gen.split == "test")
    gen.loc[mask, "item_id"] = gen.loc[mask, "item_id"] + "x"
    check_rejected(tmp_path, capsys, gen, nll, "different test items", traj)


def test_bad_input_keeps_earlier_results(tmp_path, capsys, study):
    gen, nll = study
    records = rg.write(tmp_path / "records", gen, nll)
    out = tmp_path / "results"
    main_args = ["analyze", str(records), "--out", str(out), "--permutations", "5", "--draws", "50"]
    with pytest.raises(SystemExit) as exc:
        main(main_args)
    assert exc.value.code == 0
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    nll.loc[0, "nll_sum"] = np.nan
    rg.write(records, gen, nll)
    code, err = run_cli(records, out, capsys)
    assert code == 2 and "NaN" in err
    after = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert before == after


def test_group_must_not_vary_across_checkpoints(tmp_path, capsys, study):
    gen, nll = study
    idx = gen[gen.split == "validation"].index[2]
    r = gen.loc[idx]
    gen.loc[idx, "group"] = "some-other-group"
    check_rejected(tmp_path, capsys, gen, nll, "'group' differs across checkpoints", r["trajectory"], r["item_id"])
