"""Pages that walk a user through their own run are run as written: every block marked
``<!-- follow-along -->`` on a page, in order, in one fresh folder — Python blocks executed in one
namespace, shell blocks as ``ckptsel`` commands (exit 0) — so a page that stops working as
written fails here (issue 36: the callback snippets and the own-run how-to)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ckptsel.cli.app import main

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"^<!-- follow-along -->\n```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)
PAGES = sorted(p for p in DOCS.rglob("*.md") if BLOCK.search(p.read_text()))

pytest.importorskip("trl")
pytestmark = pytest.mark.usefixtures("one_thread")


def test_pages_have_follow_along_blocks():
    names = {p.name for p in PAGES}
    assert {"trainer-run.md", "trainer-callbacks.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_follow_along_blocks_run_as_written(page, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "__follow_along__"}
    for lang, block in BLOCK.findall(page.read_text()):
        if lang == "python":
            exec(compile(block, f"{page.name}:python", "exec"), namespace)  # noqa: S102
            continue
        assert lang == "bash", f"{page.name}: follow-along blocks are python or bash"
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.split(" # ")[0].strip()
            if not line:
                continue
            assert line.startswith("ckptsel "), f"{page.name}: {line}"
            try:
                main(shlex.split(line)[1:])
            except SystemExit as exc:
                assert exc.code in (0, None), f"{page.name}: {line}: exit {exc.code}\n{capsys.readouterr()}"
