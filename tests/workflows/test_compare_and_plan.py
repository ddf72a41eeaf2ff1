"""`ckptsel compare` and `ckptsel plan`: hand-computed McNemar and 2×2 tables, the clustered
bootstrap against a plain loop, single-item groups = the unclustered bootstrap exactly, the
pilot resampling against a loop, and the closed form against simulation."""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from ckptsel.cli.app import main
from ckptsel.errors import CkptselError
from ckptsel.stats.distributions import norm_cdf
from ckptsel.stats.paired import mcnemar_exact, two_by_two
from ckptsel.stats.resample import cluster_codes, clustered_means, draw_counts, resample_counts
from ckptsel.workflows.advise.comparison import CompareSettings, compare_checkpoints, paired_difference
from ckptsel.workflows.advise.planning import (
    PilotMoments,
    PlanSettings,
    calibrated_curves,
    closed_form,
    default_budgets,
    pilot_curves,
    plan_from_pilot,
)

import recordsgen as rg

STEPS = [10, 20, 30]


def run(argv: list[str]) -> None:
    """Run the CLI; a successful command exits 0."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 0


# --------------------------------------------------------------------------- primitives
def test_mcnemar_hand_computed():
    # 2 vs 8 discordant: P(X <= 2 | Bin(10, 1/2)) = (1 + 10 + 45) / 1024; two-sided doubles it
    assert mcnemar_exact(2, 8) == pytest.approx(112 / 1024, rel=1e-12)
    assert mcnemar_exact(8, 2) == pytest.approx(112 / 1024, rel=1e-12)
    assert mcnemar_exact(0, 5) == pytest.approx(2 / 32, rel=1e-12)
    assert mcnemar_exact(5, 5) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 1) == 1.0  # 2 · 1/2
    rng = np.random.default_rng(0)
    for b, c in rng.integers(0, 400, size=(40, 2)):
        b, c = int(b), int(c)
        n = b + c
        exact = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(b, c) + 1)) / 2**n) if n else 1.0
        assert mcnemar_exact(b, c) == pytest.approx(exact, rel=1e-9, abs=1e-300)


def test_two_by_two():
    a = np.array([1, 1, 0, 0, 1, 0], dtype=bool)
    b = np.array([1, 0, 1, 0, 0, 0], dtype=bool)
    assert two_by_two(a, b) == {"both_correct": 1, "only_a": 2, "only_b": 1, "both_wrong": 2}


def test_cluster_codes_first_appearance():
    codes, G = cluster_codes(np.array(["q7", "q2", "q7", "q9", "q2"]))
    assert G == 3 and codes.tolist() == [0, 1, 0, 2, 1]
    codes, G = cluster_codes(np.array(["c", "a", "b"]))
    assert G == 3 and codes.tolist() == [0, 1, 2]


def test_draw_counts_equals_resample_counts_at_full_size():
    a = draw_counts(7, 7, 50, np.random.default_rng(4))
    b = resample_counts(7, 50, np.random.default_rng(4))
    assert np.array_equal(a, b)
    c = draw_counts(7, 3, 50, np.random.default_rng(4))
    assert c.shape == (50, 7) and (c.sum(axis=1) == 3).all()


def test_single_item_groups_give_the_unclustered_bootstrap_exactly():
    rng = np.random.default_rng(1)
    d = rng.integers(-1, 2, size=37).astype(float) * 100
    groups = np.array([f"i{k}" for k in range(37)])
    reps = clustered_means(d, groups, 300, seed=5, stream=2)[:, 0]
    R = resample_counts(37, 300, np.random.default_rng([5, 8, 2, 0]))
    assert np.array_equal(reps, R @ d / 37)


def test_clustered_bootstrap_matches_a_loop():
    rng = np.random.default_rng(2)
    n, draws = 23, 200
    groups = np.array([f"g{k}" for k in rng.integers(0, 9, size=n)])
    values = rng.normal(size=n)
    reps = clustered_means(values, groups, draws, seed=11, stream=1)[:, 0]
    # loop reference: the same cluster draws, items gathered cluster by cluster
    codes, G = cluster_codes(groups)
    idx = np.random.default_rng([11, 8, 1, 0]).integers(0, G, size=(draws, G))
    ref = []
    for row in idx:
        items = [i for g in row for i in range(n) if codes[i] == g]
        ref.append(np.mean(values[items]))
    assert np.allclose(reps, ref, rtol=1e-12, atol=1e-12)


def test_clustering_widens_the_interval_for_duplicated_items():
    # every item duplicated in its group: the clustered bootstrap sees half as many units
    a = np.tile(np.random.default_rng(3).random(60) < 0.6, 2)
    b = np.tile(np.random.default_rng(4).random(60) < 0.5, 2)
    s = CompareSettings(draws=4000)
    plain = paired_difference(a, b, np.array([str(i) for i in range(120)]), s)
    clustered = paired_difference(a, b, np.array([str(i % 60) for i in range(120)]), s)
    assert clustered["clusters"] == 60 and plain["clusters"] == 120
    assert clustered["difference"]["mean"] == plain["difference"]["mean"]
    w_plain = plain["difference"]["hi"] - plain["difference"]["lo"]
    w_clust = clustered["difference"]["hi"] - clustered["difference"]["lo"]
    assert w_clust == pytest.approx(math.sqrt(2) * w_plain, rel=0.1)


# --------------------------------------------------------------------------- compare on records
def _traj(name, task, n=40, N=30, groups=None, seed=0, ids=None) -> rg.Traj:
    """Step 20 right on every item; the final step 30 right on even items; step 10 on none."""
    T = len(STEPS)
    val = np.zeros((T, n), dtype=bool)
    val[1] = True
    val[2] = np.arange(n) % 2 == 0
    test = np.zeros((T, N), dtype=bool)
    test[1] = np.arange(N) < 24
    test[2] = np.arange(N) < 18
    return rg.Traj(
        name=name,
        configuration="cfg",
        task=task,
        steps=STEPS,
        val_correct=val,
        val_answers=np.where(val, "A", "B"),
        val_nll=np.ones((T, n)),
        val_tokens=np.full(n, 3),
        test_correct=test,
        test_answers=np.where(test, "A", "B"),
        val_groups=groups,
        val_ids=ids,
    )


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    pairs = [f"q{i // 2}" for i in range(40)]
    gen, nll = rg.tables(
        [
            _traj("run-a", "gsm8k", groups=pairs),
            _traj("run-b", "gsm8k", groups=pairs),
            _traj("other", "math", ids=[f"m{i}" for i in range(40)]),
        ]
    )
    test = gen["split"] == "test"
    gen.loc[test, "group"] = "t" + (gen.loc[test, "item_id"].str[1:].astype(int) // 3).astype(str)
    return rg.write(root / "records", gen, nll)


def test_compare_hand_computed(records):
    out = compare_checkpoints(records, "run-a", 20, 30, settings=CompareSettings(draws=2000))
    v = out["splits"]["validation"]
    assert v["table"] == {"both_correct": 20, "only_a": 20, "only_b": 0, "both_wrong": 0}
    assert (v["items"], v["clusters"]) == (40, 20)
    assert (v["accuracy_a"], v["accuracy_b"], v["difference"]["mean"]) == (100.0, 50.0, 50.0)
    # each pair {even, odd} contributes exactly 50 pp: every cluster has the same mean, so the
    # bootstrap has zero width: no variance information, not estimable (issue 38; it printed
    # +50.00 [+50.00, +50.00] before), and the McNemar p carries the verdict
    assert v["difference"]["lo"] is None and v["difference"]["hi"] is None
    assert v["difference"]["not_estimable"] == "no spread across the 20 clusters"
    assert v["mcnemar_p"] == pytest.approx(2.0**-19, rel=1e-12)
    t = out["splits"]["test"]
    assert t["table"] == {"both_correct": 18, "only_a": 6, "only_b": 0, "both_wrong": 6}
    assert (t["items"], t["clusters"]) == (30, 10)
    assert t["difference"]["mean"] == pytest.approx(20.0)
    # items share groups (clusters of 3): the clustered McNemar (issue 29) flips whole clusters; the 6
    # discordant items are 2 clusters of d_k = +3, so P(|S*| >= 6) = 2/4; the item-level 2/64 is kept aside
    assert t["mcnemar_p"] == pytest.approx(0.5) and t["mcnemar_p_items"] == pytest.approx(2 / 64)
    assert t["mcnemar_method"].startswith("clustered")
    assert v["mcnemar_method"].startswith("clustered")
    # the 6 discordant test items fill 2 of the 10 clusters: a resample misses both with
    # probability 0.8**10 ≈ 0.11 > 2.5 %, so the clustered interval reaches 0 (unresolved)
    assert t["difference"]["lo"] == 0.0 and t["difference"]["hi"] > 20
    assert t["difference"]["unresolved"]
    # reversed: the sign flips, the p-value does not
    back = compare_checkpoints(records, "run-a", 30, 20, settings=CompareSettings(draws=2000))
    assert back["splits"]["test"]["difference"]["mean"] == pytest.approx(-20.0)
    assert back["splits"]["test"]["mcnemar_p"] == t["mcnemar_p"]


def test_compare_two_runs_and_cli_json(records, capsys):
    run(["compare", str(records), "--trajectory", "run-a", "--trajectory-b", "run-b", "10", "30", "--json", "--draws", "500"])
    out = json.loads(capsys.readouterr().out)
    assert out["b"] == {"trajectory": "run-b", "step": 30}
    v = out["splits"]["validation"]
    assert v["table"]["only_b"] == 20 and v["difference"]["mean"] == -50.0
    assert v["not_shared"] == {"only_in_a": 0, "only_in_b": 0}
    run(["compare", str(records), "--trajectory", "run-a", "20", "30", "--draws", "200"])
    text = capsys.readouterr().out
    assert "McNemar" in text and "validation" in text and "40 (20)" in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--trajectory", "nope", "10", "30"], "trajectory 'nope' has no validation records"),
        (["--trajectory", "run-a", "10", "35"], "no checkpoint at step 35"),
        (["--trajectory", "run-a", "30", "30"], "compared with itself"),
        (["--trajectory", "run-a", "--trajectory-b", "other", "10", "30"], "share no validation items"),
    ],
)
def test_compare_errors_exit_2(records, capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        main(["compare", str(records), *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# --------------------------------------------------------------------------- plan
def _loop_pilot(signal, correct, groups, maximize, budgets, draws, seed, stream):
    codes, G = cluster_codes(groups)
    T, n = correct.shape
    acc = correct.sum(axis=1)
    out = []
    for k, b in enumerate(budgets):
        m = max(1, round(b * G / n))
        idx = np.random.default_rng([seed, 9, stream, k, 0]).integers(0, G, size=(draws, m))
        gain = beat = 0.0
        for row in idx:
            items = [i for g in row for i in range(n) if codes[i] == g]
            s = signal[:, items].sum(axis=1)
            best = s.max() if maximize else s.min()
            tied = [t for t in range(T) if s[t] == best]
            for t in tied:
                gain += 100 * (acc[t] - acc[-1]) / n / len(tied)
                beat += (acc[t] > acc[-1]) / len(tied)
        out.append((gain / draws, beat / draws))
    return np.array(out)


@pytest.mark.parametrize("maximize", [True, False])
def test_pilot_curves_match_a_loop(maximize):
    rng = np.random.default_rng(7)
    T, n = 4, 15
    correct = rng.random((T, n)) < np.array([0.3, 0.6, 0.5, 0.45])[:, None]
    signal = correct.astype(float) if maximize else rng.integers(1, 4, size=(T, n)) / 4
    groups = np.array([f"g{k}" for k in rng.integers(0, 8, size=n)])
    budgets = (4, 15, 40)
    c = pilot_curves(signal, correct, groups, maximize, budgets, 150, seed=3, stream=1)
    ref = _loop_pilot(signal, correct, groups, maximize, budgets, 150, 3, 1)
    assert np.allclose(c["gain"], ref[:, 0], atol=1e-9)
    assert np.allclose(c["p_beat"], ref[:, 1], atol=1e-12)
    assert np.allclose(c["p_beat"] + c["p_worse"] + c["p_final"] <= 1 + 1e-12, True)


def test_pilot_known_answers():
    # checkpoint 0 right on every item, the final one on none: always chosen, gain 100
    correct = np.array([[True] * 10, [False] * 10])
    c = pilot_curves(correct, correct, np.arange(10).astype(str), True, (1, 10, 100), 50, 0)
    assert np.allclose(c["p_beat"], 1.0) and np.allclose(c["gain"], 100.0)
    # identical checkpoints: every draw ties them, half the mass on the final one, gain 0
    same = np.tile(np.arange(10) % 2 == 0, (2, 1))
    c = pilot_curves(same, same, np.arange(10).astype(str), True, (4, 10), 50, 0)
    assert np.allclose(c["p_final"], 0.5) and np.allclose(c["gain"], 0.0)
    assert np.allclose(c["p_beat"], 0.0) and np.allclose(c["p_worse"], 0.0)


def test_plan_from_records_and_cli(records, tmp_path, capsys):
    s = PlanSettings(budgets=(2, 8, 40, 160), draws=300, method="pilot")
    out = plan_from_pilot(records, ["run-a"], settings=s)
    # step 20 is right everywhere; every cluster (a pair {even, odd}) holds an item the final
    # step gets wrong, so even one drawn cluster picks step 20: P(beat) = 1, gain = 50 pp
    rows = out["rows"]
    assert [r["extrapolation"] for r in rows] == [0.05, 0.2, 1.0, 4.0]
    assert all(r["p_beat"] == 1.0 and r["p_worse"] == 0.0 for r in rows)
    assert all(r["gain"] == pytest.approx(50.0) for r in rows)
    assert out["planned_budget"] == 2 and out["trajectories"]["run-a"]["pilot_clusters"] == 20
    # split pilot: choices on one half, scored on the other; the same known answers (each
    # half holds whole {even, odd} pairs), extrapolation relative to the half
    out = plan_from_pilot(records, ["run-a"], settings=PlanSettings(budgets=(2, 8, 40, 160), draws=300, method="split"))
    assert out["settings"]["method"] == "split"
    assert [r["extrapolation"] for r in out["rows"]] == [0.1, 0.4, 2.0, 8.0]
    assert all(r["p_beat"] == 1.0 and r["gain"] == pytest.approx(50.0) for r in out["rows"])
    # without the clusters a 2-item draw can hold two even items and tie step 20 with the final
    flat = pilot_curves(
        np.tile(np.arange(40) % 2 == 0, (3, 1)) | (np.arange(3) == 1)[:, None],
        np.tile(np.arange(40) % 2 == 0, (3, 1)) | (np.arange(3) == 1)[:, None],
        np.arange(40).astype(str),
        True,
        (2,),
        2000,
        seed=0,
    )
    # both even (prob. 1/4): all three checkpoints tie, step 20 gets a third of the draw
    assert flat["p_beat"][0] == pytest.approx(0.75 + 0.25 / 3, abs=0.03)
    # calibrated (the default): every pair differs by exactly 50 pp, so the pilot has no doubt
    # (zero variance): step 20 is a confident beater and the promise is the same known answer
    cal = plan_from_pilot(records, ["run-a"], settings=PlanSettings(budgets=(2, 8, 40, 160), draws=300))
    assert cal["settings"]["method"] == "calibrated" and cal["reaches_target"]
    assert cal["trajectories"]["run-a"]["confident_beaters"] == [20]
    assert all(r["p_beat"] == 1.0 and r["p_beat_point"] == 1.0 for r in cal["rows"])
    assert cal["planned_budget"] == 2 and cal["answer"].startswith("2 items")
    args = [
        "plan",
        str(records),
        "--trajectory",
        "run-a",
        "--budgets",
        "2,8,40,160",
        "--draws",
        "300",
        "--delta",
        "3",
        "--agreement",
        "0.9",
        "--json",
        "--method",
        "split",
    ]
    run([*args, "--figure", str(tmp_path / "a.png")])
    first = json.loads(capsys.readouterr().out)
    run([*args, "--figure", str(tmp_path / "b.png")])
    second = json.loads(capsys.readouterr().out)
    assert first["pilot"] == second["pilot"] == json.loads(json.dumps(out))
    assert first["pilot"]["answer"].startswith("2 items")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    assert first["closed_form"]["budget_to_pick"] > 0
    run(["plan", "--delta", "2", "--agreement", "0.8", "--figure", str(tmp_path / "c.svg")])
    assert "closed form" in capsys.readouterr().out and (tmp_path / "c.svg").stat().st_size > 0


@pytest.mark.parametrize(
    "args, message",
    [
        (["plan"], "give pilot RECORDS"),
        (["plan", "--delta", "2"], "give pilot RECORDS"),
        (["plan", "--delta", "30", "--agreement", "0.8"], "is impossible"),
    ],
)
def test_plan_errors_exit_2(args, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main([*args, "--figure", str(tmp_path / "x.png")])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


def test_closed_form_against_simulation():
    delta, agreement, n = 3.0, 0.85, 200
    cf = closed_form(delta, agreement, (n,))
    q, d = 1 - agreement, delta / 100
    p10, p01 = (q + d) / 2, (q - d) / 2
    rng = np.random.default_rng(0)
    counts = rng.multinomial(n, [p10, p01, 1 - q], size=200_000)
    diff = counts[:, 0] - counts[:, 1]
    p_sim = (diff > 0).mean() + 0.5 * (diff == 0).mean()
    assert cf["rows"][0]["p_pick"] == pytest.approx(p_sim, abs=0.015)
    # the planned budget is the first whose probability reaches the target
    n_pick = cf["budget_to_pick"]
    z = d / math.sqrt(q - d * d)
    assert norm_cdf(z * math.sqrt(n_pick)) >= 0.8 > norm_cdf(z * math.sqrt(n_pick - 1))
    assert cf["rows"][0]["se"] == pytest.approx(100 * math.sqrt(q - d * d) / math.sqrt(n))
    assert cf["budget_for_test"] > n_pick


def test_default_budgets():
    assert default_budgets(100) == (16, 32, 64, 100)
    assert default_budgets(64) == (16, 32, 64)
    with pytest.raises(CkptselError):
        default_budgets(0)


def test_plan_writes_no_figure_unless_asked(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run(["plan", "--delta", "2", "--agreement", "0.8", "--json"])
    assert json.loads(capsys.readouterr().out)["figure"] is None
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- calibrated plan
def test_closed_form_paired_mde_known_answers():
    # δ = 2 pp, agreement 0.9: q = 0.1, σ² = q − δ² = 0.0996, k = z_.975 + z_.8 = 2.801585;
    # budget whose MDE is δ: k² σ² / δ² = 7.848879 · 0.0996 / 0.0004 = 1954.37 → 1955
    cf = closed_form(2.0, 0.9, (100, 1955, 4000))
    k = 1.959964 + 0.841621
    assert cf["budget_mde"] == cf["planned_budget"] == 1955
    assert cf["budget_for_test"] == 1960  # Connor: (1.959964·√0.1 + 0.841621·√0.0996)² / 0.0004
    # MDE(n) = k √q / √(n + k²): at 100 items 2.801585·0.316228/√107.85 = 8.53 pp
    mde = [r["mde"] for r in cf["rows"]]
    assert mde[0] == pytest.approx(100 * k * math.sqrt(0.1) / math.sqrt(100 + k * k), rel=1e-5)
    assert mde[0] == pytest.approx(8.5306, abs=1e-3)
    assert mde[1] == pytest.approx(2.0, abs=2e-3)  # the planned budget detects δ
    assert [r["detectable"] for r in cf["rows"]] == [False, True, True]


def _pilot(p, n, rng):
    """(T, n) correctness of ``n`` items in pairs (bench_plan's generator, loading 0.85)."""
    g = rng.standard_normal((1, n // 2)).repeat(2, axis=1)
    u = np.sqrt(0.5) * g + np.sqrt(0.5) * rng.standard_normal((1, n))
    z = 0.85 * u + np.sqrt(1 - 0.85**2) * rng.standard_normal((len(p), n))
    return z < np.array([NormalDist().inv_cdf(x) for x in p])[:, None]


def test_calibrated_plan_final_best_gets_no_plan():
    # the final checkpoint truly best by 0.5-3 pp: every pilot's promise stays below the target
    p = [0.45, 0.52, 0.56, 0.58, 0.585, 0.59, 0.595, 0.60]
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(256), 2).astype(str)
    for j in range(5):
        pilot = _pilot(p, 512, rng)
        m = PilotMoments.of(pilot, pilot, groups, True)
        c = calibrated_curves(m, (32, 256, 2048), 1000, 0.95, seed=j)
        assert c["p_beat"].max() < 0.8 and c["critical"] > 1.96  # simultaneous > pointwise
        assert np.all(c["p_beat"] <= c["p_beat_point"] + 1e-12)  # never above the pilot-as-truth
        assert c["gap_bounds_pp"].shape == (7, 2)
    # a clear gain: the promise rises with the budget and reaches the target
    p = [0.40, 0.50, 0.60, 0.50]
    pilot = _pilot(p, 1024, rng)
    m = PilotMoments.of(pilot, pilot, np.repeat(np.arange(512), 2).astype(str), True)
    c = calibrated_curves(m, (16, 64, 256), 1000, 0.95, seed=0)
    assert c["p_beat"][-1] >= 0.8 and np.all(np.diff(c["p_beat"]) >= 0)


def test_plan_cli_answers_no_budget_reaches_the_target(tmp_path, capsys):
    p = [0.50, 0.58, 0.60]
    rng = np.random.default_rng(3)
    val = _pilot(p, 200, rng)
    traj = rg.Traj(
        name="run",
        configuration="cfg",
        task="gsm8k",
        steps=STEPS,
        val_correct=val,
        val_answers=np.where(val, "A", "B"),
        val_nll=np.ones(val.shape),
        val_tokens=np.full(200, 3),
        test_correct=val[:, :10],
        test_answers=np.where(val[:, :10], "A", "B"),
        val_groups=[f"q{i // 2}" for i in range(200)],
    )
    records = rg.write(tmp_path / "records", *rg.tables([traj]))
    run(["plan", str(records), "--max-budget", "512", "--draws", "500", "--json"])
    out = json.loads(capsys.readouterr().out)["pilot"]
    assert out["planned_budget"] is None and out["reaches_target"] is False
    assert 0.0 <= out["max_promise"] < 0.8
    assert out["max_promise_budget"] in [r["budget"] for r in out["rows"]]
    assert out["answer"].startswith("no budget up to 512 reaches")
    run(["plan", str(records), "--max-budget", "512", "--draws", "500"])
    text = " ".join(capsys.readouterr().out.split())
    assert "no budget up to 512 reaches P(choice beats final) ≥ 0.8" in text
    assert "the most that can be promised is" in text


def test_compare_mcnemar_holds_its_level_when_items_come_in_groups():
    """Issue 29: items in groups of 4 that share difficulty; A and B equally good (exchangeable).
    The plain McNemar test rejected this true null ~11% of the time at 5%; compare's default now
    flips whole clusters and holds the level."""
    from ckptsel.workflows.advise.comparison import paired_difference

    rng = np.random.default_rng(2029)
    G, size, reps = 50, 4, 400
    groups = np.repeat(np.arange(G), size).astype(str)
    settings = CompareSettings(draws=10)
    rejected, plain = 0, 0
    for _ in range(reps):  # datasets, not items
        base = rng.normal(0.0, 1.5, G)
        pa = 1 / (1 + np.exp(-np.repeat(base + rng.normal(0.0, 1.5, G), size)))
        pb = 1 / (1 + np.exp(-np.repeat(base + rng.normal(0.0, 1.5, G), size)))
        r = paired_difference(rng.random(G * size) < pa, rng.random(G * size) < pb, groups, settings)
        rejected += r["mcnemar_p"] < 0.05
        plain += r["mcnemar_p_items"] < 0.05
    assert rejected / reps <= 0.06 and plain / reps >= 0.08, (rejected / reps, plain / reps)
    # every item its own group: the exact McNemar test, as before (and no second p-value)
    a, b = rng.random(60) < 0.6, rng.random(60) < 0.5
    r = paired_difference(a, b, np.arange(60).astype(str), settings)
    assert "mcnemar_method" not in r and r["mcnemar_p"] == pytest.approx(mcnemar_exact(int((a & ~b).sum()), int((~a & b).sum())), rel=1e-12)
    from ckptsel.stats.paired import clustered_mcnemar

    assert clustered_mcnemar(a, b, np.arange(60).astype(str)) == pytest.approx(r["mcnemar_p"], rel=1e-9)


def test_compare_difference_of_one_cluster_is_not_estimable(capsys):
    from ckptsel.cli.output import print_comparison
    from ckptsel.workflows.advise.comparison import paired_difference

    a, b = np.ones(8, dtype=bool), np.zeros(8, dtype=bool)
    r = paired_difference(a, b, np.array(["g"] * 8), CompareSettings(draws=50))
    assert r["difference"] == {"mean": 100.0, "lo": None, "hi": None, "unresolved": True, "not_estimable": "1 cluster"}
    assert r["mcnemar_p"] == 1.0  # one cluster flipped: |S*| = |S| always
    print_comparison(
        {
            "a": {"trajectory": "t", "step": 1},
            "b": {"trajectory": "t", "step": 2},
            "settings": {"level": 0.95, "draws": 50},
            "splits": {"test": {**r, "not_shared": {"only_in_a": 0, "only_in_b": 0}}},
        }
    )
    out = " ".join(capsys.readouterr().out.split())
    assert "is the clustered test" in out and "estimab" in out
    from ckptsel.results.estimate import fmt

    assert fmt(r["difference"]) == "+100.00 not estimable: 1 cluster"
