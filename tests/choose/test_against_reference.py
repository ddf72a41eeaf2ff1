"""The engine against an independent loop-based reference (issue 2: "How we will know it is right").

Every selection vector of ``choose_trajectory``, every column of ``per_trajectory.csv`` and every
point estimate of ``summary.json`` is recomputed by ``tests/reference_impl.py`` (plain loops
written from SPEC §3–§6) on random small studies built to be hard: few answers and few
checkpoints (many exact ties, plurality ties), pools around the budget thresholds (budgets
skipped), groups with several variants, excluded items, one-checkpoint and all-identical
trajectories. The reference itself is pinned by hand-computed cases first, so that agreement
is not two copies of one mistake.
"""

from __future__ import annotations

import inspect
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ckptsel.choose.choices import choose_trajectory
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.records.load import load_validation
from ckptsel.workflows.analysis import analyze

import recordsgen as rg
import reference_impl as ref

TOL = 1e-9
SUMMARY_TOL = 5e-7 + 1e-12  # summary.json stores estimates rounded to 6 decimals
SECTIONS = ("budget", "D", "matched_half", "sensitivities")
# figures and report.html are not what is compared here and cost seconds per study
NO_REPORT = {"report": False} if "report" in inspect.signature(analyze).parameters else {}


# --------------------------------------------------------------------------- helpers
def _means(node):
    """Keep only the point estimates ("mean") of a summary.json subtree (notes such as "skipped" go)."""
    if isinstance(node, dict):
        if "mean" in node:
            return node["mean"]
        return {k: _means(v) for k, v in node.items() if not isinstance(v, str)}
    return node


def _compare_tree(engine, reference, path: str, problems: list[str]) -> None:
    if isinstance(engine, dict) or isinstance(reference, dict):
        if not (isinstance(engine, dict) and isinstance(reference, dict)):
            problems.append(f"{path}: engine {engine!r} vs reference {reference!r}")
            return
        if set(engine) != set(reference):
            problems.append(
                f"{path}: keys engine-only {sorted(set(engine) - set(reference))}, reference-only {sorted(set(reference) - set(engine))}"
            )
        for key in sorted(set(engine) & set(reference)):
            _compare_tree(engine[key], reference[key], f"{path}/{key}", problems)
    elif engine is None or reference is None or not math.isclose(engine, reference, rel_tol=0, abs_tol=SUMMARY_TOL):
        problems.append(f"{path}: engine {engine} vs reference {reference}")


