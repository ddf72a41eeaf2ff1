"""The study file: what is trained, on what, with which seeds, and how it is measured and
analysed.

* :mod:`~ckptsel.study.configuration` — :class:`Configuration` (everything that defines a
  trajectory but its seed), :class:`Study` (the trained part), ``[[configurations]]`` as TOML;
* :mod:`~ckptsel.study.spec` — :class:`StudySpec`, a whole study for ``ckptsel run`` (schema 2,
  validated key by key; a schema-1 file is refused, saying how to write it);
* :mod:`~ckptsel.study.protocol` — the protocol frozen before training (``ckptsel protocol
  freeze``) and its check.
"""

from __future__ import annotations

from ckptsel.study.spec import load_study

__all__ = ["load_study"]
