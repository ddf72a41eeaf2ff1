"""Integrations with the tools users train with: Hugging Face ``Trainer`` callbacks that record
every checkpoint as it is saved (:class:`RecordingCallback`) and keep a choice up to date
(:class:`SelectionCallback`), in :mod:`~ckptsel.integrations.hf_trainer`.

Importing this package imports ``transformers`` (the callbacks subclass ``TrainerCallback``).
"""

from __future__ import annotations

from ckptsel._moved import moved_attribute
from ckptsel.integrations.hf_trainer import RecordingCallback, SelectionCallback

__all__ = ["RecordingCallback", "SelectionCallback"]


def __getattr__(name: str):
    """A name this ``__init__`` no longer exports (issue 49): its defining module's, for one
    release, with a DeprecationWarning (:data:`ckptsel._moved.MOVED_NAMES`)."""
    return moved_attribute(__name__, name)
