"""``ckptsel`` run in-process by a test: its exit code (:func:`exit_code`), what it said
(:func:`run_cli`: stderr, then stdout), and the arguments of a tiny run's ``measure``
(:func:`measure_args`)."""

from __future__ import annotations

from pathlib import Path

from ckptsel.cli.app import main


def exit_code(args: list) -> int:
    """Run ``ckptsel ARGS`` (each turned into a string); return its exit code."""
    try:
        main([str(a) for a in args])
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def run_cli(args: list, capsys) -> tuple[int, str]:
    """Run ``ckptsel ARGS`` (each turned into a string); return (exit code, stderr + stdout)."""
    code = exit_code(args)
    said = capsys.readouterr()
    return code, said.err + said.out


def measure_args(run, run_dir: Path, out: Path, *extra: str, batch: int = 4, max_new: int = 10) -> list[str]:
    """``ckptsel measure`` of ``run_dir`` on a tiny run's (:func:`tinyrun.build_tiny_run`)
    validation and test items."""
    return [
        "measure",
        str(run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        str(batch),
        "--max-new-tokens",
        str(max_new),
        "--no-progress",
        *extra,
    ]
