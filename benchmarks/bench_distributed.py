"""Benchmark of ``ckptsel measure`` through the local executor and through Ray (1 and 2 actors).

The work of ``bench_measure.py`` (a tiny LoRA run, greedy generation + NLL) at reduced sizes
by default (8 checkpoints × 400 items instead of 11 × 1,000: the machine is shared). Each
executor runs in its own subprocess, so memory and start-up are its own; Ray starts a local
cluster there (``ray.init(num_cpus=2)``), one CPU and one torch thread per actor; the local
executor uses one torch thread.

Reports per executor: wall time of ``measure_run`` and items/s (checkpoint × item
measurements per second, end to end), Ray's start-up (``ray.init``; actors starting and
loading the base before their first result), the scheduling overhead per unit (driver
round trip minus the actor's own measuring time), and peak memory per worker process.
Writes its section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_distributed.py [--items 400] [--checkpoints 8]
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
sys.path.insert(0, str(HERE.parent / "tests"))

from ckptsel.records.scan import read_frame  # noqa: E402

from _common import machine, update_section  # noqa: E402

MODES = {"local": ("local", 0), "ray-1": ("ray", 1), "ray-2": ("ray", 2)}


def peak_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def one(args: argparse.Namespace) -> None:
    """Child process: one executor over the run in ``args.run``; prints one JSON line."""
    import torch

    torch.set_num_threads(1)
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.executors.base import ExecutorConfig
    from ckptsel.measure.run import measure_run

    kind, workers = MODES[args.one]
    run = json.loads(Path(args.run).read_text())
    init_s = 0.0
    if kind == "ray":
        import ray

        t0 = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        init_s = time.perf_counter() - t0
    config = MeasureConfig("gsm8k", batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    res = measure_run(
        run["run_dir"],
        config,
        validation=Path(run["validation"]),
        test=Path(run["test"]),
        out=Path(args.out),
        executor=ExecutorConfig(kind, workers=workers),
    )
    st = res.executor_stats
    out = {
        "mode": args.one,
        "seconds": res.seconds,
        "init_seconds": init_s,
        "generated": res.generated_items,
        "scored": res.scored_items,
        "model_loads": res.model_loads,
        "driver_peak_mb": peak_mb(),
    }
    if kind == "ray":
        rt, cp, first = (st[k] for k in ("batch_roundtrip_seconds", "batch_compute_seconds", "batch_first_on_actor"))
        gap = [r - c for r, c in zip(rt, cp, strict=True)]
        later = [g for g, f in zip(gap, first, strict=True) if not f]
        out.update(
            overhead_ms=1000 * sum(later) / max(1, len(later)),
            startup_seconds=sum(g for g, f in zip(gap, first, strict=True) if f) / sum(first),
            worker_peak_mb=sorted(st["worker_peak_rss_mb"].values()),
            compute_seconds=sum(cp),
        )
        ray.shutdown()
    print("RESULT " + json.dumps(out), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=400, help="validation + test items (half each)")
    ap.add_argument("--checkpoints", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--one", choices=sorted(MODES), help=argparse.SUPPRESS)
    ap.add_argument("--run", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one(args)

    from tinyrun import build_tiny_run

    load_start = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench_distributed_") as tmp:
        tmp = Path(tmp)
        steps = tuple(25 * (k + 1) for k in range(args.checkpoints))
        run = build_tiny_run(tmp, steps=steps, n_validation=args.items // 2, n_test=args.items - args.items // 2)
        spec = tmp / "run.json"
        spec.write_text(json.dumps({"run_dir": str(run.run_dir), "validation": str(run.validation), "test": str(run.test)}))
        env = dict(os.environ, OMP_NUM_THREADS="1")
        for mode in MODES:
            cmd = [sys.executable, __file__, "--one", mode, "--run", str(spec)]
            cmd += ["--out", str(tmp / f"records-{mode}"), "--items", str(args.items)]
            cmd += ["--max-new-tokens", str(args.max_new_tokens)]
            cmd += ["--batch-size", str(args.batch_size)]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
            if proc.returncode or not line:
                raise SystemExit(f"{mode} failed:\n{proc.stderr[-3000:]}")
            results[mode] = json.loads(line[-1][7:]) | {"process_seconds": time.perf_counter() - t0}
            print(mode, results[mode], flush=True)

        same = all(
            read_frame(tmp / f"records-{m}", "generations").equals(read_frame(tmp / "records-local", "generations"))
            for m in ("ray-1", "ray-2")
        )

    n = len(steps) * args.items
    rows = []
    for mode, r in results.items():
        rate = 2 * n / r["seconds"]
        if mode == "local":
            init = over = start = "—"
            mem = f"{r['driver_peak_mb']:.0f} (the one process)"
        else:
            init = f"{r['init_seconds']:.1f} s"
            over = f"{r['overhead_ms']:.0f} ms"
            start = f"{r['startup_seconds']:.1f} s"
            mem = ", ".join(f"{m:.0f}" for m in r["worker_peak_mb"])
            mem += f" (driver {r['driver_peak_mb']:.0f})"
        rows.append(f"| {mode} | {r['seconds']:.1f} s | {rate:.0f} | {init} | {start} | {over} | {mem} |")
    local_s = results["local"]["seconds"]
    speedup = results["ray-1"]["seconds"] / results["ray-2"]["seconds"]
    slower = results["ray-2"]["compute_seconds"] > 1.2 * results["ray-1"]["compute_seconds"]
    reading = (
        "i.e. the second core was not free (other jobs running) and each actor ran slower "
        "rather than adding throughput; the speed-up from more actors needs free cores or GPUs."
        if slower
        else "i.e. each actor measured about as fast as one alone: the second core added throughput."
    )
    body = f"""## Distributed measurement (`benchmarks/bench_distributed.py`)

