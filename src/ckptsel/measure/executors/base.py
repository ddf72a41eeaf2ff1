"""What every executor shares: its settings (:class:`ExecutorConfig`), the unit of work, the
rows it gives back and its progress callback's type, the Ray import with its install hint, and
the storage settings that travel to workers (:func:`storage_env`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ckptsel._util.checks import check_choice, check_int, check_number
from ckptsel.errors import CkptselError
from ckptsel.measure.parts import StepParts
from ckptsel.measure.progress import ProgressEvent
from ckptsel.train.checkpoints import Checkpoint

EXECUTORS = ("local", "ray")
RAY_INSTALL_HINT = "pip install 'ckptsel[ray]' (or pip install 'ray[default]')"
RAY_ADDRESS_ENV = "RAY_ADDRESS"
# where objects are and how to reach them: always forwarded to workers (no secrets here)
STORAGE_ENV = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_PROFILE",
    "AWS_EC2_METADATA_DISABLED",
    "STORAGE_EMULATOR_HOST",
    "GOOGLE_CLOUD_PROJECT",
    "CKPTSEL_CACHE_DIR",
)
# secrets: forwarded only with forward_credentials (a runtime_env is visible in Ray's dashboard).
# fsspec's and gcsfs' own variables are here too: they carry any filesystem argument, keys and
# tokens included (FSSPEC_S3_KEY, FSSPEC_S3_SECRET, FSSPEC_GCS_TOKEN, GCSFS_...)
CREDENTIALS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "GOOGLE_APPLICATION_CREDENTIALS")
CREDENTIALS_ENV_PREFIXES = ("FSSPEC_", "GCSFS_")

WorkUnit = tuple[Checkpoint, StepParts]
NewRows = tuple[list[Any], list[Any]]  # (generation part frames, NLL part frames)
# what an executor's ``run`` gives back per unit: (checkpoint, parts, new rows or None when
# nothing was missing there)
UnitResult = tuple[Checkpoint, StepParts, NewRows | None]
Emit = Callable[[ProgressEvent], None]  # where an executor sends its progress events


@dataclass(frozen=True)
class ExecutorConfig:
    """How and where the units run (validated in ``__post_init__``).

    ``kind``: ``local`` or ``ray``. Ray only: ``address`` of a running cluster (``None``:
    ``$RAY_ADDRESS`` if set, else a local ``ray.init()``); ``workers`` = actors to start
    (0: as many as the cluster's resources hold, at most one per unit); ``num_cpus`` /
    ``num_gpus`` = resources each actor reserves (one actor per GPU: ``num_gpus=1``);
    ``max_retries`` = restarts of a dead actor and retries of its unit before the run stops;
    ``forward_credentials`` = also hand the driver's storage credentials (``AWS_ACCESS_KEY_ID``,
    ..., and every ``FSSPEC_*``/``GCSFS_*`` variable, which may hold keys) to the workers (off:
    each node uses its own, e.g. an instance role or ``~/.aws``; storage settings such as
    ``AWS_ENDPOINT_URL`` always travel, see :func:`storage_env`).
    """

    kind: str = "local"
    address: str | None = None
    workers: int = 0
    num_cpus: float = 1.0
    num_gpus: float = 0.0
    max_retries: int = 3
    forward_credentials: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.forward_credentials, bool):
            raise CkptselError(f"forward_credentials must be true or false, not {self.forward_credentials!r}")
        check_choice(self.kind, "--executor", EXECUTORS)
        check_int(self.workers, "--workers (workers)", low=0)
        check_int(self.max_retries, "--max-retries (max_retries)", low=0)
        check_number(self.num_cpus, "--num-cpus (num_cpus)", low=0)
        check_number(self.num_gpus, "--num-gpus (num_gpus)", low=0)
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
                raise CkptselError(f"executor: unknown setting {unknown[0]!r} (known: {', '.join(sorted(known))})")
            return cls(**dict(value))
        raise CkptselError(f"executor must be 'local', 'ray' or a table of settings, not {value!r}")

    def resolved_address(self) -> str | None:
        """The cluster to join: ``address``, else ``$RAY_ADDRESS``, else ``None`` (local)."""
        return self.address or os.environ.get(RAY_ADDRESS_ENV) or None


def storage_env(forward_credentials: bool = False) -> dict[str, str]:
    """The driver's storage settings that workers need to reach the same URLs (endpoint,
    region, profile name, the node cache folder), plus its credentials and every
    ``FSSPEC_*``/``GCSFS_*`` variable (they may carry keys) only when ``forward_credentials``.
    On a real cluster, workers do not inherit the driver's environment."""
    if not forward_credentials:
        return {k: v for k, v in os.environ.items() if k in STORAGE_ENV}
    return {k: v for k, v in os.environ.items() if k in STORAGE_ENV + CREDENTIALS_ENV or k.startswith(CREDENTIALS_ENV_PREFIXES)}


def import_ray() -> Any:
    """The ``ray`` module, or one clear error saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise CkptselError(f"--executor ray needs the ray package, which is not installed: {RAY_INSTALL_HINT}") from err
    return ray
