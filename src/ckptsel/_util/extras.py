"""The optional packages a command needs, said in one line: a command that trains, measures or
loads a model needs the ``[ml]`` extra (torch, transformers, peft, ...); without it the analysis
still runs. :func:`missing_ml` tells (without importing anything) whether those packages are
there; :func:`require_ml` refuses before a command writes anything; :func:`missing_module_line`
turns a :class:`ModuleNotFoundError` that got as far as the command line into its one line."""

from __future__ import annotations

import importlib.util

from ckptsel.errors import CkptselError

__all__ = ["ML_HINT", "ML_PACKAGES", "missing_ml", "missing_module_line", "require_ml"]

ML_HINT = "pip install 'ckptsel[ml]' (install your platform's torch build first: the CPU build on a machine without a GPU)"
# what a command that trains or measures imports first; the rest of [ml] comes with them
ML_PACKAGES = ("torch", "transformers")
# every import name of the [ml] extra (a ModuleNotFoundError for one of them is [ml]'s)
ML_MODULES = frozenset({"torch", "transformers", "peft", "tokenizers", "safetensors", "accelerate"})
# ckptsel's own dependencies (pyproject.toml): missing only from a broken or --no-deps install
CORE_MODULES = {"jinja2": "jinja2", "markupsafe": "markupsafe", "math_verify": "math-verify"}


def missing_ml() -> list[str]:
    """The :data:`ML_PACKAGES` not installed (found without importing them)."""
    missing = []
    for name in ML_PACKAGES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it, a half-removed package
            found = False
        if not found:
            missing.append(name)
    return missing


def require_ml(what: str) -> None:
    """Refuse ``what`` (e.g. ``"ckptsel measure"``) in one line naming the extra to install
    when :func:`missing_ml` finds a package missing."""
    missing = missing_ml()
    if missing:
        raise CkptselError(f"{what} needs {' and '.join(missing)}, not installed: {ML_HINT}")


def missing_module_line(err: ModuleNotFoundError, what: str) -> str | None:
    """The one line for a package ``what`` needed and did not find (``None`` for a module of
    ckptsel itself, or one with no name: a bug, not an install to fix)."""
    name = (err.name or "").split(".")[0]
    if not name or name == "ckptsel":
        return None
    if name in ML_MODULES:
        return f"{what} needs {name}, not installed: {ML_HINT}"
    if name in CORE_MODULES:
        return (
            f"{what} needs {name}, one of ckptsel's dependencies, not installed: "
            f"pip install {CORE_MODULES[name]} (or reinstall ckptsel with its dependencies)"
        )
    return f"{what} needs the Python package {name!r}, not installed (pip install it)"
