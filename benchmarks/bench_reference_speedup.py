"""Speed-up of the vectorized engine over the loop-based reference (``tests/reference_impl.py``).

Run from the repo root:  .venv/bin/python benchmarks/bench_reference_speedup.py [--repeats 3]

Times the deterministic part of the analysis — every frozen choice (nested budgets, thinning,
one variant per group, complete-response NLL) and every per-trajectory quantity (G, H, D,
matched half) — at P = 200 permutations/partitions, on studies where the reference still
finishes: the ``ckptsel.sim.simulate`` "small" preset and a larger random study from
``tests/recordsgen.py``. Both sides must agree (max |difference| is reported) before a timing
counts. Prints a table and writes the ``<!-- bench_reference -->`` section of BENCHMARKS.md
(other sections are kept).

Engine columns: ``choose`` = ``choose_trajectory`` over every trajectory, from loaded arrays;
``analyze`` = the whole ``pipeline.analyze`` with 10 bootstrap draws (records loading,
choices, per-trajectory quantities, tables on disk; the bootstrap itself is negligible at 10
draws). Reference columns: the same choices, then choices + per-trajectory quantities, from
already-parsed records (parsing is excluded, which favours the reference).
"""

from __future__ import annotations

import argparse
import inspect
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from _common import update_section

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from ckptsel.choose.choices import choose_trajectory  # noqa: E402
from ckptsel.choose.settings import ChoiceSettings  # noqa: E402
from ckptsel.records.load import load_validation  # noqa: E402
from ckptsel.workflows.analysis import analyze  # noqa: E402

import recordsgen as rg  # noqa: E402
import reference_impl as ref  # noqa: E402

PERMUTATIONS = 200
# the HTML report and figures are not part of the deterministic analysis being timed
NO_REPORT = {"report": False} if "report" in inspect.signature(analyze).parameters else {}
SEED = 20260825


def _median_time(fn, repeats: int):
    """Median (wall, CPU) seconds over ``repeats`` runs and the last result.

    CPU time is the headline number: the machine is shared, and wall clock then measures the
    neighbours as much as the code (both sides are single-process).
    """
    walls, cpus, out = [], [], None
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return (statistics.median(walls), statistics.median(cpus)), out


def _studies(which: list[str]) -> dict[str, tuple[pd.DataFrame, pd.DataFrame]]:
    out = {}
    if "small" in which:
        from ckptsel.sim.simulate import simulate

        gen, nll, _ = simulate("small", seed=0)
        out["simulate small"] = (gen, nll)
    if "medium" in which:
        rng = np.random.default_rng(2026)
        trajs = rg.random_study(
            rng, n_configs=3, seeds=2, T=(10, 16), n_val=(280, 320), n_test=(250, 300), n_answers=4, tasks=("a", "b", "c"), dyadic=False
        )
        out["random medium"] = rg.tables(trajs)
    if "paper" in which:  # the paper's scale: the reference takes many minutes here
        from ckptsel.sim.simulate import simulate

        gen, nll, _ = simulate("paper", seed=0)
        out["simulate paper"] = (gen, nll)
    return out


def _describe(trajs: list[ref.RefTrajectory]) -> str:
    T = [len(t.steps) for t in trajs]
    n = [len(t.val_ids) for t in trajs]
    N = [len(t.test_ids) for t in trajs]
    return f"{len(trajs)} traj., T {min(T)}–{max(T)}, validation {min(n)}–{max(n)}, test {min(N)}–{max(N)}"


