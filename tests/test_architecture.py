"""The layers of ARCHITECTURE.md, enforced: a module imports only from its own layer or earlier ones.

Data flows one way (``data → train → measure → records → choose → evaluate → stats → report``);
the records contract sits low because producers (measure, ingest, the Trainer callbacks) write it
and consumers (choose onwards) read it. Every module must be placed in a layer, so a new module
has to be given a home here (and in ARCHITECTURE.md) before the suite passes.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "ckptsel"

# Earlier layers first. Names are top-level modules or packages of ckptsel.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundation", ("__init__", "errors", "defaults", "io", "analysis")),
    ("records", ("records",)),
    ("data", ("answers", "tasks", "pools", "split", "audit", "tiny", "embedded")),
    ("train", ("study", "train")),
    ("measure", ("measure", "ingest")),
    ("choose", ("rules", "choose")),
    ("evaluate", ("evaluate",)),
    ("stats", ("stats", "results")),
    ("report", ("report", "publish")),
    ("workflows", ("pipeline", "select", "compare", "plan", "simulate", "runner")),
    ("entry points", ("quickstart", "integrations", "cli", "commands", "__main__")),
)
LAYER_OF = {name: k for k, (_, names) in enumerate(LAYERS) for name in names}


def _top(module: str) -> str:
    return module.split(".")[0]


def _imports(path: Path) -> set[str]:
    """Top-level ckptsel modules that ``path`` imports (``from ckptsel import x`` counts x)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ckptsel":
                out |= {a.name for a in node.names if a.name != "__version__"}
            elif node.module.startswith("ckptsel."):
                out.add(_top(node.module[len("ckptsel."):]))
        elif isinstance(node, ast.Import):
            out |= {_top(a.name[len("ckptsel."):]) for a in node.names if a.name.startswith("ckptsel.")}
    return out


def _modules() -> dict[str, Path]:
    return {
        str(p.relative_to(PACKAGE).with_suffix("")).replace("/", "."): p
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def test_every_module_has_a_layer():
    unplaced = sorted({_top(m) for m in _modules()} - set(LAYER_OF))
    assert not unplaced, f"give these modules a layer in tests/test_architecture.py and ARCHITECTURE.md: {unplaced}"


def test_imports_follow_the_layers():
    wrong = []
    for module, path in _modules().items():
        here = LAYER_OF[_top(module)]
        for dep in _imports(path):
            if dep in LAYER_OF and LAYER_OF[dep] > here:
                wrong.append(
                    f"{module} ({LAYERS[here][0]}) imports {dep} ({LAYERS[LAYER_OF[dep]][0]})"
                )
    assert not wrong, "imports against the data flow:\n" + "\n".join(wrong)


def test_the_check_catches_a_backward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from ckptsel.report import write_report\nfrom ckptsel import stats\n")
    assert _imports(bad) == {"report", "stats"}
    assert LAYER_OF["report"] > LAYER_OF["records"]  # so records importing it would be reported
