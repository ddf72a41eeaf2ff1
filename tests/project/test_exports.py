"""One front door (issue 49): ``ckptsel`` itself exports the few names users call, and a stage
package's ``__init__`` exports only what other packages import from it.

The counting parses, never imports: every ``src/ckptsel/**/__init__.py``, its exported names
(``__all__``; without one, the public names it imports or defines), and every ``from
ckptsel.<package> import name`` in ``src/ckptsel`` (tests, docs and examples do not count: they
import from the defining module). An exported name that no module outside its package imports
fails :func:`test_no_export_without_an_outside_importer`. The lazy table of the top-level
``__init__`` (``ckptsel._EXPORTS``) counts as an importer of the names it serves.

:data:`PENDING` lists the packages being reworked elsewhere (left alone until the list is
empty), :data:`KEPT` the names exported on purpose without an importer; the test prints both.
A name that left an ``__init__`` is imported from its defining module (CHANGELOG).
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "ckptsel"
MAX_TOP_LEVEL = 25
BEFORE = 510  # names exported across every package __init__ (sub-packages too) before issue 49
# What the stage __init__s export now (issue 49 asks for at most BEFORE // 3): other stages
# import each name from the module that defines it (tests/project/test_architecture.py), so an
# __init__ serves only the front door's names, the records' cache seam and what it defines.
MAX_STAGE_EXPORTS = 52
# packages (and their subpackages) whose __init__s other work is trimming: empty this list
PENDING = ()
# exported with no outside importer, on purpose: (package, name) -> why
KEPT = {
    ("records", "write_unit"): "the records contract's writer for a user's own measurement "
    "(docs/how-to/measure.md: one checkpoint's rows beside upsert_records)",
    ("cli", "app"): "without it ckptsel.cli.app is the submodule: `from ckptsel.cli import app` "
    "would quietly give a module instead of the Typer app",
}


def _packages() -> dict[str, Path]:
    """``{"choose": path, "data.audit": path, ...}``: every package below the root."""
    out = {}
    for p in sorted(PACKAGE.rglob("__init__.py")):
        parts = p.parent.relative_to(PACKAGE).parts
        if parts:
            out[".".join(parts)] = p
    return out


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["ckptsel", *parts])


def _literal_names(node: ast.expr, tree: ast.Module, packages: dict[str, Path], package: str):
    """The strings of an ``__all__`` list/tuple, with ``*NAME`` and ``*mod.__all__`` expanded."""
    out = []
    for elt in getattr(node, "elts", ()):
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
            out.append(elt.value)
        elif isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Name):
            for stmt in tree.body:
                if isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == elt.value.id for t in stmt.targets):
                    out += _literal_names(stmt.value, tree, packages, package)
        elif isinstance(elt, ast.Starred) and isinstance(elt.value, ast.Attribute):
            sub = f"{package}.{elt.value.value.id}"
            out += exported(sub, packages)
    return out


def exported(package: str, packages: dict[str, Path] | None = None) -> list[str]:
    """The names ``ckptsel.<package>`` exports: its ``__all__``, else its public names."""
    packages = packages or _packages()
    tree = ast.parse(packages[package].read_text(encoding="utf-8"))
    for stmt in tree.body:
        targets = getattr(stmt, "targets", None) or [getattr(stmt, "target", None)]
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return _literal_names(stmt.value, tree, packages, package)
    names = []
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module != "__future__":
            names += [a.asname or a.name for a in stmt.names]
        elif isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
            names.append(stmt.name)
        elif isinstance(stmt, ast.Assign):
            names += [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    return [n for n in names if not n.startswith("_")]


def top_level_table() -> dict[str, str]:
    """``ckptsel._EXPORTS``, read from the source: name -> the package that serves it."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    for stmt in tree.body:
        target = getattr(stmt, "target", None) or (getattr(stmt, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id == "_EXPORTS":
            return ast.literal_eval(stmt.value)
    return {}


def _attribute_uses(tree: ast.Module, packages: dict[str, Path]) -> set[tuple[str, str]]:
    """``(package, name)`` for each ``alias.name`` where ``alias`` is a package imported as a
    module (``from ckptsel.records import cache`` then ``cache.prove``; ``import
    ckptsel.records.cache as cache``)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}".removeprefix("ckptsel.")
                if node.module.startswith("ckptsel") and full in packages:
                    aliases[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                full = alias.name.removeprefix("ckptsel.")
                if alias.asname and alias.name.startswith("ckptsel.") and full in packages:
                    aliases[alias.asname] = full
    return {
        (aliases[node.value.id], node.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
    }


def importers() -> dict[tuple[str, str], set[str]]:
    """``{(package, name): {importing module, ...}}`` over ``src/ckptsel``, at any depth."""
    out: dict[tuple[str, str], set[str]] = {}
    packages = _packages()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for package, name in _attribute_uses(tree, packages):
            out.setdefault((package, name), set()).add(module)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
                continue
            package = node.module.removeprefix("ckptsel.")
            if not node.module.startswith("ckptsel.") or package not in packages:
                continue
            for alias in node.names:
                names = exported(package, packages) if alias.name == "*" else [alias.name]
                for name in names:
                    out.setdefault((package, name), set()).add(module)
    for name, home in top_level_table().items():
        out.setdefault((home.removeprefix("ckptsel."), name), set()).add("ckptsel")
    return out


def _outside(module: str, package: str) -> bool:
    inner = f"ckptsel.{package}"
    return module != inner and not module.startswith(inner + ".")


def _pending(package: str) -> bool:
    return package.split(".")[0] in PENDING


def unimported() -> dict[str, list[str]]:
    """``{package: [exported names no module outside it imports]}``, pending packages left out."""
    seen = importers()
    out = {}
    for package in _packages():
        if _pending(package):
            continue
        dead = [
            name
            for name in exported(package)
            if (package, name) not in KEPT and not any(_outside(m, package) for m in seen.get((package, name), ()))
        ]
        if dead:
            out[package] = dead
    return out


def totals() -> dict[str, int]:
    counts = {package: len(exported(package)) for package in _packages()}
    return {
        "top level": len(top_level_table()),
        "stage packages": sum(counts.values()),
        "of which pending": sum(n for p, n in counts.items() if _pending(p)),
        **counts,
    }


def test_the_counts(capsys):
    with capsys.disabled():
        print("\nexported names:", totals())
        print("pending (trimmed elsewhere, to be emptied):", PENDING)
        print("kept without an outside importer:", KEPT)
    assert len(top_level_table()) <= MAX_TOP_LEVEL


def test_no_export_without_an_outside_importer():
    dead = unimported()
    assert not dead, (
        "exported, but no module outside the package imports them (import from the defining "
        "module instead, and drop them from the package's __init__):\n"
        + "\n".join(f"ckptsel.{p}: {', '.join(names)}" for p, names in dead.items())
    )


def test_stage_exports_only_shrink():
    assert not PENDING, f"{PENDING} are pending"
    assert totals()["stage packages"] <= MAX_STAGE_EXPORTS < BEFORE


def test_the_front_door_serves_every_name():
    import ckptsel

    table = top_level_table()
    assert sorted(ckptsel.__all__) == sorted(table)
    assert set(table) <= set(dir(ckptsel))
    for name, home in table.items():
        assert getattr(ckptsel, name) is getattr(importlib.import_module(home), name), name
    assert ckptsel.__version__
    try:
        ckptsel.no_such_name  # noqa: B018
    except AttributeError as err:
        assert "no_such_name" in str(err)
    else:
        raise AssertionError("an unknown name must raise AttributeError")


def test_import_ckptsel_stays_light():
    """The front door is lazy: ``import ckptsel`` loads no stage and no NumPy."""
    code = (
        "import sys, ckptsel\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('ckptsel.') or m == 'numpy')\n"
        "print(' '.join(loaded))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    light = ("_util",)
    heavy = [m for m in out.stdout.split() if m == "numpy" or m.split(".")[1] not in light]
    assert not heavy, heavy


def test_the_checks_see_what_they_count():
    seen = importers()
    assert seen[("workflows", "analyze")] == {"ckptsel"}  # the front door's lazy table
    assert "ckptsel.records.load" in seen[("records.cache", "uncached")]  # `cache.uncached`
    assert _outside("ckptsel.cli.app", "choose") and not _outside("ckptsel.choose.core", "choose")
    assert not _outside("ckptsel.data", "data") and _outside("ckptsel.data", "data.audit")
    assert "select_checkpoint" in exported("workflows") and exported("workflows.advise") == []


def test_a_name_that_left_an_init_is_gone_from_it():
    """No compatibility layer: a trimmed name is an AttributeError on its old package and
    imports from its defining module."""
    for package, home, name in (
        ("ckptsel.choose", "ckptsel.choose.choices", "PoolSubsets"),
        ("ckptsel.trackers", "ckptsel.trackers.base", "read_summary"),
    ):
        assert hasattr(importlib.import_module(home), name), f"{home}.{name}"
        pkg = importlib.import_module(package)
        assert name not in pkg.__all__ and not hasattr(pkg, name), f"{package}.{name}"
    import ckptsel.choose

    try:
        ckptsel.choose.no_such_name  # noqa: B018
    except AttributeError:
        pass
    else:
        raise AssertionError("an unknown name must raise AttributeError")