Machine: {machine()}; 1-min load average at start {load_start:.1f} (shared with other jobs:
absolute times are noisy). The work of `bench_measure.py` at **reduced sizes** (this machine is
shared): tiny Llama, {len(steps)} LoRA checkpoints, {args.items} GSM8K-format items, greedy
max {args.max_new_tokens} new tokens, batch {args.batch_size}, NLL (window 512 + complete), fp32
CPU, one torch thread per process. Each executor runs in its own process; Ray starts a local
cluster (`ray.init(num_cpus=2)`) with one CPU per actor. Records identical across the three
(generations compared exactly): **{same}**.

| executor | `measure_run` wall | items/s | `ray.init` | actor start-up | scheduling overhead per unit | peak RSS per worker (MB) |
|---|---:|---:|---:|---:|---:|---|
{chr(10).join(rows)}

items/s = checkpoint × item measurements (generation and NLL count one each) per second of
`measure_run`, start-up included. Scheduling overhead per unit = the driver's round trip for a
unit minus the actor's own time measuring it (sending the checkpoint and its missing items,
the part rows back, waiting while the driver writes), averaged over units that were not
an actor's first. Actor start-up = the same gap for an actor's first unit (a worker process
starting and importing torch and transformers; the base model load is inside the measuring
time).

Against the local executor ({local_s:.1f} s), `measure_run` with one Ray actor differs by
{results["ray-1"]["seconds"] - local_s:+.1f} s on this run, plus
{results["ray-1"]["init_seconds"]:.1f} s of `ray.init` (starting a local cluster). Two actors took
{results["ray-2"]["seconds"]:.1f} s ({speedup:.2f}× one actor): their measuring time summed over
both actors was {results["ray-2"]["compute_seconds"]:.1f} s against
{results["ray-1"]["compute_seconds"]:.1f} s for one actor, {reading} What this run shows
besides is the cost of Ray itself: the start-up, paid once per actor, and a per-unit overhead
of tens of milliseconds against units that are minutes of GPU work in a real study.
"""
    print(body)
    if not args.no_write:
        update_section("bench_distributed", body)


if __name__ == "__main__":
    main()
