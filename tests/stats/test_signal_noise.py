"""Each task's signal and noise (issue 46; after Heineman et al. 2025): hand-computed values,
the cases with none, and summary.json's, recomputed from the test records by an independent
loop."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ckptsel import defaults
from ckptsel.results.summary import Summary, TaskSignal
from ckptsel.stats.noise import signal_and_noise
from ckptsel.workflows.analysis import analyze

import recordsgen as rg
import reference_impl as ref


def test_by_hand():
    curves = [np.array([50.0, 60, 70, 80]), np.array([52.0, 58]), np.array([40.0, 40, 40]), np.array([30.0])]
    got = signal_and_noise(curves, ["c1", "c1", "c2", "c9"], ["t", "t", "t", "u"], last=3)
    noise = math.sqrt((10.0**2 + 18.0 + 0.0) / 3)  # stds of [60 70 80], [52 58], [40 40 40]
    signal = abs(69.0 - 40.0) / math.sqrt(2)  # c1 ends at mean(80, 58), c2 at 40
    assert got["t"] == TaskSignal(round(signal, 6), round(noise, 6), round(signal / noise, 6), 2, 3)
    # one configuration, one checkpoint: neither a signal nor a noise
    assert got["u"] == TaskSignal(None, None, None, 1, 0)
    flat = signal_and_noise([np.array([5.0, 5, 5]), np.array([7.0, 7])], ["a", "b"], ["t", "t"])
    assert flat["t"].noise == 0.0 and flat["t"].ratio is None and flat["t"].signal == round(math.sqrt(2), 6)
    with pytest.raises(ValueError):
        signal_and_noise(curves, ["c"] * 4, ["t"] * 4, last=1)


def test_summary_json_says_it_and_it_is_the_test_records(tmp_path):
    trajs = rg.random_study(np.random.default_rng(3), n_configs=4, seeds=2, T=(3, 8))
    gen, nll = rg.tables(trajs)
    rec = rg.write(tmp_path / "records", gen, nll)
    summary = analyze(rec, tmp_path / "out", permutations=10, draws=50, report=False)
    sn = summary.signal_noise
    assert sn is not None and sn.last == defaults.NOISE_CHECKPOINTS
    by_task: dict[str, list] = {}
    for t in ref.trajectories_from_tables(gen, nll):  # plain loops over the test rows
        curve = [100.0 * sum(row) / len(row) for row in t.test_correct]
        by_task.setdefault(t.task, []).append((t.configuration, curve))
    assert set(sn.tasks) == set(by_task) == set(summary.by_task)
    for task, rows in by_task.items():
        spreads = []
        for _, curve in rows:
            tail = curve[-sn.last :]
            if len(tail) >= 2:
                m = sum(tail) / len(tail)
                spreads.append(sum((x - m) ** 2 for x in tail) / (len(tail) - 1))
        noise = math.sqrt(sum(spreads) / len(spreads))
        finals: dict[str, list[float]] = {}
        for config, curve in rows:
            finals.setdefault(config, []).append(curve[-1])
        means = [sum(v) / len(v) for _, v in sorted(finals.items())]
        mean = sum(means) / len(means)
        signal = math.sqrt(sum((x - mean) ** 2 for x in means) / (len(means) - 1))
        got = sn.tasks[task]
        assert got.noise == pytest.approx(noise, abs=1e-6) and got.signal == pytest.approx(signal, abs=1e-6)
        assert got.ratio == pytest.approx(signal / noise, abs=1e-5)
        assert (got.configurations, got.trajectories) == (len(means), len(spreads))
    text = (tmp_path / "out" / "summary.json").read_text()
    assert '"signal_noise"' in text and "Heineman" in text
    assert Summary.load(tmp_path / "out" / "summary.json") == summary


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d["signal_noise"].pop("tasks"), "key 'tasks' is missing"),
        (lambda d: d["signal_noise"]["tasks"]["a"].update(noise="x"), "expected a finite number"),
        (lambda d: d["signal_noise"]["tasks"]["a"].update(ratio=float("nan")), "expected a finite number"),
        (lambda d: d["signal_noise"].update(last_checkpoints=True), "expected an integer"),
        (lambda d: d["signal_noise"]["tasks"]["a"].update(extra=1), "unknown key"),
    ],
)
def test_a_malformed_signal_noise_is_one_error_naming_the_key(tmp_path, edit, message):
    import copy

    from ckptsel.errors import CkptselError

    trajs = rg.random_study(np.random.default_rng(3), n_configs=2, seeds=2, tasks=("a",))
    rec = rg.write(tmp_path / "records", *rg.tables(trajs))
    data = analyze(rec, tmp_path / "out", permutations=5, draws=20, report=False).to_dict()
    bad = copy.deepcopy(data)
    edit(bad)
    with pytest.raises(CkptselError, match=message) as err:
        Summary.from_dict(bad, "s.json")
    assert "s.json: signal_noise" in str(err.value)
    old = {k: v for k, v in data.items() if k != "signal_noise"}  # a summary from before
    assert Summary.from_dict(old).signal_noise is None


def test_the_report_shows_each_tasks_signal_and_noise(tmp_path):
    from ckptsel.report.html import render_html, signal_frame

    trajs = rg.random_study(np.random.default_rng(3), n_configs=3, seeds=2, tasks=("a", "b"))
    rec = rg.write(tmp_path / "records", *rg.tables(trajs))
    summary = analyze(rec, tmp_path / "out", permutations=5, draws=20, report=False)
    frame = signal_frame(summary)
    assert list(frame["task"]) == ["a", "b"]
    a = summary.signal_noise.tasks["a"]
    assert frame.iloc[0]["signal / noise"] == f"{a.ratio:.2f}" and frame.iloc[0]["noise (pp)"] == f"{a.noise:.2f}"
    page = render_html(summary, [], {})
    assert '<h2 id="signal-noise">Signal and noise per task</h2>' in page and f"{a.signal:.2f}" in page
    old = Summary.from_dict({k: v for k, v in summary.to_dict().items() if k != "signal_noise"})
    assert signal_frame(old) is None and "signal-noise" not in render_html(old, [], {})
