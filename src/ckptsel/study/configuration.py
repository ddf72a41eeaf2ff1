"""What is trained: :class:`Configuration` (everything that defines a trajectory but its seed),
:class:`Study` (the trained part of a study file), and ``[[configurations]]`` written as TOML.

A study is the unit a person hands to ``ckptsel train``; keeping every setting in one TOML
file (written back into the study directory) is what makes a run reproducible and lets the
analysis check each trajectory's expected final step (SPEC §2, §11). The file itself
(``schema = 2``) is read by :mod:`ckptsel.study.spec`; a ``[[configurations]]`` table holds a
:class:`Configuration`'s fields::

    [[configurations]]
    name = "lora-r8"
    adaptation = "lora"              # lora | full
    rank = 8
    alpha = 16
    lr = 2e-4                        # default 2e-4 (lora) / 2e-5 (full)
    steps = 500                      # or: epochs = 3
    save_every = 25
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ckptsel._util.checks import MAX_STEP
from ckptsel._util.locations import Location, as_location, is_url
from ckptsel.errors import CkptselError

MAX_CHECKPOINTS = 10_000  # per trajectory: each one is measured

DEFAULT_LR = {"lora": 2e-4, "full": 2e-5}
_NAME_RE = re.compile(r"[A-Za-z0-9_+][A-Za-z0-9._+-]{0,99}")
DEFAULT_SEEDS = (42, 43, 44)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Configuration:
    """Everything that defines a trajectory except its seed (SPEC §1)."""

    name: str
    adaptation: str = "lora"
    rank: int = 8
    alpha: float = 16.0
    lr: float | None = None
    steps: int | None = None
    epochs: float | None = None
    save_every: int = 25
    batch_size: int = 32  # effective batch = micro_batch x gradient accumulation
    micro_batch: int = 8
    max_length: int = 512
    warmup_ratio: float = 0.05
    weight_decay: float = 0.0
    target_modules: tuple[str, ...] = LORA_TARGETS

    def __post_init__(self) -> None:
        where = f"configuration {self.name!r}"
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise CkptselError(
                f"{where}: a name is 1-100 letters, digits, '.', '_', '+' or '-', not starting "
                "with '.' or '-' (it names folders: <name>-s<seed>)"
            )
        self._check_numbers(where)
        if self.adaptation not in DEFAULT_LR:
            raise CkptselError(f"{where}: adaptation must be 'lora' or 'full', got {self.adaptation!r}")
        if (self.steps is None) == (self.epochs is None):
            raise CkptselError(f"{where}: give exactly one of 'steps' or 'epochs'")
        if self.steps is not None and self.steps < 1:
            raise CkptselError(f"{where}: steps must be >= 1, got {self.steps}")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise CkptselError(f"{where}: epochs must be a finite number > 0, got {self.epochs}")
        if self.save_every < 1:
            raise CkptselError(f"{where}: save_every must be >= 1, got {self.save_every}")
        if self.steps is not None:
            self.check_checkpoints(self.steps, where)
        if self.batch_size < 1 or self.micro_batch < 1 or self.batch_size % self.micro_batch:
            raise CkptselError(f"{where}: batch_size ({self.batch_size}) must be a positive multiple of micro_batch ({self.micro_batch})")
        if self.adaptation == "lora" and self.rank < 1:
            raise CkptselError(f"{where}: rank must be >= 1, got {self.rank}")

    def _check_numbers(self, where: str) -> None:
        """Finite learning rate, alpha, warm-up and weight decay; room for a response token."""
        if self.lr is not None and not (self.lr > 0 and math.isfinite(self.lr)):
            raise CkptselError(f"{where}: lr must be a finite number > 0, got {self.lr}")
        if not (self.alpha > 0 and math.isfinite(self.alpha)):
            raise CkptselError(f"{where}: alpha must be a finite number > 0, got {self.alpha}")
        if not 0 <= self.warmup_ratio <= 1:
            raise CkptselError(f"{where}: warmup_ratio must be in [0, 1], got {self.warmup_ratio}")
        if not (self.weight_decay >= 0 and math.isfinite(self.weight_decay)):
            raise CkptselError(f"{where}: weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if self.max_length < 2:  # the prompt's first token and at least one response token
            raise CkptselError(f"{where}: max_length must be >= 2, got {self.max_length}")

    @property
    def learning_rate(self) -> float:
        """Peak LR: the configured one, else the SPEC §11 default for the adaptation."""
        return float(self.lr) if self.lr is not None else DEFAULT_LR[self.adaptation]

    @property
    def grad_accum(self) -> int:
        return self.batch_size // self.micro_batch

    def total_steps(self, n_examples: int) -> int:
        """Optimizer steps of one trajectory (``epochs`` rounds up to whole steps)."""
        if self.steps is not None:
            return int(self.steps)
        return max(1, math.ceil(float(self.epochs) * n_examples / self.batch_size))

    def check_checkpoints(self, final: int, where: str) -> None:
        """At most :data:`MAX_CHECKPOINTS` checkpoints of at most :data:`MAX_STEP` steps (a
        trajectory of more could not be measured, nor its steps listed)."""
        if final > MAX_STEP:
            raise CkptselError(f"{where}: steps must be <= {MAX_STEP} (int64), got {final}")
        if final // self.save_every > MAX_CHECKPOINTS:
            raise CkptselError(
                f"{where}: {final} steps saved every {self.save_every} make "
                f"{final // self.save_every} checkpoints, more than {MAX_CHECKPOINTS}; raise "
                "save_every or train fewer steps"
            )

    def save_steps(self, n_examples: int) -> list[int]:
        """Checkpoint steps: every ``save_every`` steps and always the final step."""
        final = self.total_steps(n_examples)
        self.check_checkpoints(final, f"configuration {self.name!r}")
        steps = list(range(self.save_every, final + 1, self.save_every))
        if not steps or steps[-1] != final:
            steps.append(final)
        return steps


@dataclass(frozen=True)
class Study:
    """A parsed study file. Paths are absolute (resolved against the TOML's folder); data
    files, ``records_dir`` and a base model may be URLs (:class:`~ckptsel._util.locations.
    Location`; the base model as its string); ``root`` (the work folder) is local."""

    name: str
    root: Path
    base_model: str
    task: str
    train: Path | Location
    validation: Path | Location | None
    test: Path | Location | None
    configurations: tuple[Configuration, ...]
    test_task: str | None = None
    seeds: tuple[int, ...] = DEFAULT_SEEDS
    runs_dir: Path | Location | None = None
    records_dir: Path | Location | None = None
    measure: dict[str, Any] = field(default_factory=dict)

    @property
    def run_root(self) -> Path | Location:
        return self.runs_dir if self.runs_dir is not None else self.root / "runs"

    @property
    def records_root(self) -> Path | Location:
        return self.records_dir if self.records_dir is not None else self.root / "records"

    def trajectories(self) -> list[tuple[str, Configuration, int]]:
        """``(trajectory name, configuration, seed)``; name = ``<configuration>-s<seed>``."""
        return [(trajectory_name(c.name, s), c, s) for c in self.configurations for s in self.seeds]


def trajectory_name(configuration: str, seed: int) -> str:
    return f"{configuration}-s{seed}"


# the seed at the end of a run folder's or trajectory's name: ``-s42``, ``_seed42``, ``-seed-42``
SEED_RE = re.compile(r"(?:^|[-_.])(?:s|seed)[-_]?(\d+)$")


def seed_of(folder: str) -> int | None:
    """The seed in a run folder's name: ``...-s42``, ``..._seed42``, ``...-seed-42``."""
    m = SEED_RE.search(Path(folder).name)
    return int(m.group(1)) if m else None


def configuration_and_seed(trajectory: str) -> tuple[str, int | None]:
    """``(configuration, seed)`` a trajectory's name says, read as ``ckptsel run`` reads run
    folders (:func:`seed_of`) and names trajectories (:func:`trajectory_name`): ``cfgA-s42`` →
    ``("cfgA", 42)``, ``lora_seed7`` → ``("lora", 7)``; a name with no seed at its end (or
    nothing before it) is its own configuration, seed unknown: ``("lora-r8", None)``."""
    m = SEED_RE.search(trajectory)
    if m is None or m.start() == 0:
        return trajectory, None
    return trajectory[: m.start()], int(m.group(1))


def default_configuration(trajectory: str) -> str:
    """The configuration a trajectory belongs to when none is given: its name less the seed at
    its end (:func:`configuration_and_seed`: ``cfgA-s42`` → ``cfgA``), as ``run`` names them and
    ``ingest`` reads them. Seeds of one configuration must share it: the configuration is the
    resampling unit of the main bootstrap (SPEC §4), so seeds recorded as configurations of
    their own would be resampled as if independent (narrower intervals than the data carry)."""
    return configuration_and_seed(trajectory)[0]


def resolve_path(root: Path | Location, value: str | None) -> Path | Location | None:
    """A path a study file names: a URL as a :class:`Location` (``file://``: its local path),
    an absolute path as it is, a relative one against ``root`` (the file's folder: a local
    path, or a URL whose folder the reference is then below)."""
    if value is None:
        return None
    if is_url(value):
        return Location(value)
    p = Path(str(as_location(value)) if value.startswith("file://") else value).expanduser()
    if p.is_absolute():
        return p
    if is_url(root):
        return as_location(root) / p.as_posix()
    return (Path(root) / p).resolve()


def resolve_model(root: Path | Location, value: str) -> str:
    """A local path or URL (absolute, or relative to the study) if it exists there, else a hub
    name."""
    if is_url(value):
        return str(Location(value))
    cand = resolve_path(root, value)
    if cand.exists():
        return str(cand) if is_url(cand) else str(cand.resolve())
    return value


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, (str, Path)):
        return json.dumps(str(v))  # a JSON string is a valid TOML basic string
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


_ALWAYS_WRITTEN = {"name", "adaptation", "rank", "alpha", "lr", "steps", "epochs", "save_every", "batch_size", "micro_batch"}
_LORA_ONLY = {"rank", "alpha", "target_modules"}


def configurations_toml(configurations: Sequence[Configuration]) -> list[str]:
    """``[[configurations]]`` tables (TOML lines; defaults left out), as study files hold them."""
    lines: list[str] = []
    defaults = Configuration(name="x", steps=1)
    for c in configurations:
        lines += ["", "[[configurations]]"]
        for f in fields(Configuration):
            v = getattr(c, f.name)
            if v is None:
                continue
            if f.name not in _ALWAYS_WRITTEN and v == getattr(defaults, f.name):
                continue
            if c.adaptation == "full" and f.name in _LORA_ONLY:
                continue
            lines.append(f"{f.name} = {_toml_value(v)}")
    return lines


def final_steps(study: Study, n_train_examples: int) -> dict[str, int]:
    """Expected final step per trajectory (written to ``final_steps.json``)."""
    return {name: cfg.total_steps(n_train_examples) for name, cfg, _seed in study.trajectories()}
