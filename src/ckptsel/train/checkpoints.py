"""Find and validate the checkpoints of a run before anything is measured or written.

A run directory holds ``checkpoint-<step>/`` folders in the Hugging Face ``Trainer`` layout:
either a PEFT adapter (``adapter_config.json`` + adapter weights) or a full model
(``config.json`` + weights). Everything is checked up front so that a bad folder stops the
job before a single record is touched.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

CHECKPOINT_RE = re.compile(r"^checkpoint-(.+)$")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint folder: its step, path, kind (``"adapter"``|``"full"``) and base model."""

    step: int
    path: Path
    kind: str
    base: str | None = None  # adapters only: a local folder or a hub name


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", name)) and not name.startswith(".")


def resolve_base(name: str, run_dir: Path, where: Path) -> str:
    """A base model reference as a usable string: an existing folder (as given, or relative
    to the run directory) or, failing that, something shaped like a hub id."""
    for cand in (Path(name).expanduser(), Path(run_dir) / name):
        if cand.is_dir():
            if not (cand / "config.json").exists():
                raise CkptselError(f"{where}: base model folder {cand} has no config.json")
            return str(cand.resolve())
    if _looks_like_hub_id(name) and not Path(name).is_absolute():
        return name
    raise CkptselError(
        f"{where}: base model {name!r} not found (base_model_name_or_path); pass --base MODEL_DIR"
    )


