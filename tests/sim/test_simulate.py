"""``ckptsel simulate``: contract, determinism and the planted structure of the synthetic records."""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import typer
from typer.testing import CliRunner

from ckptsel.errors import CkptselError
from ckptsel.records.schema import COMPLETE_WINDOW, GENERATION_COLUMNS, MATCHED_WINDOW, NLL_COLUMNS
from ckptsel.sim.simulate import PRESETS, TRUTH_COLUMNS, SimSpec, TaskSim, simulate, write_simulation
from ckptsel.stats.distributions import norm_cdf, norm_ppf


@pytest.fixture(scope="module")
def small() -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    return simulate("small", seed=0)


@pytest.fixture(scope="module")
def paper() -> tuple[tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame], float]:
    """The paper preset (categorical strings: the fast path) and its generation time."""
    start = time.perf_counter()
    tables = simulate("paper", seed=0, strings="category")
    return tables, time.perf_counter() - start


def _one_task_spec(**task_kw) -> SimSpec:
    task = dict(name="gsm8k", kind="numeric", seeds_per_configuration=(1,), n_validation=50, n_test=20000, variants_per_group=(1, 3))
    task.update(task_kw)
    return SimSpec(tasks=(TaskSim(**task),), checkpoints=(6, 6))


# ---------------------------------------------------------------------------- contract


def test_columns_and_dtypes_match_schema(small, tmp_path):
    gen, nll, truth = small
    assert list(gen.columns) == list(GENERATION_COLUMNS)
    assert list(nll.columns) == list(NLL_COLUMNS)
    assert list(truth.columns) == list(TRUTH_COLUMNS)
    for df, cols in ((gen, GENERATION_COLUMNS), (nll, NLL_COLUMNS), (truth, TRUTH_COLUMNS)):
        assert {c: str(df[c].dtype) for c in cols} == cols
        assert not df.isna().any().any()
    # a plain pd.read_parquet of the written files gives the same columns and dtypes
    out = write_simulation(tmp_path / "sim", "small", 0)
    for name, cols in (("generations.parquet", GENERATION_COLUMNS), ("nll.parquet", NLL_COLUMNS), ("truth.parquet", TRUTH_COLUMNS)):
        back = pd.read_parquet(out / name)
        assert {c: str(back[c].dtype) for c in back.columns} == cols, name
    # the records writer stores rows sorted by split, trajectory, step, item (same rows)
    order = ["split", "trajectory", "step", "item_id"]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "generations.parquet"), gen.sort_values(order, kind="stable", ignore_index=True))
    meta = json.loads((out / "simulation.json").read_text())
    assert meta["preset"] == "small" and meta["seed"] == 0
    assert meta["parameters"]["tasks"][0]["name"] == "gsm8k"
    assert meta["counts"]["generation_rows"] == len(gen)


def test_keys_unique_and_values_valid(small):
    gen, nll, truth = small
    assert not gen.duplicated(["trajectory", "step", "split", "item_id"]).any()
    assert not nll.duplicated(["trajectory", "step", "split", "item_id", "window"]).any()
    assert set(gen["split"].unique()) == {"validation", "test"}
    assert set(nll["window"].unique()) == {MATCHED_WINDOW, COMPLETE_WINDOW}
    assert np.isfinite(nll["nll_sum"]).all() and (nll["nll_sum"] >= 0).all()
    assert (nll["n_tokens"] >= 0).all()
    assert truth["true_test_accuracy"].between(0, 1, inclusive="neither").all()


def test_category_mode_has_same_values(small):
    gen_c, nll_c, truth_c = simulate("small", seed=0, strings="category")
    gen, nll, truth = small
    for a, b in ((gen, gen_c), (nll, nll_c), (truth, truth_c)):
        assert isinstance(b["trajectory"].dtype, pd.CategoricalDtype)
        pd.testing.assert_frame_equal(a, b.astype({c: "string" for c in b.columns if b[c].dtype == "category"}))


def test_bad_input_raises():
    with pytest.raises(CkptselError, match="unknown preset"):
        simulate("huge")
    with pytest.raises(CkptselError, match="strings"):
        simulate("small", strings="object")
    with pytest.raises(CkptselError, match="seed"):
        simulate("small", seed=-1)
    with pytest.raises(CkptselError, match="item_share"):
        simulate(replace(PRESETS["small"], item_share=0.7, trajectory_item_share=0.4))


def test_determinism_byte_identical(tmp_path):
    a = write_simulation(tmp_path / "a", "small", seed=3)
    b = write_simulation(tmp_path / "b", "small", seed=3)
    c = write_simulation(tmp_path / "c", "small", seed=4)
    names = ["generations.parquet", "nll.parquet", "truth.parquet", "simulation.json"]
    for name in names:
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    for name in names[:3]:
        assert (a / name).read_bytes() != (c / name).read_bytes(), name


