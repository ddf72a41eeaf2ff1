"""One self-contained HTML report: inline CSS, figures as base64 PNG, no scripts, no URLs.

A person opens ``report.html`` on a laptop and reads, in order: who is in the study, the
three claims in plain words (generated from the numbers), the main table, the figures and
the remaining tables. The claims use three words only — resolved positive, resolved
negative, unresolved (the interval contains 0) — and never say "no effect".
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable

import pandas as pd

from ckptsel.choose.rules import H_BASELINE, RULES, SIGNAL_RULES, average_rule_step, shown_rule
from ckptsel.records.schema import step_text
from ckptsel.report.tables import ReportTable, budgets_text
from ckptsel.results.estimate import Estimate, fmt
from ckptsel.results.summary import Range, Summary

CSS = """
body{font-family:-apple-system,'Segoe UI',Roboto,'Helvetica Neue',Arial,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
main{max-width:1180px;margin:0 auto;padding:18px 28px 60px;background:#fff}
h1{font-size:1.6em;margin:.3em 0}
h2{font-size:1.25em;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:1.8em}
h3{font-size:1.05em;margin-top:1.3em}
p.caption{color:#555;font-size:.9em;margin:.3em 0 .6em}
p.caution{background:#fff4e0;border-left:4px solid #e69500;padding:.4em .7em}
table{border-collapse:collapse;margin:.5em 0 1em;font-size:.86em}
th,td{border-bottom:1px solid #e3e3e3;padding:4px 9px;text-align:left;vertical-align:top}
thead th{border-bottom:2px solid #444;background:#f4f4f6}
td.unresolved{color:#6b6b6b;font-style:italic}
td.positive{color:#0a6b2a}
td.negative{color:#a4161a}
ul.claims li{margin:.45em 0;line-height:1.4}
span.tag{display:inline-block;padding:1px 7px;border-radius:9px;font-size:.82em;font-weight:600;margin-right:4px}
span.pos{background:#d8f3dc;color:#0a6b2a}
span.neg{background:#ffd6d6;color:#a4161a}
span.unr{background:#ececec;color:#444}
figure{margin:1em 0 1.6em}
figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#555;font-size:.88em;margin-top:.3em}
dl.pop{display:grid;grid-template-columns:max-content auto;gap:3px 16px;font-size:.92em}
dl.pop dt{font-weight:600}
dl.pop dd{margin:0}
.scroll{overflow-x:auto}
footer{color:#777;font-size:.8em;margin-top:3em}
"""

CLAIMS = (
    ("D", "More validation data helps", "D_r = G_r(full) − G_r({n})"),  # n: the smallest budget
    ("H", "Beats matched-NLL selection", "H_r(full)"),
    ("G", "Beats simply keeping the final checkpoint", "G_r(full)"),
)
RULE_WORDS = {name: RULES[name].words for name in SIGNAL_RULES}


def _rule_words(rule: str) -> str:
    spec = shown_rule(rule)
    return RULE_WORDS.get(rule) or (spec.words if spec is not None else f"your rule {rule}")


def verdict(e: Estimate | dict | None) -> str:
    """'resolved positive' / 'resolved negative' / 'unresolved' from an estimate's interval;
    'not estimable' when the design gives it none."""
    e = Estimate.coerce(e)
    if e is None or e.mean is None:
        return "not available"
    e = e.as_stored()
    if not e.estimable:
        return "not estimable"
    if e.lo <= 0.0 <= e.hi or e.unresolved:
        return "unresolved"
    return "resolved positive" if e.lo > 0 else "resolved negative"


_CODE = re.compile(r"`([^`\n]+)`")


def text_html(text: str) -> str:
    """Plain text as HTML: escaped, and a `name` in backticks set as ``<code>name</code>``."""
    return _CODE.sub(r"<code>\1</code>", html.escape(text))


def _tag(v: str) -> str:
    cls = {"resolved positive": "pos", "resolved negative": "neg"}.get(v, "unr")
    return f'<span class="tag {cls}">{html.escape(v)}</span>'


def claim_sentences(summary: Summary | dict) -> list[tuple[str, str]]:
    """(verdict, plain-language sentence) for each claim and rule, from the numbers."""
    summary = Summary.coerce(summary)
    level, d_from = summary.level_percent, summary.d_from
    out = []
    rules = [*SIGNAL_RULES, *(r for r in summary.gains.rules if r not in RULES)]  # then the averages, a researcher's own
    for key, question, symbol in CLAIMS:
        symbol = symbol.format(n=d_from)
        for rule in rules:
            if key == "H" and rule == H_BASELINE:
                continue  # matched NLL against itself is 0 by construction
            if key == "D" and average_rule_step(rule) is not None:
                continue  # an average is a fixed choice: more validation data changes nothing
            e = summary.gains.get(key, rule)
            v = verdict(e)
            if v == "not available":
                if key == "D" and rule == SIGNAL_RULES[0]:  # said once, not per rule
                    out.append(
                        (
                            v,
                            f"<b>{html.escape(question)}?</b> Not available: D_r needs the "
                            f"{d_from}-item budget, and no eligible validation pool "
                            f"has {d_from} items.",
                        )
                    )
                continue
            nums = fmt(e, unit=" pp", mark=False)
            if v == "not estimable":
                reading = (
                    f"no {level}% interval ({e.not_estimable}): this design says nothing about its "
                    "uncertainty, so these data cannot tell the sign"
                )
            elif v == "unresolved" and e.cannot_resolve is not None:
                reading = f"too small a design to resolve ({e.cannot_resolve}), so these data cannot tell the sign"
            elif v == "unresolved":
                reading = f"the {level}% interval contains 0, so these data cannot tell the sign"
            elif v == "resolved positive":
                reading = "the whole interval is above 0"
            else:
                reading = "the whole interval is below 0: it does worse"
            out.append(
                (
                    v,
                    f"<b>{html.escape(question)}?</b> With {html.escape(_rule_words(rule))}: "
                    f"{html.escape(symbol)} = {html.escape(nums)} — {html.escape(reading)}.",
                )
            )
    return out


def _cell_class(text: str) -> str:
    if "unresolved" in text or "not estimable" in text:
        return ' class="unresolved"'
    if text.startswith("+") and "[+" in text:
        return ' class="positive"'
    if text.startswith("-") and "[-" in text and ", -" in text:
        return ' class="negative"'
    return ""


def table_html(df: pd.DataFrame) -> str:
    """An HTML table of display strings (intervals containing 0 styled as unresolved)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for row in df.itertuples(index=False):
        cells = "".join(f"<td{_cell_class(str(v))}>{html.escape(str(v))}</td>" for v in row)
        rows.append(f"<tr>{cells}</tr>")
    return f'<div class="scroll"><table><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table></div>'


def _population(summary: Summary) -> str:
    pop = summary.population
    ex = pop.validation_exclusions
    reasons = ", ".join(f"{k.replace('_', ' ')}: {v}" for k, v in ex.reasons.items())
    rows = [
        ("trajectories", pop.trajectories),
        ("configurations", pop.configurations),
        ("tasks", ", ".join(pop.tasks)),
        ("checkpoints per trajectory", _range(pop.checkpoints)),
        ("eligible validation items per trajectory", _range(pop.validation_items)),
        ("test items per task", ", ".join(f"{t}: {n}" for t, n in (pop.test_items or {}).items())),
        ("validation exclusions", f"{ex.total}" + (f" ({reasons})" if reasons else "")),
        ("resampling", f"{summary.draws} bootstrap draws, {summary.permutations} nested permutations, seed {summary.seed}"),
        ("validation budgets", budgets_text(summary)),
        ("frozen choices SHA-256", summary.choices_sha256 or ""),
    ]
    body = "".join(f"<dt>{html.escape(k)}</dt><dd>{text_html(str(v))}</dd>" for k, v in rows)
    return f'<dl class="pop">{body}</dl>'


def _range(r: Range | None) -> str:
    if r is None:
        return "–"
    return str(r.min) if r.min == r.max else f"{r.min}–{r.max}"


FIGURE_CAPTIONS = {
    "budget_curves_G": "G_r(n), the test-accuracy gain of each rule's choice over the final checkpoint, by validation budget; "
    "shaded bands are pointwise {level}% {method} intervals.",
    "budget_curves_H": "H_r(n), the gain over choosing by matched NLL on the same validation subsets; "
    "shaded bands are pointwise {level}% {method} intervals.",
    "configuration_gains": "Per-configuration gains at the full validation pool (means over seeds), grouped by task.",
    "matched_half": "Matched-half diagnostic: gain on the half used to choose vs on the other half; the distance below the "
    "diagonal is the same-item optimism B (error bars: {level}% {method} intervals).",
    "trajectory_curves": "Within-trajectory curves for one trajectory: test and validation accuracy and validation matched NLL "
    "per checkpoint.",
}


def figure_caption(name: str, summary: Summary) -> str:
    """A figure's caption, naming the interval method that made its intervals."""
    cap = FIGURE_CAPTIONS.get(name, name)
    if name == "trajectory_curves" and not summary.population.has_nll:  # no NLL panel
        cap = cap.replace(" and validation matched NLL", "")
    return cap.replace("{level}", str(summary.level_percent)).replace("{method}", summary.interval_label)


def keep_frame(summary: Summary) -> pd.DataFrame | None:
    """Which checkpoint to keep per trajectory, as display strings (None: the summary has no
    keep table)."""
    keep = summary.keep
    if keep is None:
        return None
    level = int(round(float(keep.settings.get("level", summary.level)) * 100))
    rows = [
        {
            "trajectory": r.trajectory,
            "configuration": r.configuration,
            "final step": r.final_step,
            f"{keep.rule} rule's choice": ", ".join(map(step_text, r.choice)) or "–",
            f"split-validation gain over final, pp ({level}%)": fmt(r.gain),
            "keep": f"{r.keep_step} (final)" if r.keep_final else step_text(r.keep_step),
        }
        for r in keep.trajectories
    ]
    return pd.DataFrame(rows)


def _keep_section(summary: Summary) -> list[str]:
    frame = keep_frame(summary)
    if frame is None:
        return []
    keep = summary.keep
    earlier = sum(not r.keep_final for r in keep.trajectories)
    caption = (
        f"For each trajectory, what <code>ckptsel select</code> answers (rule {html.escape(keep.rule)}): "
        "the checkpoint the rule picks on the full validation pool, its gain over the final checkpoint on "
        "validation halves it did not choose on, and the checkpoint to keep — the final one unless that "
        f"gain is resolved above 0. {earlier} of {len(keep.trajectories)} trajectories keep an earlier "
        "checkpoint. <code>ckptsel select --all</code> prints the same table; "
        "<code>--trajectory</code> gives one trajectory's reasons in full."
    )
    unanswered = [r for r in keep.trajectories if not r.choice]
    notes = [f'<p class="caption">{text_html(f"{r.trajectory}: {r.reason}")}</p>' for r in unanswered]
    if keep.provisional is not None:
        notes.append(f'<p class="caption"><strong>Provisional:</strong> {text_html(f"this table was {keep.provisional}.")}</p>')
    return ['<h2 id="keep">Which checkpoint to keep</h2>', f'<p class="caption">{caption}</p>', table_html(frame), *notes]


def signal_frame(summary: Summary) -> pd.DataFrame | None:
    """Each task's signal, noise and ratio, as display strings (None: the summary says none)."""
    sn = summary.signal_noise
    if sn is None or not sn.tasks:
        return None

    def shown(x: float | None, digits: int) -> str:
        return "–" if x is None else f"{x:.{digits}f}"

    return pd.DataFrame(
        [
            {
                "task": task,
                "signal (pp)": shown(t.signal, 2),
                "noise (pp)": shown(t.noise, 2),
                "signal / noise": shown(t.ratio, 2),
                "configurations": str(t.configurations),
                "trajectories": str(t.trajectories),
            }
            for task, t in sn.tasks.items()
        ]
    )


def _signal_section(summary: Summary) -> list[str]:
    frame = signal_frame(summary)
    if frame is None:
        return []
    caption = (
        "Whether each task can tell checkpoints apart: its <i>noise</i>, how much a trajectory's test "
        f"accuracy moves over its last {summary.signal_noise.last} checkpoints (standard deviation, "
        "root-mean-square over trajectories), against its <i>signal</i>, how far apart the configurations' "
        "final checkpoints end (standard deviation across configurations), and their ratio. Near or below 1, "
        "choosing between late checkpoints on this task is mostly noise. After Heineman et al. 2025, "
        "“Signal and Noise”."
    )
    return ['<h2 id="signal-noise">Signal and noise per task</h2>', f'<p class="caption">{caption}</p>', table_html(frame)]


def render_html(
    summary: Summary | dict,
    tables: Iterable[ReportTable],
    figures_png: dict[str, bytes],
    title: str = "ckptsel report",
    notes: Iterable[str] = (),
    measured_by: Iterable[str] = (),
) -> str:
    """The report page as one string (figures inlined as base64 PNG); ``notes``: one line for
    each figure or panel left out, and why (:func:`ckptsel.report.figures.figure_notes`);
    ``measured_by``: what measured the records, one line each (``run.json``'s: engine, dtype,
    device, prompt format)."""
    measured = "".join(f"<li>{html.escape(line)}</li>" for line in measured_by)
    summary = Summary.coerce(summary)
    tables = list(tables)
    by_name = {t.name: t for t in tables}
    claims = "".join(f"<li>{_tag(v)} {s}</li>" for v, s in claim_sentences(summary))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title><style>{CSS}</style></head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
        '<p class="caption">Which checkpoint of a supervised fine-tuning run to keep, and what the validation data used to '
        "choose it is worth. Gains are in percentage points (pp) of test accuracy. An interval that contains 0 is "
        "<i>unresolved</i>: these data cannot tell the sign of the effect, which may still be large either way.</p>",
        "<h2>Population</h2>",
        _population(summary),
        *(
            [f'<p class="caption" id="protocol"><b>Protocol:</b> {text_html(summary.protocol.status)}</p>']
            if summary.protocol is not None
            else []
        ),
        *(f'<p class="caution"><b>Caution:</b> {text_html(w)}</p>' for w in summary.warnings or ()),
        *(
            [
                f'<p class="caption" id="measured-by"><b>Measured by</b> (engine, dtype, attention, batch, '
                f'device, prompt format):</p><ul class="caption">{measured}</ul>'
            ]
            if measured
            else []
        ),
        "<h2>The three claims, read from the numbers</h2>",
        f'<ul class="claims">{claims}</ul>',
    ]
    if "main_table" in by_name:
        t = by_name["main_table"]
        parts += ["<h2>Main table</h2>", f'<p class="caption">{html.escape(t.title)}</p>', table_html(t.display)]
    parts += _keep_section(summary)
    parts.append("<h2>Figures</h2>")
    parts += [f'<p class="caption figure-note">{text_html(n)}.</p>' for n in notes]
    for name, png in figures_png.items():
        data = base64.b64encode(png).decode("ascii")
        cap = figure_caption(name, summary)
        parts.append(
            f'<figure id="fig-{html.escape(name)}"><img alt="{html.escape(cap)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{html.escape(cap)}</figcaption></figure>"
        )
    parts += _signal_section(summary)
    parts.append("<h2>Tables</h2>")
    for t in tables:
        if t.name == "main_table":
            continue
        parts += [
            f'<h3 id="tab-{t.name}">{html.escape(t.name.replace("_", " "))}</h3>',
            f'<p class="caption">{text_html(t.title)}</p>',
            table_html(t.display),
        ]
    rules = ", ".join(summary.gains.table_rules)
    parts.append(
        f"<footer>Rules: {html.escape(rules)}. Generated by ckptsel from summary.json (schema {summary.schema}). "
        f"Intervals: {summary.level_percent}% {html.escape(summary.interval_label)} intervals (summary.json "
        f"interval: {html.escape(summary.interval_method)}); configurations are the primary resampling unit. "
        "An estimate marked <i>not estimable</i> has no interval: its design (e.g. one configuration) gives no "
        "information about its variance.</footer>"
    )
    parts.append("</main></body></html>")
    return "\n".join(parts) + "\n"
