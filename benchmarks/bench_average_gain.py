"""Do the intervals of an average's gain cover a planted averaging gain? (``ckptsel analyze`` end to end.)

Each study is ``ckptsel simulate --preset small --average-last 3 --average-gain GAIN`` with its own
seed, analysed as a user runs it. The average ``average-last3`` is a fixed choice: its ``G`` (vs the
final checkpoint) and ``H`` (vs matched NLL's choice) come with the main table's intervals
(configuration cluster-robust t, CR2). Each interval is scored against the truth of the generating
model: the mean over configurations of the mean over their trajectories of the true test accuracy of
the average minus that of the final checkpoint (``truth.parquet``) — for ``H``, minus that of
matched NLL's full-pool choice.

Reports, per planted gain: coverage ± its Monte Carlo standard error, the mean width, and how often
the interval resolves (lies wholly above or below 0).

    python benchmarks/bench_average_gain.py [--studies 100] [--gains 0,2,5] [--no-write]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel.choose.frozen import load_frozen
from ckptsel.sim.presets import PRESETS
from ckptsel.sim.simulate import write_simulation
from ckptsel.workflows.analysis import analyze

from _common import machine, update_section

RULE, STEP = "mean_last3", -3


def truths(sim: Path, results: Path) -> dict[str, float]:
    """True G and H of the average (pp): configuration means of trajectory differences."""
    truth = pd.read_parquet(sim / "truth.parquet")
    final = truth[truth["step"] >= 0].groupby("trajectory")["step"].max()
    acc = truth.set_index(["trajectory", "step"])["true_test_accuracy"]
    frozen = load_frozen(results / "choices").table
    nll = frozen[(frozen.scheme == "nested") & (frozen.rule == "nll") & (frozen.budget == "full")]
    rows = []
    for traj, t in truth.groupby("trajectory", observed=True):
        chosen = nll[nll.trajectory == traj]
        p_nll = float((chosen["prob"].to_numpy() * acc.loc[[(traj, s) for s in chosen["step"]]].to_numpy()).sum())
        p_avg, p_final = acc.loc[(traj, STEP)], acc.loc[(traj, final[traj])]
        rows.append((t["configuration"].iloc[0], 100 * (p_avg - p_final), 100 * (p_avg - p_nll)))
    d = pd.DataFrame(rows, columns=["configuration", "G", "H"]).groupby("configuration").mean()
    return {"G": float(d["G"].mean()), "H": float(d["H"].mean())}


def one_study(gain: float, seed: int, work: Path) -> dict:
    spec = replace(PRESETS["small"], average_last=(3,), average_gain_pp=gain)
    sim, res = work / f"sim-{seed}", work / f"res-{seed}"
    write_simulation(sim, spec, seed)
    summary = analyze(sim, res, permutations=20, draws=1000, seed=seed, report=False)
    truth = truths(sim, res)
    out = {}
    for key in ("G", "H"):
        e = summary.gains.get(key, RULE)
        out[key] = (e.lo <= truth[key] <= e.hi, e.hi - e.lo, not e.unresolved, truth[key], e.mean)
    return out


def run(studies: int, gains: list[float]) -> str:
    lines = [
        f"Machine: {machine()}. {studies} studies per planted gain (`simulate --preset small --average-last 3 "
        "--average-gain GAIN`, 7 configurations, 18 trajectories), each analysed end to end; 95% CR2 intervals "
        "of `mean_last3`'s G and H against the generating model's truth.",
        "",
        "| planted gain (pp) | claim | mean truth (pp) | mean estimate (pp) | coverage | mean width (pp) | resolved |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    start = time.perf_counter()
    for gain in gains:
        with tempfile.TemporaryDirectory() as tmp:
            results = [one_study(gain, seed, Path(tmp)) for seed in range(studies)]
        for key in ("G", "H"):
            cov = np.array([r[key][0] for r in results], dtype=float)
            mcse = np.sqrt(cov.mean() * (1 - cov.mean()) / len(cov))
            lines.append(
                f"| {gain:g} | {key} | {np.mean([r[key][3] for r in results]):+.2f} | {np.mean([r[key][4] for r in results]):+.2f} "
                f"| {cov.mean():.3f} ± {mcse:.3f} | {np.mean([r[key][1] for r in results]):.2f} "
                f"| {np.mean([r[key][2] for r in results]):.2f} |"
            )
        print("\n".join(lines[-2:]), flush=True)
    lines += ["", f"{time.perf_counter() - start:.0f} s. `python benchmarks/bench_average_gain.py --studies {studies}`"]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=100)
    ap.add_argument("--gains", default="0,2,5")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    text = run(args.studies, [float(g) for g in args.gains.split(",")])
    print(text)
    if not args.no_write:
        update_section("bench_average_gain", "## Averages: intervals of a planted averaging gain\n\n" + text)


if __name__ == "__main__":
    main()
