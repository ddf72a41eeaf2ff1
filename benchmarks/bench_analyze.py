"""Paper-scale speed and memory of ``ckptsel analyze`` (issue 23: at most 3 s and 1 GiB on 2 cores;
issue 37: the first analysis at most 5 s and 1 GiB, again at most 2 s).

Simulates the paper preset (81 trajectories in 26 configurations, 10-31 checkpoints,
305-1,024 validation and 500-4,000 test items), writes the records through
``ckptsel.records.upsert_records`` (the writer ``measure``, ``ingest`` and the Trainer
callback use, so the layout timed is the one they produce), then runs the whole analysis (every rule and
budget, matched half with 200 partitions, sensitivities, all three bootstraps with 20,000 draws,
the default interval) in fresh subprocesses:

* **first analysis** of new records (median of ``--repeats``, the cache removed before each):
  no cache of loaded arrays yet, the trajectories' packs as the writer left them (what the first
  ``analyze`` after ``measure`` pays, once);
* **again** (best of ``--repeats``): the caches are current, as for every later analysis,
  ``verify`` and re-run of the same records; each phase is then re-run separately (warm).

    python benchmarks/bench_analyze.py [--repeats 3] [--no-write]

``--form`` times the first analysis of one form of the same records instead (issue 49; the
``--records DIR`` folder is written once and kept, so runs before and after a change read the
same records; nothing is written to BENCHMARKS.md): ``packed`` (as the writer left them),
``copied`` (``cp -r`` of the folder: every unit a new file, new mtimes and inodes), ``units``
(the packs deleted: units written by another producer) and ``single`` (the single-file form
of the same rows, ``compact``). Each prints its wall and CPU seconds, those of a second analysis
of the same folder right after (``again``: the cache of loaded arrays the first one built; no
form gains packs from its readers) and summary.json's sha256.

    python benchmarks/bench_analyze.py --form packed|copied|units|single --records DIR [--repeats 3]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from ckptsel.records.cache.memo import MEMO_DIR
except ImportError:  # before issue 49
    from ckptsel.records.memo import MEMO_DIR

from _common import machine, update_section

CHILD = r"""
import json, sys, time
from pathlib import Path
from ckptsel._util.blas import blas_kernel
from ckptsel.choose.choices import choose
from ckptsel.choose.evaluate import score
from ckptsel.choose.frozen import load_frozen
from ckptsel.choose.settings import ChoiceSettings
from ckptsel.records.load import load_test, load_validation
from ckptsel.stats.estimates import StatSettings, summarize
from ckptsel.workflows import analysis
rec, out, phases = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "phases"
t = {}
t0, c0 = time.perf_counter(), time.process_time()
analysis.analyze(rec, out)
t["analyze (total)"] = time.perf_counter() - t0
t["analyze (total), CPU seconds of the process"] = time.process_time() - c0
# peak of analyze itself: VmHWM is this process's own high-water mark (ru_maxrss would
# include the parent's, inherited across fork/exec)
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0]
rss = int(hwm.split()[1]) / 1024 / 1024
if phases:  # the phases, once more, separately (warm caches)
    from ckptsel._util.threads import single_threaded
    single_threaded().__enter__()
    t0 = time.perf_counter(); val = load_validation(rec); t["load validation"] = time.perf_counter() - t0
    t0 = time.perf_counter(); table = choose(val, ChoiceSettings()); t["choose (all schemes)"] = time.perf_counter() - t0
    frozen = load_frozen(out / "choices")
    t0 = time.perf_counter(); tests = load_test(rec, val); t["load test"] = time.perf_counter() - t0
    t0 = time.perf_counter(); scored = score(frozen, tests); t["score + matched half"] = time.perf_counter() - t0
    pop = analysis.population(val); pop["test_items"] = scored.test_items
    t0 = time.perf_counter(); summarize(scored, StatSettings(), pop); t["bootstraps + intervals"] = time.perf_counter() - t0
