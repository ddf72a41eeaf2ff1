"""What a study run shows while it works: one log line per stage and trajectory (``Log``), and
on a terminal one live display counting the trajectories (:func:`live`); no progress bars from
transformers (:func:`quiet_transformers`). A log (no terminal) gets lines only, never bar
updates.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

Log = Callable[[str], None]
Advance = Callable[[], None]


def live(console: Any, label: str, total: int) -> AbstractContextManager[Advance]:
    """A live display counting ``total`` trajectories on a terminal ``console`` (a context
    manager yielding ``advance()``); a no-op otherwise (no console, not a terminal, or
    nothing to count)."""
    if not total or console is None or not getattr(console, "is_terminal", False):
        return nullcontext(lambda: None)
    return _bar(console, label, total)


@contextmanager
def _bar(console: Any, label: str, total: int) -> Iterator[Advance]:
    from rich import progress as rp

    with rp.Progress(
        rp.TextColumn(label),
        rp.BarColumn(),
        rp.MofNCompleteColumn(),
        rp.TextColumn("trajectories"),
        rp.TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=total)
        yield lambda: progress.update(task, advance=1)


def quiet_transformers() -> None:
    """No per-load 'Loading weights' bars from transformers: the runner's lines say what is
    happening."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:  # pragma: no cover
        return
    hf_logging.disable_progress_bar()
