"""``analyze``'s keep table (``summary.json``'s ``"keep"``) against ``ckptsel select --all`` at
its defaults, on simulated studies (issue 44 item 7).

For each ``--seeds`` seed of ``ckptsel simulate`` (small and paper presets), the keep rows are
made three ways, all through :func:`ckptsel.workflows.select_all` (``keep_only``, as ``analyze``
makes them, validation loaded once):

* **analysis**: the settings :func:`ckptsel.workflows.analysis.keep_table` uses
  (:func:`ckptsel.workflows.advise.selection.keep_settings` of the analysis' defaults);
* **select defaults**: ``SelectSettings()`` — what ``select --all`` runs without options;
* **former cheap**: the settings the keep table used before issue 44 (at most 200 draws and 5
  bootstrap partitions), spelled here for the record.

Counted per preset: the "keep X" recommendations (rows that keep a checkpoint other than the
final one) of ``select --all``, the rows whose recommendation differs from it (keep step or
keep-final), how many of the differing keeps are truly worse than the final checkpoint
(``truth.parquet``: true test accuracy), and the seconds of each table.

    python benchmarks/bench_keep.py [--seeds 0-4] [--presets small,paper] [--no-write]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from ckptsel import defaults
from ckptsel.records.load import load_validation
from ckptsel.sim.simulate import write_simulation
from ckptsel.workflows.advise.selection import SelectSettings, keep_settings, select_all

from _common import machine, update_section

# the keep table's settings before issue 44 (defaults.KEEP_DRAWS, KEEP_BOOTSTRAP_PARTITIONS)
FORMER_CHEAP = {"draws": 200, "bootstrap_partitions": 5}


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = map(int, text.split("-"))
        return list(range(lo, hi + 1))
    return [int(s) for s in text.split(",")]


def _truth(sim: Path) -> dict[tuple[str, int], float]:
    t = pd.read_parquet(sim / "truth.parquet")
    return {(str(tr), int(s)): float(a) for tr, s, a in zip(t.trajectory, t.step, t.true_test_accuracy, strict=True)}


def _compare(rows, reference, truth) -> dict:
    """Rows of one table against ``select --all``'s: differing recommendations, the keeps
    (rows keeping a non-final checkpoint) of each and the differing keeps truly worse."""
    differ = worse = keeps = 0
    for r, ref in zip(rows, reference, strict=True):
        assert r.trajectory == ref.trajectory
        keeps += not r.keep_final
        if (r.keep_step, r.keep_final) != (ref.keep_step, ref.keep_final):
            differ += 1
            if not r.keep_final and truth[(r.trajectory, r.keep_step)] < truth[(r.trajectory, r.final_step)]:
                worse += 1
    return {"differ": differ, "worse": worse, "keeps": keeps}


def run_seed(preset: str, seed: int, tmp: Path) -> dict:
    """The three tables of one simulated study, compared and timed."""
    sim = write_simulation(tmp / f"{preset}-{seed}", preset, seed=seed)
    truth = _truth(sim)
    validation = load_validation(sim)
    made = {}
    analysis = keep_settings(defaults.SEED, defaults.CONFIDENCE)
    cheap = replace(SelectSettings(), **FORMER_CHEAP)
    for name, settings in (("select", SelectSettings()), ("analysis", analysis), ("cheap", cheap)):
        t0 = time.perf_counter()
        table = select_all(sim, settings=settings, validation=validation, keep_only=True).keep
        made[name] = (table.trajectories, time.perf_counter() - t0)
    ref = made["select"][0]
    out = {"trajectories": len(ref), "select_keeps": sum(not r.keep_final for r in ref)}
    for name, (rows, secs) in made.items():
        out[name] = {**_compare(rows, ref, truth), "seconds": secs}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0-4", help="simulate seeds: 0-4 or 0,3,7")
    ap.add_argument("--paper-seeds", default=None, help="seeds of the paper preset (default: --seeds)")
    ap.add_argument("--presets", default="small,paper")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    start = time.perf_counter()
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            seeds = _seeds(args.paper_seeds if preset == "paper" and args.paper_seeds else args.seeds)
            res = [run_seed(preset, s, Path(tmp)) for s in seeds]
            for s, r in zip(seeds, res, strict=True):
                print(preset, s, r, flush=True)
            n = sum(r["trajectories"] for r in res)
            keeps = sum(r["select_keeps"] for r in res)
            for name, label in (
                ("analysis", "analysis' keep table (`keep_settings`)"),
                ("cheap", "former cheap settings (200 draws, 5 bootstrap partitions)"),
            ):
                differ = sum(r[name]["differ"] for r in res)
                studies = sum(r[name]["differ"] > 0 for r in res)
                worse = sum(r[name]["worse"] for r in res)
                secs = [r[name]["seconds"] for r in res]
                lines.append(
                    f"| {preset} | {len(seeds)} ({seeds[0]}–{seeds[-1]}) | {n} | {keeps} | {label} | "
                    f"{differ} ({studies} of {len(seeds)} studies) | {worse} | "
                    f"{sum(secs) / len(secs):.2f} | {sum(r['select']['seconds'] for r in res) / len(res):.2f} |"
                )
                print(lines[-1], flush=True)
    elapsed = time.perf_counter() - start
    body = [
        "## `analyze`'s keep table against `select --all` at its defaults (`benchmarks/bench_keep.py`)",
        "",
        f"`ckptsel simulate` studies; each table made by `select_all(..., keep_only=True)` as "
        f"`analyze` makes it, validation loaded once; `select --all` at its defaults is "
        f"`SelectSettings()` ({defaults.PERMUTATIONS} partitions, {defaults.SELECT_DRAWS} draws, "
        f"{defaults.SELECT_BOOTSTRAP_PARTITIONS} bootstrap partitions, seed {defaults.SEED}, level "
        f"{defaults.CONFIDENCE}). A row differs when its keep step or keep-final differs; "
        f'"truly worse": a differing keep whose true test accuracy (`truth.parquet`) is below the '
        f"final checkpoint's. Run: `python benchmarks/bench_keep.py --seeds {args.seeds}"
        f"{f' --paper-seeds {args.paper_seeds}' if args.paper_seeds else ''}`. {machine()}; {elapsed:.0f} s.",
        "",
        '| preset | seeds | trajectories | "keep X" rows of `select --all` | table | rows differing '
        "from `select --all` | differing keeps truly worse than final | seconds per table | "
        "seconds per `select --all` table |",
        "|---|---|---|---|---|---|---|---|---|",
        *lines,
    ]
    text = "\n".join(body)
    print(text)
    if not args.no_write:
        update_section("bench_keep", text)


if __name__ == "__main__":
    main()
