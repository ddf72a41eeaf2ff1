"""Paper-style tables from the typed summary (:class:`ckptsel.results.Summary`, or its
``summary.json`` dict): Markdown, LaTeX (booktabs) and CSV.

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
from ckptsel._util.markdown import md_cell
from ckptsel.results.estimate import Estimate, fmt
from ckptsel.results.summary import MATCHED_HALF_STATS, Gains, Summary, budget_order

TABLE_FORMATS = ("md", "tex", "csv")


@dataclass
class ReportTable:
    """One table: a title, the cells a person reads, and the long-form numbers behind them."""

    name: str
    title: str
    display: pd.DataFrame
    numbers: pd.DataFrame

    @classmethod
    def of_rows(cls, name: str, title: str, display: list[dict], numbers: list[dict], columns: list[str] | None = None) -> ReportTable:
        """The table of its display rows (``columns``: their order, kept when there are none)
        and its long-form number rows."""
        return cls(name, title, pd.DataFrame(display, columns=columns), pd.DataFrame(numbers))

    def markdown(self) -> str:
        return to_markdown(self.display, self.title)

    def latex(self) -> str:
        return to_latex(self.display, self.title, label=f"tab:{self.name}")


# --------------------------------------------------------------------------- helpers
def _stored(e: Estimate | None) -> Estimate | None:
    """The estimate as stored (its printed numbers), None when there is none."""
    return None if e is None or e.mean is None else e.as_stored()


def _num_row(est: Estimate | None, **keys: object) -> dict:
    e = _stored(est)
    return {
        **keys,
        "mean": e.mean if e else float("nan"),
        "lo": e.lo if e else float("nan"),
        "hi": e.hi if e else float("nan"),
        "unresolved": e.unresolved if e else None,
    }


def _full_rows(gains: Gains, rule: str, **keys: object) -> list[dict]:
    """The long-form rows of D_r, H_r(full) and G_r(full) of one rule."""
    return [
        _num_row(gains.get("D", rule), **keys, rule=rule, quantity="D"),
        _num_row(gains.get("H", rule), **keys, rule=rule, quantity="H_full"),
        _num_row(gains.get("G", rule), **keys, rule=rule, quantity="G_full"),
    ]


# --------------------------------------------------------------------------- the tables
def main_table(summary: Summary | dict) -> ReportTable:
    """Per rule: D_r, H_r(full), G_r(full) (the paper's main table)."""
    summary = Summary.coerce(summary)
    display = pd.DataFrame(summary.main_table_rows(), columns=["rule", summary.d_column, "H_r(full) vs matched NLL", "G_r(full) vs final"])
    nums = [row for rule in summary.gains.table_rules for row in _full_rows(summary.gains, rule)]
    return ReportTable("main_table", summary.main_table_title, display, pd.DataFrame(nums))


def _budget_rows(gains: Gains, **keys: object) -> tuple[list[dict], list[dict]]:
    disp, nums = [], []
    for rule in gains.rules:
        for b in gains.labels(rule):
            cell = gains.budget[rule][b]
            disp.append({**keys, "rule": rule, "budget n": b, "G_r(n) vs final": fmt(cell.G), "H_r(n) vs matched NLL": fmt(cell.H)})
            for q in ("G", "H"):
                if cell.get(q) is not None:
                    nums.append(_num_row(cell.get(q), **keys, rule=rule, budget=b, quantity=q))
    return disp, nums


def budget_curves(summary: Summary | dict) -> ReportTable:
    """G_r(n) and H_r(n) at every validation budget (nested subsets)."""
    summary = Summary.coerce(summary)
    disp, nums = _budget_rows(summary.gains)
    return ReportTable.of_rows(
        "budget_curves",
        f"Budget curves — G_r(n) and H_r(n) at every validation budget n (pp, {summary.level_percent}% {summary.interval_label} "
        "intervals; 'full' is the whole eligible pool, whose size differs by dataset).",
        disp,
        nums,
    )


def matched_half(summary: Summary | dict) -> ReportTable:
    """Same-item optimism: selection-half gain G_in, complementary-half gain G_out, B = G_in − G_out."""
    summary = Summary.coerce(summary)
    disp, nums = [], []
    for rule, mh in summary.matched_half.items():
        disp.append({"rule": rule, **{q: fmt(mh.get(q)) for q in MATCHED_HALF_STATS}})
        nums += [_num_row(mh.get(q), rule=rule, quantity=q) for q in MATCHED_HALF_STATS]
    return ReportTable.of_rows(
        "matched_half",
        "Matched-half diagnostic on the test pool — gain on the half used to choose (G_in), on the other half "
        f"(G_out), and the same-item optimism B = G_in − G_out (pp, {summary.level_percent}% {summary.interval_label} intervals).",
        disp,
        nums,
        columns=["rule", "G_in", "G_out", "B"],
    )


def task_strata(summary: Summary | dict) -> ReportTable:
    """The main table and the matched-half B per task."""
    summary = Summary.coerce(summary)
    disp, nums = [], []
    for task, block in summary.by_task.items():
        g, mhs = block.gains, block.gains.matched_half or {}
        for rule in g.rules:
            disp.append(
                {
                    "task": task,
                    "trajectories": block.population.trajectories,
                    "rule": rule,
                    summary.d_column: fmt(g.get("D", rule)),
                    "H_r(full)": fmt(g.get("H", rule)),
                    "G_r(full)": fmt(g.get("G", rule)),
                    "B (matched half)": fmt(mhs[rule].B) if rule in mhs else "–",
                }
            )
            nums += _full_rows(g, rule, task=task)
        for rule, mh in mhs.items():
            nums += [_num_row(mh.get(q), task=task, rule=rule, quantity=f"MH_{q}") for q in MATCHED_HALF_STATS]
    return ReportTable.of_rows(
        "task_strata",
        f"Task strata — D_r, H_r(full), G_r(full) and the oracle/agreement same-item optimism B per task (pp, {summary.level_percent}% {summary.interval_label} intervals over each task's configurations).",
        disp,
        nums,
    )


def task_budget_curves(summary: Summary | dict) -> ReportTable:
    """G_r(n), H_r(n) per task."""
    summary = Summary.coerce(summary)
    per_task = [_budget_rows(block.gains, task=task) for task, block in summary.by_task.items()]
    disp = [row for rows, _ in per_task for row in rows]
    nums = [row for _, rows in per_task for row in rows]
    title = f"Budget curves per task (pp, {summary.level_percent}% {summary.interval_label} intervals over each task's configurations)."
    return ReportTable.of_rows("task_budget_curves", title, disp, nums)


def _sensitivity_blocks(summary: Summary) -> Iterable[tuple[str, Gains | None, str | None, Estimate | None]]:
    """(analysis name, gains or None, note, same-choice fraction of the NLL control)."""
    yield "nested (main analysis)", summary.gains, None, None
    sens = summary.sensitivities
    yield "one variant per group ('full' = all groups)", sens.one_variant, None, None
    for k, block in sorted(sens.thinning.items()):
        yield f"thinning: every k-th checkpoint, k = {k}", block, None, None
    nc = sens.nll_complete
    if nc.skipped is not None:
        yield "complete-response NLL", None, f"skipped: {nc.skipped}", None
    else:
        yield "complete-response NLL", nc.gains, None, nc.same_choice_fraction


def sensitivities(summary: Summary | dict) -> ReportTable:
    """D_r, H_r(full), G_r(full) under each sensitivity analysis next to the main analysis."""
    summary = Summary.coerce(summary)
    disp, nums = [], []
    for name, gains, note, same in _sensitivity_blocks(summary):
        if gains is None:
            disp.append({"analysis": name, "rule": "–", "D_r": note, "H_r(full)": "–", "G_r(full)": "–"})
            continue
        for rule in gains.rules:
            disp.append(
                {
                    "analysis": name,
                    "rule": rule,
                    "D_r": fmt(gains.get("D", rule)),
                    "H_r(full)": fmt(gains.get("H", rule)),
                    "G_r(full)": fmt(gains.get("G", rule)),
                }
            )
            nums += _full_rows(gains, rule, analysis=name)
        if same is not None:
            e = _stored(same)
            text = (
                "–"
                if not e
                else (f"{e.mean:.2f} [{e.lo:.2f}, {e.hi:.2f}]" if e.estimable else f"{e.mean:.2f} not estimable: {e.not_estimable}")
            )
            disp.append(
                {
                    "analysis": name,
                    "rule": "nll",
                    "D_r": f"same NLL choice (fraction of trajectories): {text}",
                    "H_r(full)": "",
                    "G_r(full)": "",
                }
            )
            nums.append(_num_row(same, analysis=name, rule="nll", quantity="same_choice_fraction"))
    return ReportTable.of_rows(
        "sensitivities",
        "Sensitivities — one variant per group, checkpoint thinning and the complete-response NLL control "
        f"(pp, {summary.level_percent}% {summary.interval_label} intervals; in the NLL control H is measured against the "
        "complete-response NLL rule).",
        disp,
        nums,
        columns=["analysis", "rule", "D_r", "H_r(full)", "G_r(full)"],
    )


def interval_comparison(summary: Summary | dict) -> ReportTable:
    """Configuration vs test-question vs joint intervals for D_r, H_r(full), G_r(full)."""
    summary = Summary.coerce(summary)
    disp, nums = [], []
    sources = summary.interval_sources()
    for rule in summary.gains.table_rules:
        for qname, q in (("D_r", "D"), ("H_r(full)", "H"), ("G_r(full)", "G")):
            ests = {kind: gains.get(q, rule) for kind, gains in sources}
            base = _stored(ests.get("configuration"))
            row = {"rule": rule, "quantity": qname, "mean": f"{base.mean:+.2f}" if base else "–"}
            row.update({f"{kind} interval": fmt(e, mean=False) for kind, e in ests.items()})
            disp.append(row)
            nums += [_num_row(e, rule=rule, quantity=qname, interval=kind) for kind, e in ests.items()]
    return ReportTable.of_rows(
        "intervals",
        f"Interval comparison — {summary.level_percent}% intervals: {summary.interval_label} (primary), "
        "the test-question percentile bootstrap (frozen choices held fixed) and the joint "
        + ("pigeonhole bootstrap." if summary.interval_method == "percentile" else "two-way t (crossed-design variance)."),
        disp,
        nums,
    )


def all_tables(summary: Summary | dict) -> list[ReportTable]:
    """Every report table, in reading order."""
    summary = Summary.coerce(summary)
    return [
        main_table(summary),
        budget_curves(summary),
        matched_half(summary),
        task_strata(summary),
        task_budget_curves(summary),
        sensitivities(summary),
        interval_comparison(summary),
    ]


def budgets_run(summary: Summary | dict) -> tuple[int, ...]:
    """The finite validation budgets that ran (some rule has a cell there), in order; a budget
    larger than every eligible pool is skipped by the analysis and is not among them."""
    summary = Summary.coerce(summary)
    labels = {b for rule in summary.gains.budget for b in summary.gains.labels(rule)}
    return tuple(int(b) for b in budget_order(labels) if b.isdigit())


def budgets_text(summary: Summary | dict) -> str:
    """The validation budgets in one line of plain text: those that ran, then "full", what D
    starts from, and the budgets skipped (larger than every eligible pool), if any."""
    summary = Summary.coerce(summary)
    ran = budgets_run(summary)
    text = ", ".join([*map(str, ran), "full"])
    if summary.d_from in ran:
        text += f"; D_r = G_r(full) − G_r({summary.d_from})"
    else:
        text += f"; D_r not available (it needs budget {summary.d_from})"
    skipped = [n for n in summary.finite_budgets if n not in ran]
    if skipped:
        text += f"; skipped: {', '.join(map(str, skipped))} (larger than every eligible validation pool)"
    return text


# --------------------------------------------------------------------------- rendering
def to_markdown(df: pd.DataFrame, title: str = "") -> str:
    """A GitHub-flavoured Markdown table (with an optional caption line above it)."""
    lines = [title, ""] if title else []
    lines.append("| " + " | ".join(md_cell(c) for c in df.columns) + " |")
    lines.append("|" + "---|" * len(df.columns))
    for row in df.itertuples(index=False):
        lines.append("| " + " | ".join(md_cell(v) for v in row) + " |")
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


def write_tables(summary: Summary | dict, tables_dir: Path, formats: Iterable[str] = TABLE_FORMATS) -> list[Path]:
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
