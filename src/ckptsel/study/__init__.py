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

from ckptsel.study.configuration import (
    LORA_TARGETS,
    Configuration,
    Study,
    configuration_and_seed,
    configurations_toml,
    default_configuration,
    final_steps,
    seed_of,
)
from ckptsel.study.protocol import (
    before_training,
    check_protocol,
    freeze,
    protocol_analysis,
    protocol_json,
    protocol_path,
    protocol_status,
    read_protocol,
)
from ckptsel.study.spec import STATE_DIR, StudySpec, load_spec, load_study

__all__ = [
    "before_training",
    "check_protocol",
    "freeze",
    "protocol_analysis",
    "protocol_json",
    "protocol_path",
    "protocol_status",
    "read_protocol",
    "LORA_TARGETS",
    "STATE_DIR",
    "Configuration",
    "Study",
    "StudySpec",
    "configuration_and_seed",
    "default_configuration",
    "configurations_toml",
    "final_steps",
    "load_spec",
    "load_study",
    "seed_of",
]
