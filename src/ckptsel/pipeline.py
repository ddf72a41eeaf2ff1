"""``analyze`` and ``verify``: records → frozen choices → test scores → statistics → files.

The order is structural: validation records are loaded and the choices written and hashed
*before* :func:`ckptsel.records.load_test` is called, and scoring only accepts choices read
back through :func:`ckptsel.choose.load_frozen`, which checks the hash. The results folder's
names, its estimates and the main table are defined in :mod:`ckptsel.results`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel import choose as ch
from ckptsel import defaults, records
from ckptsel.analysis.blas import single_threaded
from ckptsel.errors import CkptselError, VerificationError
from ckptsel.evaluate import score
from ckptsel.io import write_csv, write_parquet, write_text
from ckptsel.results import CHOICES_DIR, RUN_FILE, SUMMARY_FILE, TABLES_DIR, main_table_markdown
from ckptsel.stats import StatSettings, summarize


def population(validation: list[records.ValidationData]) -> dict:
    """Who is in the study: counted from validation records only (safe before freezing)."""
    exclusions: dict[str, int] = {}
    for v in validation:
        for reason, count in v.exclusions.items():
            exclusions[reason] = exclusions.get(reason, 0) + count
    sizes = [len(v.item_ids) for v in validation]
    ckpts = [len(v.steps) for v in validation]
    return {
        "trajectories": len(validation),
        "nll_records": any(records.MATCHED_WINDOW in v.nll for v in validation),
        "configurations": len({v.configuration for v in validation}),
        "tasks": sorted({v.task for v in validation}),
        "checkpoints": {"min": int(min(ckpts)), "max": int(max(ckpts))},
        "validation_items": {"min": int(min(sizes)), "max": int(max(sizes))},
        "validation_exclusions": {
            "total": int(sum(exclusions.values())),
            **dict(sorted(exclusions.items())),
            "by_trajectory": {v.trajectory: int(sum(v.exclusions.values())) for v in validation if sum(v.exclusions.values())},
        },
    }


def freeze_choices(records_dir: Path, out_dir: Path, settings: ch.ChoiceSettings) -> tuple[list, str]:
    """Step 1: choose on validation records only, write and hash the choices."""
    validation = records.load_validation(records_dir)
    table = ch.choose(validation, settings)
    digest = ch.freeze(table, settings, Path(out_dir) / CHOICES_DIR)
    return validation, digest


def evaluate_frozen(records_dir: Path, out_dir: Path, validation: list, stat: StatSettings) -> tuple[dict, dict]:
    """Step 2: read the frozen choices back (hash checked), then — only then — the test records."""
    frozen = ch.load_frozen(Path(out_dir) / CHOICES_DIR)
    tests = records.load_test(records_dir, validation)
    scored = score(frozen, tests)
    pop = population(validation)
    pop["test_items"] = scored.test_items
    summary, tables = summarize(
        scored,
        stat,
        pop,
        permutations=frozen.settings.permutations,
        partitions=frozen.settings.permutations,  # score() partitions the test pool as often
        choices_sha256=frozen.sha256,
    )
    tables["checkpoint_curves"] = checkpoint_curves(validation, scored)
    return summary, tables


def checkpoint_curves(validation: list[records.ValidationData], scored) -> pd.DataFrame:
    """Per checkpoint: test accuracy, and validation accuracy / matched NLL on the eligible pool."""
    frames = []
    for v in validation:
        nll = v.nll.get(records.MATCHED_WINDOW)
        frames.append(
            pd.DataFrame(
                {
                    "trajectory": v.trajectory,
                    "configuration": v.configuration,
                    "task": v.task,
                    "step": v.steps.astype(np.int64),
                    "test_accuracy": scored.test_accuracy[v.trajectory],
                    "validation_accuracy": 100.0 * v.correct.mean(axis=1),
                    "validation_nll": (
                        nll.sum(axis=1) / v.n_tokens[records.MATCHED_WINDOW].sum()
                        if nll is not None
                        else np.full(len(v.steps), np.nan)
                    ),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def summary_json(summary: dict) -> str:
    return json.dumps(summary, indent=1, sort_keys=False, allow_nan=False) + "\n"


def analyze(
    records_dir: Path,
    out_dir: Path,
    *,
    permutations: int = defaults.PERMUTATIONS,
    draws: int = defaults.DRAWS,
    seed: int = defaults.SEED,
    level: float = defaults.CONFIDENCE,
    interval: str = defaults.INTERVAL,
) -> dict:
    """The whole analysis; writes ``summary.json``, frozen choices and tables into ``out_dir``.

    Everything is first written to a staging folder beside ``out_dir`` (the choices are frozen
    and read back there before any test record is loaded) and moved into place only when the
    whole analysis succeeded, so bad input never leaves a half-written results folder behind.
    ``interval`` names the interval method (``ckptsel.analysis.intervals.METHODS``;
    ``"percentile"`` reproduces the paper's numbers); summary.json records it unless it is
    ``"percentile"``, and ``verify`` reads it back.
    """
    if permutations < 1 or draws < 10:
        raise CkptselError("--permutations must be >= 1 and --draws >= 10")
    stat = StatSettings(draws, seed, level, interval)  # checks the method name before any work
    with single_threaded():
        return _analyze(records_dir, Path(out_dir), permutations, stat)


def _analyze(records_dir: Path, out_dir: Path, permutations: int, stat: StatSettings) -> dict:
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.staging-", dir=out_dir.parent))
    try:
        settings = ch.ChoiceSettings(permutations=permutations, seed=stat.seed)
        validation, _ = freeze_choices(records_dir, stage, settings)
        summary, tables = evaluate_frozen(records_dir, stage, validation, stat)
        tdir = stage / TABLES_DIR
        for name, df in tables.items():
            write_parquet(tdir / f"{name}.parquet", df)
            write_csv(tdir / f"{name}.csv", df)
        write_text(tdir / "main.md", main_table_markdown(summary))
        write_text(stage / SUMMARY_FILE, summary_json(summary))
        from ckptsel import __version__

        run = {"records_dir": str(Path(records_dir).resolve()), "ckptsel": __version__}
        write_text(stage / RUN_FILE, json.dumps(run, indent=1) + "\n")
        for path in sorted(p for p in stage.rglob("*") if p.is_file()):
            target = out_dir / path.relative_to(stage)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return summary


def verify(results_dir: Path, records_dir: Path | None = None) -> list[str]:
    """Recompute choices and results; raise :class:`VerificationError` on any mismatch."""
    with single_threaded():
        return _verify(Path(results_dir), records_dir)


def _verify(results_dir: Path, records_dir: Path | None) -> list[str]:
    spath = results_dir / SUMMARY_FILE
    if not spath.is_file():
        raise CkptselError(f"{spath}: no summary to verify")
    stored = json.loads(spath.read_text())
    if records_dir is None:
        run_path = results_dir / RUN_FILE
        if not run_path.is_file():
            raise CkptselError(f"{run_path}: not found; pass the records directory explicitly")
        records_dir = json.loads(run_path.read_text())["records_dir"]
    records_dir = Path(records_dir)
    frozen = ch.load_frozen(results_dir / CHOICES_DIR)  # raises when the stored hash is off
    validation = records.load_validation(records_dir)
    again = ch.choose(validation, frozen.settings)
    digest = ch.choices_hash(again, frozen.settings)
    if digest != frozen.sha256:
        raise VerificationError(
            f"choices recomputed from {records_dir} have SHA-256 {digest}, but the frozen choices in "
            f"{results_dir / CHOICES_DIR} have {frozen.sha256}"
        )
    stat = StatSettings(
        draws=stored["draws"],
        seed=stored["seed"],
        level=stored.get("confidence", defaults.CONFIDENCE),
        interval=stored.get("interval", "percentile"),
    )
    summary, _ = evaluate_frozen(records_dir, results_dir, validation, stat)
    if summary_json(summary) != summary_json(stored):
        diff = _first_difference(stored, summary)
        raise VerificationError(f"{spath}: recomputed results differ from the stored summary at {diff}")
    return [f"choices: SHA-256 {digest} matches", f"results: {spath} reproduced exactly"]


def _first_difference(a, b, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in list(a) + [k for k in b if k not in a]:
            if k not in a or k not in b:
                return f"{path}/{k} (present in only one)"
            if a[k] != b[k]:
                return _first_difference(a[k], b[k], f"{path}/{k}")
    return f"{path}: stored {a!r}, recomputed {b!r}"
