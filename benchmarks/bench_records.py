"""Records that scale (issue 13): write cost per checkpoint from empty to paper scale, analyze
load time on the units vs the single files, and ``measure`` into a full vs an empty folder.

1. Fills a records folder with the paper preset's 1,563 checkpoints (81 trajectories; 3.76M
   generation and 7.51M NLL rows) through :func:`ckptsel.records.write_unit`, each
   generation row carrying a realistic 1-2 KB ``text``, timing every checkpoint's write
   (generations + texts + NLL) and the process's resident memory as the folder grows.
2. Loads the validation and test records (``load_validation`` + ``load_test``) and runs the
   whole ``analyze`` in fresh processes on the single files and on the units (first load after
   the writes, which builds the read cache, and later ones).
3. Measures 6 tiny LoRA checkpoints (100 items) with ``measure`` into an empty folder and
   into the paper-scale folder.

    python benchmarks/bench_records.py [--no-write] [--skip-measure]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, rss_mb, update_section  # noqa: E402

WORDS = (
    "so the answer is we first compute the total number of apples then subtract those eaten "
    "each day which leaves twelve and multiply by three to get thirty six therefore"
).split()


def texts(n: int, seed: int) -> list[str]:
    """``n`` distinct 1-2 KB texts of words (as compressible as model outputs, roughly)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(170, 340, size=n)  # ~6 bytes a word: 1-2 KB
    words = np.asarray(WORDS)
    pool = words[rng.integers(0, len(words), size=int(lengths.sum()))]
    out, at = [], 0
    for k in lengths:
        out.append(" ".join(pool[at : at + k]))
        at += k
    return out


def fill(sim: Path, rec: Path) -> list[tuple[int, float, float]]:
    """Write every checkpoint of ``sim`` as units into ``rec``; per write (index, s, RSS MB)."""
    import numpy as np
    import pyarrow.parquet as pq

    from ckptsel import records

    def units_of(name: str):
        """The table sorted by (trajectory, step) and each checkpoint's row range."""
        table = pq.read_table(sim / name).sort_by([("trajectory", "ascending"), ("step", "ascending")])
        traj = table.column("trajectory").to_numpy(zero_copy_only=False).astype(str)
        step = table.column("step").to_numpy()
        cut = np.flatnonzero((traj[1:] != traj[:-1]) | (step[1:] != step[:-1])) + 1
        starts, ends = np.r_[0, cut], np.r_[cut, len(step)]
        return table, {(traj[a], int(step[a])): (a, b) for a, b in zip(starts, ends, strict=True)}

    gen, gkeys = units_of("generations.parquet")
    nll, nkeys = units_of("nll.parquet")
    # checkpoints in training order across trajectories (as a study is measured)
    order = sorted(gkeys, key=lambda k: (k[1], k[0]))
    pool = texts(4096, seed=0)
    timings = [(-1, 0.0, rss_mb())]  # RSS before the first write (the source tables held)
    for i, (traj, step) in enumerate(order):
        (a, b), (c, d) = gkeys[(traj, step)], nkeys[(traj, step)]
        g = gen.slice(a, b - a).to_pandas()
        n = nll.slice(c, d - c).to_pandas()
        g = g.assign(text=[f"{step} {pool[(j * 7 + step) % len(pool)]}" for j in range(len(g))])
        t0 = time.perf_counter()
        records.write_unit(rec, traj, step, generations=g, nll=n)
        timings.append((i, time.perf_counter() - t0, rss_mb()))
        if i % 200 == 0:
            print(f"{i} checkpoints written", flush=True)
    del gen, nll
    return timings


LOAD = r"""
import json, sys, time
from pathlib import Path
from ckptsel.records.load import load_test, load_validation
rec = Path(sys.argv[1])
t0 = time.perf_counter(); val = load_validation(rec); t1 = time.perf_counter()
tests = load_test(rec, val); t2 = time.perf_counter()
print(json.dumps({"validation": t1 - t0, "test": t2 - t1}))
"""

ANALYZE = r"""
import json, sys, time
from pathlib import Path
from ckptsel.workflows.analysis import analyze
t0 = time.perf_counter(); analyze(Path(sys.argv[1]), Path(sys.argv[2]))
print(json.dumps({"analyze": time.perf_counter() - t0}))
"""