def test_cli_writes_files_and_rejects_bad_preset(tmp_path):
    from ckptsel.cli.simulate import simulate

    app = typer.Typer()
    app.command("simulate")(simulate)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps typer from collapsing to a single command
        pass

    res = CliRunner().invoke(app, ["simulate", str(tmp_path / "s"), "--seed", "5"])
    assert res.exit_code == 0, res.output
    for name in ("generations.parquet", "nll.parquet", "truth.parquet", "simulation.json"):
        assert (tmp_path / "s" / name).is_file()
    assert json.loads((tmp_path / "s" / "simulation.json").read_text())["seed"] == 5

    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as exc:
        main(["simulate", str(tmp_path / "t"), "--preset", "nope"])
    assert exc.value.code == 2


# ---------------------------------------------------------------------------- structure


def test_tasks_configurations_trajectories(small):
    gen, _, truth = small
    traj = truth.drop_duplicates("trajectory")
    # a configuration belongs to exactly one task; names are <configuration>-s<seed>
    assert (traj.groupby("configuration")["task"].nunique() == 1).all()
    for t, c in zip(traj["trajectory"], traj["configuration"], strict=True):
        assert t.startswith(c + "-s") and t[len(c) + 2 :].isdigit()
    assert set(truth["task"]) == {"gsm8k", "math", "commonsense"}
    per_conf = traj.groupby("configuration").size()
    assert 6 <= len(per_conf) <= 8 and per_conf.between(2, 3).all()
    # all trajectories of one configuration share the same checkpoint grid
    grids = truth.groupby("trajectory")["step"].apply(tuple)
    conf = traj.set_index("trajectory")["configuration"]
    assert (grids.groupby(conf).nunique() == 1).all()
    # all trajectories of a task see the same test items and the same validation pool
    for (_, split), g in gen.groupby(["task", "split"]):
        sets = g.groupby("trajectory")["item_id"].apply(frozenset)
        assert sets.nunique() == 1, split


def test_checkpoint_grid(small, paper):
    _, _, truth = small
    paper_truth = paper[0][2]
    offgrid = 0
    for tr in (truth, paper_truth):
        for _, t in tr.groupby("trajectory", observed=True):
            steps = t["step"].to_numpy()
            assert (np.diff(steps) > 0).all()
            assert list(steps[:-1]) == [25 * k for k in range(1, len(steps))]
            assert steps[-1] == steps.max() and 25 * (len(steps) - 1) < steps[-1] <= 25 * len(steps)
            offgrid += steps[-1] % 25 != 0
    assert offgrid > 0  # some final steps are not multiples of 25
    t_counts = truth.groupby("trajectory").size()
    assert t_counts.between(5, 12).all()


def test_groups_and_subtasks(small):
    gen, _, _ = small
    items = gen.drop_duplicates(["task", "split", "item_id"])
    val = items[items["split"] == "validation"]
    test = items[items["split"] == "test"]
    for task in ("gsm8k", "math"):
        sizes = val[val["task"] == task].groupby("group").size()
        assert sizes.max() >= 3 and (sizes >= 2).mean() > 0.4  # augmented variants
        assert (sizes == 1).any()
    cs = val[val["task"] == "commonsense"]
    assert (cs["group"] == cs["item_id"]).all()
    assert (test["group"] == test["item_id"]).all()
    # commonsense test items carry 8 subtasks of equal size; everything else has ""
    cs_test = test[test["task"] == "commonsense"]
    counts = cs_test.groupby("subtask").size()
    assert len(counts) == 8 and counts.nunique() == 1 and "" not in counts.index
    assert (items.loc[~items.index.isin(cs_test.index), "subtask"] == "").all()


def test_answers_consistent_with_correctness(small):
    gen, _, _ = small
    # one reference answer per item; a wrong answer never equals it
    ref = gen[gen["correct"]].groupby(["task", "item_id"])["answer"].agg(["nunique", "first"])
    assert (ref["nunique"] == 1).all()
    wrong = gen[~gen["correct"]].merge(ref["first"].rename("ref").reset_index(), on=["task", "item_id"], how="inner")
    assert (wrong["answer"] != wrong["ref"]).all()
    assert (gen.loc[gen["correct"], "answer"] != "").all()
    empty = (gen.loc[~gen["correct"], "answer"] == "").mean()
    assert 0.01 < empty < 0.2
    # commonsense answers are labels of the item's subtask pattern
    cs = gen[(gen["task"] == "commonsense") & (gen["answer"] != "")]
    assert cs["answer"].str.fullmatch(r"true|false|solution[12]|answer[1-5]|ending[1-4]|option[12]").all()
    # wrong answers are shared: per item, few distinct wrong answers across all its rows
    distinct = gen[~gen["correct"]].groupby(["task", "item_id"])["answer"].nunique()
    assert distinct.max() <= 4 and distinct.mean() < 3


