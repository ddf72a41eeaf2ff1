"""Where checkpoints are measured: this process (``local``) or a Ray cluster (``ray``).

An executor takes the run's *units* — one checkpoint each, with its part cache
(:class:`~ckptsel.measure.parts.StepParts`) — and gives back, unit by unit, the new part rows
it measured (``None`` when the unit was already recorded). It never writes: the driver
(:func:`ckptsel.measure.measure_run`) merges the rows into the parts and writes the records,
one unit at a time, in one place. So records do not depend on the executor, a worker that
dies only costs a retried unit, and a driver killed and re-run continues from what is
recorded.

* ``local``: one :class:`~ckptsel.measure.runner._Measurer` in this process (the base model
  loaded once, LoRA adapters swapped in place), units in checkpoint order.
* ``ray``: long-lived actors (:mod:`ckptsel.measure.ray_executor`), each holding a measurer;
  Ray is an optional extra, imported only here.

Pick one with :class:`ExecutorConfig` (or just ``"local"`` / ``"ray"``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from ckptsel.errors import CkptselError
from ckptsel.measure.checkpoints import Checkpoint
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.parts import StepParts
from ckptsel.measure.progress import ProgressEvent

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = "pip install 'ckptsel[ray]' (or pip install 'ray[default]')"
RAY_ADDRESS_ENV = "RAY_ADDRESS"

Unit = tuple[Checkpoint, StepParts]
NewRows = tuple[list[Any], list[Any]]  # (generation part frames, NLL part frames)


@dataclass(frozen=True)
class ExecutorConfig:
    """How and where the units run (validated in ``__post_init__``).

    ``kind``: ``local`` or ``ray``. Ray only: ``address`` of a running cluster (``None``:
    ``$RAY_ADDRESS`` if set, else a local ``ray.init()``); ``workers`` = actors to start
    (0: as many as the cluster's resources hold, at most one per unit); ``num_cpus`` /
    ``num_gpus`` = resources each actor reserves (one actor per GPU: ``num_gpus=1``);
    ``max_retries`` = restarts of a dead actor and retries of its unit before the run stops.
    """

    kind: str = "local"
    address: str | None = None
    workers: int = 0
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_retries: int = 3

    def __post_init__(self) -> None:
        if self.kind not in EXECUTORS:
            raise CkptselError(f"unknown --executor {self.kind!r}: use local or ray")
        for name, flag, low in (
            ("workers", "--workers", 0),
            ("max_retries", "--max-retries", 0),
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise CkptselError(f"{flag} ({name}) must be an integer >= {low} (got {value!r})")
        for name, flag in (("num_cpus", "--num-cpus"), ("num_gpus", "--num-gpus")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise CkptselError(f"{flag} ({name}) must be a number >= 0 (got {value!r})")
        if self.num_cpus == 0 and self.num_gpus == 0:
            raise CkptselError("--num-cpus and --num-gpus are both 0: an actor needs a resource")

    @classmethod
    def coerce(cls, value: ExecutorConfig | str | Mapping[str, Any] | None) -> ExecutorConfig:
        """``None`` -> local; ``"local"``/``"ray"`` -> that kind with default settings; a
        mapping (a study file's ``executor = {kind = "ray", workers = 4}``) -> its fields."""
        if value is None:
            return cls()
        if isinstance(value, ExecutorConfig):
            return value
        if isinstance(value, str):
            return cls(kind=value)
        if isinstance(value, Mapping):
            known = {f.name for f in fields(cls)}
            unknown = sorted(set(value) - known)
            if unknown:
                raise CkptselError(
                    f"executor: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})"
                )
            return cls(**dict(value))
        raise CkptselError(f"executor must be 'local', 'ray' or a table of settings, not {value!r}")

    def resolved_address(self) -> str | None:
        """The cluster to join: ``address``, else ``$RAY_ADDRESS``, else ``None`` (local)."""
        return self.address or os.environ.get(RAY_ADDRESS_ENV) or None


def import_ray() -> Any:
    """The ``ray`` module, or one clear error saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise CkptselError(
            f"--executor ray needs the ray package, which is not installed: {RAY_INSTALL_HINT}"
        ) from err
    return ray


class LocalExecutor:
    """Units in checkpoint order, measured in this process by one measurer."""

    def __init__(
        self, config: MeasureConfig, ckpts: list[Checkpoint], base: str | None, result: Any
    ) -> None:
        from ckptsel.measure.runner import _Measurer

        self.measurer = _Measurer(config, ckpts, base, result)

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.measurer.__exit__(*exc)

    def run(
        self,
        units: Sequence[Unit],
        trajectory: str,
        configuration: str,
        emit: Callable[[ProgressEvent], None],
    ) -> Iterator[tuple[Checkpoint, StepParts, NewRows | None]]:
        """``(checkpoint, parts, new rows or None when nothing was missing)`` per unit."""
        for ckpt, parts in units:
            emit(ProgressEvent("step", trajectory, step=ckpt.step, total=parts.n_todo))
            if not parts.n_todo:
                yield ckpt, parts, None
                continue

            def tick(n: int, _step: int = ckpt.step) -> None:
                emit(ProgressEvent("items", trajectory, step=_step, done=n))

            yield ckpt, parts, self.measurer.measure(ckpt, parts, trajectory, configuration, tick)


def open_executor(
    executor: ExecutorConfig | str | None,
    config: MeasureConfig,
    ckpts: list[Checkpoint],
    base: str | None,
    result: Any,
) -> Any:
    """The executor named by ``executor`` (a context manager with ``run``)."""
    ex = ExecutorConfig.coerce(executor)
    if ex.kind == "local":
        return LocalExecutor(config, ckpts, base, result)
    import_ray()
    from ckptsel.measure.ray_executor import RayExecutor

    return RayExecutor(ex, config, ckpts, base, result)
