"""Paper-style tables from ``summary.json``: Markdown, LaTeX (booktabs) and CSV.

Every table is built once as a :class:`ReportTable` holding both the strings a person reads
(``display``: "mean [lo, hi]" cells, made by :func:`ckptsel.results.fmt` so the CLI, the
Markdown, the LaTeX and the HTML all print the same numbers) and the numbers behind them in
long form (``numbers``: one row per estimate with mean/lo/hi/unresolved), which is what the
CSV holds. An interval that contains 0 is marked "unresolved", never read as "no effect".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ckptsel._util.io import write_csv, write_text
from ckptsel.choose import RULE_ORDER
from ckptsel.results import d_column, fmt, interval_label, level_percent, main_table_rows

INTERVAL_KINDS = (
    ("configuration", None),
    ("test-question", "question_bootstrap"),
    ("joint", "joint_bootstrap"),
)
TABLE_FORMATS = ("md", "tex", "csv")


@dataclass
class ReportTable:
    """One table: a title, the cells a person reads, and the long-form numbers behind them."""

    name: str
    title: str
    display: pd.DataFrame
    numbers: pd.DataFrame

    def markdown(self) -> str:
        return to_markdown(self.display, self.title)

    def latex(self) -> str:
        return to_latex(self.display, self.title, label=f"tab:{self.name}")


# --------------------------------------------------------------------------- helpers
def budgets_in(block: dict) -> list[str]:
    """Budget labels present in a ``{"<n>": ...}`` block: the finite budgets by size (whatever
    budgets the summary was made with), then "full", then anything else."""
    return sorted(
        block,
        key=lambda s: (0, int(s), "") if s.isdigit() else (1 if s == "full" else 2, 0, s),
    )


def _est(e: dict | None) -> dict | None:
    return e if isinstance(e, dict) and e.get("mean") is not None else None


def _num_row(est: dict | None, **keys: object) -> dict:
    e = _est(est)
    return {
        **keys,
        "mean": e["mean"] if e else float("nan"),
        "lo": e["lo"] if e else float("nan"),
        "hi": e["hi"] if e else float("nan"),
        "unresolved": bool(e["unresolved"]) if e else None,
    }


def _rules(block: dict) -> list[str]:
    return [r for r in RULE_ORDER if r in block] + sorted(r for r in block if r not in RULE_ORDER)


# --------------------------------------------------------------------------- the tables
def main_table(summary: dict) -> ReportTable:
    """Per rule: D_r, H_r(full), G_r(full) (the paper's main table)."""
    display = pd.DataFrame(
        main_table_rows(summary),
        columns=["rule", d_column(summary), "H_r(full) vs matched NLL", "G_r(full) vs final"],
    )
    nums = []
    for rule in RULE_ORDER:
        full = summary["budget"].get(rule, {}).get("full", {})
        nums.append(_num_row(summary["D"].get(rule), rule=rule, quantity="D"))
        nums.append(_num_row(full.get("H"), rule=rule, quantity="H_full"))
        nums.append(_num_row(full.get("G"), rule=rule, quantity="G_full"))
    pop = summary["population"]
    title = (
        f"Main table — {pop['trajectories']} trajectories in {pop['configurations']} configurations; "
        f"percentage points, {level_percent(summary)}% {interval_label(summary)} intervals ({summary['draws']} draws)."
    )
    return ReportTable("main_table", title, display, pd.DataFrame(nums))


def _budget_rows(budget: dict, **keys: object) -> tuple[list[dict], list[dict]]:
    disp, nums = [], []
    for rule in _rules(budget):
        for b in budgets_in(budget[rule]):
            cell = budget[rule][b]
            disp.append(
                {
                    **keys,
                    "rule": rule,
                    "budget n": b,
                    "G_r(n) vs final": fmt(cell.get("G")),
                    "H_r(n) vs matched NLL": fmt(cell.get("H")),
                }
            )
            for q in ("G", "H"):
                if q in cell:
                    nums.append(_num_row(cell[q], **keys, rule=rule, budget=b, quantity=q))
    return disp, nums


def budget_curves(summary: dict) -> ReportTable:
    """G_r(n) and H_r(n) at every validation budget (nested subsets)."""
    disp, nums = _budget_rows(summary["budget"])
    return ReportTable(
        "budget_curves",
        f"Budget curves — G_r(n) and H_r(n) at every validation budget n (pp, {level_percent(summary)}% configuration-bootstrap "
        "intervals; 'full' is the whole eligible pool, whose size differs by dataset).",
        pd.DataFrame(disp),
        pd.DataFrame(nums),
    )


def matched_half(summary: dict) -> ReportTable:
    """Same-item optimism: selection-half gain G_in, complementary-half gain G_out, B = G_in − G_out."""
    disp, nums = [], []
    for rule, block in summary.get("matched_half", {}).items():
        disp.append({"rule": rule, **{f"{q}": fmt(block.get(q)) for q in ("G_in", "G_out", "B")}})
        nums += [_num_row(block.get(q), rule=rule, quantity=q) for q in ("G_in", "G_out", "B")]
    return ReportTable(
        "matched_half",
        "Matched-half diagnostic on the test pool — gain on the half used to choose (G_in), on the other half "
        f"(G_out), and the same-item optimism B = G_in − G_out (pp, {level_percent(summary)}% configuration-bootstrap intervals).",
        pd.DataFrame(disp, columns=["rule", "G_in", "G_out", "B"]),
        pd.DataFrame(nums),
    )


def task_strata(summary: dict) -> ReportTable:
    """The main table and the matched-half B per task."""
    disp, nums = [], []
    for task, block in summary.get("by_task", {}).items():
        pop = block.get("population", {})
        for rule in _rules(block.get("budget", {})):
            full = block["budget"][rule].get("full", {})
            d = block.get("D", {}).get(rule)
            disp.append(
                {
                    "task": task,
                    "trajectories": pop.get("trajectories", ""),
                    "rule": rule,
                    d_column(summary): fmt(d),
                    "H_r(full)": fmt(full.get("H")),
                    "G_r(full)": fmt(full.get("G")),
                    "B (matched half)": fmt(block.get("matched_half", {}).get(rule, {}).get("B"))
                    if rule in block.get("matched_half", {})
                    else "–",
                }
            )
            nums += [
                _num_row(d, task=task, rule=rule, quantity="D"),
                _num_row(full.get("H"), task=task, rule=rule, quantity="H_full"),
                _num_row(full.get("G"), task=task, rule=rule, quantity="G_full"),
            ]
        for rule, mh in block.get("matched_half", {}).items():
            nums += [
                _num_row(mh.get(q), task=task, rule=rule, quantity=f"MH_{q}")
                for q in ("G_in", "G_out", "B")
            ]
    return ReportTable(
        "task_strata",
        f"Task strata — D_r, H_r(full), G_r(full) and the oracle/agreement same-item optimism B per task (pp, {level_percent(summary)}% intervals).",
        pd.DataFrame(disp),
        pd.DataFrame(nums),
    )


def task_budget_curves(summary: dict) -> ReportTable:
    """G_r(n), H_r(n) per task."""
    disp, nums = [], []
    for task, block in summary.get("by_task", {}).items():
        d, n = _budget_rows(block.get("budget", {}), task=task)
        disp += d
        nums += n
    return ReportTable(
        "task_budget_curves", "Budget curves per task (pp).", pd.DataFrame(disp), pd.DataFrame(nums)
    )


def _sensitivity_blocks(summary: dict) -> Iterable[tuple[str, dict | None, str | None]]:
    """(analysis name, {"budget":..., "D":...} block or None, note)."""
    yield "nested (main analysis)", {"budget": summary["budget"], "D": summary["D"]}, None
    sens = summary.get("sensitivities", {})
    if "one_variant" in sens:
        yield "one variant per group ('full' = all groups)", sens["one_variant"], None
    for k, block in sorted(sens.get("thinning", {}).items()):
        yield f"thinning: every k-th checkpoint, k = {k}", block, None
    nc = sens.get("nll_complete")
    if nc is not None:
        if "skipped" in nc:
            yield "complete-response NLL", None, f"skipped: {nc['skipped']}"
        else:
            yield "complete-response NLL", nc, None


def sensitivities(summary: dict) -> ReportTable:
    """D_r, H_r(full), G_r(full) under each sensitivity analysis next to the main analysis."""
    disp, nums = [], []
    for name, block, note in _sensitivity_blocks(summary):
        if block is None:
            disp.append(
                {"analysis": name, "rule": "–", "D_r": note, "H_r(full)": "–", "G_r(full)": "–"}
            )
            continue
        budget = block.get("budget", {})
        for rule in _rules(budget):
            full = budget[rule].get("full", {})
            d = block.get("D", {}).get(rule)
            disp.append(
                {
                    "analysis": name,
                    "rule": rule,
                    "D_r": fmt(d),
                    "H_r(full)": fmt(full.get("H")),
                    "G_r(full)": fmt(full.get("G")),
                }
            )
            nums += [
                _num_row(d, analysis=name, rule=rule, quantity="D"),
                _num_row(full.get("H"), analysis=name, rule=rule, quantity="H_full"),
                _num_row(full.get("G"), analysis=name, rule=rule, quantity="G_full"),
            ]
        if "same_choice_fraction" in block:
            e = block["same_choice_fraction"]
            text = f"{e['mean']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]" if _est(e) else "–"
            disp.append(
                {
                    "analysis": name,
                    "rule": "nll",
                    "D_r": f"same NLL choice (fraction of trajectories): {text}",
                    "H_r(full)": "",
                    "G_r(full)": "",
                }
            )
            nums.append(_num_row(e, analysis=name, rule="nll", quantity="same_choice_fraction"))
    return ReportTable(
        "sensitivities",
        "Sensitivities — one variant per group, checkpoint thinning and the complete-response NLL control "
        f"(pp, {level_percent(summary)}% configuration-bootstrap intervals; in the NLL control H is measured against the "
        "complete-response NLL rule).",
        pd.DataFrame(disp, columns=["analysis", "rule", "D_r", "H_r(full)", "G_r(full)"]),
        pd.DataFrame(nums),
    )


def interval_comparison(summary: dict) -> ReportTable:
    """Configuration vs test-question vs joint intervals for D_r, H_r(full), G_r(full)."""
    disp, nums = [], []
    sources = [(kind, summary if key is None else summary.get(key)) for kind, key in INTERVAL_KINDS]
    sources = [(k, s) for k, s in sources if s]
    for rule in RULE_ORDER:
        for qname, getter in (
            ("D_r", lambda s, r: s.get("D", {}).get(r)),
            ("H_r(full)", lambda s, r: s.get("budget", {}).get(r, {}).get("full", {}).get("H")),
            ("G_r(full)", lambda s, r: s.get("budget", {}).get(r, {}).get("full", {}).get("G")),
        ):
            ests = {kind: getter(src, rule) for kind, src in sources}
            base = _est(ests.get("configuration"))
            row = {"rule": rule, "quantity": qname, "mean": f"{base['mean']:+.2f}" if base else "–"}
            row.update({f"{kind} interval": fmt(e, mean=False) for kind, e in ests.items()})
            disp.append(row)
            nums += [
                _num_row(e, rule=rule, quantity=qname, interval=kind) for kind, e in ests.items()
            ]
    return ReportTable(
        "intervals",
        f"Interval comparison — {level_percent(summary)}% intervals: {interval_label(summary)} (primary), "
        "the test-question percentile bootstrap (frozen choices held fixed) and the joint "
        + ("pigeonhole bootstrap." if summary.get("interval", "percentile") == "percentile"
           else "two-way t (crossed-design variance)."),
        pd.DataFrame(disp),
        pd.DataFrame(nums),
    )


def all_tables(summary: dict) -> list[ReportTable]:
    """Every report table, in reading order."""
    return [
        main_table(summary),
        budget_curves(summary),
        matched_half(summary),
        task_strata(summary),
        task_budget_curves(summary),
        sensitivities(summary),
        interval_comparison(summary),
    ]


# --------------------------------------------------------------------------- rendering
def _md_cell(v: object) -> str:
    return str(v).replace("|", "\\|").replace("\n", " ")


def to_markdown(df: pd.DataFrame, title: str = "") -> str:
    """A GitHub-flavoured Markdown table (with an optional caption line above it)."""
    lines = [title, ""] if title else []
    lines.append("| " + " | ".join(_md_cell(c) for c in df.columns) + " |")
    lines.append("|" + "---|" * len(df.columns))
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(_md_cell(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


_LATEX_ESCAPES = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "−": "--",
    "–": "--",
    "|": r"\textbar{}",
}


def latex_escape(text: object) -> str:
    return "".join(_LATEX_ESCAPES.get(ch, ch) for ch in str(text))


def _latex_cell(v: object) -> str:
    text = latex_escape(v)
    return text.replace(" unresolved", r" \emph{unresolved}")


def to_latex(df: pd.DataFrame, title: str = "", label: str = "") -> str:
    """A booktabs table (``\\toprule``/``\\midrule``/``\\bottomrule``; needs ``\\usepackage{booktabs}``)."""
    lines = [r"\begin{table}[t]", r"\centering", r"\small"]
    if title:
        lines.append(rf"\caption{{{latex_escape(title)}}}")
    if label:
        lines.append(rf"\label{{{label}}}")
    lines.append(r"\begin{tabular}{" + "l" * len(df.columns) + "}")
    lines.append(r"\toprule")
    lines.append(" & ".join(latex_escape(c) for c in df.columns) + r" \\")
    lines.append(r"\midrule")
    for row in df.itertuples(index=False):
        lines.append(" & ".join(_latex_cell(v) for v in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def write_tables(
    summary: dict, tables_dir: Path, formats: Iterable[str] = TABLE_FORMATS
) -> list[Path]:
    """Write every table in each of ``formats`` (md, tex, csv) into ``tables_dir``; return the paths."""
    formats = tuple(formats)
    unknown = sorted(set(formats) - set(TABLE_FORMATS))
    if unknown:
        from ckptsel.errors import CkptselError

        raise CkptselError(f"unknown table format(s) {unknown}; choose from {list(TABLE_FORMATS)}")
    tables_dir = Path(tables_dir)
    paths = []
    for t in all_tables(summary):
        if "md" in formats:
            paths.append(tables_dir / f"{t.name}.md")
            write_text(paths[-1], t.markdown())
        if "tex" in formats:
            paths.append(tables_dir / f"{t.name}.tex")
            write_text(paths[-1], t.latex())
        if "csv" in formats:
            paths.append(tables_dir / f"{t.name}.csv")
            write_csv(paths[-1], t.numbers)
    return paths
