"""Integrations with the tools users train with: Hugging Face ``Trainer`` callbacks that record
every checkpoint as it is saved (:class:`RecordingCallback`) and keep a choice up to date
(:class:`SelectionCallback`), in :mod:`~ckptsel.integrations.hf_trainer`.

Importing this package imports ``transformers`` (the callbacks subclass ``TrainerCallback``).
"""

from __future__ import annotations

from ckptsel.integrations.hf_trainer import RecordingCallback, SelectionCallback

__all__ = ["RecordingCallback", "SelectionCallback"]
