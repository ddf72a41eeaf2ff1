"""The Python API page's worked examples are real: every ```python block of
docs/reference/api.md runs, top to bottom, in one namespace, in a fresh folder, and a ```text
block right after one is exactly what that block prints."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "reference" / "api.md"
BLOCK = re.compile(r"^```python\n(?P<code>.*?)^```\n(?:\n```text\n(?P<out>.*?)^```\n)?", re.DOTALL | re.MULTILINE)


def blocks() -> list[tuple[str, str | None]]:
    return [(m["code"], m["out"]) for m in BLOCK.finditer(PAGE.read_text())]


def test_page_shows_the_four_entry_points():
    code = "\n".join(c for c, _ in blocks())
    for name in ("measure_model(", "analyze(", "select_checkpoint(", "compare_checkpoints("):
        assert name in code, name
    assert all(out is not None for _, out in blocks()), "every example shows what it prints"


def test_api_examples_run_and_print_what_the_page_shows(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "api_docs"}
    capsys.readouterr()
    for i, (code, expected) in enumerate(blocks()):
        exec(compile(code, f"{PAGE.name}, python block {i + 1}", "exec"), namespace)
        printed = capsys.readouterr().out
        if expected is not None:
            assert printed == expected, f"{PAGE.name}, python block {i + 1} printed:\n{printed}\nthe page shows:\n{expected}"
    # what the examples wrote is a real results folder and a real records folder
    assert (tmp_path / "sim-results" / "summary.json").is_file()
    from ckptsel.records.load import load_validation

    measured = load_validation(tmp_path / "my-records")
    assert [v.trajectory for v in measured] == ["my-run-s1"]


def test_faq_quotes_the_numbers_these_examples_print(tmp_path):
    """docs/faq.md reads its numbers off the same simulated records (small preset, seed 0, the
    same trajectory and steps): each interval it quotes is one the examples above print, or
    D_r of the accuracy rule with ``--seed 7``, computed here."""
    from ckptsel.results.estimate import fmt
    from ckptsel.sim.simulate import write_simulation
    from ckptsel.workflows.analysis import analyze

    faq = (PAGE.parents[1] / "faq.md").read_text()
    printed = "\n".join(out for _, out in blocks() if out)
    quoted = re.findall(r"`([+-]?\d+\.\d\d(?: pp)? \[[+-]?\d+\.\d\d, [+-]?\d+\.\d\d\])`", faq)
    quoted += re.findall(r"`(\[[+-]?\d+\.\d\d, [+-]?\d+\.\d\d\])`", faq)
    assert len(quoted) >= 6, quoted
    records = write_simulation(tmp_path / "records", "small", seed=0)
    seed7 = analyze(records, tmp_path / "results", seed=7).gains.get("D", "accuracy")
    d7 = fmt(seed7, mark=False)
    assert f"to `{d7}`" in faq, d7
    missing = [q for q in quoted if q not in printed and q != d7]
    assert not missing, f"docs/faq.md quotes numbers no example prints: {missing}"


def test_sphinx_roles_become_optional_cross_references(tmp_path):
    """docs/_hooks/sphinx_roles.py on a small package: every role form, by hand."""
    griffe = pytest.importorskip("griffe", reason="the docs extra installs griffe (mkdocstrings)")
    import importlib.util

    spec = importlib.util.spec_from_file_location("sphinx_roles", PAGE.parents[1] / "_hooks" / "sphinx_roles.py")
    roles = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(roles)
    pkg = tmp_path / "toypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        '"""See :mod:`~toypkg.core`, :func:`run`, :class:`toypkg.core.Thing`, '
        ':func:`the runner <toypkg.core.run>`, :data:`!LIMIT` and ``code``."""\n'
        "from toypkg.core import run\n"
    )
    (pkg / "core.py").write_text(
        'class Thing:\n    """Made by :meth:`.make`."""\n\n'
        '    def make(self):\n        """:attr:`~Thing.size` of it."""\n\n'
        'def run():\n    """Returns a :class:`Thing`."""\n'
    )
    loaded = griffe.load("toypkg", search_paths=[tmp_path], extensions=griffe.load_extensions(roles.SphinxRoles))

    def ref(target: str, shown: str) -> str:
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    assert loaded.docstring.value == (
        f"See {ref('toypkg.core', 'core')}, {ref('toypkg.core.run', 'run')}, "
        f"{ref('toypkg.core.Thing', 'toypkg.core.Thing')}, {ref('toypkg.core.run', 'the runner')}, "
        "<code>LIMIT</code> and ``code``."
    )
    core = loaded["core"]
    assert core["run"].docstring.value == f"Returns a {ref('toypkg.core.Thing', 'Thing')}."
    assert core["Thing"].docstring.value == f"Made by {ref('toypkg.core.Thing.make', 'make')}."
    assert core["Thing.make"].docstring.value == f"{ref('toypkg.core.Thing.size', 'size')} of it."
