"""The architecture of ARCHITECTURE.md, enforced.

Data flows one way (``data → train → measure → records → choose → evaluate → stats → report``),
and the tree says so: one package per stage, in :data:`ORDER`, and inside each package its
modules in :data:`SUBORDER`. Every module gets a rank from those two tables; a module may import
only modules of lower rank (a package's ``__init__`` ranks after its own modules). That one rule
forbids backward imports between stages and between the modules of a stage, and it makes an
import cycle impossible; :func:`test_no_import_cycle` checks the cycles on their own, with the
cycle in the message. Function-level imports count like top-level ones.

Besides: other stages import a name from the module that defines it (``from
ckptsel.<stage>.<module> import x``, or a public module itself; the foundation modules are
imported directly, a stage's ``__init__`` only for what it defines); no module imports another's
private ``_name``; the package root holds at most 8 modules; no function is over 100 lines.
A new module must be placed in these tables (and in ARCHITECTURE.md) before the suite passes.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "ckptsel"

# Stages, earlier first: (layer, top-level names of ckptsel in their order)
ORDER: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("errors", "defaults", "_util", "__init__")),
    ("records", ("records",)),
    ("data", ("data",)),
    ("study", ("study",)),
    ("train", ("train",)),
    ("measure", ("measure",)),
    ("ingest", ("ingest",)),
    ("choose", ("choose",)),
    ("results", ("results",)),
    ("stats", ("stats",)),
    ("report", ("report",)),
    ("trackers", ("trackers",)),
    ("workflows", ("workflows",)),
    ("sim", ("sim",)),
    ("integrations", ("integrations",)),
    ("cli", ("cli", "__main__")),
)
# The modules of each package, earlier first (a package's __init__ comes after them all).
SUBORDER: dict[str, tuple[str, ...]] = {
    "_util": ("blas", "locations", "nodecache", "io", "checks", "rng", "threads", "markdown", "extras", "keys", "usercode"),
    "records": ("schema", "codec", "checks", "units", "cache", "provenance", "weights", "scan", "store", "load"),
    "records.cache": ("memo", "arrays", "pack"),
    "data": ("answers", "taskdef", "tasks", "prompts", "scoring", "pools", "split", "audit"),
    "data.answers": ("numbers", "latex", "gsm8k", "commonsense", "rules"),
    "data.audit": ("grams", "indexes", "findings", "plant", "run", "files"),
    "study": ("configuration", "spec", "protocol"),
    "train": ("checkpoints", "formats", "models", "trajectory", "study", "average", "average_write", "average_read"),
    "measure": (
        "config",
        "tokens",
        "backends",
        "paged",
        "passes",
        "frames",
        "parts",
        "progress",
        "conformance",
        "measurer",
        "executors",
        "provenance",
        "run",
        "watch",
        "cost",
    ),
    "measure.backends": ("swap", "hf", "vllm", "vllm_patch"),
    "measure.executors": ("base", "local", "ray_actors"),
    "ingest": ("mapping", "inflate", "lm_eval", "inspect", "lighteval", "logs"),
    "choose": ("core", "rules", "settings", "choices", "budgets", "frozen", "evaluate"),
    "results": ("estimate", "layout", "summary", "publish"),
    "stats": ("resample", "distributions", "bootstrap", "intervals", "paired", "exact", "noise", "estimates", "winners"),
    "report": ("tables", "figures", "html", "terminal", "build"),
    "trackers": ("base", "mlflow", "wandb", "trackio", "log"),
    "workflows": ("advise", "analysis", "tracking", "watching", "study_run"),
    "workflows.advise": ("comparison", "planning", "log_comparison", "selection"),
    "workflows.study_run": ("progress", "context", "fingerprint", "plan", "stages", "workers", "job"),
    "sim": ("tiny", "embedded", "presets", "simulate", "shape", "quickstart"),
    "integrations": ("hf_trainer",),
    "cli": (
        "output",
        "options",
        "split",
        "audit",
        "measure",
        "watch",
        "ingest",
        "analyze",
        "verify",
        "budgets",
        "simulate",
        "train",
        "average",
        "quickstart",
        "report",
        "selection",
        "compare",
        "plan",
        "run",
        "records",
        "protocol",
        "tasks",
        "app",
    ),
}
FOUNDATION = {"errors", "defaults", "_util", "__init__"}
MAX_ROOT_MODULES = 8
MAX_FUNCTION_LINES = 100


def _modules() -> dict[str, Path]:
    """``{"records.load": path, "records": path-of-__init__, "__init__": root init, ...}``."""
    out = {}
    for p in sorted(PACKAGE.rglob("*.py")):
        parts = list(p.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return name != "__init__" and MODULES[name].name == "__init__.py"


def rank(name: str) -> tuple[int, ...]:
    """The module's place in the flow (raises KeyError when a table does not place it)."""
    parts = name.split(".")
    top = parts[0]
    layer = next(k for k, (_, names) in enumerate(ORDER) if top in names)
    out = [layer, ORDER[layer][1].index(top)]
    for depth in range(1, len(parts)):
        pkg = ".".join(parts[:depth])
        out.append(SUBORDER[pkg].index(parts[depth]))
    if _is_package(name):
        out.append(len(SUBORDER.get(name, ())))  # __init__ after the package's modules
    return tuple(out)