print(json.dumps({"times": t, "peak_gib": rss, "blas": blas_kernel()}))
"""


def _run(rec: Path, out: Path, phases: bool) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(rec), str(out), "phases" if phases else "total"], check=True, capture_output=True, text=True
    )
    run = json.loads(res.stdout.strip().splitlines()[-1])
    run["summary"] = hashlib.sha256((out / "summary.json").read_bytes()).hexdigest()
    return run


def _records(tmp: Path) -> tuple[Path, str]:
    """The simulated paper preset written as ``measure`` writes records, and its shape."""
    import pandas as pd

    from ckptsel.records.store import upsert_records
    from ckptsel.sim.simulate import write_simulation

    sim = write_simulation(tmp / "simulated", "paper", seed=0)
    gen = pd.read_parquet(sim / "generations.parquet", columns=["trajectory", "configuration"])
    shape = f"{gen.trajectory.nunique()} trajectories, {gen.configuration.nunique()} configurations, {len(gen):,} generation rows"
    rec = tmp / "records"
    for name in ("generations", "nll"):
        upsert_records(rec, **{name: pd.read_parquet(sim / f"{name}.parquet")})
    shutil.rmtree(sim)
    return rec, shape


def _form(rec: Path, form: str, work: Path) -> Path:
    """A fresh copy of the records ``rec`` in ``form`` under ``work`` (the loaded-array cache
    removed: what a first analysis of that folder meets)."""
    target = work / f"records-{form}"
    shutil.rmtree(target, ignore_errors=True)
    if form == "single":
        single = work / "records-single-kept"
        if not single.exists():
            from ckptsel.records.store import compact

            shutil.copytree(rec, single)
            compact(single)
        src = single
    else:
        src = rec
    shutil.copytree(src, target)  # as ``cp -r``: new files, new mtimes and inodes
    shutil.rmtree(target / MEMO_DIR, ignore_errors=True)
    if form == "units":
        shutil.rmtree(target / "units" / ".packs", ignore_errors=True)
    return target


def _prove_for_this_code(rec: Path) -> None:
    """Re-prove the NLL packs of ``rec`` where their test-NLL proofs were made by another
    version of the records' checks (kept records written before a change to them): else the
    ``packed`` and ``copied`` forms would re-prove every trajectory inside the timed analysis,
    which a writer's own folder never does."""
    from ckptsel.records import cache
    from ckptsel.records.scan import refresh_pack
    from ckptsel.records.units import list_units

    listed = list_units(rec, "nll")
    found = cache.proofs(rec, "nll", listed)
    stale = [traj for traj, proof in found.items() if proof is None or proof.get("code") != cache.code_digest()]
    if not stale:
        return
    print(f"re-proving {len(stale)} NLL pack(s) of {rec} (their proofs are another version's)", file=sys.stderr)
    groups = dict(cache.by_trajectory(listed))
    failed = [traj for traj in stale if not refresh_pack(rec, "nll", traj, groups[traj], force=True)]
    if failed:  # (the timed analysis would prove these itself: the packed form is not the writer's)
        sys.exit(f"{rec}: {len(failed)} NLL pack(s) could not be rewritten (first: {failed[0]!r}); write the records again")


