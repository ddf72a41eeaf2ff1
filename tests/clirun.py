"""``ckptsel`` run in-process by a test: its exit code (:func:`exit_code`), and what it said
(:func:`run_cli`: stderr, then stdout)."""

from __future__ import annotations

from ckptsel.cli import main


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
