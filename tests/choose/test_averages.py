"""Averages of a run's checkpoints as candidates (records at reserved negative steps): each is a
fixed choice beside ``last`` with G, H and intervals; every rule chooses among checkpoints and
averages; averages never vote in agreement's plurality and are not candidates of a thinned grid;
``select`` keeps an average only when its gain is resolved; records with different averages per
trajectory, or a negative step that is not an average's, are refused in one line."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from tests.clirun import run_cli

from ckptsel.choose import core
from ckptsel.choose.choices import averages_of, choose
from ckptsel.choose.frozen import load_frozen
from ckptsel.choose.rules import average_rule_step, user_rule
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.errors import CkptselError
from ckptsel.records.load import load_test, load_validation
from ckptsel.records.schema import average_rule_name, average_step, candidate_name, candidate_step, is_average_step
from ckptsel.sim.presets import PRESETS
from ckptsel.sim.simulate import simulate, write_simulation
from ckptsel.workflows.analysis import analyze

FAST = {"permutations": 20, "draws": 300}


def _simulated(root: Path, gain: float = 2.0, last=(3, 5), seed: int = 0) -> Path:
    spec = replace(PRESETS["small"], average_last=tuple(last), average_gain_pp=gain)
    return write_simulation(root, spec, seed)


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> Path:
    return _simulated(tmp_path_factory.mktemp("avg") / "records")


@pytest.fixture(scope="module")
def results(records, tmp_path_factory) -> tuple[Path, object]:
    out = tmp_path_factory.mktemp("avg-res") / "res"
    return out, analyze(records, out, **FAST)


# --------------------------------------------------------------------------- the contract
@pytest.mark.parametrize(
    ("name", "step"),
    [("average-last2", -2), ("average-last3", -3), ("average-last999", -999), ("ema-0.9", -1_900_000), ("ema-0.999", -1_999_000)],
)
def test_average_names_and_reserved_steps_round_trip(name, step):
    assert average_step(name) == step
    assert candidate_name(step) == name
    assert is_average_step(step)
    assert average_rule_step(average_rule_name(step)) == step


@pytest.mark.parametrize(
    "name", ["average-last1", "average-last1000", "average-last03", "ema-0.90", "ema-1.0", "ema-0.0", "ema-0.1234567", "checkpoint-3"]
)
def test_names_that_are_not_recordable_averages_are_refused(name):
    with pytest.raises(CkptselError, match="not an average ckptsel can record"):
        average_step(name)


@pytest.mark.parametrize(
    "name, step", [(75, 75), ("75", 75), ("checkpoint-75", 75), (" 0 ", 0), ("average-last3", -3), ("-3", -3), ("ema-0.9", -1_900_000)]
)
def test_a_candidate_named_by_step_checkpoint_or_average(name, step):
    assert candidate_step(name) == step


@pytest.mark.parametrize(
    "name, message",
    [
        ("-1", "is not a checkpoint"),
        ("-7000", "is not a checkpoint"),
        ("checkpoint--3", "is not a checkpoint"),
        ("checkpoint-", "is not a checkpoint"),
        ("", "is not a checkpoint"),
        ("1e3", "is not a checkpoint"),
        ("9" * 40, "is not a checkpoint"),
        (True, "is not a checkpoint"),
        (7.5, "is not a checkpoint"),
        (None, "is not a checkpoint"),
        ("\u0667\u0665", "is not a checkpoint"),  # Arabic-Indic 75: steps are ASCII digits
        ("average-last1", "not an average ckptsel can record"),
        ("average-last0", "not an average ckptsel can record"),  # out of range: the average's own line
        ("average-last1000", "not an average ckptsel can record"),
        ("ema-0.90", "not an average ckptsel can record"),
        ("ema-1.5", "not an average ckptsel can record"),
        ("ema-0", "not an average ckptsel can record"),
    ],
)
def test_names_that_are_no_candidate_are_refused(name, message):
    with pytest.raises(CkptselError, match=message):
        candidate_step(name)


def test_compare_names_an_average_as_its_folder_or_its_row(records, capsys):
    from ckptsel.workflows.advise.comparison import CompareSettings, compare_checkpoints

    v = load_validation(records)[0]
    final, settings = int(v.steps.max()), CompareSettings(draws=200)
    by_step = compare_checkpoints(records, v.trajectory, -3, final, settings=settings)
    assert by_step["a"] == {"trajectory": v.trajectory, "step": -3}
    for name in ("average-last3", "mean_last3"):
        assert compare_checkpoints(records, v.trajectory, name, f"checkpoint-{final}", settings=settings) == by_step
    code, out = run_cli(["compare", records, "--trajectory", v.trajectory, "mean_last5", final, "--draws", "200"], capsys)
    assert code == 0 and f"A = {v.trajectory}@average-last5  vs  B = {v.trajectory}@{final}" in out
    code, err = run_cli(["compare", records, "--trajectory", v.trajectory, "average-last4", final], capsys)
    assert code == 2 and "no checkpoint at step average-last4 (known: average-last5, average-last3, " in err
    code, err = run_cli(["compare", records, "--trajectory", v.trajectory, "average-last", final], capsys)
    assert code == 2 and "'average-last' is not a checkpoint" in err
    code, err = run_cli(["compare", records, "--trajectory", v.trajectory, "average-last3", "mean_last3"], capsys)
    assert code == 2 and "step average-last3 compared with itself" in err


def test_other_negative_steps_stay_invalid():
    for step in (-1, -1000, -10_000, -1_000_000, -2_000_000):
        assert not is_average_step(step)
    assert candidate_name(75) == "checkpoint-75"


def test_simulated_checkpoint_rows_are_those_of_the_simulation_without_averages():
    spec = replace(PRESETS["small"], average_last=(3,), average_gain_pp=2.0)
    g, n, t = simulate(spec, 1)
    g0, n0, t0 = simulate("small", 1)
    assert g[g.step >= 0].reset_index(drop=True).equals(g0)
    assert n[n.step >= 0].reset_index(drop=True).equals(n0)
    assert set(g.step[g.step < 0]) == {-3}
    # the average's true accuracy is the mean of its last 3 checkpoints' plus the planted gain
    for _, d in t.groupby("trajectory", observed=True):
        ck = d[d.step >= 0].sort_values("step")
        assert d[d.step == -3].true_test_accuracy.iloc[0] == pytest.approx(ck.true_test_accuracy.iloc[-3:].mean() + 0.02)


# --------------------------------------------------------------------------- choosing
def test_agreement_scores_averages_against_the_checkpoints_plurality_by_brute_force():
    rng = np.random.default_rng(0)
    answers = rng.integers(0, 3, size=(7, 40))
    got = core.agreement_with_checkpoints(answers, 2)
    for i in range(answers.shape[1]):
        votes = answers[2:, i]
        counts = {a: (votes == a).sum() for a in votes}
        best = max(counts.values())
        plural = next(a for a in votes if counts[a] == best)  # ties: the first in checkpoint order
        assert (got[:, i] == (answers[:, i] == plural)).all()
    assert (core.agreement_with_checkpoints(answers, 0) == core.plurality_agreement(answers)).all()


def test_every_rule_chooses_among_checkpoints_and_averages(records):
    validation = load_validation(records)
    settings = ChoiceSettings(permutations=5, averages=averages_of(validation))
    table = choose(validation, settings)
    full = table[(table.scheme == "nested") & (table.budget == "full")]
    for v in validation:
        totals = v.correct.sum(axis=1)
        best = set(v.steps[totals == totals.max()].tolist())  # by hand, over every candidate
        picked = full[(full.trajectory == v.trajectory) & (full.rule == "accuracy")]
        assert set(picked.step) == best
        for rule, step in (("last", v.steps[-1]), ("mean_last3", -3), ("mean_last5", -5)):
            row = full[(full.trajectory == v.trajectory) & (full.rule == rule)]
            assert row.step.tolist() == [step] and row.prob.tolist() == [1.0]
    picked_average = full[(full.rule == "accuracy") & (full.step < 0)]
    assert len(picked_average), "the fixture should let accuracy pick an average somewhere"
    thinned = table[table.scheme.str.startswith("thin")]
    assert (thinned.step >= 0).all()  # a thinned grid has no averages
    assert not thinned.rule.isin(["mean_last3", "mean_last5"]).any()


def test_records_with_different_averages_per_trajectory_are_refused(tmp_path):
    rec = _simulated(tmp_path / "r", last=(3,))
    gen = pd.read_parquet(rec / "generations.parquet")
    nll = pd.read_parquet(rec / "nll.parquet")
    traj = sorted(gen.trajectory.unique())[0]
    drop_g, drop_n = (gen.trajectory == traj) & (gen.step == -3), (nll.trajectory == traj) & (nll.step == -3)
    gen[~drop_g].to_parquet(rec / "generations.parquet", index=False)
    nll[~drop_n].to_parquet(rec / "nll.parquet", index=False)
    with pytest.raises(CkptselError, match=f"trajectory {traj!r} has the averages none and trajectory .* has \\[average-last3\\]"):
        analyze(rec, tmp_path / "res", **FAST)
    assert not (tmp_path / "res").exists()


# --------------------------------------------------------------------------- scoring
def test_an_averages_gain_is_its_test_accuracy_minus_the_finals_by_hand(records, results):
    out, summary = results
    validation = load_validation(records)
    tests = {t.trajectory: t for t in load_test(records, validation)}
    frozen = load_frozen(out / "choices")
    assert frozen.settings.averages == (-5, -3)
    curves = pd.read_parquet(out / "tables" / "checkpoint_curves.parquet")
    for traj, t in tests.items():
        acc = 100 * t.correct.mean(axis=1)
        row = list(t.steps).index(-3)
        got = curves[(curves.trajectory == traj) & (curves.step == -3)].test_accuracy.iloc[0]
        assert got == pytest.approx(acc[row])
    for rule in ("mean_last3", "mean_last5"):
        for key in ("G", "H"):
            assert summary.gains.get(key, rule) is not None
        assert summary.gains.get("D", rule).mean == 0.0  # a fixed choice: more validation changes nothing


def test_a_rule_that_picks_the_average_gives_the_averages_numbers(records, results, tmp_path):
    """A researcher's rule that always picks ``average-last3`` goes through every step of the
    protocol as a rule that chooses; its G and H equal the fixed choice's to the last digit."""
    (tmp_path / "pick.py").write_text(
        "import numpy as np\ndef pick(v):\n    return np.broadcast_to((v.steps == -3)[:, None], v.answers.shape).astype(int)\n"
    )
    rule = user_rule(f"{tmp_path / 'pick.py'}:pick")
    summary = analyze(records, tmp_path / "res", rules=[rule], **FAST)
    for key in ("G", "H"):
        a, b = summary.gains.get(key, "pick"), results[1].gains.get(key, "mean_last3")
        assert (a.mean, a.lo, a.hi) == (b.mean, b.lo, b.hi)


