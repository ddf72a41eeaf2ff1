"""Benchmark of ``ckptsel measure`` on a tiny local LoRA run.

Default: 11 LoRA checkpoints, 1,000 items (500 validation + 500 test), greedy generation of
up to 16 new tokens, batch 32, NLL for window 512 and the complete response.

Reports generation and NLL throughput (items/s), the speed-up over a naive loop that reloads
the model for every checkpoint and handles one item at a time (timed on a subset and
extrapolated, because the full naive loop would take far too long), and the resident memory
after each checkpoint (it must not grow with the number of checkpoints: adapters are swapped
in place and old ones deleted). Writes its section of BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_measure.py [--items 1000] [--checkpoints 11]

``--small`` is issue 37's check instead: 6 LoRA checkpoints, 100 items, 32 new tokens, the
CLI's defaults otherwise; ``ckptsel measure`` as a user runs it (a fresh process, progress bars
on a terminal, an empty cache folder) against the naive loop over every checkpoint and item
(a fresh process too), wall and CPU seconds, then where one more run's time went (imports
timed wherever they happen; the garbage collector's share). ``--against OTHER/src`` runs
another ckptsel's CLI interleaved with this one's (before/after). The default mode imports
ckptsel from the environment: from a worktree, set ``PYTHONPATH=src``.

    .venv/bin/python benchmarks/bench_measure.py --small [--repeat 3] [--against OTHER/src]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, rss_mb, update_section  # noqa: E402

# where a run's time goes (issue 37): (label, module, class or None, attribute); the NESTED
# rows are inside another row (named after them) and are not counted twice
PARTS = (
    ("checkpoints listed", "ckptsel.measure.run", None, "discover_checkpoints"),
    ("items loaded", "ckptsel.measure.parts", "ItemPool", "load"),
    ("records folder checked", "ckptsel.measure.run", "RunMeasurement", "check_records"),
    ("prompt format bound", "ckptsel.measure.run", "RunMeasurement", "bind_format"),
    ("fingerprints + stamps (once per checkpoint)", "ckptsel.measure.run", "RunMeasurement", "check_weights"),
    ("  weights fingerprints", "ckptsel.measure.run", None, "weights_fingerprint"),
    ("  file digests (base read once)", "ckptsel.measure.run", None, "function_digests"),
    ("part caches opened", "ckptsel.measure.run", "RunMeasurement", "parts"),
    ("provenance gate", "ckptsel.measure.run", "RunMeasurement", "_provenance_gate"),
    ("measurer started", "ckptsel.measure.run", None, "open_executor"),
    ("tokenizer (once per run)", "ckptsel.measure.measurer", "Measurer", "_begin"),
    ("model for a checkpoint (adapter merge; base load included)", "ckptsel.measure.backends.hf", "ModelHolder", "get"),
    ("  base model load (once per run)", "ckptsel.measure.backends.hf", "ModelHolder", "_load"),
    ("  plain LoRA adapter read", "ckptsel.measure.backends.hf", None, "plain_lora"),
    ("  plain LoRA merged in place", "ckptsel.measure.backends.hf", None, "merge_lora"),
    ("  adapter reach check (plain LoRA)", "ckptsel.measure.backends.hf", None, "check_lora_reaches"),
    ("  adapter through PEFT: reach check", "ckptsel.measure.backends.hf", None, "check_adapter_reaches"),
    ("conformance check (once per model family)", "ckptsel.measure.conformance", "Conformance", "hf"),
    ("generation + NLL passes", "ckptsel.measure.measurer", None, "measure_items"),
    ("contract frames", "ckptsel.measure.measurer", None, "split_frames"),
    ("part files written", "ckptsel.measure.parts", "StepParts", "add"),
    ("records written (units)", "ckptsel.measure.run", None, "upsert_records"),
)
NESTED = {label for label, *_ in PARTS if label.startswith("  ")}


class ImportClock:
    """Wall and CPU seconds spent importing modules (outermost imports only) since
    :meth:`install`: importlib's loader step timed, so that the parts of :class:`PartTimes`
    can leave out the imports that happen to run inside them."""

    wall = cpu = 0.0
    depth = 0

    @classmethod
    def install(cls) -> None:
        import _frozen_importlib as bootstrap

        load = bootstrap._load_unlocked

        def timed_load(spec):
            if cls.depth:
                return load(spec)
            cls.depth += 1
            w, c = time.perf_counter(), time.process_time()
            try:
                return load(spec)
            finally:
                cls.depth -= 1
                cls.wall += time.perf_counter() - w
                cls.cpu += time.process_time() - c

        bootstrap._load_unlocked = timed_load


class PartTimes:
    """Calls, wall and CPU seconds of each of :data:`PARTS` while in this block (wrappers
    patched in; the imports that run inside a part, timed by :class:`ImportClock` once it is
    installed, are left out of it)."""

    def __enter__(self) -> dict[str, list[float]]:
        import importlib

        self.times: dict[str, list[float]] = {label: [0, 0.0, 0.0] for label, *_ in PARTS}
        self.saved = []
        for label, module, owner, attr in PARTS:
            target = importlib.import_module(module)
            target = getattr(target, owner) if owner else target
            fn = getattr(target, attr, None)
            if fn is None:  # a part this version of ckptsel does not have
                continue
            self.saved.append((target, attr, target.__dict__[attr] if owner else fn))
            setattr(target, attr, self._wrap(fn, self.times[label]))
        return self.times

    @staticmethod
    def _wrap(fn, acc):
        def timed(*a, **k):
            w, c, iw, ic = (time.perf_counter(), time.process_time(), ImportClock.wall, ImportClock.cpu)
            try:
                return fn(*a, **k)
            finally:
                acc[0] += 1
                acc[1] += time.perf_counter() - w - (ImportClock.wall - iw)
                acc[2] += time.process_time() - c - (ImportClock.cpu - ic)

        return timed

    def __exit__(self, *exc) -> None:
        for target, attr, fn in reversed(self.saved):
            setattr(target, attr, fn)


def import_seconds() -> float:
    """Seconds a fresh process takes to import what ``measure`` needs (torch, transformers,
    peft, ckptsel.measure): paid once per ``ckptsel measure`` command."""
    import subprocess

    code = (
        "import time; t = time.perf_counter(); import torch, transformers, peft, ckptsel.measure; "
        "import transformers.models.llama.modeling_llama; print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def parts_table(times: dict[str, list[float]], total: float, n_ckpts: int) -> str:
    """The rows of the where-the-time-goes table (wall seconds; CPU seconds beside them)."""
    rows = [
        f"| {label.strip() if label not in NESTED else '— ' + label.strip()} | {int(n)} | "
        f"{sec:.2f} | {cpu:.2f} | {sec / max(n, 1) * 1000:.0f} ms |"
        for label, (n, sec, cpu) in times.items()
    ]
    counted = sum(sec for label, (_, sec, _) in times.items() if label not in NESTED)
    rows.append(f"| everything else (progress, checks, glue) | | {total - counted:.2f} | | |")
    measuring = times["generation + NLL passes"][1]
    fixed = total - measuring
    rows.append(f"| **fixed costs (all but the passes)** | | **{fixed:.2f}** | | {fixed / max(n_ckpts, 1) * 1000:.0f} ms per checkpoint |")
    return "\n".join(rows)


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def naive_subset(run, n_ckpts: int, items: list, max_new: int, window: int) -> tuple[float, float]:
    """(seconds per model load, seconds per item) of the naive loop over ``items``: reload the
    tokenizer, base + adapter for every checkpoint, generate and score one item at a time."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ckptsel.data.prompts import format_prompt
    from ckptsel.measure.passes import generate_texts, response_nll

    load_s = item_s = 0.0
    for step in run.steps[:n_ckpts]:
        t0 = time.perf_counter()
        tok = AutoTokenizer.from_pretrained(str(run.base))
        base = AutoModelForCausalLM.from_pretrained(str(run.base), dtype=torch.float32)
        model = PeftModel.from_pretrained(base, str(run.run_dir / f"checkpoint-{step}")).eval()
        t1 = time.perf_counter()
        for it in items:
            p = format_prompt(it.instruction)
            generate_texts(model, tok, [p], batch_size=1, max_new_tokens=max_new)
            response_nll(model, tok, [p], [it.response], windows=(window, 0), batch_size=1)
        t2 = time.perf_counter()
        load_s += t1 - t0
        item_s += t2 - t1
        del model, base
    return load_s / n_ckpts, item_s / (n_ckpts * len(items))


