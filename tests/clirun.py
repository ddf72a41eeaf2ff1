"""``ckptsel`` run in-process by a test: its exit code and what it said (stderr, then stdout)."""

from __future__ import annotations

from ckptsel.cli import main


def run_cli(args: list, capsys) -> tuple[int, str]:
    """Run ``ckptsel ARGS`` (each turned into a string); return (exit code, stderr + stdout)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as e:
        code = int(e.code or 0)
    said = capsys.readouterr()
    return code, said.err + said.out
