"""What the conformance check costs (issue 29): the check's time against one checkpoint's
measurement, on a tiny local LoRA run (``tests/tinyrun.py``), float32 on the CPU, one thread.

Three ``measure_run`` calls into fresh records folders, each with the run's checkpoints:
the first checks the family (a fresh verdict cache), the second reads the verdict, the third
runs with ``conformance_check=False``. Reported: the check's seconds
(``MeasureResult.conformance_seconds``), one checkpoint's measurement seconds (generation +
NLL of every item, the check excluded) and the ratio. Main venv::

    python benchmarks/bench_conformance.py --quick [--no-write]   # ~1 minute
    python benchmarks/bench_conformance.py                         # 300 items, 3 checkpoints
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from _common import machine, update_section  # noqa: E402


def one(run, out: Path, max_new: int, check: bool):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    config = MeasureConfig("gsm8k", batch_size=16, max_new_tokens=max_new, conformance_check=check)
    t0 = time.perf_counter()
    res = measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=out)
    return res, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 items, 2 checkpoints (~1 minute)")
    ap.add_argument("--no-write", action="store_true", help="print only, leave BENCHMARKS.md")
    args = ap.parse_args()
    import torch

    from ckptsel.measure import conformance

    from tinyrun import build_tiny_run

    torch.set_num_threads(1)
    n_val, n_test, steps, max_new = (48, 16, (10, 20), 64) if args.quick else (200, 100, (10, 20, 30), 128)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.environ["CKPTSEL_CACHE_DIR"] = str(root / "cache")
        run = build_tiny_run(root / "run", steps=steps, n_validation=n_val, n_test=n_test, long_every=4)
        first, wall1 = one(run, root / "a", max_new, True)
        second, wall2 = one(run, root / "b", max_new, True)
        off, wall3 = one(run, root / "c", max_new, False)
    per_ckpt = (first.generation_seconds + first.nll_seconds) / len(steps)
    checked = min(max(conformance.CHECK_ITEMS, 16), n_val + n_test)  # issue 38: at batch size
    rows = [
        f"Tiny LoRA run (Llama, hidden 64, 2 layers), {n_val + n_test} items, {len(steps)} "
        f"checkpoints, --max-new-tokens {max_new}, batch 16, float32 CPU, 1 thread; {machine()}.",
        "",
        "| run | checks | check s | measure s per checkpoint | wall s |",
        "|---|---|---|---|---|",
        f"| first (fresh cache) | {first.conformance_checks} | {first.conformance_seconds:.2f} | {per_ckpt:.2f} | {wall1:.1f} |",
        f"| second (cached verdict) | {second.conformance_checks} | "
        f"{second.conformance_seconds:.2f} | "
        f"{(second.generation_seconds + second.nll_seconds) / len(steps):.2f} | {wall2:.1f} |",
        f"| --no-conformance-check | {off.conformance_checks} | {off.conformance_seconds:.2f} | "
        f"{(off.generation_seconds + off.nll_seconds) / len(steps):.2f} | {wall3:.1f} |",
        "",
        f"The check ({checked} items: through the fast path in padded batches of 16, the run's "
        f"batch size, then unbatched `generate` and an unpadded forward per item) costs "
        f"{first.conformance_seconds:.2f} s once per family, config, settings and versions "
        f"(cached across runs): "
        f"{100 * first.conformance_seconds / per_ckpt:.0f} % of one checkpoint of "
        f"{n_val + n_test} items here, the time of measuring about "
        f"{first.conformance_seconds / (per_ckpt / (n_val + n_test)):.0f} items; so about "
        f"{100 * first.conformance_seconds / (per_ckpt * 1000 / (n_val + n_test)):.1f} % of one "
        "checkpoint of 1,000 items, once per run at most. A cached verdict costs nothing "
        "measurable.",
    ]
    body = "## The conformance check's cost (`benchmarks/bench_conformance.py`"
    body += " --quick)\n\n" if args.quick else ")\n\n"
    body += "\n".join(rows)
    print(body)
    if not args.no_write:
        update_section("bench_conformance", body)


if __name__ == "__main__":
    main()
