"""The docs site's commands are real: every ``ckptsel ...`` command a page or the README shows
names a command that exists, with options it takes; the blocks marked ``<!-- runnable -->``
are run; every command of the CLI has a page that mentions it; the README stays short and
keeps its two commands; the generated reference covers every command."""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
from pathlib import Path

import pytest
import typer

from ckptsel.cli import app
from ckptsel.cli.app import main

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
RUNNABLE = re.compile(r"^<!-- runnable -->\n```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
# the README's two commands, exactly (CI and users copy them)
TWO_COMMANDS = (
    "bash scripts/setup.sh && .venv/bin/ckptsel quickstart --out ckptsel-quickstart",
    "bash scripts/setup.sh --dev && .venv/bin/python -m pytest -q -n 2 --dist loadfile",
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
    return [(str(p.relative_to(REPO)), line) for p in sources for line in _command_lines(p.read_text())]


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
            assert line.startswith("ckptsel "), f"{page}: runnable blocks hold ckptsel commands only"
            try:
                main(shlex.split(line)[1:])
            except SystemExit as exc:
                assert exc.code in (0, None), f"{page}: {line}: exit {exc.code}\n{capsys.readouterr()}"
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


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", REPO / "scripts" / "gen_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_reference_is_current(monkeypatch):
    """The generated parts committed in docs/reference/ are what the code generates now (a
    reader of the repository sees the current CLI, keys and columns), and every part is in a
    page; regenerated in memory, nothing written, in a narrow colour terminal (the pages must
    not depend on the terminal that wrote them)."""
    hook = _hook()
    for key, value in {"COLUMNS": "20", "FORCE_COLOR": "1", "TERM": "xterm-256color"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NO_COLOR", raising=False)
    pages = hook.regenerate(DOCS)
    assert os.environ["COLUMNS"] == "20" and "NO_COLOR" not in os.environ  # restored after
    stale = []
    for page, (now, fresh) in pages.items():
        if now != fresh:
            old, new = now.splitlines(), fresh.splitlines()
            i = next((i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), min(len(old), len(new)))
            stale.append(
                f"{page.relative_to(REPO)}, line {i + 1}: committed "
                f"{old[i] if i < len(old) else '(end)'!r}, generated {new[i] if i < len(new) else '(end)'!r}"
            )
    assert not stale, "generated reference not current: run python scripts/gen_docs.py\n" + "\n".join(stale)
    named = {name for page, (now, _) in pages.items() for name, _, _ in hook.parts(now, str(page))}
    assert named == set(hook.PARTS), f"parts no page holds: {set(hook.PARTS) - named}"
    assert {p.parent.name for p in pages} == {"reference"}


def test_gen_docs_writes_the_parts_and_check_names_stale_pages(tmp_path, capsys):
    hook = _hook()
    gen = _gen_docs()
    page = tmp_path / "docs" / "reference" / "keys.md"
    page.parent.mkdir(parents=True)
    empty = "# Keys\n\n<!-- generated: study-keys -->\n<!-- end generated: study-keys -->\n\nAfter.\n"
    page.write_text(empty)
    assert gen.main(["--check", "--docs", str(tmp_path / "docs")]) == 1
    out = capsys.readouterr().out
    assert "keys.md: its generated parts are not current: run python scripts/gen_docs.py" in out
    assert page.read_text() == empty  # --check writes nothing
    assert gen.main(["--docs", str(tmp_path / "docs")]) == 0
    written = page.read_text()
    assert written == hook.fill(empty, "keys.md") and hook.study_keys() in written
    assert written.endswith("<!-- end generated: study-keys -->\n\nAfter.\n")
    assert "wrote" in capsys.readouterr().out
    assert gen.main(["--check", "--docs", str(tmp_path / "docs")]) == 0
    assert gen.main(["--docs", str(tmp_path / "docs")]) == 0
    assert page.read_text() == written and sorted(p.name for p in page.parent.iterdir()) == ["keys.md"]
    site = hook.on_page_markdown(written, None, None, None)
    assert "<!-- " not in site and hook.study_keys() in site


def test_docs_hook_warns_when_a_committed_part_is_stale(caplog):
    hook = _hook()
    stale = "<!-- generated: study-keys -->\n\n| old |\n\n<!-- end generated: study-keys -->\n"
    with caplog.at_level("WARNING", logger="mkdocs.hooks.generate"):
        site = hook.on_page_markdown(stale, None, None, None)
    assert "| old |" not in site and hook.study_keys() in site  # the site shows the code's
    assert [r.getMessage() for r in caplog.records] == [
        "page: its generated reference is not what the code generates: run python scripts/gen_docs.py"
    ]


def test_docs_hook_fails_the_build_on_bad_markers_in_one_line():
    exceptions = pytest.importorskip("mkdocs.exceptions", reason="the [docs] extra is not installed")
    hook = _hook()
    with pytest.raises(exceptions.PluginError) as caught:
        hook.on_page_markdown("# T\n<!-- generated: cli -->\n", None, None, None)
    assert str(caught.value) == "page, line 2: <!-- generated: cli --> has no <!-- end generated: cli --> after it"


BAD_PAGES = {
    "no-end": ("<!-- generated: cli -->\nsome text\n", "b.md, line 1: <!-- generated: cli --> has no <!-- end generated: cli -->"),
    "unknown-part": ("<!-- generated: clii -->\n<!-- end generated: clii -->\n", "b.md, line 1: no generated part 'clii'"),
    "end-alone": ("text\n<!-- end generated: cli -->\n", "b.md, line 2: <!-- end generated: cli --> where no part is open"),
    "ends-disagree": (
        "<!-- generated: cli -->\n<!-- end generated: tasks -->\n",
        "b.md, line 2: <!-- end generated: tasks --> where 'cli' is open",
    ),
    "nested": (
        "<!-- generated: cli -->\n<!-- generated: tasks -->\n<!-- end generated: tasks -->\n",
        "b.md, line 2: a generated part starts inside 'cli'",
    ),
    "misspelt": ("<!--generated: cli-->\n", "b.md, line 1: not a marker line"),
    "not-utf8": (b"\xff\xfe<!-- generated: cli -->\n", "b.md: cannot be read as UTF-8 text"),
    "huge": ("x" * 5_000_000 + "\n<!-- generated: tasks -->\n", "b.md, line 2: <!-- generated: tasks --> has no"),
    "fifo": (None, "b.md: not a regular file"),
    "empty-docs": ("", "docs: no page has a <!-- generated: NAME --> part"),
    "no-docs": ("", "missing: no such folder"),
    "docs-is-file": ("", "a.md: not a folder"),
    "unknown-option": ("", "gen_docs.py: unrecognized arguments: --chek"),
}


@pytest.mark.parametrize("case", BAD_PAGES, ids=str)
def test_gen_docs_refuses_bad_markers_in_one_line_and_writes_nothing(case, tmp_path, capsys, monkeypatch):
    gen = _gen_docs()
    docs = tmp_path / "docs"
    (docs / "reference").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    content, message = BAD_PAGES[case]
    good = docs / "reference" / "a.md"  # a stale page the refusal must leave as it is
    good_text = "<!-- generated: study-keys -->\n<!-- end generated: study-keys -->\n"
    bad = docs / "reference" / "b.md"
    if case == "fifo":
        os.mkfifo(bad)
    elif isinstance(content, bytes):
        bad.write_bytes(content)
    elif content:
        bad.write_text(content)
    if case not in ("empty-docs", "no-docs"):
        good.write_text(good_text)
    before = {p: (p.stat().st_mtime_ns, p.is_file() and p.read_bytes()) for p in docs.rglob("*") if p != bad}
    where = {"no-docs": "missing", "docs-is-file": "docs/reference/a.md"}.get(case, "docs")
    for check in ([], ["--check"]):
        args = [*check, "--docs", where, *(["--chek"] if case == "unknown-option" else [])]
        try:
            code = gen.main(args)
        except SystemExit as exc:  # argparse's way out
            code = exc.code
        out, err = capsys.readouterr()
        assert code == 2, (case, out, err)
        assert out == "" and len(err.splitlines()) == 1, err
        assert message in err and "Traceback" not in err, err
    after = {p: (p.stat().st_mtime_ns, p.is_file() and p.read_bytes()) for p in docs.rglob("*") if p != bad}
    assert after == before  # nothing written, no temporary file left


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_pages_link_to_pages_that_exist(page):
    """The relative links of every page (mkdocs build --strict checks anchors too, in CI)."""
    for link in re.findall(r"\]\(([^)#:]+\.(?:md|png))(?:#[^)]*)?\)", page.read_text()):
        assert (page.parent / link).resolve().is_file(), f"{page}: {link}"
