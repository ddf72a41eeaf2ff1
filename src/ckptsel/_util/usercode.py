"""A user's own code, named on purpose: ``file.py:function`` resolved against a folder, read
and hashed without importing, imported only when it is about to run, and whatever it raises
(``SystemExit`` too) turned into one line naming it. A task file's scorer
(:mod:`ckptsel.data.answers.rules`) and a researcher's selection rule
(:mod:`ckptsel.choose.rules`) both come through here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

FILE_FUNCTION_RE = re.compile(r"^([^:]+\.py):([A-Za-z_]\w*)$")
MODULE_FUNCTION_RE = re.compile(r"^([A-Za-z_][\w.]*):([A-Za-z_]\w*)$")


def one_line(err: BaseException) -> str:
    """``Type: message`` of an exception raised by user code, on one line, at most 200 chars."""
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text[:200]}" if text else type(err).__name__


def code_path(spec: Any, base: str | Path, what: str, owner: str | None, example: str = "file.py:function") -> tuple[Path, str]:
    """``(file, function)`` of ``spec`` (``"file.py:function"``): the file a path relative to the
    folder ``base``. When ``owner`` (e.g. ``"task file"``) names the file that named the code, the
    code must be a file inside that file's folder once links are followed (a shared file cannot
    reach out); without one (a command-line option) any path the user typed is theirs. The file is
    not imported here. Anything else is one line starting with ``what`` (``"[answer] scorer"``)."""
    if not isinstance(spec, str) or not spec.strip():
        raise CkptselError(f"{what}: write it as {example!r}, got {spec!r}")
    found = FILE_FUNCTION_RE.fullmatch(spec.strip())
    if not found:
        module = MODULE_FUNCTION_RE.fullmatch(spec.strip())
        named_by = f"a {owner}" if owner else "a name"
        hint = f" (a module is never imported from {named_by} alone; a {example.split(':')[0]} beside it may import one)" if module else ""
        beside = f"beside the {owner}" if owner else "named by its path"
        raise CkptselError(f"{what} {spec!r}: write it as {example!r}, a Python file {beside}{hint}")
    relative, name = found.groups()
    folder = Path(base or ".").resolve()
    if owner:
        place = f"the {owner}'s folder"
        escapes = Path(relative).is_absolute() or relative.startswith(("/", "\\", "~"))
        if escapes or ".." in Path(relative).parts:
            raise CkptselError(f"{what} {spec!r}: the file must be a relative path inside {place} {folder}")
    target = (folder / Path(relative).expanduser()).resolve()
    if owner and not target.is_relative_to(folder):
        raise CkptselError(f"{what} {spec!r}: {relative} leads outside {place} {folder} (a link)")
    if not target.is_file():
        raise CkptselError(f"{what} {spec!r}: no file {target if not owner else folder / relative}")
    return target, name


def import_function(path: Path, name: str, spec: str, what: str) -> Callable[..., Any]:
    """The function ``name`` of the Python file ``path``, imported now. Whatever the file raises
    while importing (``SystemExit`` too; not ``KeyboardInterrupt``) is one line naming ``spec``."""
    module_name = "ckptsel_user_" + hashlib.sha256(str(path).encode()).hexdigest()[:12]
    try:
        loader = importlib.util.spec_from_file_location(module_name, path)
        if loader is None or loader.loader is None:
            raise ImportError(f"{path.name} is not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[module_name] = module  # as an import does (dataclasses, pickling)
        loader.loader.exec_module(module)
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # SystemExit included: user code never ends the command
        sys.modules.pop(module_name, None)
        raise CkptselError(f"{what} {spec!r}: importing {path.name} raised {one_line(err)}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise CkptselError(f"{what} {spec!r}: {path.name} has no function {name!r}")
    return function


def file_digest(path: Path, length: int = 64) -> str:
    """SHA-256 (hex, first ``length`` characters) of a file's bytes: an edited file is other code."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:length]
