"""``ckptsel budgets``: the validation items behind every budget and permutation, as lists
another harness can run (an lm-eval or inspect task filtered to them)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.table import Table

from ckptsel import defaults
from ckptsel._util.locations import Location, as_location
from ckptsel.choose.budgets import INDEX_FILE, ITEMS_FILE, SCHEMES, budget_items, read_budget_items, subset, write_lists
from ckptsel.choose.settings import ChoiceSettings, parse_budget_list
from ckptsel.cli.output import console, json_flag, print_json
from ckptsel.errors import CkptselError
from ckptsel.records.load import load_validation
from ckptsel.results.layout import CHOICES_DIR


def budgets(
    source: str = typer.Argument(
        ...,
        help="A records folder (the lists are made from its validation records), or a results folder "
        "written by `ckptsel analyze` (the lists its choices were made on, from its choices/); a local folder or a URL.",
    ),
    out: Path = typer.Option(
        None, "--out", help="Write budget_items.parquet and budget_items.json there (every pool, budget, permutation)."
    ),
    budget: str = typer.Option(None, "--budget", help="Print one subset as JSON: this budget (e.g. 64, or full)."),
    permutation: int = typer.Option(None, "--permutation", help="… of this permutation (0, 1, …)."),
    pool: str = typer.Option(None, "--pool", help="… of this validation pool (needed when the records have several)."),
    scheme: str = typer.Option("nested", "--scheme", help=f"… of this scheme: {' or '.join(SCHEMES)}."),
    permutations: int = typer.Option(None, help=f"From records: permutations (default {defaults.PERMUTATIONS})."),
    seed: int = typer.Option(None, help=f"From records: the seed (default {defaults.SEED})."),
    budget_list: str = typer.Option(None, "--budgets", help="From records: the finite budgets, comma-separated (default: analyze's)."),
    as_json: bool = json_flag("Print one JSON object (the settings and the pools) instead of the table."),
) -> None:
    """List the validation items each budget's choice is made on, per pool, budget and
    permutation, with a digest; an analysis writes the same lists into its choices/. With
    --budget and --permutation: one subset's item ids as JSON (for a sample filter)."""
    if (budget is None) != (permutation is None):
        raise CkptselError("--budget and --permutation go together (one subset)")
    if budget is None and out is None:
        raise CkptselError("give --out DIR (every list), or --budget and --permutation (one subset)")
    given = {"--permutations": permutations, "--seed": seed, "--budgets": budget_list}
    table, index = _lists(as_location(source), given)
    if out is not None:
        _write_lists(out, table, index)
    if budget is not None:
        typer.echo(json.dumps(subset(table, index, budget, permutation, pool, scheme), indent=1))
    elif as_json:
        print_json("budgets", {"source": source, "out": str(out), "settings": index["settings"], "pools": index["pools"]})
    else:
        _print_pools(index, out)


def _lists(source: Location, given: dict) -> tuple:
    """The lists of a results folder (its ``choices/``, or that folder itself; local or a URL)
    as it wrote them, or made from a records folder's validation records under the given settings."""
    for folder in (source / CHOICES_DIR, source):
        if (folder / INDEX_FILE).is_file():
            named = [flag for flag, value in given.items() if value is not None]
            if named:
                raise CkptselError(f"{folder}: these lists were made with the analysis' own settings; {named[0]} is for a records folder")
            return read_budget_items(folder)
    settings = ChoiceSettings(
        permutations=defaults.PERMUTATIONS if given["--permutations"] is None else given["--permutations"],
        seed=defaults.SEED if given["--seed"] is None else given["--seed"],
        budgets=defaults.BUDGETS if given["--budgets"] is None else parse_budget_list(given["--budgets"]),
    )
    return budget_items(load_validation(source), settings)


def _write_lists(out: Path, table, index: dict) -> None:
    """Both files in ``out`` (made if missing; a file there that is not a folder refused)."""
    if out.exists() and not out.is_dir():
        raise CkptselError(f"--out {out}: not a folder")
    out.mkdir(parents=True, exist_ok=True)
    write_lists(out, table, index)


def _print_pools(index: dict, out: Path | None) -> None:
    settings = index["settings"]
    grid = Table(title=f"validation subsets: {settings['permutations']} permutations, seed {settings['seed']}")
    for col in ("pool", "trajectories", "items", "groups", "nested budgets", "one-variant budgets"):
        grid.add_column(col)
    for p in index["pools"]:
        shown = ", ".join(p["trajectories"][:3]) + (f" (+{len(p['trajectories']) - 3})" if len(p["trajectories"]) > 3 else "")
        grid.add_row(
            p["pool"], shown, str(p["items"]), str(p["groups"]), " ".join(p["budgets"]["nested"]), " ".join(p["budgets"]["one_variant"])
        )
    console.print(grid)
    if out is not None:
        console.print(f"written: {out / ITEMS_FILE}, {out / INDEX_FILE}")