def bench(name: str, gen: pd.DataFrame, nll: pd.DataFrame, repeats: int, workdir: Path) -> dict:
    rec = rg.write(workdir / "records", gen, nll)
    settings = ChoiceSettings(permutations=PERMUTATIONS, seed=SEED)
    trajs = ref.trajectories_from_tables(gen, nll)
    validation = load_validation(rec)

    def engine_choose():
        return {v.trajectory: choose_trajectory(v, settings) for v in validation}

    def engine_analyze():
        return analyze(rec, workdir / "out", permutations=PERMUTATIONS, draws=10, seed=SEED, **NO_REPORT)

    def ref_choose():
        return {t.name: ref.choose_reference(t, ref.shared_orders(t, PERMUTATIONS, SEED)) for t in trajs}

    def ref_all():
        return ref.analyze_reference(trajs, PERMUTATIONS, SEED)

    e_choose, e_vectors = _median_time(engine_choose, repeats)
    e_all, _ = _median_time(engine_analyze, repeats)
    r_choose, _ = _median_time(ref_choose, max(1, repeats // 3))
    r_all, study = _median_time(ref_all, max(1, repeats // 3))

    # agreement check: vectors and per-trajectory table
    diff = 0.0
    for traj, vecs in e_vectors.items():
        for key, vec in vecs.items():
            diff = max(diff, float(np.max(np.abs(vec - np.asarray(study.vectors[traj][key])))))
    table = pd.read_csv(workdir / "out" / "tables" / "per_trajectory.csv")
    for _, row in table.iterrows():
        for col, want in study.quantities[row["trajectory"]].items():
            diff = max(diff, abs(float(row[col]) - want))
    return {
        "study": name,
        "shape": _describe(trajs),
        "engine_choose": e_choose,
        "ref_choose": r_choose,
        "engine_all": e_all,
        "ref_all": r_all,
        "max_diff": diff,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--studies", default="small,medium", help="comma list of: small, medium, paper")
    parser.add_argument("--out", type=Path, default=REPO / "BENCHMARKS.md")
    parser.add_argument("--no-write", action="store_true", help="print only, leave BENCHMARKS.md alone")
    args = parser.parse_args()
    rows = []
    for name, (gen, nll) in _studies(args.studies.split(",")).items():
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(bench(name, gen, nll, args.repeats, Path(tmp)))
        r = rows[-1]
        print(
            f"{r['study']}: {r['shape']}; (wall, cpu) s: choose engine {r['engine_choose']} "
            f"ref {r['ref_choose']}; all engine {r['engine_all']} ref {r['ref_all']}; "
            f"max|diff| {r['max_diff']:.1e}",
            flush=True,
        )
    lines = [
        "## Engine vs loop reference (`benchmarks/bench_reference_speedup.py`)",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"P = {PERMUTATIONS} permutations and matched-half partitions; engine median of "
        f"{args.repeats} runs, reference median of {max(1, args.repeats // 3)}; times are CPU seconds "
        "(the machine is shared; the wall-clock speed-up is given too). *Choices*: every frozen "
        "selection vector (nested budgets, thinning k = 2, 3, 4, one variant per group, complete-response "
        "NLL). *Deterministic part*: choices + every per-trajectory quantity (G, H, D, matched half); "
        "engine timed as the whole `analyze` with 10 bootstrap draws (so it also parses records and writes "
        "tables), reference from already-parsed records. Max |diff| = largest disagreement over every "
        "vector and per-trajectory value (pp).",
        "",
        "| study | shape | choices: engine CPU s | reference CPU s | speed-up (wall) "
        "| deterministic part: engine CPU s | reference CPU s | speed-up (wall) | max abs diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        (ecw, ecc), (rcw, rcc) = r["engine_choose"], r["ref_choose"]
        (eaw, eac), (raw, rac) = r["engine_all"], r["ref_all"]
        lines.append(
            f"| {r['study']} | {r['shape']} | {ecc:.3f} | {rcc:.2f} | {rcc / ecc:.0f}× ({rcw / ecw:.0f}×) | "
            f"{eac:.3f} | {rac:.2f} | {rac / eac:.0f}× ({raw / eaw:.0f}×) | {r['max_diff']:.1e} |"
        )
    body = "\n".join(lines)
    print()
    print(body)
    if not args.no_write:
        update_section("bench_reference", body, args.out)
        print(f"\nwrote the bench_reference section of {args.out}")


if __name__ == "__main__":
    main()
