"""The report's edges: records without NLL (no empty figure or panel, one line saying why),
only the budgets that ran, and no markup leaking into text (HTML backticks, Rich markup)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from ckptsel.cli.app import main
from ckptsel.records.store import write_records
from ckptsel.report.terminal import print_main_table

import recordsgen as rg

SKIPPED = ("128", "256")  # larger than every eligible pool below (at most ~90 items)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """Generations only (no nll table, as `ckptsel ingest` writes), pools under 128 items."""
    root = tmp_path_factory.mktemp("edges")
    rng = np.random.default_rng(5)
    trajs = rg.random_study(rng, n_configs=6, seeds=2, T=(4, 6), n_val=(40, 90), n_test=(30, 50), tasks=("a", "b"))
    gen, _ = rg.tables(trajs)
    write_records(root / "records" / "generations.parquet", gen)
    out = root / "results"
    with pytest.raises(SystemExit) as exc:
        main(["analyze", str(root / "records"), "--out", str(out), "--permutations", "10", "--draws", "200"])
    assert exc.value.code == 0
    return out


def _page_text(page: str) -> str:
    """The HTML's text: figures' base64 and tags dropped."""
    page = re.sub(r'src="data:[^"]*"', "", page)
    return re.sub(r"<[^>]+>", "", page)


def test_no_nll_leaves_out_the_empty_figures_and_panels_and_says_why(results):
    from ckptsel.report import figures as figs
    from ckptsel.report.build import load_results

    stems = {p.stem for p in (results / "figures").glob("*.png")}
    assert "budget_curves_H" not in stems
    assert {"budget_curves_G", "configuration_gains", "trajectory_curves"} <= stems
    summary, per_conf, curves = load_results(results)
    drawn = figs.all_figures(summary, per_conf, curves)
    assert "budget_curves_H" not in drawn
    for name, fig in drawn.items():  # every axes drawn holds something
        for ax in fig.axes:
            assert ax.lines or ax.collections or ax.patches, (name, ax.get_xlabel())
    assert len(drawn["configuration_gains"].axes) == 1  # the G panel alone
    assert [ax.get_ylabel() for ax in drawn["trajectory_curves"].axes] == ["accuracy (%)"]
    notes = figs.figure_notes(summary, per_conf, curves)
    assert len(notes) == 1 and notes[0].startswith("no NLL records: the matched-NLL rule and H")
    page = (results / "report.html").read_text()
    assert notes[0] in page
    assert 'id="fig-budget_curves_H"' not in page
    assert "matched NLL per checkpoint" not in page  # the caption names no NLL panel


def test_html_sets_backticks_as_code(results):
    page = (results / "report.html").read_text()
    assert "<code>ckptsel ingest</code>" in page
    assert "`" not in _page_text(page)


def test_report_and_terminal_list_only_the_budgets_that_ran(results):
    summary = json.loads((results / "summary.json").read_text())
    ran = sorted({b for cells in summary["budget"].values() for b in cells if b.isdigit()}, key=int)
    assert ran == ["32", "64"]
    page = (results / "report.html").read_text()
    budgets = re.search(r"<dt>validation budgets</dt><dd>([^<]*)</dd>", page).group(1)
    assert budgets.startswith("32, 64, full;")
    assert "skipped: 128, 256" in budgets
    out = io.StringIO()
    print_main_table(summary, Console(file=out, width=250))
    line = next(ln for ln in out.getvalue().splitlines() if ln.startswith("validation budgets"))
    assert line.startswith("validation budgets: 32, 64, full;")
    assert "skipped: 128, 256" in line


def test_terminal_prints_text_never_rich_markup(results):
    summary = json.loads((results / "summary.json").read_text())
    summary["warnings"] = ["set [measure] conformance_check = false in study.toml", "[bold]not bold[/bold] and [red]not red"]
    out = io.StringIO()
    print_main_table(summary, Console(file=out, width=250, color_system=None))
    text = out.getvalue()
    assert "caution: set [measure] conformance_check = false in study.toml" in text
    assert "caution: [bold]not bold[/bold] and [red]not red" in text


def test_figures_of_a_study_with_nll_keep_every_panel():
    from ckptsel.report import figures as figs

    df = pd.DataFrame({"configuration": ["c0"], "task": ["a"], "G|nested|accuracy|full": [1.0], "H|nested|accuracy|full": [0.5]})
    assert len(figs.configuration_gain_figure(df).axes) == 2
    curves = pd.DataFrame(
        {
            "trajectory": "t",
            "task": "a",
            "step": [1, 2],
            "test_accuracy": [1.0, 2.0],
            "validation_accuracy": [1.0, 2.0],
            "validation_nll": [0.5, 0.4],
        }
    )
    assert len(figs.trajectory_figure(curves).axes) == 2