SWAP_ROUNDS = 3


def swap_rss(run) -> tuple[float, float]:
    """RSS (MB) after the first round of adapter swaps and after the last (leak check)."""
    import gc

    import torch

    from ckptsel.measure.backends.hf import ModelHolder
    from ckptsel.train.checkpoints import discover_checkpoints

    ckpts = discover_checkpoints(run.run_dir)
    holder = ModelHolder("cpu", torch.float32)
    first = last = 0.0
    for k in range(SWAP_ROUNDS * len(ckpts)):
        holder.get(ckpts[k % len(ckpts)])
        gc.collect()
        if k == len(ckpts) - 1:  # after one full round (allocator warmed up)
            first = rss_mb()
        last = rss_mb()
    holder.free()
    return first, last


# ----------------------------------------------------------------- the small run
# issue 37, item 4: a whole `ckptsel measure` of a tiny run against a naive per-checkpoint
# loop, both in a fresh process (both pay Python's start and their imports)
SMALL = {"checkpoints": 6, "items": 100, "max_new_tokens": 32}


def _run_in_pty(cmd: list[str], env: dict) -> tuple[float, float]:
    """(wall, CPU seconds) of ``cmd`` in a fresh process whose stdout and stderr are a
    terminal (so progress bars draw as they do for a user); its output is read and dropped."""
    import pty
    import subprocess
    import threading

    master, slave = pty.openpty()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=slave, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    tail: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            tail[:] = (tail + [chunk])[-8:]

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    reader.join(timeout=5)
    os.close(master)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if rc != 0:
        sys.exit(f"failed ({rc}): {' '.join(cmd)}\n{b''.join(tail).decode(errors='replace')[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def _env() -> dict:
    src = str(HERE.parent / "src")
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": src + (os.pathsep + path if path else ""),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


def measure_argv(root: Path, out: Path) -> list[str]:
    """``ckptsel measure``'s arguments for the small run (the CLI's defaults otherwise)."""
    return [
        "measure",
        str(root / "runs" / "run-a"),
        "--validation",
        str(root / "data" / "validation.jsonl"),
        "--test",
        str(root / "data" / "test.jsonl"),
        "--out",
        str(out),
        "--task",
        "gsm8k",
        "--max-new-tokens",
        str(SMALL["max_new_tokens"]),
    ]


def gc_clock() -> list[float]:
    """``[CPU seconds, runs]`` of Python's garbage collections from now on (filled in as they
    happen)."""
    import gc

    acc, start = [0.0, 0], [0.0]

    def on_gc(phase: str, _info: dict) -> None:
        if phase == "start":
            start[0] = time.process_time()
        else:
            acc[0] += time.process_time() - start[0]
            acc[1] += 1

    gc.callbacks.append(on_gc)
    return acc


def breakdown_child(out_json: str, argv: list[str]) -> None:
    """In a fresh process: ``ckptsel measure`` run through its CLI with :class:`PartTimes`
    and :class:`ImportClock` on; where its time went, as JSON in ``out_json``."""
    import json

    ImportClock.install()
    collected = gc_clock()
    w0, c0 = time.perf_counter(), time.process_time()
    import ckptsel.cli

    cli_wall = time.perf_counter() - w0
    with PartTimes() as times:
        m0 = time.perf_counter()
        try:
            ckptsel.cli.main(argv)
        except SystemExit as end:
            if end.code not in (0, None):
                raise
        inner = time.perf_counter() - m0
    blob = {
        "times": times,
        "wall": time.perf_counter() - w0,
        "cpu": time.process_time() - c0,
        "import_wall": ImportClock.wall,
        "import_cpu": ImportClock.cpu,
        "cli_import": cli_wall,
        "command": inner,
        "modules": len(sys.modules),
        "peft": "peft" in sys.modules,
        "gc_cpu": collected[0],
        "gc_runs": collected[1],
    }
    Path(out_json).write_text(json.dumps(blob))


def naive_child(root: str) -> None:
    """In a fresh process: the naive loop over every checkpoint and item of the small run
    (:func:`naive_subset`), the torch threads as ``ckptsel measure`` sets them."""
    from types import SimpleNamespace

    import torch

    from ckptsel.data.tasks import load_items

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    root = Path(root)
    run_dir = root / "runs" / "run-a"
    steps = sorted(int(p.name.split("-")[1]) for p in run_dir.glob("checkpoint-*"))
    run = SimpleNamespace(base=root / "base", run_dir=run_dir, steps=steps)
    items = [it for s in ("validation", "test") for it in load_items("gsm8k", root / "data" / f"{s}.jsonl")]
    naive_subset(run, len(steps), items, SMALL["max_new_tokens"], 512)


def small(args: argparse.Namespace) -> None:
    """The issue's check: ``ckptsel measure`` as a user runs it vs the naive loop, both in
    fresh processes, best of ``--repeat``; then one breakdown run. Writes its section."""
    import json

    from tinyrun import build_tiny_run

    env, here = _env(), [sys.executable, str(Path(__file__).resolve())]
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_measure_small_") as tmp:
        root = Path(tmp) / "run"
        half = SMALL["items"] // 2
        steps = tuple(25 * (k + 1) for k in range(SMALL["checkpoints"]))
        build_tiny_run(root, steps=steps, n_validation=half, n_test=SMALL["items"] - half)
        cli, naive, against = [], [], []
        for k in range(args.repeat):
            out = Path(tmp) / f"records{k}"
            fresh = {**env, "CKPTSEL_CACHE_DIR": str(Path(tmp) / f"cache{k}")}  # a first run
            cli.append(_run_in_pty([*here[:1], "-m", "ckptsel", *measure_argv(root, out)], fresh))
            print(f"ckptsel measure: {cli[-1][0]:.2f} s wall, {cli[-1][1]:.2f} CPU-s", flush=True)
            if args.against:  # the same, from another source tree, right after
                other = {**fresh, "PYTHONPATH": args.against, "CKPTSEL_CACHE_DIR": f"{tmp}/o{k}"}
                argv = measure_argv(root, Path(tmp) / f"other{k}")
                against.append(_run_in_pty([*here[:1], "-m", "ckptsel", *argv], other))
                print(f"  against: {against[-1][0]:.2f} s wall, {against[-1][1]:.2f} CPU-s")
            if k < args.naive_repeat:
                naive.append(_run_in_pty([*here, "--naive-child", str(root)], env))
                print(f"naive loop: {naive[-1][0]:.2f} s wall, {naive[-1][1]:.2f} CPU-s", flush=True)
        report = Path(tmp) / "breakdown.json"
        argv = measure_argv(root, Path(tmp) / "records-breakdown")
        cmd = [*here, "--breakdown-child", str(report), "--", *argv]
        _run_in_pty(cmd, {**env, "CKPTSEL_CACHE_DIR": str(Path(tmp) / "cache-breakdown")})
        parts = json.loads(report.read_text())
    load_end = os.getloadavg()
    body = small_section(cli, naive, parts, (load_start, load_end))
    if against:
        body += (
            f"\nInterleaved with the CLI of `{args.against}` (each run right after this one's, "
            f"a fresh cache each): best {min(against)[0]:.2f} s wall / "
            f"{min(a[1] for a in against):.2f} CPU-s there, {best_of(cli)} here; all runs "
            f"(wall, CPU s): there {_pairs(against)}, here {_pairs(cli)}.\n"
        )
    print(body)
    if not args.no_write:
        update_section("bench_measure_small", body)


def _pairs(runs) -> str:
    return ", ".join(f"({w:.1f}, {c:.1f})" for w, c in runs)


def best_of(runs) -> str:
    return f"{min(runs)[0]:.2f} s wall / {min(c for _, c in runs):.2f} CPU-s"


def small_section(cli, naive, parts, loads) -> str:
    """The ``bench_measure_small`` section of BENCHMARKS.md."""
    best = (min(w for w, _ in cli), min(c for _, c in cli))  # each column's best
    best_naive = (min(w for w, _ in naive), min(c for _, c in naive))
    times = parts["times"]
    total = parts["wall"]
    counted = parts["import_wall"] + sum(sec for label, (_, sec, _) in times.items() if label not in NESTED)
    lines = "\n".join(
        f"| {'— ' + label.strip() if label in NESTED else label} | {int(n)} | {sec:.2f} | {cpu:.2f} |"
        for label, (n, sec, cpu) in times.items()
    )
    return f"""## The issue's small run, as a user runs it (`benchmarks/bench_measure.py --small`)

Machine: {machine()}; OMP_NUM_THREADS=1; 1-min load average {loads[0][0]:.1f} at the start,
{loads[1][0]:.1f} at the end (shared machine). Tiny Llama (hidden 64, 2 layers), {SMALL["checkpoints"]}
LoRA checkpoints, {SMALL["items"]} GSM8K-format items ({SMALL["items"] // 2} validation + {SMALL["items"] // 2} test),
greedy, {SMALL["max_new_tokens"]} new tokens, the CLI's defaults otherwise (batch auto = 16 on the CPU, progress bars on a
terminal, fp32 CPU). Both sides run in a fresh process (Python's start and every import
paid by each); best of {len(cli)} (`ckptsel measure`) and {len(naive)} (naive). Every `ckptsel measure`
run starts with an empty cache folder (`CKPTSEL_CACHE_DIR`), as on a machine's first run: it
pays the conformance check, which later runs read from the cache.

| | wall s | CPU s |
|---|---:|---:|
| `ckptsel measure` (fresh process, the CLI) | {best[0]:.2f} | {best[1]:.2f} |
| naive loop (fresh process: per checkpoint tokenizer + base + adapter, `generate` and an NLL forward per item, batch 1) | {best_naive[0]:.2f} | {best_naive[1]:.2f} |
| **speed-up** | **{best_naive[0] / best[0]:.1f}×** | **{best_naive[1] / best[1]:.1f}×** |

Where one more `ckptsel measure` run's {total:.2f} s ({parts["cpu"]:.2f} CPU-s, after Python's own
start) went: imports timed wherever they happen, each part without the imports inside it
({parts["modules"]} modules loaded by the end; PEFT {"among them" if parts["peft"] else "not imported"}).

| part | calls | wall s | CPU s |
|---|---:|---:|---:|
| imports (torch, transformers, ...; the CLI's own: {parts["cli_import"]:.2f} s) | | {parts["import_wall"]:.2f} | {parts["import_cpu"]:.2f} |
{lines}
| everything else (CLI, progress, glue) | | {total - counted:.2f} | |

Python's garbage collector ran {parts["gc_runs"]} times for {parts["gc_cpu"]:.2f} CPU-s in all (inside the rows above).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, default=1000, help="validation + test items (half each)")
    ap.add_argument("--checkpoints", type=int, default=11)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1 is fastest on a shared 2-core box)")
    ap.add_argument("--naive-checkpoints", type=int, default=2)
    ap.add_argument("--naive-items", type=int, default=40)
    ap.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    ap.add_argument("--small", action="store_true", help="the issue's small run (see SMALL)")
    ap.add_argument("--repeat", type=int, default=3, help="--small: ckptsel measure runs")
    ap.add_argument("--naive-repeat", type=int, default=1, help="--small: naive loop runs")
    ap.add_argument("--against", help="--small: another ckptsel src folder, its CLI run interleaved (before/after)")
    if len(sys.argv) > 2 and sys.argv[1] == "--breakdown-child":
        return breakdown_child(sys.argv[2], sys.argv[4:])
    if len(sys.argv) > 2 and sys.argv[1] == "--naive-child":
        return naive_child(sys.argv[2])
    args = ap.parse_args()
    if args.small:
        return small(args)

    import pyarrow.parquet as pq
    import torch

    torch.set_num_threads(args.threads)
    from ckptsel.cli.output import progress_bars
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run
    from ckptsel.records.units import list_units

    from tinyrun import build_tiny_run

    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="bench_measure_") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        steps = tuple(25 * (k + 1) for k in range(args.checkpoints))
        run = build_tiny_run(tmp, steps=steps, n_validation=args.items // 2, n_test=args.items - args.items // 2)
        build_s = time.perf_counter() - t0
        print(f"built tiny run ({len(steps)} LoRA checkpoints, {args.items} items) in {build_s:.1f}s")

        rss: list[tuple[int, float, float, int]] = []
        rss0 = rss_mb()

        def after(step: int) -> None:
            rows = sum(  # the records' units (one file per checkpoint and kind)
                pq.read_metadata(u.path).num_rows for kind in ("generations", "nll") for u in list_units(tmp / "records", kind)
            )
            rss.append((step, rss_mb(), peak_mb(), rows))

        config = MeasureConfig("gsm8k", batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
        with progress_bars() as on_progress, PartTimes() as part_times:
            res = measure_run(
                run.run_dir,
                config,
                validation=run.validation,
                test=run.test,
                out=tmp / "records",
                on_progress=on_progress,
                after_checkpoint=after,
            )
        gen_rate = res.generated_items / res.generation_seconds
        nll_rate = res.scored_items / res.nll_seconds
        print(
            f"measure: {res.seconds:.1f}s total; generation {gen_rate:.1f} items/s; NLL {nll_rate:.1f} items/s; "
            f"model loads {res.model_loads}"
        )

        imports = import_seconds()
        swaps = swap_rss(run)
        from ckptsel.data.tasks import load_items

        naive_items = load_items("gsm8k", run.validation)[: args.naive_items]
        load_s, item_s = naive_subset(run, args.naive_checkpoints, naive_items, args.max_new_tokens, 512)
        naive_total = len(steps) * (load_s + args.items * item_s)
        speedup = naive_total / res.seconds
        print(
            f"naive: {load_s:.2f}s per load, {item_s * 1000:.1f} ms per item -> ~{naive_total:.0f}s "
            f"for the full grid; speed-up {speedup:.1f}x"
        )

    n_ckpt_items = len(steps) * args.items
    rss_rows = "\n".join(
        f"| {k + 1} | {step} | {rows:,} | {cur:.0f} | {peak:.0f} |"
        for k, (step, cur, peak, rows) in enumerate(rss)
        if k in (0, 1, len(rss) // 2, len(rss) - 1)
    )
    body = f"""## Measurement (`benchmarks/bench_measure.py`)

Machine: {machine()}; torch threads {args.threads}; 1-min load average at start {load_start:.1f} (the
machine is shared with other jobs, so absolute times are noisy). Tiny Llama (hidden 64, 2 layers,
BPE vocab 400), {len(steps)} LoRA checkpoints (rank 4), {args.items} GSM8K-format items
({args.items // 2} validation + {args.items - args.items // 2} test); greedy, max {args.max_new_tokens} new
tokens, batch {args.batch_size}; NLL for window 512 and the complete response; fp32 CPU.

| quantity | value |
|---|---:|
| checkpoint × item measurements | {n_ckpt_items:,} |
| `ckptsel measure` wall time | {res.seconds:.1f} s |
| generation throughput | {gen_rate:.1f} items/s |
| NLL throughput (both windows in one pass) | {nll_rate:.1f} items/s |
| model loads (base once, adapters swapped) | {res.model_loads} |
| naive loop: model load / per item (gen + NLL, batch 1) | {load_s:.2f} s / {item_s * 1000:.1f} ms |
| naive loop, extrapolated to the full grid | {naive_total:.0f} s |
| **speed-up of `ckptsel measure` over the naive loop** | **{speedup:.1f}×** |

Where `ckptsel measure`'s {res.seconds:.1f} s went (wall seconds inside `measure_run`; the
imports a fresh `ckptsel measure` process pays before it, {imports:.1f} s, come on top, and
the naive loop's imports are not counted either):

| part | calls | seconds | CPU s | per call |
|---|---:|---:|---:|---:|
{parts_table(part_times, res.seconds, len(steps))}

The naive loop was timed on {args.naive_checkpoints} checkpoints × {args.naive_items} items and extrapolated
(load time × checkpoints + per-item time × checkpoints × items).

Resident memory while measuring (MB; RSS before the run: {rss0:.0f}):

| checkpoints done | step | rows in the records files | RSS | peak RSS |
|---:|---:|---:|---:|---:|
{rss_rows}

Adapter swapping alone (no measuring): after one round through the {len(steps)} adapters RSS is
{swaps[0]:.0f} MB, after {SWAP_ROUNDS} rounds ({SWAP_ROUNDS * len(steps)} swaps) {swaps[1]:.0f} MB
({(swaps[1] - swaps[0]) / max(1, (SWAP_ROUNDS - 1) * len(steps)):+.2f} MB per further swap). While
measuring, the records files are re-read and rewritten (atomically, as Arrow tables) after every
checkpoint, so what memory grows follows the records' size, not the number of checkpoints.
"""
    print(body)
    if not args.no_write:
        update_section("bench_measure", body)


if __name__ == "__main__":
    main()