def compare_study(
    trajs: list[rg.Traj] | tuple[pd.DataFrame, pd.DataFrame],
    tmp: Path,
    permutations: int = 20,
    seed: int = 7,
    draws: int = 200,
    budgets: tuple[int, ...] | None = None,
) -> ref.RefStudy:
    """Run engine and reference on one study; assert every output agrees. Returns the reference.

    ``budgets`` (None: the default) go to both the reference and ``analyze(budgets=...)``."""
    gen, nll = trajs if isinstance(trajs, tuple) else rg.tables(trajs)
    rec = rg.write(tmp / "records", gen, nll)
    study = ref.analyze_reference(ref.trajectories_from_tables(gen, nll), permutations, seed, budgets or ref.BUDGETS)
    problems: list[str] = []

    # 1. every frozen selection vector
    settings = ChoiceSettings(permutations=permutations, seed=seed, budgets=budgets or ref.BUDGETS)
    validation = load_validation(rec)
    assert sorted(v.trajectory for v in validation) == sorted(study.vectors)
    for v in validation:
        engine = choose_trajectory(v, settings)
        mine = study.vectors[v.trajectory]
        if set(engine) != set(mine):
            problems.append(
                f"{v.trajectory}: vector keys engine-only {sorted(set(engine) - set(mine))}, "
                f"reference-only {sorted(set(mine) - set(engine))}"
            )
        for key in sorted(set(engine) & set(mine)):
            if np.max(np.abs(np.asarray(engine[key]) - np.asarray(mine[key]))) > TOL:
                problems.append(f"{v.trajectory} {key}: engine {engine[key].tolist()} vs reference {mine[key]}")

    # 2. every per-trajectory quantity of the whole pipeline
    out = tmp / "out"
    extra = {} if budgets is None else {"budgets": budgets}
    summary = analyze(rec, out, permutations=permutations, draws=draws, seed=seed, **NO_REPORT, **extra)
    table = pd.read_csv(out / "tables" / "per_trajectory.csv")
    columns = [c for c in table.columns if c not in ("trajectory", "configuration", "task")]
    expected_columns = sorted({name for q in study.quantities.values() for name in q})
    if sorted(columns) != expected_columns:
        problems.append(
            f"per_trajectory columns: engine-only {sorted(set(columns) - set(expected_columns))}, "
            f"reference-only {sorted(set(expected_columns) - set(columns))}"
        )
    assert sorted(table["trajectory"]) == sorted(study.quantities)
    for _, row in table.iterrows():
        mine = study.quantities[row["trajectory"]]
        for col in columns:
            got, want = row[col], mine.get(col)
            if want is None:
                if not pd.isna(got):
                    problems.append(f"{row['trajectory']} {col}: engine {got} but the reference has no value")
            elif pd.isna(got) or abs(got - want) > TOL:
                problems.append(f"{row['trajectory']} {col}: engine {got} vs reference {want}")

    # 3. summary point estimates (trajectory-weighted means), overall and by task
    with open(out / "summary.json") as fh:
        on_disk = json.load(fh)
    assert _means(on_disk["budget"]) == _means(summary.to_dict()["budget"])
    mine = ref.summary_means(study)
    _compare_tree({k: _means(on_disk[k]) for k in SECTIONS}, {k: mine[k] for k in SECTIONS}, "summary", problems)
    for task, block in on_disk.get("by_task", {}).items():
        mine_task = ref.summary_means(study, task)
        keys = [k for k in SECTIONS if k in block]
        assert {"budget", "D", "matched_half"} <= set(keys)
        _compare_tree({k: _means(block[k]) for k in keys}, {k: mine_task[k] for k in keys}, f"by_task/{task}", problems)
    assert not problems, "engine disagrees with the reference:\n" + "\n".join(problems[:40])
    return study


def _traj(name, config, task, correct, answers, nll, tokens, test_correct, test_answers, **kw) -> rg.Traj:
    correct = np.asarray(correct, dtype=bool)
    T = correct.shape[0]
    return rg.Traj(
        name=name,
        configuration=config,
        task=task,
        steps=[25 * (c + 1) for c in range(T)],
        val_correct=correct,
        val_answers=np.asarray(answers, dtype=str),
        val_nll=np.asarray(nll, dtype=float),
        val_tokens=np.asarray(tokens),
        test_correct=np.asarray(test_correct, dtype=bool),
        test_answers=np.asarray(test_answers, dtype=str),
        **kw,
    )


# --------------------------------------------------------------------------- the reference, by hand
def test_reference_building_blocks_by_hand() -> None:
    assert ref.plurality(["b", "a", "a", "b"]) == "b"  # tie: first in ascending step order
    assert ref.plurality(["", "x", ""]) == ""  # the empty answer is an answer like any other
    assert ref.plurality(["a", "b", "c", "c"]) == "c"
    assert ref.thinned(7, 3) == [0, 3, 6]
    assert ref.thinned(4, 2) == [1, 3]
    assert ref.thinned(5, 4) == [0, 4]
    assert ref.thinned(1, 2) == [0]
    assert ref.uniform_over_best({0: 3, 1: 5, 2: 5}, True, 3) == [0.0, 0.5, 0.5]
    assert ref.uniform_over_best({1: 0.25, 3: 0.5}, False, 4) == [0.0, 1.0, 0.0, 0.0]
    assert ref.gain([0.5, 0.5, 0.0], [60.0, 80.0, 50.0]) == pytest.approx(20.0)


