"""Benchmark of ``ckptsel quickstart`` (default and ``--fast``): wall and CPU time, the median
within-trajectory test-accuracy spread (beside the paper's 3.5 pp), accuracies and the number
of configurations. Writes its section of BENCHMARKS.md.

Each mode runs in a fresh temporary folder as a subprocess (``python -m ckptsel quickstart``).
Wall time on a shared machine says more about the other jobs than about ckptsel, so the CPU
time is measured too (user + system of the quickstart process and its worker processes, per
stage, from ``quickstart.json``), and the wall time on an otherwise idle machine with W cores
is estimated as: each stage's CPU time / the cores it keeps busy (the base pre-training runs
min(W, 2) threads and the training/measurement stage min(W, 2) single-threaded worker
processes; the others run in one process, one thread).

    .venv/bin/python benchmarks/bench_quickstart.py [--modes fast,default] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import machine, update_section  # noqa: E402

PARALLEL_STAGES = ("data + base model", "training + measurement")  # two threads / two workers
LIMITS = {"fast": 180.0, "default": 300.0}  # seconds, issue 10


def run_mode(mode: str, root: Path) -> dict:
    out = root / f"qs-{mode}"
    cmd = [sys.executable, "-m", "ckptsel", "quickstart", "--out", str(out)]
    if mode == "fast":
        cmd.append("--fast")
    loads = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        while proc.poll() is None:  # the 1-minute load average, every 5 s during the run
            time.sleep(5)
            loads.append(os.getloadavg()[0])
        wall = time.perf_counter() - t0
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if proc.returncode != 0:
        raise SystemExit(f"quickstart {mode} failed ({proc.returncode}):\n{stdout}\n{stderr}")
    q = json.loads((out / "results" / "quickstart.json").read_text())
    workers = min(2, os.cpu_count() or 1)
    cpu = q["cpu_seconds"]
    estimate = sum(v / (workers if k in PARALLEL_STAGES else 1) for k, v in cpu.items())
    lines = stdout.count("\n") + stderr.count("\n")
    return {
        "mode": mode,
        "wall_s": wall,
        "cpu_s": sum(cpu.values()),
        "idle_estimate_s": estimate,
        "load": (loads[0], sum(loads) / len(loads), max(loads)),
        "stdout": stdout,
        "configurations": q["configurations"],
        "trajectories": len(q["spread_pp_by_trajectory"]),
        "base_pp": q["base_test_accuracy_pp"],
        "final_pp": q["final_test_accuracy_pp"],
        "spread_pp": q["median_best_to_worst_spread_pp"],
        "spreads": sorted(q["spread_pp_by_trajectory"].values()),
        "stages": q["seconds"],
        "stage_cpu": cpu,
        "log_lines": lines,
        "limit_s": LIMITS[mode],
    }


def section(results: list[dict]) -> str:
    rows = [
        "## Quickstart (`benchmarks/bench_quickstart.py`)",
        "",
        f"Machine: {machine()}, shared with other jobs (the 1-minute load average, sampled every "
        "5 s during each run, says how busy it was: 2 means both cores were taken). Each mode "
        "from an empty folder, output to a log (no TTY). "
        "CPU = user + system of the quickstart and its workers; the idle-machine estimate is "
        "each stage's CPU / the cores it keeps busy (2 for the base pre-training's two threads "
        "and for the two single-threaded workers of training + measurement, 1 otherwise).",
        "",
        "| mode | configurations × seeds | wall (1-min load avg: start, mean, max) | CPU "
        "| estimate, idle 2 cores "
        "| limit | base → final test acc. | median spread (paper: 3.5 pp) | spreads min–max "
        "| log lines |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        rows.append(
            f"| {r['mode']} | {r['configurations']} × {r['trajectories'] // r['configurations']} "
            f"| {r['wall_s']:.0f} s ({r['load'][0]:.1f}, {r['load'][1]:.1f}, {r['load'][2]:.1f}) "
            f"| {r['cpu_s']:.0f} s "
            f"| {r['idle_estimate_s']:.0f} s | {r['limit_s']:.0f} s "
            f"| {r['base_pp']:.1f}% → {r['final_pp']:.1f}% | {r['spread_pp']:.1f} pp "
            f"| {min(r['spreads']):.1f}–{max(r['spreads']):.1f} pp | {r['log_lines']} |"
        )
    rows.append("")
    for r in results:
        stages = ", ".join(f"{k} {r['stages'][k]:.0f} s wall / {r['stage_cpu'][k]:.0f} s CPU" for k in r["stages"])
        verdict = "within" if r["wall_s"] <= r["limit_s"] else "MISSED"
        rows.append(
            f"* {r['mode']}: {r['wall_s']:.0f} s wall against the {r['limit_s']:.0f} s target: "
            f"{verdict} (1-minute load average {r['load'][1]:.1f} on average during the run, "
            f"{r['load'][2]:.1f} at most); median spread {r['spread_pp']:.1f} pp against the "
            f"2-15 pp target (the paper's: 3.5 pp). Stages: {stages}."
        )
    return "\n".join(rows) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="fast,default")
    ap.add_argument("--keep", type=Path, default=None, help="keep the study folders here")
    ap.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md")
    ap.add_argument("--log", type=Path, default=None, help="write each mode's output here")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-qs-") as tmp:
        root = args.keep or Path(tmp)
        results = [run_mode(m, root) for m in args.modes.split(",")]
    if args.log:
        args.log.write_text("".join(f"== {r['mode']}\n{r['stdout']}" for r in results))
    text = section(results)
    print(text)
    if not args.no_write:
        update_section("bench_quickstart", text)


if __name__ == "__main__":
    main()