def _resolve(module: str, name: str | None) -> str | None:
    """The ckptsel module an import names (``from module import name``), or None."""
    if not module.startswith("ckptsel"):
        return None
    base = module[len("ckptsel.") :] if module != "ckptsel" else "__init__"
    if name is not None:
        sub = f"{base}.{name}" if base != "__init__" else name
        if sub in MODULES:
            return sub
    return base if base in MODULES else None


def _imports(path: Path):
    """``(line, imported module, names)`` of every ckptsel import in ``path``, at any depth."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = _resolve(node.module, alias.name)
                if target is not None:
                    yield node.lineno, target, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, None)
                if target is not None:
                    yield node.lineno, target, alias.name, None


def _graph() -> dict[str, set[str]]:
    return {m: {t for _, t, _, _ in _imports(p) if t != m} for m, p in MODULES.items()}


def test_every_module_has_a_place():
    unplaced = []
    for name in MODULES:
        try:
            rank(name)
        except (KeyError, ValueError, StopIteration):
            unplaced.append(name)
    assert not unplaced, f"place these modules in ORDER/SUBORDER of tests/project/test_architecture.py and in ARCHITECTURE.md: {unplaced}"
    stale = [f"{pkg}.{sub}" for pkg, subs in SUBORDER.items() for sub in subs if f"{pkg}.{sub}" not in MODULES]
    assert not stale, f"SUBORDER names modules that do not exist: {stale}"


def test_imports_follow_the_flow():
    wrong = []
    for module, path in MODULES.items():
        for line, target, _, _ in _imports(path):
            if target != module and rank(target) > rank(module):
                wrong.append(f"{module} (line {line}) imports {target}, which comes after it")
    assert not wrong, "imports against the data flow:\n" + "\n".join(wrong)


# Who may call the records' speed layers (issue 49), and only through the seam
# (``ckptsel.records.cache``, never its modules): the loaders, the one writer (it keeps the
# packs current), the package's public face (``records.uncached``), and the readers that still
# take pack rows and footers through it (scan: a trajectory's pack or its units; provenance and
# weights: the units' metadata from pack footers, their results in the array cache).
CACHE_SEAM = "records.cache"
CACHE_CALLERS = {"records.load", "records.store", "records", "records.scan", "records.provenance", "records.weights"}


def test_the_records_caches_sit_behind_one_seam():
    wrong = []
    for module, path in MODULES.items():
        if module == CACHE_SEAM or module.startswith(CACHE_SEAM + "."):
            continue
        for line, target, _, _ in _imports(path):
            if target != CACHE_SEAM and not target.startswith(CACHE_SEAM + "."):
                continue
            if not module.startswith("records"):
                wrong.append(f"{module} (line {line}) imports {target}: the caches are private to ckptsel.records")
            elif module not in CACHE_CALLERS:
                wrong.append(f"{module} (line {line}) imports {target}: only {sorted(CACHE_CALLERS)} call the caches")
            elif target != CACHE_SEAM:
                wrong.append(f"{module} (line {line}) imports {target}: through the seam ({CACHE_SEAM}) only")
    assert not wrong, "the records' caches behind one seam:\n" + "\n".join(wrong)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def test_no_import_cycle():
    cycles = _cycles(_graph())
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_no_private_name_crosses_modules():
    wrong = []
    for module, path in MODULES.items():
        for line, target, _, name in _imports(path):
            private = name and name.startswith("_") and not name.startswith("__")
            is_module = target.split(".")[-1] == name  # a package-private module (_util)
            if private and not is_module and target != module:
                wrong.append(f"{module} (line {line}) imports {name} from {target}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


def _defined_names(path: Path) -> set[str]:
    """The names a module binds itself at its top level (``def``, ``class``, assignments,
    also under ``if``/``try``), not the names it imports."""
    out: set[str] = set()

    def walk(body):
        for stmt in body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                for target in getattr(stmt, "targets", None) or [stmt.target]:
                    out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(stmt, (ast.If, ast.Try)):
                walk(stmt.body)
                walk(stmt.orelse)
                for handler in getattr(stmt, "handlers", ()):
                    walk(handler.body)

    walk(ast.parse(path.read_text(encoding="utf-8")).body)
    return out


def test_other_stages_import_names_from_their_home():
    """Another stage's name is imported from the module that defines it (``from
    ckptsel.records.load import load_validation``), or a public module is imported itself
    (``from ckptsel.choose import core``): one home per name, never a re-export."""
    wrong = []
    for module, path in MODULES.items():
        stage = module.split(".")[0]
        for line, target, imported_from, name in _imports(path):
            tstage = target.split(".")[0]
            if tstage == stage or tstage in FOUNDATION or name is None:
                continue
            if any(part.startswith("_") for part in target.split(".")):
                wrong.append(f"{module} (line {line}): {target} is private to its stage")
            elif target != imported_from.removeprefix("ckptsel.") and target.endswith(f".{name}"):
                continue  # a module imported as a name
            elif name not in _defined_names(MODULES[target]):
                wrong.append(f"{module} (line {line}): {name} is not defined in {imported_from}")
    assert not wrong, (
        "import another stage's names from the module that defines them (from ckptsel.<stage>.<module> import name):\n" + "\n".join(wrong)
    )


def test_the_package_root_is_small():
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, f"{len(root)} modules at the package root: {root}"


def test_no_function_over_100_lines():
    long = []
    for module, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {n} lines")
    assert not long, "split these functions into the steps they perform:\n" + "\n".join(long)


def test_the_checks_catch_what_they_forbid(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ckptsel.report import write_report\nfrom ckptsel.stats import summarize\nfrom ckptsel.records.load import _Grid\n")
    imports = {(t, n) for _, t, _, n in _imports(bad)}
    assert ("report", "write_report") in imports and ("records.load", "_Grid") in imports
    assert rank("report") > rank("records") > rank("errors")  # records importing report: caught
    assert rank("records.schema") < rank("records.load") < rank("records")
    assert rank("measure.executors.local") > rank("measure.measurer")
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("name", ["records", "data", "choose", "stats", "results", "workflows"])
def test_every_public_name_exists(name):
    pkg = importlib.import_module(f"ckptsel.{name}")
    missing = [n for n in getattr(pkg, "__all__", ()) if not hasattr(pkg, n)]
    assert not missing, f"ckptsel.{name}.__all__ names what it does not define: {missing}"


def _tree_of_the_page() -> set[str]:
    """The modules ARCHITECTURE.md's tree lists (``records/ schema codec cache/{memo, ...}``),
    dotted (``records.schema``, ``records.cache.memo``)."""
    import re

    text = (PACKAGE.parents[1] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    block = text.split("```\nsrc/ckptsel/\n", 1)[1].split("```", 1)[0]
    out, stage = set(), ""
    for line in block.splitlines():
        head = re.match(r"^  ([a-z_]+)/\s+(.*)$", line)
        if head:
            stage, rest = head.group(1), head.group(2)
        elif line.startswith("  ") and not line.startswith("   "):  # the foundation line
            stage, rest = "", line
        else:
            rest = line
        for sub, inner in re.findall(r"([a-z_]+)/\{([^}]*)\}", rest):
            out.update(".".join(filter(None, (stage, sub, m.strip()))) for m in inner.split(","))
            out.add(".".join(filter(None, (stage, sub))))
        for name in re.sub(r"[a-z_]+/\{[^}]*\}", " ", rest).split():
            out.add(".".join(filter(None, (stage, name))))
        if stage:
            out.add(stage)
    return out


def test_the_page_draws_the_modules_the_test_orders():
    ordered = {name for _, names in ORDER for name in names} - {"__init__", "__main__"}
    ordered |= {f"{pkg}.{sub}" for pkg, subs in SUBORDER.items() for sub in subs}
    drawn = _tree_of_the_page()
    assert drawn == ordered, f"ARCHITECTURE.md's tree lacks {sorted(ordered - drawn)} and lists {sorted(drawn - ordered)}"
    page = (PACKAGE.parents[1] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert len(page.splitlines()) <= 60, "ARCHITECTURE.md is one screen"
