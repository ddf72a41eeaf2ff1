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
    DEFAULT_LR,
    DEFAULT_SEEDS,
    LORA_TARGETS,
    Configuration,
    Study,
    configuration_and_seed,
    configurations_toml,
    default_configuration,
    final_steps,
    resolve_model,
    seed_of,
    trajectory_name,
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
from ckptsel.study.spec import (
    SCHEMA,
    STATE_DIR,
    ExternalConfiguration,
    PoolSplit,
    StudySpec,
    load_spec,
    load_study,
)

__all__ = [
    "before_training",
    "check_protocol",
    "freeze",
    "protocol_analysis",
    "protocol_json",
    "protocol_path",
    "protocol_status",
    "read_protocol",
    "DEFAULT_LR",
    "DEFAULT_SEEDS",
    "LORA_TARGETS",
    "SCHEMA",
    "STATE_DIR",
    "Configuration",
    "ExternalConfiguration",
    "PoolSplit",
    "Study",
    "StudySpec",
    "configuration_and_seed",
    "default_configuration",
    "configurations_toml",
    "final_steps",
    "load_spec",
    "load_study",
    "resolve_model",
    "seed_of",
    "trajectory_name",
]
