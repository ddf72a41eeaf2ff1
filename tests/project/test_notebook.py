"""examples/analysis.ipynb runs: executed afresh in a real Jupyter kernel (nbclient + ipykernel,
the dev extra) in an empty folder, every cell succeeds and prints what the committed notebook
shows (its outputs are those of scripts/execute_notebook.py, which rebuilds it)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat", reason="the dev extra installs nbformat")
nbclient = pytest.importorskip("nbclient", reason="the dev extra installs nbclient")
pytest.importorskip("ipykernel", reason="the dev extra installs ipykernel")

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "analysis.ipynb"


def texts(nb) -> list[list[str]]:
    """Per code cell, what it showed as text (streams and the plain-text form of results)."""
    out = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        shown = []
        for o in cell.outputs:
            if o.output_type == "stream":
                shown.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                shown.append(o.data["text/plain"])
            else:  # an error output in the committed notebook
                shown.append(f"{o.output_type}: {o.get('ename')}: {o.get('evalue')}")
        out.append(shown)
    return out


def test_notebook_executes_and_shows_its_committed_outputs(tmp_path):
    committed = nbformat.read(NOTEBOOK, as_version=4)
    fresh = copy.deepcopy(committed)
    for cell in fresh.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    # a cell that raises fails here (CellExecutionError names the cell and the traceback)
    nbclient.NotebookClient(fresh, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    shown = texts(committed)
    assert all(shown), "every code cell of the committed notebook shows an output"
    assert texts(fresh) == shown
    assert (tmp_path / "ckptsel-notebook" / "results" / "summary.json").is_file()