def child(code: str, *args: str) -> dict:
    env = dict(os.environ, PYTHONPATH=str(HERE.parent / "src"))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure6(out: Path, run, trajectory: str):
    """``measure_run`` of the 6 tiny LoRA checkpoints of ``run`` (50 + 50 items) into ``out``:
    (wall seconds, the run's MeasureResult)."""
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    config = MeasureConfig("gsm8k", batch_size=32, max_new_tokens=16)
    t0 = time.perf_counter()
    res = measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=out, trajectory=trajectory)
    return time.perf_counter() - t0, res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--skip-measure", action="store_true", help="skip part 3 (needs torch)")
    ap.add_argument("--sim", type=Path, default=None, help="existing paper-preset records")
    ap.add_argument("--repeats", type=int, default=2, help="repeats of part 3 (interleaved)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads for part 3 (0: torch's default, one per core)")
    args = ap.parse_args()
    import numpy as np

    from ckptsel.sim.simulate import write_simulation

    load0 = os.getloadavg()[0]

    with tempfile.TemporaryDirectory(prefix="bench_records_") as tmp:
        tmp = Path(tmp)
        sim = args.sim or write_simulation(tmp / "sim", "paper", seed=0)
        rec = tmp / "records"
        t0 = time.perf_counter()
        timings = fill(sim, rec)
        fill_s = time.perf_counter() - t0
        rss0 = timings.pop(0)[2]
        sec = np.asarray([t for _, t, _ in timings])
        rss = np.asarray([r for _, _, r in timings])
        n = len(sec)
        size = sum(p.stat().st_size for p in rec.rglob("*.parquet")) / 2**30
        buckets = [(0, 100), (n // 4, n // 4 + 100), (n // 2, n // 2 + 100), (n - 100, n)]
        rows_w = [
            f"| {a + 1}-{b} | {np.median(sec[a:b]) * 1000:.0f} ms | {np.percentile(sec[a:b], 90) * 1000:.0f} ms | {rss[b - 1]:.0f} MB |"
            for a, b in buckets
        ]
        print(f"filled {n} checkpoints ({size:.2f} GiB) in {fill_s:.0f}s", *rows_w, sep="\n")

        loads = {}
        loads["single file"] = child(LOAD, str(sim))
        loads["units, first load (builds the read cache)"] = child(LOAD, str(rec))
        loads["units, later loads"] = child(LOAD, str(rec))
        print(loads)
        analyze = {
            "single file": child(ANALYZE, str(sim), str(tmp / "res-single"))["analyze"],
            "units": child(ANALYZE, str(rec), str(tmp / "res-units"))["analyze"],
        }
        same = (tmp / "res-single" / "summary.json").read_text() == (tmp / "res-units" / "summary.json").read_text()
        print(analyze, "identical summary.json:", same)

        measure: dict[str, list] = {"empty folder": [], "paper-scale folder": []}
        if not args.skip_measure:
            import torch

            from tinyrun import build_tiny_run

            if args.threads:
                torch.set_num_threads(args.threads)
            run = build_tiny_run(tmp / "tiny", steps=(10, 20, 30, 40, 50, 60), n_validation=50, n_test=50)
            for r in range(args.repeats):  # interleaved: empty, full, empty, full, ...
                measure["empty folder"].append(measure6(tmp / f"empty-{r}", run, "bench-tiny"))
                # a new trajectory each time (the one before left the read cache stale)
                measure["paper-scale folder"].append(measure6(rec, run, f"bench-tiny-{r}"))
                print({k: [round(t, 1) for t, _ in v] for k, v in measure.items()}, flush=True)
        shutil.rmtree(rec, ignore_errors=True)

    load_rows = "\n".join(f"| {k} | {v['validation']:.2f} s | {v['test']:.2f} s |" for k, v in loads.items())

    def med(k: str, f) -> float:
        return float(np.median([f(t, res) for t, res in measure[k]]))

    wall = {k: med(k, lambda t, res: t) for k in measure} if not args.skip_measure else {}
    other = {k: med(k, lambda t, res: t - res.generation_seconds - res.nll_seconds) for k in measure} if wall else {}
    measure_rows = "\n".join(
        f"| {k} | {wall[k]:.1f} s | {', '.join(f'{t:.1f}' for t, _ in measure[k])} "
        f"| {med(k, lambda t, res: res.generation_seconds):.1f} s "
        f"| {med(k, lambda t, res: res.nll_seconds):.1f} s | {other[k]:.1f} s |"
        for k in wall
    )
    ratio = (
        f"Ratio of medians, paper-scale / empty: wall {wall['paper-scale folder'] / wall['empty folder']:.2f}x "
        f"(target <= 1.3x; before units 2.4x); outside generation and NLL (checks, model loads, "
        f"records writes): {other['paper-scale folder']:.1f} s vs {other['empty folder']:.1f} s "
        f"({other['paper-scale folder'] / other['empty folder']:.2f}x)."
        if wall
        else "(skipped)"
    )
    body = f"""## Records that scale (`benchmarks/bench_records.py`)

{machine()}; 1-min load average {load0:.1f} at the start, {os.getloadavg()[0]:.1f} at the end (2 cores
shared with other jobs, so absolute times are noisy).

Each checkpoint is written once as its own units (generations, texts, NLL; see
`ckptsel.records.units`); nothing already recorded is read or rewritten. The folder is filled
with the paper preset's {n} checkpoints (3.76M generation rows with 1-2 KB texts, 7.51M NLL rows;
{size:.2f} GiB on disk) in {fill_s:.0f} s. Write time per checkpoint (generations + texts + NLL,
~2,400 generation rows each) as the folder grows, and the writing process's resident memory
(it holds the whole simulated records as its source: {rss0:.0f} MB before the first write):

| checkpoints already written | median | 90th percentile | RSS after |
|---|---|---|---|
{chr(10).join(rows_w)}

(Before: one checkpoint upserted into paper-scale single files, without texts, took 5.0 s and
grew with the records.)

Loading the records at paper scale (fresh process each):

| form | load_validation | load_test |
|---|---|---|
{load_rows}

Whole `analyze` (fresh process): single file {analyze["single file"]:.1f} s, units
{analyze["units"]:.1f} s; identical summary.json: {same}.

`measure` of 6 tiny LoRA checkpoints (100 items; batch 32, 16 new tokens; torch threads
{args.threads or "default"}) in this process,
{args.repeats} repeats interleaved (empty, paper-scale, empty, ...; each paper-scale repeat records
a new trajectory, so from the second on the folder's read cache is stale), medians:

| into | wall | repeats (s) | generation | NLL | the rest |
|---|---|---|---|---|---|
{measure_rows}

{ratio}
"""
    if not args.no_write:
        update_section("bench_records", body)
    print(body)


if __name__ == "__main__":
    main()