def form_main(args) -> None:
    """``--form``: the first analysis of one form of the records kept in ``--records``."""
    keep = Path(args.records)
    if not (keep / "units").exists():
        keep.parent.mkdir(parents=True, exist_ok=True)
        tmp = keep.parent / f"{keep.name}-build"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        rec, shape = _records(tmp)
        shutil.rmtree(keep, ignore_errors=True)
        rec.rename(keep)
        shutil.rmtree(tmp)
        print(f"records written to {keep}: {shape}")
    if args.form in ("packed", "copied"):  # (the other forms read no pack)
        _prove_for_this_code(keep)
    work = keep.parent / f"{keep.name}-forms-{args.form}"  # (forms may run side by side)
    work.mkdir(exist_ok=True)
    runs, agains = [], []
    for _ in range(args.repeats):
        if args.form == "packed":
            rec = keep
            shutil.rmtree(rec / MEMO_DIR, ignore_errors=True)
        else:
            rec = _form(keep, args.form, work)
        runs.append(_run(rec, work / "out", phases=False))
        agains.append(_run(rec, work / "out", phases=False))  # the same folder: its caches now filled
    assert len({r["summary"] for r in runs + agains}) == 1, "summary.json differs between runs"
    cpu = sorted(r["times"]["analyze (total), CPU seconds of the process"] for r in runs)
    wall = sorted(r["times"]["analyze (total)"] for r in runs)
    print(
        json.dumps(
            {
                "form": args.form,
                "cpu_s": cpu,
                "wall_s": wall,
                "again_wall_s": sorted(r["times"]["analyze (total)"] for r in agains),
                "load": os.getloadavg()[0],
                "peak_gib": max(r["peak_gib"] for r in runs),
                "summary": sorted({r["summary"] for r in runs}),
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--form", choices=["packed", "copied", "units", "single"])
    ap.add_argument("--records", help="with --form: where the records are written once and kept")
    args = ap.parse_args()
    if args.form:
        if not args.records:
            ap.error("--form needs --records DIR")
        return form_main(args)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        rec, shape = _records(Path(tmp))
        written = time.perf_counter() - t0
        firsts = []  # each: the packs as the writer left them, no cache of loaded arrays
        for _ in range(args.repeats):
            shutil.rmtree(rec / MEMO_DIR, ignore_errors=True)
            firsts.append(_run(rec, Path(tmp) / "out", phases=False))  # builds the caches
        runs = [_run(rec, Path(tmp) / "out", phases=True) for _ in range(args.repeats)]
    firsts.sort(key=lambda r: r["times"]["analyze (total)"])
    first = firsts[len(firsts) // 2]  # the median run
    spread = [r["times"]["analyze (total)"] for r in (firsts[0], firsts[-1])]
    assert all(r["summary"] == first["summary"] for r in runs + firsts), "summary.json differs between runs"
    phases = list(runs[0]["times"])
    best = {p: min(r["times"][p] for r in runs) for p in phases}
    peak = max(r["peak_gib"] for r in runs)
    total = best["analyze (total)"]
    met = total <= 3 and peak <= 1
    first_s, first_gib = first["times"]["analyze (total)"], max(r["peak_gib"] for r in firsts)
    met37 = first_s <= 5 and first_gib <= 1 and total <= 2
    lines = [
        "## `ckptsel analyze` at paper scale (`benchmarks/bench_analyze.py`)",
        "",
        f"Simulated paper preset, written as `measure` writes records: {shape}; 200 permutations/"
        f"partitions, 20,000 draws, default interval (CR2). Machine: {machine()}, BLAS kernels "
        f"{runs[0]['blas']}; 1-minute load average {load:.1f} at the start. Fresh process each.",
        "",
        "| | seconds |",
        "|---|---|",
        f"| simulate + write the records through `upsert_records` (units and packs) | {written:.1f} |",
        f"| first analysis of new records (reads the packs and the test NLL's proofs, builds the cache "
        f"of loaded arrays; median of {len(firsts)}, {spread[0]:.2f}–{spread[1]:.2f}) | "
        f"{first_s:.2f} (CPU "
        f"{first['times']['analyze (total), CPU seconds of the process']:.2f} s; peak {first_gib:.2f} GiB) |",
        f"| **analyze again** (best of {args.repeats}; caches current) | **{total:.2f}** |",
        *[f"| — {p} | {best[p]:.2f} |" for p in phases if p != "analyze (total)"],
        f"| peak memory (RSS), again | {peak:.2f} GiB |",
        "",
        f"summary.json identical in all {len(runs) + len(firsts)} runs (sha256 {first['summary'][:12]}…).",
        f"Target (issue 23): analyze ≤ 3 s and ≤ 1 GiB — {'met' if met else 'NOT met'}.",
        f"Target (issue 37): first analysis ≤ 5 s and ≤ 1 GiB, again ≤ 2 s — "
        f"{'met' if met37 else 'NOT met'} (first {first_s:.2f} s, {first_gib:.2f} GiB; again {total:.2f} s).",
    ]
    text = "\n".join(lines)
    print(text)
    if not args.no_write:
        update_section("bench_analyze", text)


if __name__ == "__main__":
    main()
