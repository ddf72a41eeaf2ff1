"""Report tables, figures and report.html against the summary.json they are built from."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ckptsel.cli.app import main
from ckptsel.errors import CkptselError
from ckptsel.report import figures as figs
from ckptsel.report import html as rhtml
from ckptsel.report import tables as rtables
from ckptsel.report.build import write_report
from ckptsel.results.summary import main_table_rows

import recordsgen as rg

CELL = re.compile(r"([+-]\d+\.\d\d) \[([+-]\d+\.\d\d), ([+-]\d+\.\d\d)\]( unresolved)?(: \d+ nonzero)?")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def expected_cell(e: dict) -> str:
    """Written independently of ckptsel.results.fmt: 'mean [lo, hi]' and 'unresolved' iff lo <= 0 <= hi,
    or 'unresolved: <reason>' where the design cannot resolve it (issue 38)."""
    text = f"{e['mean']:+.2f} [{e['lo']:+.2f}, {e['hi']:+.2f}]"
    if "cannot_resolve" in e:
        return f"{text} unresolved: {e['cannot_resolve']}"
    return text + (" unresolved" if e["lo"] <= 0 <= e["hi"] else "")


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    """A random study (3 tasks, window-0 NLL, groups) analyzed by `ckptsel analyze` (report included)."""
    root = tmp_path_factory.mktemp("report")
    rng = np.random.default_rng(5)
    trajs = rg.random_study(rng, n_configs=6, seeds=3, T=(4, 7), n_val=(70, 140), n_test=(40, 80), tasks=("a", "b", "c"))
    gen, nll = rg.tables(trajs)
    records = rg.write(root / "records", gen, nll)
    out = root / "results"
    with pytest.raises(SystemExit) as exc:  # the CLI's analyze writes the report too
        main(["analyze", str(records), "--out", str(out), "--permutations", "20", "--draws", "500"])
    assert exc.value.code == 0
    return out


@pytest.fixture(scope="module")
def summary(results) -> dict:
    return json.loads((results / "summary.json").read_text())


def md_rows(path: Path) -> list[list[str]]:
    lines = [ln for ln in path.read_text().splitlines() if ln.startswith("|")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[2:]]


def test_analyze_writes_the_whole_report(results):
    for name in ("main_table", "budget_curves", "matched_half", "task_strata", "task_budget_curves", "sensitivities", "intervals"):
        for ext in ("md", "tex", "csv"):
            assert (results / "tables" / f"{name}.{ext}").stat().st_size > 100, (name, ext)
    for stem in ("budget_curves_G", "budget_curves_H", "configuration_gains", "matched_half", "trajectory_curves"):
        png = (results / "figures" / f"{stem}.png").read_bytes()
        assert png.startswith(PNG_MAGIC) and len(png) > 10_000, stem
        svg = (results / "figures" / f"{stem}.svg").read_text()
        assert "<svg" in svg and len(svg) > 10_000, stem
    assert (results / "report.html").stat().st_size > 50_000


def test_main_table_numbers_equal_summary(results, summary):
    rows = md_rows(results / "tables" / "main_table.md")
    assert [r[0] for r in rows] == ["accuracy", "agreement", "nll", "last"]
    for rule, d, h, g in rows:
        full = summary["budget"][rule]["full"]
        assert d == expected_cell(summary["D"][rule])
        assert h == expected_cell(full["H"])
        assert g == expected_cell(full["G"])
    csv = pd.read_csv(results / "tables" / "main_table.csv")
    for row in csv.itertuples():
        e = {"D": summary["D"][row.rule]}.get(row.quantity) or summary["budget"][row.rule]["full"][row.quantity[0]]
        assert (row.mean, row.lo, row.hi) == (e["mean"], e["lo"], e["hi"])
        assert row.unresolved == (e["lo"] <= 0 <= e["hi"] or "cannot_resolve" in e)


def test_budget_curve_table_has_every_budget_of_summary(results, summary):
    csv = pd.read_csv(results / "tables" / "budget_curves.csv", dtype={"budget": str})
    expected = {
        (rule, b, q): summary["budget"][rule][b][q] for rule in summary["budget"] for b in summary["budget"][rule] for q in ("G", "H")
    }
    got = {(r.rule, r.budget, r.quantity): r for r in csv.itertuples()}
    assert set(got) == set(expected)
    for key, e in expected.items():
        assert (got[key].mean, got[key].lo, got[key].hi) == (e["mean"], e["lo"], e["hi"])
    rows = md_rows(results / "tables" / "budget_curves.md")
    for rule, b, g, h in rows:
        assert g == expected_cell(summary["budget"][rule][b]["G"])
        assert h == expected_cell(summary["budget"][rule][b]["H"])
    assert [r[1] for r in rows if r[0] == "accuracy"][-1] == "full"  # 'full' is the last, categorical budget


def test_unresolved_appears_exactly_where_interval_contains_zero(results):
    n_cells = 0
    for path in sorted((results / "tables").glob("*.md")):
        if path.name == "main.md":
            continue
        for m in CELL.finditer(path.read_text()):
            lo, hi = float(m.group(2)), float(m.group(3))
            n_cells += 1
            if m.group(5):  # too small a design to resolve (issue 38): an interval that excludes 0
                assert not (lo < 0 < hi), (path.name, m.group(0))
            elif m.group(4):  # rounding can only make a resolved interval look like it touches 0
                assert lo <= 0 <= hi, (path.name, m.group(0))
            else:
                assert not (lo < 0 < hi), (path.name, m.group(0))
    assert n_cells > 100
    for path in sorted((results / "tables").glob("*.csv")):
        df = pd.read_csv(path)
        if {"lo", "hi", "unresolved"} <= set(df.columns):
            ok = df.dropna(subset=["lo", "hi"])
            # every interval that contains 0 is unresolved; one that does not is unresolved only
            # where the design cannot resolve it (issue 38; the reason is in the .md tables)
            assert ok["unresolved"].astype(bool)[(ok["lo"] <= 0) & (ok["hi"] >= 0)].all(), path.name


def test_interval_comparison_and_sensitivities_match_summary(results, summary):
    csv = pd.read_csv(results / "tables" / "intervals.csv")
    src = {"configuration": summary, "test-question": summary["question_bootstrap"], "joint": summary["joint_bootstrap"]}
    assert set(csv["interval"]) == set(src)
    for r in csv.itertuples():
        s = src[r.interval]
        e = s["D"][r.rule] if r.quantity == "D_r" else s["budget"][r.rule]["full"][r.quantity[0]]
        assert (r.lo, r.hi) == (e["lo"], e["hi"])
    sens = pd.read_csv(results / "tables" / "sensitivities.csv")
    thin = sens[sens["analysis"] == "thinning: every k-th checkpoint, k = 3"]
    for r in thin.itertuples():
        block = summary["sensitivities"]["thinning"]["3"]
        e = block["D"][r.rule] if r.quantity == "D" else block["budget"][r.rule]["full"][r.quantity[0]]
        assert (r.mean, r.lo, r.hi) == (e["mean"], e["lo"], e["hi"])
    assert "one variant per group ('full' = all groups)" in set(sens["analysis"])
    frac = sens[sens["quantity"] == "same_choice_fraction"]
    assert frac["mean"].tolist() == [summary["sensitivities"]["nll_complete"]["same_choice_fraction"]["mean"]]
    strata = pd.read_csv(results / "tables" / "task_strata.csv")
    assert set(strata["task"]) == {"a", "b", "c"}
    r = strata[(strata.task == "b") & (strata.rule == "agreement") & (strata.quantity == "G_full")].iloc[0]
    assert r["mean"] == summary["by_task"]["b"]["budget"]["agreement"]["full"]["G"]["mean"]


def test_latex_uses_booktabs_and_the_same_numbers(results):
    tex = (results / "tables" / "main_table.tex").read_text()
    md = (results / "tables" / "main_table.md").read_text()
    assert tex.index(r"\toprule") < tex.index(r"\midrule") < tex.index(r"\bottomrule")
    assert r"\begin{tabular}" in tex and r"D\_r" in tex
    plain = tex.replace(r"\emph{unresolved}", "unresolved")
    assert [m.group(0) for m in CELL.finditer(plain)] == [m.group(0) for m in CELL.finditer(md)]
    assert tex.count(r"\emph{unresolved}") == md.count("unresolved")
    assert rtables.latex_escape("a_b & 5% #1 {x}") == r"a\_b \& 5\% \#1 \{x\}"


def test_figure_functions_label_their_axes(summary, results):
    per_conf = pd.read_parquet(results / "tables" / "per_configuration.parquet")
    curves = pd.read_parquet(results / "tables" / "checkpoint_curves.parquet")
    fig = figs.budget_curve_figure(summary, "G")
    ax = fig.axes[0]
    assert "budget" in ax.get_xlabel() and "G_r(n)" in ax.get_ylabel()
    ticks = [t.get_text() for t in ax.get_xticklabels()]
    assert ticks[0] == "32" and ticks[-1] == "full"
    assert len(ax.collections) >= 3  # shaded interval bands
    fig = figs.configuration_gain_figure(per_conf)
    assert [a.get_xlabel() for a in fig.axes] == [
        "G_r(full): gain over the final checkpoint (pp)",
        "H_r(full): gain over matched-NLL selection (pp)",
    ]
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == len(per_conf) and all(": " in t for t in labels)
    fig = figs.matched_half_figure(per_conf, summary)
    assert fig.axes[0].get_xlabel().startswith("G_in") and fig.axes[0].get_ylabel().startswith("G_out")
    first = curves["trajectory"].iloc[0]
    fig = figs.trajectory_figure(curves)
    assert first in fig.get_suptitle()
    assert fig.axes[0].get_ylabel() == "accuracy (%)" and fig.axes[1].get_xlabel().startswith("training step")
    line = fig.axes[0].get_lines()[0]
    np.testing.assert_array_equal(line.get_ydata(), curves[curves.trajectory == first].sort_values("step")["test_accuracy"])
    other = curves["trajectory"].iloc[-1]
    assert other in figs.trajectory_figure(curves, other).get_suptitle()
    with pytest.raises(CkptselError, match="nope"):
        figs.trajectory_figure(curves, "nope")


def test_html_is_self_contained_and_reads_the_claims(results, summary):
    page = (results / "report.html").read_text()
    assert "http://" not in page and "https://" not in page and "<script" not in page.lower()
    assert "no effect" not in page.lower()
    imgs = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(imgs) == 5
    assert all(base64.b64decode(b).startswith(PNG_MAGIC) for b in imgs)
    for rule, d, h, g in main_table_rows(summary):
        assert f"<td>{rule}</td>" in page
        for cell in (d, h, g):
            assert cell in page
    assert "Population" in page and f"<dd>{summary['population']['trajectories']}</dd>" in page
    for rule in ("accuracy", "agreement", "nll"):
        e = summary["budget"][rule]["full"]["G"]
        word = rhtml.verdict(e)
        assert f"{e['mean']:+.2f} pp [{e['lo']:+.2f}, {e['hi']:+.2f}]" in page
        assert word in page


def test_verdicts_and_claim_sentences_from_numbers(summary):
    assert rhtml.verdict({"mean": 1.0, "lo": 0.2, "hi": 2.0, "unresolved": False}) == "resolved positive"
    assert rhtml.verdict({"mean": -1.0, "lo": -2.0, "hi": -0.1, "unresolved": False}) == "resolved negative"
    assert rhtml.verdict({"mean": 0.5, "lo": -0.1, "hi": 1.0, "unresolved": True}) == "unresolved"
    assert rhtml.verdict({"mean": 0.0, "lo": 0.0, "hi": 0.0, "unresolved": True}) == "unresolved"
    s = json.loads(json.dumps(summary))
    s["D"]["accuracy"] = {"mean": 1.5, "lo": 0.5, "hi": 2.5, "unresolved": False}
    s["budget"]["agreement"]["full"]["G"] = {"mean": -3.0, "lo": -4.0, "hi": -1.0, "unresolved": False}
    s["budget"]["accuracy"]["full"]["H"] = {"mean": 0.3, "lo": -0.2, "hi": 0.9, "unresolved": True}
    found = set(rhtml.claim_sentences(s))
    assert len(found) == 8  # 3 claims x 3 rules, without H of matched NLL against itself
    assert any(v == "resolved positive" and "More validation data helps" in t and "generated accuracy" in t for v, t in found)
    assert any(
        v == "resolved negative" and "Beats simply keeping the final" in t and "agreement" in t and "-3.00 pp [-4.00, -1.00]" in t
        for v, t in found
    )
    assert any(v == "unresolved" and "Beats matched-NLL" in t and "generated accuracy" in t and "contains 0" in t for v, t in found)
    assert not any("Beats matched-NLL" in t and "matched NLL:" in t for _, t in found)  # H_nll is 0 by construction


def test_write_report_formats_and_errors(results, tmp_path):
    written = write_report(results, formats=["md"])
    assert written["figures"] == [] and written["html"] == []
    assert all(p.suffix == ".md" for p in written["tables"])
    with pytest.raises(CkptselError, match="unknown report format"):
        write_report(results, formats=["pdf"])
    with pytest.raises(CkptselError, match="summary.json"):
        write_report(tmp_path)
    with pytest.raises(CkptselError, match="trajectory 'nope'"):
        write_report(results, formats=["png"], trajectory="nope")


def test_report_cli(results, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["report", str(results), "--formats", "md,html"])
    assert exc.value.code == 0
    with pytest.raises(SystemExit) as exc:
        main(["report", str(tmp_path / "missing")])
    assert exc.value.code == 2
    assert "summary.json" in capsys.readouterr().err


def test_every_caption_names_the_interval_method_that_made_the_numbers(results, summary):
    """Issue 30 item 8: under cr2 (the default) the footer said "percentile intervals" and three
    captions "configuration-bootstrap intervals"; now every one names the summary's method."""
    from rich.console import Console

    from ckptsel.report import terminal
    from ckptsel.results.summary import INTERVAL_LABELS, Summary

    assert summary["interval"] == "cr2"
    label = INTERVAL_LABELS["cr2"]
    page = (results / "report.html").read_text()
    footer = page[page.index("<footer>") :]
    assert "percentile" not in footer and label in footer and "interval: cr2" in footer
    assert "configuration-bootstrap" not in page and "percentile intervals" not in page
    for name in ("budget_curves", "matched_half", "sensitivities", "task_strata", "task_budget_curves"):
        text = (results / "tables" / f"{name}.md").read_text()
        assert label in text.splitlines()[0], name
    for name in ("budget_curves_G", "budget_curves_H", "matched_half"):
        assert label in rhtml.figure_caption(name, Summary.coerce(summary))
    for method in ("wild", "percentile"):  # each from the summary's recorded method
        other = dict(summary, interval=method) if method != "percentile" else {k: v for k, v in summary.items() if k != "interval"}
        html = rhtml.render_html(other, [rtables.budget_curves(other)], {})
        assert INTERVAL_LABELS[method] in html[html.index("<footer>") :]
        assert INTERVAL_LABELS[method] in rtables.budget_curves(other).title
        console = Console(record=True, width=300)
        terminal.print_main_table(other, console)
        assert INTERVAL_LABELS[method] in console.export_text()
