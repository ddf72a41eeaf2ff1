"""Coverage of the 95% intervals in simulation, against the known true pooled gain.

Each simulated study draws new configurations, seeds, items and outcomes (``ckptsel.simulate``,
with 8 configurations × 3 seeds per task). A trajectory's *true* gain of rule r is
``Σ_c q_c p_c − p_T`` with its frozen selection vector ``q`` and the simulator's true test
accuracies ``p``; the estimand — the population mean of that gain — is approximated by its
average over every trajectory of every simulated study. Reports how often the configuration,
test-question and joint intervals of ``G_r(full)`` contain it.

    python benchmarks/bench_coverage.py [--studies 200] [--draws 2000] [--no-write]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel.pipeline import analyze
from ckptsel.records import write_records
from ckptsel.simulate import PRESETS, simulate

from _common import machine, update_section

RULES = ("accuracy", "agreement", "nll")


def coverage_spec():
    small = PRESETS["small"]
    tasks = tuple(dataclasses.replace(t, seeds_per_configuration=(3,) * 8) for t in small.tasks)
    return dataclasses.replace(small, tasks=tasks)


def true_gains(choices: pd.DataFrame, truth: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per trajectory Σ_c q_c p_c − p_T for each rule's nested full-budget choice."""
    truth = truth.sort_values(["trajectory", "step"])
    p = {t: g.set_index("step")["true_test_accuracy"] for t, g in truth.groupby("trajectory", sort=True)}
    sel = choices[(choices.scheme == "nested") & (choices.budget == "full")]
    out = {}
    for rule in RULES:
        rows = sel[sel.rule == rule]
        gains = []
        for traj, g in rows.groupby("trajectory", sort=True):
            acc = p[traj]
            gains.append(100.0 * (float((g["prob"].to_numpy() * acc.loc[g["step"]].to_numpy()).sum()) - acc.iloc[-1]))
        out[rule] = np.array(gains)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=200)
    ap.add_argument("--draws", type=int, default=2000)
    ap.add_argument("--permutations", type=int, default=50)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    spec = coverage_spec()
    intervals, truths = [], {r: [] for r in RULES}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for s in range(args.studies):
            gen, nll, truth = simulate(spec, seed=1000 + s)
            rec = Path(tmp) / "records"
            write_records(rec / "generations.parquet", gen)
            write_records(rec / "nll.parquet", nll)
            out = Path(tmp) / "out"
            summary = analyze(rec, out, permutations=args.permutations, draws=args.draws, seed=s)
            choices = pd.read_parquet(out / "choices" / "choices.parquet")
            for rule, g in true_gains(choices, truth).items():
                truths[rule].append(g)
            row = {}
            for rule in RULES:
                row[(rule, "configuration")] = summary["budget"][rule]["full"]["G"]
                row[(rule, "question")] = summary["question_bootstrap"]["budget"][rule]["full"]["G"]
                row[(rule, "joint")] = summary["joint_bootstrap"]["budget"][rule]["full"]["G"]
            intervals.append(row)
    elapsed = time.perf_counter() - start
    lines = [
        "## Interval coverage in simulation (`benchmarks/bench_coverage.py`)",
        "",
        f"{args.studies} simulated studies (3 tasks × 8 configurations × 3 seeds, 5–8 checkpoints, "
        f"60–150 validation and 80–240 test items per task), {args.permutations} permutations, "
        f"{args.draws} draws per study; estimand = mean true gain over all "
        f"{sum(len(g) for g in truths['accuracy'])} simulated trajectories. {elapsed:.0f} s on {machine()}.",
        "",
        "| rule | true G(full) pp | configuration 95% | test-question 95% | joint 95% | mean width (conf.) |",
        "|---|---|---|---|---|---|",
    ]
    result = {}
    for rule in RULES:
        truth = float(np.mean(np.concatenate(truths[rule])))
        cov = {}
        for kind in ("configuration", "question", "joint"):
            hits = [r[(rule, kind)]["lo"] <= truth <= r[(rule, kind)]["hi"] for r in intervals]
            cov[kind] = float(np.mean(hits))
        width = float(np.mean([r[(rule, "configuration")]["hi"] - r[(rule, "configuration")]["lo"] for r in intervals]))
        result[rule] = {"truth": truth, **cov, "width": width}
        lines.append(
            f"| {rule} | {truth:+.3f} | {cov['configuration']:.1%} | {cov['question']:.1%} | {cov['joint']:.1%} | {width:.2f} |"
        )
    se = np.sqrt(0.95 * 0.05 / args.studies)
    lines += ["", f"Monte Carlo standard error of a coverage near 95%: ±{se:.1%}."]
    text = "\n".join(lines)
    print(text)
    print(json.dumps(result))
    if not args.no_write:
        update_section("bench_coverage", text)


if __name__ == "__main__":
    main()
