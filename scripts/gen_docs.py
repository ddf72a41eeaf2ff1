"""Write the reference pages' generated parts (the CLI, the ``--json`` keys, the ``study.toml``
and task-file keys, the records columns, the tasks) from the code into ``docs/``, between
their ``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` markers, so that a
reader of the repository sees them without building the site.

    python scripts/gen_docs.py           # rewrite the parts that are not current
    python scripts/gen_docs.py --check   # exit 1 and name the pages that are not current

It needs the dev install only (ckptsel and its core dependencies, not the [docs] extra). The
generator is ``docs/_hooks/generate.py``, the same file MkDocs runs as a hook, so the built site
equals the tree; ``tests/project/test_docs.py`` checks that the committed parts are current. Bad markers
are one line naming the page and line (exit 2), and then no page is written.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOOK = REPO / "docs" / "_hooks" / "generate.py"


def load_generator():
    """``docs/_hooks/generate.py`` as a module (docs/ is not a package)."""
    spec = importlib.util.spec_from_file_location("ckptsel_docs_generate", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically (a reader never sees half a page)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _shown(path: Path) -> str:
    """``path`` as the user reads it: relative to the working folder where it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not the usage and then the error
        print(f"{self.prog}: {message} (see --help)", file=sys.stderr)
        raise SystemExit(2)


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="gen_docs.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a page's generated parts are not current")
    parser.add_argument("--docs", type=Path, default=REPO / "docs", help="the docs folder (default: docs/)")
    args = parser.parse_args(argv)
    generator = load_generator()
    try:
        pages = generator.regenerate(args.docs)
    except generator.MarkerError as exc:
        print(f"gen_docs.py: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:  # run by a Python without ckptsel's dependencies
        print(
            f"gen_docs.py: {exc.name or exc} cannot be imported: run it with the project's "
            "environment, .venv/bin/python scripts/gen_docs.py",
            file=sys.stderr,
        )
        return 2
    stale = [page for page, (now, fresh) in pages.items() if now != fresh]
    if args.check:
        for page in stale:
            print(f"{_shown(page)}: its generated parts are not current: run {generator.COMMAND}")
        if not stale:
            print(f"{len(pages)} pages: generated parts current")
        return 1 if stale else 0
    for page in stale:
        _write(page, pages[page][1])
        print(f"wrote {_shown(page)}")
    print(f"{len(pages)} pages: generated parts current ({len(stale)} rewritten)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