def _pluralities(gen: pd.DataFrame) -> pd.DataFrame:
    """Per (trajectory, item): top answer count, whether it is tied, whether the first-in-step-
    order plurality answer is correct."""
    g = gen.sort_values(["trajectory", "item_id", "step"])
    counts = g.groupby(["trajectory", "item_id", "answer"], sort=False).size().rename("n")
    counts = counts.reset_index()
    top = counts.groupby(["trajectory", "item_id"])["n"].transform("max")
    best = counts[counts["n"] == top]
    tied = best.groupby(["trajectory", "item_id"]).size() > 1
    first = best.groupby(["trajectory", "item_id"]).head(1).set_index(["trajectory", "item_id"])
    right = g[g["correct"]].drop_duplicates(["trajectory", "item_id"]).set_index(["trajectory", "item_id"])["answer"]
    out = pd.DataFrame({"tied": tied})
    out["plurality_correct"] = first["answer"].reindex(out.index).eq(right.reindex(out.index))
    return out


def test_plurality_ties_and_wrong_pluralities(small):
    gen, _, _ = small
    pl = _pluralities(gen[gen["split"] == "validation"])
    assert pl["tied"].mean() > 0.02  # exact plurality ties happen
    # some pluralities are wrong answers even though the item is answered right somewhere
    assert (~pl["plurality_correct"]).mean() > 0.05


def test_accuracy_count_ties_at_budget_32(small):
    gen, _, _ = small
    val = gen[gen["split"] == "validation"]
    ties = 0
    for _, g in val.groupby("trajectory"):
        t_count = g["step"].nunique()
        full = g.groupby("item_id")["step"].transform("size") == t_count
        first32 = sorted(g.loc[full, "item_id"].unique())[:32]
        counts = g[g["item_id"].isin(first32)].groupby("step")["correct"].sum()
        ties += int((counts == counts.max()).sum() > 1)
    assert ties >= 2  # exact ties at the best count in several trajectories


def test_exclusions_only_on_validation(small):
    gen, nll, truth = small
    t_count = truth.groupby("trajectory").size().rename("T")
    n_items = gen.groupby(["trajectory", "split"])["item_id"].nunique().rename("items")

    def missing(df: pd.DataFrame, per_cell: int) -> pd.Series:
        rows = df.groupby(["trajectory", "split"]).size().rename("rows")
        j = pd.concat([rows, n_items], axis=1).join(t_count, on="trajectory")
        return j["T"] * j["items"] * per_cell - j["rows"]

    miss_gen, miss_nll = missing(gen, 1), missing(nll, 2)
    assert (miss_gen.xs("test", level="split") == 0).all()
    assert (miss_nll.xs("test", level="split") == 0).all()
    assert miss_gen.xs("validation", level="split").sum() > 0
    assert miss_nll.xs("validation", level="split").sum() > 0
    # empty supervised sequences (prompt fills the window): validation only, some of them
    zero = nll[(nll["window"] == MATCHED_WINDOW) & (nll["n_tokens"] == 0)]
    assert len(zero) > 0 and (zero["split"] == "validation").all()
    assert (zero["nll_sum"] == 0).all()
    assert (nll.loc[nll["window"] == COMPLETE_WINDOW, "n_tokens"] > 0).all()


def test_token_counts_and_windows(small):
    _, nll, _ = small
    per_item = nll.groupby(["trajectory", "split", "item_id", "window"])["n_tokens"].nunique()
    assert (per_item == 1).all()  # constant across checkpoints
    wide = nll.pivot_table(
        index=["trajectory", "step", "split", "item_id"], columns="window", values=["n_tokens", "nll_sum"], aggfunc="first"
    )
    n512, n0 = wide[("n_tokens", MATCHED_WINDOW)], wide[("n_tokens", COMPLETE_WINDOW)]
    s512, s0 = wide[("nll_sum", MATCHED_WINDOW)], wide[("nll_sum", COMPLETE_WINDOW)]
    assert (n512 <= n0).all() and (s512 <= s0 + 1e-9).all()
    assert (n512 < n0).any()  # some long responses are truncated by the 512 window
    same = n512 == n0
    np.testing.assert_array_equal(s512[same], s0[same])  # untruncated: identical scores


def test_nll_minimum_early_then_rises(small):
    _, nll, _ = small
    v = nll[(nll["split"] == "validation") & (nll["window"] == MATCHED_WINDOW)]
    agg = v.groupby(["trajectory", "step"])[["nll_sum", "n_tokens"]].sum()
    ratio = agg["nll_sum"] / agg["n_tokens"]
    pos, rises = [], []
    for _, r in ratio.groupby(level="trajectory"):
        r = r.to_numpy()
        pos.append(np.argmin(r) / (len(r) - 1))
        rises.append(r[-1] > r.min())
    assert np.mean(pos) < 0.45
    assert np.mean(rises) > 0.8


