"""analyze/verify end to end: determinism, choices frozen before test records are read, verify."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from ckptsel.choose.choices import choose
from ckptsel.choose.frozen import load_frozen
from ckptsel.cli.app import main
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.records import load as records_load
from ckptsel.records.load import ValidationData, load_test
from ckptsel.results.estimate import Estimate
from ckptsel.results.summary import Summary
from ckptsel.workflows import analysis as pipeline

import recordsgen as rg


@pytest.fixture
def records_dir(tmp_path):
    rng = np.random.default_rng(21)
    gen, nll = rg.tables(rg.random_study(rng, n_configs=5, seeds=3, T=(4, 8), n_val=(70, 140), n_test=(40, 90)))
    return rg.write(tmp_path / "records", gen, nll)


def analyze(records_dir, out, **kw):
    kw = {"permutations": 20, "draws": 500, **kw}
    return pipeline.analyze(records_dir, out, **kw)


def test_same_inputs_and_seed_give_byte_identical_summary(records_dir, tmp_path):
    analyze(records_dir, tmp_path / "a")
    analyze(records_dir, tmp_path / "b")
    a, b = (tmp_path / "a" / "summary.json").read_bytes(), (tmp_path / "b" / "summary.json").read_bytes()
    assert a == b
    assert (tmp_path / "a" / "choices" / "choices.sha256").read_bytes() == (tmp_path / "b" / "choices" / "choices.sha256").read_bytes()
    analyze(records_dir, tmp_path / "c", seed=7)
    assert (tmp_path / "c" / "summary.json").read_bytes() != a


def test_summary_schema(records_dir, tmp_path):
    s = analyze(records_dir, tmp_path / "out")  # the typed summary; its dict is summary.json
    assert isinstance(s, Summary)
    assert pipeline.summary_json(s) == (tmp_path / "out" / "summary.json").read_text()
    d = s.to_dict()
    assert s.schema == 1 and s.draws == 500 and s.permutations == 20
    assert d["population"] == {**d["population"], "trajectories": 15, "configurations": 5}
    assert (s.population.trajectories, s.population.configurations) == (15, 5)
    for rule in ("accuracy", "agreement", "nll", "last"):
        for budget in ("32", "64", "full"):
            for k in ("G", "H"):
                e = s.gains.get(k, rule, budget)
                assert isinstance(e, Estimate) and e.lo <= e.mean <= e.hi
                assert e.unresolved == (e.lo <= 0 <= e.hi or e.cannot_resolve is not None)
        assert s.D[rule].mean is not None
    assert set(s.matched_half) == {"oracle", "agreement"}
    mh = s.matched_half["oracle"]
    assert mh.B.mean == pytest.approx(mh.G_in.mean - mh.G_out.mean, abs=1e-5)
    assert set(s.by_task) == {"a", "b"}
    assert set(d["sensitivities"]) == {"one_variant", "thinning", "nll_complete"}
    assert set(s.sensitivities.thinning) == {"2", "3", "4"}
    assert 0 <= s.sensitivities.nll_complete.same_choice_fraction.mean <= 1
    assert s.joint_bootstrap is not None and s.question_bootstrap is not None
    assert "joint_bootstrap" in d and "question_bootstrap" in d
    assert s.warnings == () and d["warnings"] == []  # 5 configurations: no small-study caveat
    # the summary's point estimates equal the per-trajectory table's trajectory-weighted means
    per_traj = pd.read_csv(tmp_path / "out" / "tables" / "per_trajectory.csv")
    assert s.budget["accuracy"]["full"].G.mean == pytest.approx(per_traj["G|nested|accuracy|full"].mean(), abs=1e-6)
    assert s.D["agreement"].mean == pytest.approx(per_traj["D|nested|agreement"].mean(), abs=1e-6)


def test_choices_are_frozen_and_hashed_before_any_test_record_is_read(records_dir, tmp_path, monkeypatch):
    calls = []
    real_load_test = load_test

    def spy_load_test(records_dir_, validation=None):
        staged = list(tmp_path.glob(".out.staging-*/choices"))
        assert len(staged) == 1, "choices must be written before test records are loaded"
        calls.append(json.loads((staged[0] / "choices.sha256").read_text())["sha256"])
        return real_load_test(records_dir_, validation)

    # the analysis reads test records through the name it imported: patch it there
    monkeypatch.setattr(pipeline, "load_test", spy_load_test)

    def forbid_test_reads(*args, **kwargs):
        raise AssertionError("choose() must not read records")

    monkeypatch.setattr(pipeline, "load_frozen", load_frozen)  # unchanged: scoring reads frozen choices
    real_choose = choose

    def guarded_choose(validation, settings, texts=None):
        assert all(isinstance(v, ValidationData) for v in validation)
        with monkeypatch.context() as m:  # no test loading is possible while choosing
            m.setattr(pipeline, "load_test", forbid_test_reads)
            m.setattr(records_load, "load_test", forbid_test_reads)
            return real_choose(validation, settings, texts)

    monkeypatch.setattr(pipeline, "choose", guarded_choose)
    s = analyze(records_dir, tmp_path / "out")
    assert calls == [s.choices_sha256]


def test_test_outcomes_cannot_change_the_choices(records_dir, tmp_path):
    s1 = analyze(records_dir, tmp_path / "a")
    gen = pd.read_parquet(records_dir / "generations.parquet")
    test = gen.split == "test"
    gen.loc[test, "correct"] = ~gen.loc[test, "correct"]
    gen.loc[test, "answer"] = "changed"
    rg.write(records_dir, gen, pd.read_parquet(records_dir / "nll.parquet"))
    s2 = analyze(records_dir, tmp_path / "b")
    assert s1.choices_sha256 == s2.choices_sha256
    assert s1.gains.get("G", "accuracy") != s2.gains.get("G", "accuracy")


def test_scoring_refuses_tampered_choices(records_dir, tmp_path):
    analyze(records_dir, tmp_path / "out")
    path = tmp_path / "out" / "choices" / "choices.parquet"
    table = pd.read_parquet(path)
    table.loc[0, "prob"] = 0.25
    table.to_parquet(path, index=False)
    with pytest.raises(VerificationError, match="does not match the frozen hash"):
        load_frozen(tmp_path / "out" / "choices")


def test_verify_passes_then_catches_changes(records_dir, tmp_path, capsys):
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(records_dir), "--out", str(out), "--permutations", "20", "--draws", "300"])
    assert exc.value.code == 0
    printed = capsys.readouterr().out
    assert "accuracy" in printed and "G_r(full)" in printed

    with pytest.raises(SystemExit) as exc:
        main(["verify", str(out)])
    assert exc.value.code == 0
    assert "matches" in capsys.readouterr().out

    # validation records changed after freezing -> recomputed choices differ -> exit 1
    nll = pd.read_parquet(records_dir / "nll.parquet")
    nll["nll_sum"] = nll["nll_sum"][::-1].to_numpy()
    rg.write(records_dir, pd.read_parquet(records_dir / "generations.parquet"), nll)
    with pytest.raises(SystemExit) as exc:
        main(["verify", str(out)])
    assert exc.value.code == 1
    assert "SHA-256" in capsys.readouterr().err


def test_verify_catches_an_edited_summary(records_dir, tmp_path, capsys):
    out = tmp_path / "out"
    analyze(records_dir, out)
    path = out / "summary.json"
    s = json.loads(path.read_text())
    s["budget"]["accuracy"]["full"]["G"]["mean"] += 0.5
    path.write_text(json.dumps(s))
    with pytest.raises(VerificationError, match="budget/accuracy/full/G/mean"):
        pipeline.verify(out)


def test_tables_are_written(records_dir, tmp_path):
    analyze(records_dir, tmp_path / "out")
    tables = tmp_path / "out" / "tables"
    for name in ("per_trajectory", "per_configuration", "leave_one_out", "checkpoint_curves"):
        assert (tables / f"{name}.csv").is_file() and (tables / f"{name}.parquet").is_file()
    conf = pd.read_csv(tables / "per_configuration.csv")
    assert len(conf) == 5 and conf["trajectories"].tolist() == [3] * 5
    assert "| accuracy |" in (tables / "main.md").read_text()
    curves = pd.read_csv(tables / "checkpoint_curves.csv")
    gen = pd.read_parquet(records_dir / "generations.parquet")
    one = gen[(gen.trajectory == "c0-s0") & (gen.step == 25)]
    row = curves[(curves.trajectory == "c0-s0") & (curves.step == 25)].iloc[0]
    assert row.test_accuracy == pytest.approx(100 * one[one.split == "test"].correct.mean())
    assert row.validation_accuracy == pytest.approx(100 * one[one.split == "validation"].correct.mean())


def test_study_without_nll_records_is_analysed_without_the_nll_rule(tmp_path):
    """Generations alone (e.g. from `ckptsel ingest lm-eval`): no NLL rule, no H, a warning."""
    from ckptsel.workflows.advise.selection import select_checkpoint

    rng = np.random.default_rng(4)
    gen, nll = rg.tables(rg.random_study(rng, n_configs=5, seeds=2, T=(3, 6), n_val=(40, 80), n_test=(30, 50)))
    rec = rg.write(tmp_path / "records", gen, nll)
    with_nll = pipeline.analyze(rec, tmp_path / "with", permutations=10, draws=200)
    (rec / "nll.parquet").unlink()
    s = pipeline.analyze(rec, tmp_path / "without", permutations=10, draws=200)
    assert set(s.budget) == {"accuracy", "agreement", "last"}
    assert all(cell.H is None for per in s.budget.values() for cell in per.values())
    assert all("H" not in cell for per in s.to_dict()["budget"].values() for cell in per.values())
    assert "nll" not in s.D and "no validation NLL records" in s.warnings[0]
    assert s.population.nll_records is False and with_nll.population.nll_records is True
    # the accuracy and agreement choices do not depend on the NLL records
    for rule in ("accuracy", "agreement"):
        assert s.gains.get("G", rule).mean == with_nll.gains.get("G", rule).mean
    assert pipeline.verify(tmp_path / "without")[2].endswith("reproduced exactly")
    picked = select_checkpoint(rec, "c0-s0")
    assert set(picked.rules) == {"accuracy", "agreement"}


def test_analysis_settings_one_object_with_the_defaults_and_clear_errors():
    """[analysis] is parsed into one AnalysisSettings: absent keys are ckptsel.defaults', a bad
    value is one error naming where it was read, and the keyword options build the same object."""
    from ckptsel import defaults

    default = pipeline.AnalysisSettings.from_table({}, "study.toml: [analysis]")
    assert default == pipeline.AnalysisSettings() == pipeline.AnalysisSettings.of()
    assert default.to_dict() == {
        "permutations": defaults.PERMUTATIONS,
        "draws": defaults.DRAWS,
        "seed": defaults.SEED,
        "level": defaults.CONFIDENCE,
        "interval": defaults.INTERVAL,
        "budgets": list(defaults.BUDGETS),
    }
    given = pipeline.AnalysisSettings.from_table({"budgets": [64, 32, 64], "seed": 3}, "s: [analysis]")
    assert given.choice.budgets == (32, 64) and given.given_budgets == (64, 32, 64)
    assert given.choice.seed == given.stat.seed == 3
    for bad in ({"budgets": [0]}, {"draws": 1}, {"interval": "nope"}, {"budgets": 32}):
        with pytest.raises(CkptselError, match=r"^study.toml: \[analysis\]: "):
            pipeline.AnalysisSettings.from_table(bad, "study.toml: [analysis]")


def test_analyze_tells_one_events_object(records_dir, tmp_path):
    """phase, note and warn reach one AnalysisEvents; settings and loose options are not mixed."""
    heard = []

    class Events(pipeline.AnalysisEvents):
        def phase(self, line):
            heard.append(("phase", line))

        def note(self, line):
            heard.append(("note", line))

    settings = pipeline.AnalysisSettings.of(permutations=20, draws=500, budgets=(32, 32, 100000))
    pipeline.analyze(records_dir, tmp_path / "out", settings=settings, events=Events())
    phases = [line for kind, line in heard if kind == "phase"]
    assert phases[0] == "loading validation records…" and phases[-1] == "writing summary.json and the tables…"
    assert any(line.startswith("choosing the checkpoint to keep") for line in phases)
    notes = [line for kind, line in heard if kind == "note"]
    assert "budgets: 32 given more than once (each is used once)" in notes
    with pytest.raises(CkptselError, match="not both"):
        pipeline.analyze(records_dir, tmp_path / "again", settings=settings, draws=300)
