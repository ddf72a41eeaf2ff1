"""The prompt format a run folder was trained with (:data:`ckptsel.data.FORMAT_FILE`,
``prompt_format.json`` in the trajectory's folder), so that measuring it uses the same format by
construction.

``ckptsel train`` writes it before the first step (a resumed trajectory must keep it); a run
trained elsewhere (a Trainer ``output_dir``) can state its format once by the same file, e.g.
``{"prompt_format": "chat"}`` or ``{"prompt_format": "chat", "system_prompt": "...",
"chat_template_args": {"enable_thinking": false}}``. ``measure``, ``watch`` and ``run`` read it
(:meth:`ckptsel.measure.MeasureConfig.bind_format`).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ckptsel._util.io import write_text
from ckptsel._util.locations import Location, as_location
from ckptsel.data.prompts import FORMAT_FILE, PromptFormat, format_from_dict
from ckptsel.errors import CkptselError


def read_run_format(run_dir: Path | Location | str) -> PromptFormat | None:
    """The format ``run_dir`` records (``None``: it records none); an unreadable or malformed
    file is refused in one line naming it."""
    path = as_location(run_dir) / FORMAT_FILE
    if not path.is_file():
        return None
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise CkptselError(f"{path}: not a readable prompt format record ({exc})") from None
    if len(text) > MAX_FORMAT_CHARS:
        raise CkptselError(f"{path}: {len(text)} characters, too large for a prompt format record (at most {MAX_FORMAT_CHARS})")
    try:
        blob = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        why = " ".join(str(exc).split())[:200]
        raise CkptselError(f"{path}: not a readable prompt format record ({why})") from None
    except RecursionError:
        raise CkptselError(f"{path}: not a prompt format record: JSON nested too deeply") from None
    return format_from_dict(blob, str(path))


MAX_FORMAT_CHARS = 1 << 20  # a prompt format record: its template text and a few keys


def _no_constant(word: str) -> None:
    raise ValueError(f"{word} is not a JSON number")


def write_run_format(run_dir: Path, fmt: PromptFormat) -> Path:
    """Record ``fmt`` in ``run_dir`` (created if needed); a folder that already records another
    format (a trajectory resumed under changed settings) is refused in one line."""
    before = read_run_format(run_dir)
    if before is not None and before.kind == fmt.kind == "chat":  # the file names no template
        before = replace(before, chat_template=fmt.chat_template)
    if before is not None and before.identity != fmt.identity:
        differ = fmt.differences(before, "now", "recorded")
        raise CkptselError(
            f"{Path(run_dir) / FORMAT_FILE}: this trajectory was trained with the prompt format "
            f"{before.describe()}, not {fmt.describe()} (they differ in "
            f"{differ or 'their identity'}); train it into another folder"
        )
    path = Path(run_dir) / FORMAT_FILE
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps(fmt.to_dict(), indent=2, sort_keys=True) + "\n")
    return path