def test_hand_computed_trajectory_matches_engine_and_reference(tmp_path: Path) -> None:
    """Three checkpoints, four validation items, four test items; every number worked by hand.

    validation correct (c × item): c0 1100, c1 1110, c2 1110 → accuracy counts 2,3,3 → [0,½,½]
    answers: item0 a,a,b → a; item1 a,b,b → b; item2 x,y,z → x (3-way tie, first); item3 q,q,r → q
      agreement counts: c0 a,a,x,q → 1+0+1+1 = 3; c1 a,b,y,q → 1+1+0+1 = 3; c2 b,b,z,r → 0+1+0+0 = 1
      → [½, ½, 0]
    nll sums (tokens 1 each): c0 4, c1 3, c2 3.5 → c1 → [0,1,0]
    test accuracy: c0 2/4, c1 3/4, c2 1/4 → A = 50, 75, 25; G_acc = ½·75 + ½·25 − 25 = 25,
      G_agr = ½·50 + ½·75 − 25 = 37.5, G_nll = 75 − 25 = 50, H_acc = −25, H_agr = −12.5.
    """
    t = _traj(
        "h",
        "cfg",
        "task",
        correct=[[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 0]],
        answers=[["a", "a", "x", "q"], ["a", "b", "y", "q"], ["b", "b", "z", "r"]],
        nll=[[1, 1, 1, 1], [0.5, 0.5, 1, 1], [1, 1, 1, 0.5]],
        tokens=[1, 1, 1, 1],
        test_correct=[[1, 1, 0, 0], [1, 1, 1, 0], [1, 0, 0, 0]],
        test_answers=[["1", "2", "3", "4"]] * 3,
    )
    study = compare_study([t], tmp_path, permutations=5)
    v, q = study.vectors["h"], study.quantities["h"]
    assert v[("nested", "accuracy", "full")] == [0.0, 0.5, 0.5]
    assert v[("nested", "agreement", "full")] == [0.5, 0.5, 0.0]
    assert v[("nested", "nll", "full")] == [0.0, 1.0, 0.0]
    assert v[("nested", "last", "full")] == [0.0, 0.0, 1.0]
    assert q["G|nested|accuracy|full"] == pytest.approx(25.0)
    assert q["G|nested|agreement|full"] == pytest.approx(37.5)
    assert q["G|nested|nll|full"] == pytest.approx(50.0)
    assert q["H|nested|accuracy|full"] == pytest.approx(-25.0)
    assert q["H|nested|agreement|full"] == pytest.approx(-12.5)
    assert "G|nested|accuracy|32" not in q and "D|nested|accuracy" not in q  # pool of 4 < 32
    # thin2 keeps c0? no: counted back from the final one → c2, c0; agreement recomputed on {c0, c2}:
    # item0 a,b → a; item1 a,b → a; item2 x,z → x; item3 q,r → q → c0 scores 4, c2 scores 0
    assert v[("thin2", "agreement", "full")] == [1.0, 0.0, 0.0]
    assert v[("thin2", "accuracy", "full")] == [0.0, 0.0, 1.0]  # counts 2 vs 3 on {c0, c2}


# --------------------------------------------------------------------------- random studies
def _shape(seed: int) -> dict:
    """A varied, tie-heavy study shape per seed."""
    r = np.random.default_rng(1000 + seed)
    big = seed % 5 == 0
    return dict(
        n_configs=int(r.integers(1, 4)),
        seeds=int(r.integers(1, 3)),
        T=(2, 6) if seed % 3 else (2, 4),
        n_val=(60, 140) if big else (20, 70),
        n_test=(8, 40),
        n_answers=int(r.integers(2, 4)),
        tasks=("a", "b") if seed % 2 else ("a",),
        groups=seed % 4 != 3,
        nll0=seed % 6 != 5,
    )