def test_loss_weakly_related_to_correctness(small):
    gen, nll, _ = small
    v = nll[(nll["window"] == COMPLETE_WINDOW) & (nll["split"] == "test")]
    m = gen.merge(v, on=["trajectory", "step", "split", "item_id"])
    per_token = m["nll_sum"] / m["n_tokens"]
    z = per_token.groupby([m["trajectory"], m["step"]]).transform(lambda s: np.log(s) - np.log(s).mean())
    diff = z[m["correct"]].mean() - z[~m["correct"]].mean()
    assert -0.6 < diff < -0.05  # right answers have lower reference NLL, but only somewhat


# ---------------------------------------------------------------------------- known answers


def test_norm_ppf_matches_statistics():
    p = np.array([1e-12, 1e-6, 0.001, 0.02, 0.02425, 0.1, 0.3, 0.5, 0.7, 0.97575, 0.999, 1 - 1e-9])
    ref = np.array([statistics.NormalDist().inv_cdf(x) for x in p])
    np.testing.assert_allclose(norm_ppf(p), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(norm_cdf(norm_ppf(p)), p, rtol=1e-10)
    assert norm_ppf(np.array([0.0]))[0] == -math.inf and norm_ppf(np.array([1.0]))[0] == math.inf


def test_empirical_test_accuracy_matches_truth_on_large_pool():
    gen, _, truth = simulate(_one_task_spec(), seed=11)
    test = gen[gen["split"] == "test"]
    acc = test.groupby("step")["correct"].mean()
    p = truth.set_index("step")["true_test_accuracy"]
    se = np.sqrt(p * (1 - p) / 20000)
    assert (np.abs(acc - p) < 4 * se).all(), (acc - p) / se
    # neighbouring checkpoints agree more than distant ones (AR(1) along checkpoints)
    wide = test.pivot(index="item_id", columns="step", values="correct").to_numpy()
    agree = [np.mean(wide[:, 0] == wide[:, k]) for k in range(1, wide.shape[1])]
    assert all(a > b for a, b in zip(agree, agree[1:], strict=False))
    assert 0.75 < agree[0] < 0.95


def test_small_preset_accuracy_within_sampling_error(small):
    gen, _, truth = small
    acc = gen[gen["split"] == "test"].groupby(["trajectory", "step"])["correct"].agg(["mean", "size"])
    p = truth.set_index(["trajectory", "step"])["true_test_accuracy"].reindex(acc.index)
    z = (acc["mean"] - p) / np.sqrt(p * (1 - p) / acc["size"])
    assert np.abs(z).max() < 5


def test_planted_gain_scale():
    """The late decline (what picking an earlier checkpoint can gain) scales with gain_scale."""
    spec = replace(PRESETS["small"], decline_prob=1.0, checkpoints=(8, 8))

    def gain(scale: float) -> float:
        truth = simulate(replace(spec, gain_scale=scale), seed=2)[2]
        g = truth.groupby("trajectory")["true_test_accuracy"]
        return float((g.max() - g.last()).mean() * 100)

    assert gain(4.0) > gain(0.0) + 2.0


# ---------------------------------------------------------------------------- paper scale


def test_paper_preset_sizes_and_speed(paper):
    (gen, nll, truth), elapsed = paper
    assert elapsed < 15, f"paper preset took {elapsed:.1f} s"
    traj = truth.drop_duplicates("trajectory")
    assert len(traj) == 81 and traj["configuration"].nunique() == 26
    t_counts = truth.groupby("trajectory", observed=True).size()
    assert t_counts.min() >= 10 and t_counts.max() <= 31
    items = gen.drop_duplicates(["task", "split", "item_id"]).groupby(["task", "split"], observed=True).size()
    assert items.xs("validation", level="split").to_dict() == {"gsm8k": 1024, "math": 512, "commonsense": 305}
    assert items.xs("test", level="split").to_dict() == {"gsm8k": 1319, "math": 500, "commonsense": 4000}
    windows = nll["window"].value_counts()
    assert set(windows.index) == {MATCHED_WINDOW, COMPLETE_WINDOW} and windows.nunique() == 1
    assert abs(len(nll) - 2 * len(gen)) < 0.001 * len(gen)  # only a few validation rows dropped
    g = truth.groupby("trajectory", observed=True)["true_test_accuracy"]
    spread = (g.max() - g.min()) * 100
    assert 2.5 < spread.median() < 5.0  # paper: median best-to-worst 3.5 pp
    assert ((g.max() - g.last()) * 100 > 1.0).sum() >= 10  # earlier checkpoints truly better