def inspect_checkpoint(path: Path, step: int, run_dir: Path, base: str | None) -> Checkpoint:
    """Validate one folder and say what it holds; ``base`` overrides the adapter's own."""
    adapter_cfg = path / "adapter_config.json"
    if adapter_cfg.exists():
        try:
            cfg = json.loads(adapter_cfg.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise CkptselError(f"{adapter_cfg}: not valid JSON ({err})") from err
        if not isinstance(cfg, dict):
            raise CkptselError(f"{adapter_cfg}: expected a JSON object")
        if not any((path / w).exists() for w in ADAPTER_WEIGHTS):
            raise CkptselError(
                f"{path}: adapter_config.json but no adapter weights ({ADAPTER_WEIGHTS[0]})"
            )
        check_weights(path, ADAPTER_WEIGHTS)
        name = base if base is not None else cfg.get("base_model_name_or_path")
        if not name:
            raise CkptselError(
                f"{adapter_cfg}: field base_model_name_or_path is empty; pass --base MODEL_DIR"
            )
        return Checkpoint(step, path, "adapter", resolve_base(str(name), run_dir, adapter_cfg))
    if (path / "config.json").exists():
        try:
            json.loads((path / "config.json").read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise CkptselError(f"{path / 'config.json'}: not valid JSON ({err})") from err
        if not any((path / w).exists() for w in MODEL_WEIGHTS):
            raise CkptselError(f"{path}: config.json but no model weights ({MODEL_WEIGHTS[0]})")
        check_weights(path, MODEL_WEIGHTS)
        return Checkpoint(step, path, "full")
    raise CkptselError(
        f"{path}: neither a PEFT adapter (adapter_config.json) nor a full model (config.json)"
    )


def check_weights(path: Path, names: tuple[str, ...]) -> None:
    """Open the weight files of a checkpoint folder and check they are whole (before anything
    is measured or written): a ``.safetensors`` header must parse and its tensors must fit in
    the file; sharded weights are checked shard by shard; ``.bin`` files must not be empty."""
    for name in names:
        file = path / name
        if not file.exists():
            continue
        if name.endswith(".index.json"):
            try:
                index = json.loads(file.read_text(encoding="utf-8"))
                shards = sorted(set(index["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                raise CkptselError(f"{file}: not a valid weight index ({err})") from err
            for shard in shards:
                shard_path = path / str(shard)
                if not shard_path.is_file():
                    raise CkptselError(f"{file}: shard {shard!r} is missing")
                _check_weight_file(shard_path)
        else:
            _check_weight_file(file)


def _check_weight_file(file: Path) -> None:
    import struct

    try:
        size = file.stat().st_size
        if size == 0:
            raise CkptselError(f"{file}: empty weight file")
        if file.suffix != ".safetensors":
            return
        with open(file, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise CkptselError(f"{file}: truncated safetensors file (no header)")
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CkptselError(
                    f"{file}: truncated safetensors file (header of {n} bytes, file of {size})"
                )
            header = json.loads(fh.read(n).decode("utf-8"))
    except OSError as err:
        raise CkptselError(f"{file}: cannot read weights ({err.strerror or err})") from err
    except (ValueError, UnicodeDecodeError) as err:
        raise CkptselError(f"{file}: not a safetensors file (bad header: {err})") from err
    if not isinstance(header, dict):
        raise CkptselError(f"{file}: not a safetensors file (header is not an object)")
    end = 0
    for key, meta in header.items():
        if key == "__metadata__":
            continue
        try:
            end = max(end, int(meta["data_offsets"][1]))
        except (KeyError, TypeError, ValueError, IndexError) as err:
            raise CkptselError(f"{file}: tensor {key!r} has no valid data_offsets") from err
    if 8 + n + end > size:
        raise CkptselError(
            f"{file}: truncated safetensors file (tensors need {8 + n + end} bytes, "
            f"the file has {size})"
        )


def discover_checkpoints(run_dir: Path, base: str | None = None) -> list[Checkpoint]:
    """All ``checkpoint-<step>`` folders of ``run_dir``, validated, ascending by step."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise CkptselError(f"{run_dir}: run directory not found")
    found: list[Checkpoint] = []
    for child in sorted(run_dir.iterdir()):
        m = CHECKPOINT_RE.match(child.name)
        if not m:
            continue
        if not child.is_dir():
            raise CkptselError(f"{child}: checkpoint entry is not a folder")
        if not m.group(1).isdigit():
            raise CkptselError(
                f"{child}: checkpoint folder name must be checkpoint-<step> (an integer)"
            )
        found.append(inspect_checkpoint(child, int(m.group(1)), run_dir, base))
    if not found:
        raise CkptselError(f"{run_dir}: no checkpoint-<step> folders found")
    found.sort(key=lambda c: c.step)
    steps = [c.step for c in found]
    if len(set(steps)) != len(steps):
        dup = next(s for s in steps if steps.count(s) > 1)
        raise CkptselError(
            f"{run_dir}: step {dup} appears twice (e.g. checkpoint-{dup} and a zero-padded twin)"
        )
    return found
STATE_FILE = "trainer_state.json"
CHECKPOINT_PREFIX = "checkpoint-"


# --------------------------------------------------------------------------- status


@dataclass(frozen=True)
class TrajectoryStatus:
    """Which checkpoints a trajectory has, and whether it reached its expected final step."""

    trajectory: str
    run_dir: Path
    steps: tuple[int, ...]
    expected_final_step: int | None
    valid: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "trajectory": self.trajectory,
            "run_dir": str(self.run_dir),
            "steps": list(self.steps),
            "expected_final_step": self.expected_final_step,
            "valid": self.valid,
            "reason": self.reason,
        }


def _is_complete_checkpoint(path: Path) -> bool:
    """A checkpoint folder holding loadable weights (adapter or full model)."""
    if not path.is_dir():
        return False
    names = {p.name for p in path.iterdir()}
    has_adapter = "adapter_config.json" in names and any(
        n.startswith("adapter_model.") for n in names
    )
    has_full = "config.json" in names and any(
        n.startswith("model")
        and (n.endswith(".safetensors") or n.endswith(".bin") or n.endswith(".json"))
        and n != "config.json"
        for n in names
    )
    return has_adapter or has_full


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps of the complete ``checkpoint-<step>/`` folders of a run, ascending."""
    run_dir = Path(run_dir)
    steps = []
    if run_dir.is_dir():
        for p in run_dir.iterdir():
            if p.name.startswith(CHECKPOINT_PREFIX):
                tail = p.name[len(CHECKPOINT_PREFIX) :]
                if tail.isdigit() and _is_complete_checkpoint(p):
                    steps.append(int(tail))
    return sorted(steps)


def trajectory_status(
    run_dir: str | Path, expected_final_step: int | None = None
) -> TrajectoryStatus:
    """Report a trajectory invalid when it lacks its expected final checkpoint (SPEC §2).

    Without an expected step, the largest checkpoint counts as final (valid if any exists).
    """
    run_dir = Path(run_dir)
    steps = tuple(checkpoint_steps(run_dir))
    name = run_dir.name
    if not steps:
        return TrajectoryStatus(
            name,
            run_dir,
            steps,
            expected_final_step,
            False,
            f"no complete checkpoint-<step>/ folder in {run_dir}",
        )
    if expected_final_step is None:
        return TrajectoryStatus(name, run_dir, steps, None, True, f"final step {steps[-1]}")
    if expected_final_step in steps:
        extra = [s for s in steps if s > expected_final_step]
        if extra:
            return TrajectoryStatus(
                name,
                run_dir,
                steps,
                expected_final_step,
                False,
                f"has checkpoints beyond the expected final step {expected_final_step}: {extra}",
            )
        return TrajectoryStatus(
            name,
            run_dir,
            steps,
            expected_final_step,
            True,
            f"complete: final checkpoint-{expected_final_step}",
        )
    return TrajectoryStatus(
        name,
        run_dir,
        steps,
        expected_final_step,
        False,
        f"lacks its final checkpoint-{expected_final_step} "
        f"(last is checkpoint-{steps[-1]}); resume with `ckptsel train`",
    )
