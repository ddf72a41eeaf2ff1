"""``ckptsel split`` and ``ckptsel audit``: the data-side commands (SPEC §9)."""

from __future__ import annotations

from pathlib import Path

import typer

from ckptsel.defaults import DATA_SEED


def register(app: typer.Typer) -> None:
    """Add the ``split`` and ``audit`` commands to the CLI."""

    @app.command("split")
    def split_cmd(
        data_file: Path = typer.Argument(..., help="JSON list or JSON Lines data file."),
        out: Path = typer.Option(..., "--out", help="Output folder."),
        seed: int = typer.Option(DATA_SEED, "--seed", help="Data seed of the group hash."),
        val_fraction: float = typer.Option(
            0.1, "--val-fraction", help="Probability that a group goes to validation."
        ),
        group_field: str | None = typer.Option(
            None,
            "--group-field",
            help="Group key field (default: original_question when present, "
            "else the question field, i.e. each question is its own group).",
        ),
        strict: bool = typer.Option(
            False,
            "--strict",
            help="Exit 1 when identical question text lands on both sides (different groups).",
        ),
    ) -> None:
        """Split DATA_FILE into train/validation by whole group (SHA-256 of seed and group
        key), in the input's format, with a lineage table (lineage.json, lineage.md)."""
        from rich.console import Console
        from rich.table import Table

        from ckptsel.data import split_file

        lin = split_file(
            data_file, out, seed=seed, val_fraction=val_fraction, group_field=group_field
        )
        console = Console()
        table = Table(title=f"split of {data_file} (group field {lin['group_field']!r})")
        for col in ("side", "records", "groups"):
            table.add_column(col, justify="left" if col == "side" else "right")
        for side in ("train", "validation", "total"):
            table.add_row(side, str(lin["records"][side]), str(lin["groups"][side]))
        console.print(table)
        inter = lin["intersections"]
        console.print(
            f"intersections: groups {inter['groups']}, identical question text "
            f"{inter['question_text']}"
        )
        console.print(f"wrote {out}/train*, validation*, lineage.json, lineage.md")
        if inter["question_text"]:
            err = Console(stderr=True)
            err.print(
                f"[bold red]WARNING: {inter['question_text']} question strings occur in both "
                "train and validation under different groups[/] (see lineage.md)"
            )
            if strict:
                raise typer.Exit(1)

    @app.command("audit")
    def audit_cmd(
        train: Path | None = typer.Option(None, "--train", help="Fine-tuning data file."),
        validation: Path | None = typer.Option(None, "--validation", help="Validation file."),
        test: Path | None = typer.Option(None, "--test", help="Test data file."),
        out: Path | None = typer.Option(
            None, "--out", help="Write audit.json and audit.md here (default: print only)."
        ),
        threshold: float = typer.Option(
            0.8, "--threshold", help="Character 13-gram Jaccard threshold."
        ),
        plant: bool = typer.Option(
            True, "--plant/--no-plant", help="Run the planted positive control."
        ),
        seed: int = typer.Option(0, "--seed", help="Seed of the planted control."),
    ) -> None:
        """Overlap audit between the given pools (exact, normalized, character 13-gram
        Jaccard, word 5-gram) with a planted positive control; exit 1 if the control fails."""
        from rich.console import Console
        from rich.table import Table

        from ckptsel.data import audit_files, write_audit
        from ckptsel.errors import CkptselError

        files = {
            name: path
            for name, path in (("train", train), ("validation", validation), ("test", test))
            if path is not None
        }
        if len(files) < 2:
            raise CkptselError("audit needs at least two of --train, --validation, --test")
        result = audit_files(files, threshold=threshold, plant=plant, seed=seed, progress=True)
        console = Console()
        table = Table(title=f"overlap audit (char-13 Jaccard >= {threshold})")
        for col in ("pools", "check", "pairs", "items 1st", "items 2nd"):
            table.add_column(
                col, justify="left" if col in ("pools", "check") else "right", no_wrap=True
            )
        for p in result.pairs:
            for name, c in p.checks.items():
                table.add_row(
                    f"{p.a}–{p.b}",
                    name,
                    str(c.pairs),
                    f"{c.items_a}/{p.n_a}",
                    f"{c.items_b}/{p.n_b}",
                )
        console.print(table)
        if out is not None:
            write_audit(result, out)
            console.print(f"wrote {out / 'audit.json'} and {out / 'audit.md'}")
        else:
            console.print(result.to_markdown(), markup=False, highlight=False)
        if plant:
            n_ok = sum(q.ok for q in result.planted)
            if result.control_ok:
                console.print(
                    f"[green]planted control passed: {n_ok}/{len(result.planted)} found[/]"
                )
            else:
                err = Console(stderr=True)
                missing = sorted({"exact", "case_punct"} - {q.kind for q in result.planted})
                why = (
                    f" (no {' or '.join(missing)} copy could be planted: pools too small)"
                    if missing
                    else ""
                )
                err.print(
                    f"[bold red]planted control FAILED: {n_ok}/{len(result.planted)} found{why}[/]"
                )
                for note in result.control_notes:
                    err.print(f"  {note}", markup=False)
                raise typer.Exit(1)
        console.print(f"audit time {result.seconds:.2f} s")