def test_analyze_and_verify_from_the_cli_show_the_averages(records, tmp_path, capsys):
    out = tmp_path / "res"
    code, text = run_cli(["analyze", records, "--out", out, "--permutations", 20, "--draws", 300], capsys)
    assert code == 0, text
    assert "mean_last3" in text and "mean_last5" in text
    main = (out / "tables" / "main.md").read_text()
    assert "mean_last3" in main
    html = (out / "report.html").read_text()
    assert "keeping the mean of the last 3 checkpoints (average-last3)" in html
    assert "More validation data helps?</b> With keeping the mean" not in html  # no D claim for a fixed choice
    code, text = run_cli(["verify", out], capsys)
    assert code == 0, text
    s = json.loads((out / "summary.json").read_text())
    assert s["choices_sha256"] == load_frozen(out / "choices").sha256


def test_a_user_rule_cannot_take_an_averages_name(tmp_path):
    (tmp_path / "r.py").write_text("def f(v):\n    return v.answers\n")
    with pytest.raises(CkptselError, match="names an average's fixed choice"):
        user_rule(f"{tmp_path / 'r.py'}:f", name="mean_last3")


# --------------------------------------------------------------------------- select
def test_select_keeps_an_average_only_when_its_gain_is_resolved(tmp_path, capsys):
    big = _simulated(tmp_path / "big", gain=15.0, last=(3,))
    traj = sorted(pd.read_parquet(big / "truth.parquet").trajectory.unique())[-1]
    code, text = run_cli(["select", big, "--trajectory", traj, "--rule", "mean_last3", "--json"], capsys)
    assert code == 0, text
    rec = json.loads(text)["recommendation"]
    assert rec["keep_step"] == -3 and not rec["keep_final"], rec
    assert "average-last3" in rec["reason"]
    none = _simulated(tmp_path / "none", gain=-15.0, last=(3,))
    code, text = run_cli(["select", none, "--trajectory", traj, "--rule", "mean_last3", "--json"], capsys)
    assert code == 0, text
    rec = json.loads(text)["recommendation"]
    assert rec["keep_final"], rec
    code, text = run_cli(["select", none, "--trajectory", traj, "--rule", "mean_last4"], capsys)
    assert code == 2 and "keeps an average its records do not hold (averages: average-last3)" in text


def test_signal_and_noise_read_the_checkpoints_only(tmp_path):
    """The checkpoints' rows are those of the same simulation without averages, so every block
    about the checkpoints themselves (signal and noise per task: the last 5 checkpoints) is the
    same number, also where a trajectory has fewer checkpoints than that."""
    few = replace(PRESETS["small"], checkpoints=(3, 4))
    plain = write_simulation(tmp_path / "plain", few, 0)
    averaged = write_simulation(tmp_path / "avg", replace(few, average_last=(3,), average_gain_pp=5.0), 0)
    without = analyze(plain, tmp_path / "res", **FAST)
    with_ = analyze(averaged, tmp_path / "res-avg", **FAST)
    assert with_.to_dict()["signal_noise"] == without.to_dict()["signal_noise"]
    assert "mean_last3" in json.dumps(with_.to_dict()) and "mean_last3" not in json.dumps(without.to_dict())
