"""Build examples/analysis.ipynb from the cells below and execute it in a real kernel, saving
its outputs (the committed notebook is this script's output; tests/project/test_notebook.py executes it
again and checks the outputs are the same). Usage: python scripts/execute_notebook.py
(needs the dev extra: nbformat, nbclient, ipykernel). Runs in a temporary folder."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "analysis.ipynb"

CELLS = [
    (
        "markdown",
        """# ckptsel from Python: analyze, select, compare

Which checkpoint of a fine-tuning run should you keep, and does the validation data you used
to choose it buy anything over keeping the final checkpoint? This notebook answers both from
Python on **simulated records** (`ckptsel simulate`'s `small` preset: 18 trajectories of 7
configurations, with a known truth), so it runs anywhere in seconds and needs no model. On your
own study, point `records` at the folder `ckptsel measure` (or `ckptsel.measure.measure_model`)
wrote. The docs' [Python API page](../docs/reference/api.md) has the same calls with more words.

It writes into `ckptsel-notebook/` beside it.""",
    ),
    (
        "code",
        """from pathlib import Path

import pandas as pd

from ckptsel.sim import write_simulation
from ckptsel.workflows import analyze, compare_checkpoints, select_checkpoint

work = Path("ckptsel-notebook")
records = write_simulation(work / "records", "small", seed=0)
sorted(p.name for p in records.iterdir())""",
    ),
    (
        "markdown",
        """## The study: `analyze`

Checkpoints are chosen on validation records by four rules (generated accuracy, checkpoint
agreement, matched NLL, keep the last), the choices are frozen (SHA-256) before any test record
is read, and the gains are estimated in percentage points of test accuracy: `G` over keeping
the final checkpoint, `H` over matched-NLL selection, `D` from more validation data. An
interval that contains 0 is **unresolved**: these data cannot tell the sign.""",
    ),
    (
        "code",
        """summary = analyze(records, work / "results")
print(summary.main_table_title)
pd.DataFrame(summary.main_table_rows(), columns=["rule", "D", "H(full)", "G(full)"]).set_index("rule")""",
    ),
    (
        "markdown",
        """Each gain has three intervals, one per population it generalizes to: new configurations
and seeds on these test questions (configuration, the primary one), new test questions for
these trained checkpoints (test-question), or both (joint).""",
    ),
    (
        "code",
        """pd.DataFrame(
    [
        {"interval": family, "rule": rule, "G(full) pp": g.mean, "lo": g.lo, "hi": g.hi,
         "unresolved": g.unresolved}
        for family, gains in summary.interval_sources()
        for rule in ("accuracy", "agreement", "nll")
        for g in [gains.get("G", rule)]
    ]
).set_index(["interval", "rule"]).round(2)""",
    ),
    (
        "markdown",
        """## One run: `select_checkpoint`

For one trajectory: each rule's choice, its gain over the final checkpoint on validation items
that did not make the choice, and the recommendation — the final checkpoint unless that gain is
resolved above 0.""",
    ),
    (
        "code",
        """trajectory = "llama3-8b-lora8-gsm8k-s42"
selection = select_checkpoint(records, trajectory)
pd.DataFrame(
    [
        {"rule": rule, "picks step(s)": r.steps, "gain vs final (pp)": r.split_validation.estimate.mean,
         "lo": r.split_validation.estimate.lo, "hi": r.split_validation.estimate.hi}
        for rule, r in selection.rules.items()
    ]
).set_index("rule").round(2)""",
    ),
    ("code", """print(selection.recommendation.reason)"""),
    (
        "markdown",
        """Simulated records come with the truth (`truth.parquet`: each checkpoint's true test
accuracy), so here we can see what the recommendation would have cost or bought:""",
    ),
    (
        "code",
        """truth = pd.read_parquet(records / "truth.parquet")
mine = truth[truth["trajectory"] == trajectory].set_index("step")["true_test_accuracy"]
keep = selection.recommendation.keep_step
picked = selection.rules["accuracy"].steps[-1]
print(f"true test accuracy: kept step {keep}: {100 * mine[keep]:.2f}%, "
      f"accuracy rule's step {picked}: {100 * mine[picked]:.2f}%, "
      f"best step {mine.idxmax()}: {100 * mine.max():.2f}%")""",
    ),
    (
        "markdown",
        """## Two checkpoints: `compare_checkpoints`

A paired comparison on the items both checkpoints answered: A − B in percentage points with
Newcombe's score interval (a paired bootstrap of whole groups when items share a group), and
the exact McNemar p-value, per split; resolved only when both agree.""",
    ),
    (
        "code",
        """result = compare_checkpoints(records, trajectory, 100, 181)
pd.DataFrame(
    [
        {"split": split, "items": r["items"], "A - B (pp)": r["difference"]["mean"],
         "lo": r["difference"]["lo"], "hi": r["difference"]["hi"],
         "unresolved": r["difference"]["unresolved"], "McNemar p": round(r["mcnemar_p"], 4)}
        for split, r in result["splits"].items()
    ]
).set_index("split").round(2)""",
    ),
]


def build() -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    make = {"markdown": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    nb.cells = [make[kind](text) for kind, text in CELLS]
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{i}"  # stable ids: the committed file does not change from run to run
    return nb


def execute(nb: nbformat.NotebookNode, where: Path, timeout: int = 300) -> nbformat.NotebookNode:
    """Run every cell in a fresh kernel with ``where`` as the working folder."""
    NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False, resources={"metadata": {"path": str(where)}}).execute()
    return nb


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        nb = execute(build(), Path(tmp))
    nb.metadata.pop("widgets", None)
    nb.metadata["language_info"] = {"name": "python"}  # not the Python version that ran it
    nbformat.write(nb, NOTEBOOK)
    print(f"wrote {NOTEBOOK}", file=sys.stderr)


if __name__ == "__main__":
    main()
