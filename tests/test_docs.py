"""The docs site's commands are real: every ``ckptsel ...`` command a page or the README shows
names a command that exists, with options it takes; the blocks marked ``<!-- runnable -->``
are run; every command of the CLI has a page that mentions it; the README stays short and
keeps its two commands; the generated reference covers every command."""

from __future__ import annotations

import importlib.util
import re
import shlex
from pathlib import Path

import pytest
import typer

from ckptsel.cli import app, main

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
RUNNABLE = re.compile(r"^<!-- runnable -->\n```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
# the README's two commands, exactly (CI and users copy them)
TWO_COMMANDS = (
    "bash scripts/setup.sh && .venv/bin/ckptsel quickstart --out ckptsel-quickstart",
    "bash scripts/setup.sh --dev && .venv/bin/python -m pytest -q",
)


def _tree() -> dict[tuple[str, ...], set[str]]:
    """Every command path of the app (``("ingest", "lm-eval")``) and the options it takes."""
    out: dict[tuple[str, ...], set[str]] = {}

    def walk(command, path: tuple[str, ...]) -> None:
        opts = {o for p in command.params for o in (*p.opts, *getattr(p, "secondary_opts", ()))}
        out[path] = opts | {"--help"}
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, (*path, name))

    walk(typer.main.get_command(app), ())
    return out


TREE = _tree()


def _command_lines(text: str) -> list[str]:
    """``ckptsel ...`` command lines in a page's code blocks (continuations joined, comments cut)."""
    lines = []
    for block in FENCE.findall(text):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split(" # ")[0].strip()
            m = re.search(r"(?:^|[\s;&(`])(?:\S*/)?ckptsel ((?:[a-z][a-z-]*)(?: .*)?)$", line)
            if m and not line.startswith(("from ", "import ", "#")):
                lines.append("ckptsel " + m.group(1))
    return lines


def _resolve(words: list[str]) -> tuple[tuple[str, ...], list[str]]:
    path: tuple[str, ...] = ()
    while words and (*path, words[0]) in TREE:
        path = (*path, words.pop(0))
    return path, words


def _documented() -> list[tuple[str, str]]:
    sources = [*PAGES, REPO / "README.md"]
    return [
        (str(p.relative_to(REPO)), line) for p in sources for line in _command_lines(p.read_text())
    ]


def test_every_documented_command_and_option_exists():
    documented = _documented()
    assert len(documented) > 50  # the parser finds the pages' commands
    bad = []
    for where, line in documented:
        words = line.split()[1:]
        path, rest = _resolve(words)
        if not path and not (rest and rest[0] in ("--version", "-V", "--help")):
            bad.append(f"{where}: {line}: no such command")
            continue
        for token in rest:
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", token):
                if opt not in TREE[path]:
                    bad.append(f"{where}: {line}: ckptsel {' '.join(path)} has no {opt}")
    assert not bad, "\n".join(bad)


def test_every_command_is_documented():
    text = "\n".join(p.read_text() for p in PAGES if p.name != "cli.md")
    missing = [" ".join(path) for path in TREE if path and f"ckptsel {' '.join(path)}" not in text]
    assert not missing, f"commands no docs page mentions: {missing}"


def test_runnable_blocks_run(tmp_path, monkeypatch, capsys):
    blocks = [(p, b) for p in PAGES for b in RUNNABLE.findall(p.read_text())]
    assert blocks, "no <!-- runnable --> block in docs/"
    monkeypatch.chdir(tmp_path)
    for page, block in blocks:
        for line in block.splitlines():
            line = line.split(" # ")[0].strip()
            if not line:
                continue
            assert line.startswith("ckptsel "), (
                f"{page}: runnable blocks hold ckptsel commands only"
            )
            try:
                main(shlex.split(line)[1:])
            except SystemExit as exc:
                assert exc.code in (0, None), (
                    f"{page}: {line}: exit {exc.code}\n{capsys.readouterr()}"
                )
    out = capsys.readouterr().out
    assert "ok results:" in out and (tmp_path / "sim-results" / "report.html").is_file()


def test_readme_is_short_and_keeps_its_two_commands():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    blocks = FENCE.findall(readme)
    for command in TWO_COMMANDS:
        assert f"{command}\n" in blocks, command
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (REPO / link).is_file(), link
    assert (DOCS / "assets" / "report.png").is_file()


def _hook():
    spec = importlib.util.spec_from_file_location("docs_hook", DOCS / "_hooks" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_reference_covers_the_code():
    hook = _hook()
    cli = hook.cli()
    for path in TREE:
        if path:
            assert f"## `ckptsel {' '.join(path)}`" in cli, path
    assert "[log]" in cli and "<step>" not in cli.replace("`", "")  # escaped outside code
    from ckptsel.records import schema
    from ckptsel.study.spec import SCHEMA

    keys = hook.study_keys()
    assert all(f"`{k}`" in keys for table in SCHEMA.values() for k in table)
    records = hook.records_schema()
    assert all(f"`{c}`" in records for c in schema.GENERATION_COLUMNS | schema.NLL_COLUMNS)
    page = hook.on_page_markdown((DOCS / "reference" / "cli.md").read_text(), None, None, None)
    assert "<!-- generated" not in page


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_pages_link_to_pages_that_exist(page):
    """The relative links of every page (mkdocs build --strict checks anchors too, in CI)."""
    for link in re.findall(r"\]\(([^)#:]+\.(?:md|png))(?:#[^)]*)?\)", page.read_text()):
        assert (page.parent / link).resolve().is_file(), f"{page}: {link}"