@pytest.mark.parametrize("seed", range(36))
def test_random_study_matches_reference(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    compare_study(rg.random_study(rng, **_shape(seed)), tmp_path, permutations=20, seed=seed + 11)


@pytest.mark.parametrize("seed", [100, 101, 102])
def test_random_study_many_permutations(seed: int, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    trajs = rg.random_study(rng, n_configs=3, seeds=2, T=(2, 5), n_val=(30, 80), n_test=(10, 30), n_answers=2)
    compare_study(trajs, tmp_path, permutations=200)


def test_large_pool_reaches_every_budget(tmp_path: Path) -> None:
    """A pool past 256 items: every nested budget and one-variant budgets 32/64 are exercised."""
    rng = np.random.default_rng(12)
    trajs = rg.random_study(rng, n_configs=2, seeds=1, T=(3, 6), n_val=(260, 300), n_test=(20, 40), tasks=("a",))
    study = compare_study(trajs, tmp_path)
    keys = {k for vecs in study.vectors.values() for k in vecs}
    assert ("nested", "accuracy", "256") in keys and ("one_variant", "nll", "64") in keys


def test_plurality_ties_two_answers_even_grid(tmp_path: Path) -> None:
    """Two answers on 2 or 4 checkpoints: most items tie, so the first-in-step-order rule decides."""
    rng = np.random.default_rng(7)
    trajs = rg.random_study(rng, n_configs=3, seeds=2, T=(2, 3), n_val=(30, 50), n_test=(10, 20), n_answers=2, tasks=("p",))
    trajs += rg.random_study(
        np.random.default_rng(8), n_configs=2, seeds=1, T=(4, 5), n_val=(30, 50), n_test=(10, 20), n_answers=2, tasks=("q",)
    )
    for i, t in enumerate(trajs):
        t.name, t.configuration = f"{t.name}-{i}", f"{t.configuration}-{t.task}"
    study = compare_study(trajs, tmp_path)
    assert any(len(t.steps) == 4 for t in study.trajectories)


def test_continuous_nll_values(tmp_path: Path) -> None:
    """Non-dyadic NLL: no exact ties, sums along the permutation order decide."""
    rng = np.random.default_rng(21)
    compare_study(rg.random_study(rng, n_configs=2, seeds=2, dyadic=False, n_val=(40, 90)), tmp_path)


def test_budgets_differ_between_tasks(tmp_path: Path) -> None:
    """Task pools on both sides of 32 and 64: budget means run over the trajectories that have them."""
    trajs = []
    for task, nv, seedk in (("small", 25, 1), ("mid", 50, 2), ("large", 140, 3)):
        part = rg.random_study(np.random.default_rng(seedk), n_configs=2, seeds=2, n_val=(nv, nv + 1), tasks=(task,))
        for t in part:
            t.name, t.configuration = f"{task}-{t.name}", f"{task}-{t.configuration}"
        trajs += part
    study = compare_study(trajs, tmp_path)
    assert ref.mean_over(study, "G|nested|accuracy|128") is not None
    assert ref.mean_over(study, "G|nested|accuracy|32", task="small") is None


# --------------------------------------------------------------------------- edge cases
def test_single_checkpoint_trajectory(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    trajs = rg.random_study(rng, n_configs=2, seeds=2, T=(1, 2), tasks=("a",))
    trajs += rg.random_study(np.random.default_rng(4), n_configs=1, seeds=2, T=(3, 5), tasks=("b",))
    trajs[-1].name, trajs[-2].name = "multi-1", "multi-0"
    trajs[-1].configuration = trajs[-2].configuration = "multi"
    study = compare_study(trajs, tmp_path)
    single = [t for t in study.trajectories if len(t.steps) == 1]
    assert single
    for t in single:
        assert all(vec == pytest.approx([1.0]) for vec in study.vectors[t.name].values())
        assert all(abs(v) < TOL for k, v in study.quantities[t.name].items() if not k.startswith("same"))


def test_validation_pool_smaller_than_32(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    study = compare_study(rg.random_study(rng, n_configs=2, seeds=2, n_val=(6, 20)), tmp_path)
    for q in study.quantities.values():
        assert not any(k.endswith("|32") or k.startswith("D|") for k in q)


def test_identical_checkpoints_all_tied(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    trajs = rg.random_study(rng, n_configs=2, seeds=1, T=(3, 5), tasks=("a",))
    for t in trajs:
        for arr in (t.val_correct, t.val_answers, t.val_nll, t.test_correct, t.test_answers, t.val_nll0):
            arr[:] = arr[0]
    study = compare_study(trajs, tmp_path)
    for t in study.trajectories:
        T = len(t.steps)
        for (scheme, rule, _), vec in study.vectors[t.name].items():
            if rule == "last":
                continue
            kept = ref.thinned(T, int(scheme[4:])) if scheme.startswith("thin") else range(T)
            assert vec == pytest.approx([1 / len(kept) if c in kept else 0.0 for c in range(T)])
        assert all(abs(v) < TOL for k, v in study.quantities[t.name].items() if not k.startswith("same"))


def test_excluded_validation_items(tmp_path: Path) -> None:
    """Items missing a record at one checkpoint (or with no tokens) leave the eligible pool."""
    rng = np.random.default_rng(9)
    trajs = rg.random_study(rng, n_configs=2, seeds=2, n_val=(40, 60), tasks=("a",))
    gen, nll = rg.tables(trajs)
    drop_gen = (gen["trajectory"] == "c0-s0") & (gen["split"] == "validation") & (gen["item_id"] == "v0003") & (gen["step"] == 50)
    drop_nll = (nll["trajectory"] == "c1-s1") & (nll["item_id"] == "v0005") & (nll["step"] == 25)
    gen, nll = gen[~drop_gen].reset_index(drop=True), nll[~drop_nll].reset_index(drop=True)
    empty = (nll["trajectory"] == "c0-s1") & (nll["item_id"] == "v0001")
    nll.loc[empty, "n_tokens"] = 0
    study = compare_study((gen, nll), tmp_path)
    excluded = {t.name: t.excluded for t in study.trajectories}
    assert excluded == {"c0-s0": 1, "c0-s1": 1, "c1-s0": 0, "c1-s1": 1}


def test_simulated_small_preset(tmp_path: Path) -> None:
    """Realistic records: off-grid final steps, excluded items, empty answers, continuous NLL, subtasks."""
    from ckptsel.sim.simulate import simulate

    gen, nll, _ = simulate("small", seed=3)
    study = compare_study((gen, nll), tmp_path, permutations=20)
    assert sum(t.excluded for t in study.trajectories) > 0


# --------------------------------------------------------------------------- the comparison has teeth
def _first_of_ties(scores: dict[int, float], maximize: bool, n_checkpoints: int) -> list[float]:
    best = max(scores.values()) if maximize else min(scores.values())
    probs = [0.0] * n_checkpoints
    probs[next(c for c, s in scores.items() if s == best)] = 1.0
    return probs


def _last_of_plurality_ties(answers) -> str:
    counts = {a: list(answers).count(a) for a in answers}
    return [a for a in answers if counts[a] == max(counts.values())][-1]


def _mean_of_item_means(t, rule, subset, grid=None, window=512, utilities=None):
    if rule != "nll":
        return _original_select(t, rule, subset, grid, window, utilities)
    T = len(t.steps)
    grid = list(range(T)) if grid is None else list(grid)
    scores = {c: sum(t.val_nll[window][c][i] / t.val_tokens[window][i] for i in subset) for c in grid}
    return ref.uniform_over_best(scores, False, T)


_original_select = ref.select


@pytest.mark.parametrize(
    "name, broken",
    [
        ("uniform_over_best", _first_of_ties),  # ties broken by argmax instead of averaged
        ("plurality", _last_of_plurality_ties),  # plurality ties to the wrong checkpoint
        ("select", _mean_of_item_means),  # full-budget NLL as a mean of per-item means
        ("thinned", lambda n, k: list(range(0, n, k))),  # thinning counted from the first checkpoint
    ],
)
def test_comparison_detects_a_wrong_definition(name, broken, tmp_path: Path, monkeypatch) -> None:
    """A deliberately wrong reference must be caught, so agreement above means something."""
    rng = np.random.default_rng(7)
    trajs = rg.random_study(rng, n_configs=3, seeds=2, T=(4, 7), n_val=(30, 50), n_test=(10, 20), n_answers=2, tasks=("p",))
    monkeypatch.setattr(ref, name, broken)
    with pytest.raises(AssertionError, match="disagrees with the reference"):
        compare_study(trajs, tmp_path, permutations=10)


def test_pool_exactly_at_budgets(tmp_path: Path) -> None:
    """Pools of exactly 32 and 64 items (budget == pool is kept, next to "full"); 32 singleton groups."""
    trajs = []
    for task, nv in (("x", 32), ("y", 64)):
        part = rg.random_study(np.random.default_rng(nv), n_configs=1, seeds=2, n_val=(nv, nv + 1), tasks=(task,), groups=False)
        for t in part:
            t.name, t.configuration = f"{task}-{t.name}", f"{task}-{t.configuration}"
        trajs += part
    study = compare_study(trajs, tmp_path)
    labels = {t.name: {lab for (s, _, lab) in study.vectors[t.name] if s == "one_variant"} for t in study.trajectories}
    assert labels["x-c0-s0"] == {"32", "full"}
    assert labels["y-c0-s0"] == {"32", "64", "full"}


def test_every_trajectory_single_checkpoint(tmp_path: Path) -> None:
    """Nothing can be thinned anywhere: the thinning sensitivity is absent, every gain is 0."""
    rng = np.random.default_rng(13)
    study = compare_study(rg.random_study(rng, n_configs=2, seeds=2, T=(1, 2)), tmp_path)
    assert ref.summary_means(study)["sensitivities"]["thinning"] == {}


# --------------------------------------------------------------------------- budgets as a setting
def test_budgets_setting_reaches_512_and_d_from_32(tmp_path: Path) -> None:
    """``budgets=(32, 128, 512)`` on pools of >= 512 items: G(512) is reported, D is full − 32,
    the one-variant sensitivity keeps the budgets its groups fit (not 512), and every vector and
    estimate equals the loop reference run with the same budgets."""
    rng = np.random.default_rng(512)
    trajs = rg.random_study(rng, n_configs=3, seeds=1, T=(3, 5), n_val=(520, 560), n_test=(20, 40), tasks=("a",))
    study = compare_study(trajs, tmp_path, permutations=8, budgets=(32, 128, 512))
    keys = {k for vecs in study.vectors.values() for k in vecs}
    assert ("nested", "accuracy", "512") in keys and ("nested", "accuracy", "64") not in keys
    assert ("one_variant", "accuracy", "128") in keys
    assert ("one_variant", "accuracy", "512") not in keys  # fewer than 512 groups
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["budgets"] == [32, 128, 512] and summary["D_from"] == 32
    assert set(summary["budget"]["accuracy"]) == {"32", "128", "512", "full"}
    # D is G(full) − G(32) per trajectory, so its mean is the difference of the means
    for rule in ("accuracy", "agreement", "nll"):
        g = summary["budget"][rule]
        assert summary["D"][rule]["mean"] == pytest.approx(g["full"]["G"]["mean"] - g["32"]["G"]["mean"], abs=2e-6)
    main = (tmp_path / "out" / "tables" / "main.md").read_text()
    assert "D_r (full − 32)" in main


def test_budgets_setting_d_from_smallest_and_verify(tmp_path: Path) -> None:
    """Budgets without 32: D runs from the smallest (50), the outputs say so, and ``verify``
    reproduces the results with the recorded budgets (hashed with the choices)."""
    from ckptsel.workflows.analysis import verify

    rng = np.random.default_rng(50)
    trajs = rg.random_study(rng, n_configs=2, seeds=2, T=(3, 5), n_val=(210, 230), n_test=(15, 30), tasks=("a", "b"))
    study = compare_study(trajs, tmp_path, permutations=6, budgets=(200, 50))
    assert any("D|nested|accuracy" in q for q in study.quantities.values())
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["budgets"] == [50, 200] and summary["D_from"] == 50
    assert "32" not in summary["budget"]["accuracy"]
    assert "D_r (full − 50)" in (out / "tables" / "main.md").read_text()
    hashed = json.loads((out / "choices" / "choices.sha256").read_text())
    assert hashed["settings"]["budgets"] == [50, 200]
    assert any("reproduced exactly" in line for line in verify(out))


def test_default_budgets_are_not_written(tmp_path: Path) -> None:
    """Default budgets leave summary.json and the hashed settings as they were (byte-stable)."""
    trajs = rg.random_study(np.random.default_rng(3), n_configs=2, seeds=1, n_val=(40, 50))
    gen, nll = rg.tables(trajs)
    rec = rg.write(tmp_path / "records", gen, nll)
    a = analyze(rec, tmp_path / "a", permutations=4, draws=50, **NO_REPORT)
    b = analyze(rec, tmp_path / "b", permutations=4, draws=50, budgets=(64, 32, 256, 128), **NO_REPORT)
    assert a.budgets is None and a.D_from is None and b == a
    assert "budgets" not in a.to_dict() and "D_from" not in a.to_dict()
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    assert ChoiceSettings(budgets=(64, 32, 256, 128)).to_dict() == {
        "permutations": ChoiceSettings().permutations,
        "seed": ChoiceSettings().seed,
    }


@pytest.mark.parametrize("bad", ["32,x", "0,32", "", "-5", "32,,1e3"])
def test_bad_budgets_are_one_clear_error(bad: str) -> None:
    from ckptsel.choose.settings import parse_budgets
    from ckptsel.errors import CkptselError

    with pytest.raises(CkptselError, match="budgets"):
        parse_budgets(bad)


def test_parse_budgets_sorts_and_dedups() -> None:
    from ckptsel.choose.settings import parse_budgets

    assert parse_budgets("1024, 32,128,512,32") == (32, 128, 512, 1024)


def test_nothing_is_cut_silently_from_the_budgets() -> None:
    """Repeated budgets are used once and budgets larger than a pool are skipped, as SPEC §4
    says; each is said in one line (``analyze`` prints them as notes)."""
    from ckptsel.choose.settings import budget_notes, parse_budget_list

    assert parse_budget_list("32,32,5000") == [32, 32, 5000]
    notes = budget_notes([32, 32, 5000, 100], pool_sizes=[120, 80, 150])
    assert notes[0] == "budgets: 32 given more than once (each is used once)"
    assert "budget 100 is larger than the eligible validation pool of 1 of 3 trajectories" in notes[1]
    assert "budget 5000 is larger than every trajectory's eligible validation pool (at most 150" in notes[2]
    assert len(notes) == 3 and budget_notes([32, 64], [120]) == []


def test_analyze_says_what_it_does_with_the_budgets(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from ckptsel.cli import app

    trajs = rg.random_study(np.random.default_rng(9), n_configs=2, seeds=1, T=(3, 4), n_val=(100, 130), tasks=("a",))
    rec = rg.write(tmp_path / "records", *rg.tables(trajs))
    res = CliRunner().invoke(
        app,
        [
            "analyze",
            str(rec),
            "--permutations",
            "3",
            "--draws",
            "50",
            "--no-report",
            "--out",
            str(tmp_path / "o"),
            "--budgets",
            "32,32,5000",
        ],
    )
    assert res.exit_code == 0, res.output
    assert "note: budgets: 32 given more than once (each is used once)" in res.output
    assert "note: budget 5000 is larger than every trajectory's eligible validation pool" in res.output
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["budgets"] == [32, 5000]


def test_analyze_cli_budgets(tmp_path: Path, capsys) -> None:
    """``ckptsel analyze --budgets 32,128,512``: the terminal table names D's budget, summary.json
    the budgets and G(512); a bad list exits 2 with one error naming --budgets."""
    from typer.testing import CliRunner

    from ckptsel.cli import app

    trajs = rg.random_study(np.random.default_rng(9), n_configs=2, seeds=1, T=(3, 4), n_val=(515, 530), tasks=("a",))
    gen, nll = rg.tables(trajs)
    rec = rg.write(tmp_path / "records", gen, nll)
    base = ["analyze", str(rec), "--permutations", "3", "--draws", "50", "--no-report"]
    res = CliRunner().invoke(app, [*base, "--out", str(tmp_path / "o"), "--budgets", "32,128,512"])
    assert res.exit_code == 0, res.output
    assert "validation budgets: 32, 128, 512, full; D_r = G_r(full) − G_r(32)" in res.output
    summary = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["budgets"] == [32, 128, 512] and summary["D_from"] == 32
    assert "G" in summary["budget"]["accuracy"]["512"]
    from ckptsel.cli.app import main

    with pytest.raises(SystemExit) as exc:
        main([*base, "--out", str(tmp_path / "p"), "--budgets", "32,x"])
    assert exc.value.code == 2
    assert "--budgets" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
