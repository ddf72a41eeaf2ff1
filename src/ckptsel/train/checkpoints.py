"""Find and validate the checkpoints of a run before anything is measured or written.

A run directory holds ``checkpoint-<step>/`` folders in the Hugging Face ``Trainer`` layout
(also what TRL, axolotl and LLaMA-Factory write; torchtune's ``epoch_<n>/`` / ``step_<n>/``
with ``layout="torchtune"``): either a PEFT adapter (``adapter_config.json`` + adapter
weights) or a full model (``config.json`` + weights). Everything is checked up front so that
a bad folder stops the job before a single record is touched. The run directory and the base
model may be URLs (``s3://bucket/run``; :mod:`ckptsel._util.locations`): folders are then
listed and weight headers read with ranged GETs, nothing is downloaded here.

For a run still being written (``ckptsel watch``), :func:`checkpoint_readiness` says whether
a folder is complete: its marker (the Trainer's ``trainer_state.json``, written last) parses
with the folder's step, and the files a measurement reads are there and whole. The watcher
adds the last condition, that the folder's listing stayed the same for a settle window
(callbacks that write after the marker, uploads in any order).
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ckptsel._util.checks import MAX_STEP
from ckptsel._util.locations import FileInfo, Location, as_location, is_url
from ckptsel.errors import CkptselError

CHECKPOINT_RE = re.compile(r"^checkpoint-(.+)$")
LAYOUTS = {
    "hf": CHECKPOINT_RE,  # HF Trainer, TRL, axolotl, LLaMA-Factory
    "torchtune": re.compile(r"^(?:epoch|step)_(.+)$"),
}
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MODEL_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint folder: its step, location (a local path or a URL), kind
    (``"adapter"``|``"full"``) and base model (a local folder, a URL or a hub name)."""

    step: int
    path: Location
    kind: str
    base: str | None = None  # adapters only


def _looks_like_hub_id(name: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.\-]*/[\w.\-]+", name)) and not name.startswith(".")


def resolve_base(name: str, run_dir: Path | Location | str, where: Any, given: bool = False) -> str:
    """A base model reference as a usable string: an existing folder (a URL, an absolute
    path, or a relative one: an adapter's ``base_model_name_or_path`` against the run
    directory, as documented, else against the current directory, where a trainer launched
    from here wrote it; a ``given`` one, ``--base``, against the current directory first) or,
    failing that, something shaped like a hub id. An adapter's relative name that is a
    folder both ways, two different folders, is refused in one line naming both."""
    run = as_location(run_dir)
    if is_url(name):
        cands = [Location(name)]
    elif Path(name).expanduser().is_absolute():
        cands = [Location(Path(name).expanduser())]
    else:
        here, there = Location(Path(name)), run / name
        cands = [here, there] if given else [there, here]
    found = [(c, str(c.local.resolve()) if c.is_local else str(c)) for c in cands if c.is_dir()]
    if not given and len(found) == 2 and found[0][1] != found[1][1]:
        raise CkptselError(
            f"{where}: base model {name!r} (base_model_name_or_path) is a folder both in the "
            f"run folder ({found[0][1]}) and in the current directory ({found[1][1]}); pass "
            "--base MODEL_DIR to say which"
        )
    for cand, shown in found[:1]:
        if not (cand / "config.json").exists():
            raise CkptselError(f"{where}: base model folder {cand} has no config.json")
        return shown
    if _looks_like_hub_id(name) and not Path(name).is_absolute():
        return name
    raise CkptselError(f"{where}: base model {name!r} not found (base_model_name_or_path); pass --base MODEL_DIR")


def _read_json(file: Location) -> Any:
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise CkptselError(f"{file}: not valid JSON ({err})") from err


def inspect_checkpoint(path: Path | Location | str, step: int, run_dir: Path | Location | str, base: str | None) -> Checkpoint:
    """Validate one folder and say what it holds; ``base`` overrides the adapter's own."""
    path = as_location(path)
    names = {name for name, folder in path.children() if not folder}
    if "adapter_config.json" in names:
        adapter_cfg = path / "adapter_config.json"
        cfg = _read_json(adapter_cfg)
        if not isinstance(cfg, dict):
            raise CkptselError(f"{adapter_cfg}: expected a JSON object")
        if not names & set(ADAPTER_WEIGHTS):
            raise CkptselError(f"{path}: adapter_config.json but no adapter weights ({ADAPTER_WEIGHTS[0]})")
        check_weights(path, ADAPTER_WEIGHTS, names)
        name = base if base is not None else cfg.get("base_model_name_or_path")
        if not name:
            raise CkptselError(f"{adapter_cfg}: field base_model_name_or_path is empty; pass --base MODEL_DIR")
        resolved = resolve_base(str(name), run_dir, adapter_cfg, given=base is not None)
        return Checkpoint(step, path, "adapter", resolved)
    if "config.json" in names:
        _read_json(path / "config.json")
        if not names & set(MODEL_WEIGHTS):
            raise CkptselError(f"{path}: config.json but no model weights ({MODEL_WEIGHTS[0]})")
        check_weights(path, MODEL_WEIGHTS, names)
        return Checkpoint(step, path, "full")
    raise CkptselError(f"{path}: neither a PEFT adapter (adapter_config.json) nor a full model (config.json)")


def check_weights(path: Path | Location | str, names: tuple[str, ...], present: set[str] | None = None) -> None:
    """Open the weight files of a checkpoint folder and check they are whole (before anything
    is measured or written): a ``.safetensors`` header must parse and its tensors must fit in
    the file; sharded weights are checked shard by shard; ``.bin`` files must not be empty.
    ``present``: the folder's file names when already listed."""
    path = as_location(path)
    if present is None:
        present = {name for name, folder in path.children() if not folder}
    for name in names:
        if name not in present:
            continue
        file = path / name
        if name.endswith(".index.json"):
            try:
                index = json.loads(file.read_text(encoding="utf-8"))
                shards = sorted(set(index["weight_map"].values()))
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                raise CkptselError(f"{file}: not a valid weight index ({err})") from err
            for shard in shards:
                if str(shard) not in present:
                    raise CkptselError(f"{file}: shard {shard!r} is missing")
                _check_weight_file(path / str(shard))
        else:
            _check_weight_file(file)


def _safetensors_header(file: Location, size: int) -> tuple[int, Any]:
    """The header length and parsed header of a safetensors file (two ranged reads)."""
    head = file.read_range(0, 8)
    if len(head) < 8:
        raise CkptselError(f"{file}: truncated safetensors file (no header)")
    (n,) = struct.unpack("<Q", head)
    if n > size - 8:
        raise CkptselError(f"{file}: truncated safetensors file (header of {n} bytes, file of {size})")
    return n, json.loads(file.read_range(8, 8 + n).decode("utf-8"))


def _check_weight_file(file: Location) -> None:
    try:
        info = file.info()
        if info is None:
            raise FileNotFoundError(f"no file {file}")
        size = info.size
        if size == 0:
            raise CkptselError(f"{file}: empty weight file")
        if file.suffix != ".safetensors":
            return
        n, header = _safetensors_header(file, size)
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
        raise CkptselError(f"{file}: truncated safetensors file (tensors need {8 + n + end} bytes, the file has {size})")


def layout_pattern(layout: str) -> re.Pattern[str]:
    """The folder-name pattern of a checkpoint layout (``hf`` or ``torchtune``)."""
    if layout not in LAYOUTS:
        raise CkptselError(f"unknown checkpoint layout {layout!r} (known: {', '.join(LAYOUTS)})")
    return LAYOUTS[layout]


def _step(path: Location, digits: str) -> int:
    """The step a checkpoint folder's name gives, or one line when records cannot hold it."""
    step = int(digits)
    if step > MAX_STEP:
        raise CkptselError(
            f"{path}: step {digits[:30]}{'…' if len(digits) > 30 else ''} is beyond the largest "
            f"step records hold ({MAX_STEP}); rename or move this folder"
        )
    return step


def discover_checkpoints(run_dir: Path | Location | str, base: str | None = None, layout: str = "hf") -> list[Checkpoint]:
    """All ``checkpoint-<step>`` folders of ``run_dir`` (``epoch_<n>`` / ``step_<n>`` with
    ``layout="torchtune"``), validated, ascending by step."""
    run_dir = as_location(run_dir)
    pattern = layout_pattern(layout)
    entries = run_dir.children()
    if not entries and not run_dir.is_dir():
        raise CkptselError(f"{run_dir}: run directory not found")
    found: list[Checkpoint] = []
    for name, folder in entries:
        m = pattern.match(name)
        if not m:
            continue
        child = run_dir / name
        if not folder:
            raise CkptselError(f"{child}: checkpoint entry is not a folder")
        if not (m.group(1).isascii() and m.group(1).isdigit()):
            raise CkptselError(f"{child}: checkpoint folder name must be {name[: m.start(1)]}<step> (an integer)")
        found.append(inspect_checkpoint(child, _step(child, m.group(1)), run_dir, base))
    if not found:
        what = "checkpoint-<step>" if layout == "hf" else "epoch_<n> / step_<n>"
        raise CkptselError(f"{run_dir}: no {what} folders found")
    found.sort(key=lambda c: c.step)
    steps = [c.step for c in found]
    if len(set(steps)) != len(steps):
        dup = next(s for s in steps if steps.count(s) > 1)
        raise CkptselError(f"{run_dir}: step {dup} appears twice (e.g. checkpoint-{dup} and a zero-padded twin)")
    return found


# --------------------------------------------------------------------------- a run being written


def checkpoint_readiness(
    folder: Location, step: int, files: Mapping[str, FileInfo], marker: str | None
) -> tuple[bool, str, dict[str, Any]]:
    """Whether a checkpoint folder that a trainer may still be writing is complete:
    ``(ready, why not, the marker's JSON)``. ``files``: the folder's files (name -> size and
    tag) from the caller's listing; ``marker``: the file the trainer writes last (``None``:
    no marker, e.g. torchtune). Ready when the marker parses (a Trainer's ``global_step``
    equal to ``step``) and the files a measurement reads are there and whole (weights parse,
    every shard present). Never raises for a half-written folder: it is just not ready."""
    state: dict[str, Any] = {}
    if marker:
        if marker not in files:
            return False, f"no {marker} yet", state
        try:
            state = json.loads((folder / marker).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return False, f"{marker} is not readable JSON yet", state
        if not isinstance(state, dict):
            return False, f"{marker} is not a JSON object", {}
        if "global_step" in state and state.get("global_step") != step:
            return False, f"{marker} says global_step {state.get('global_step')}, not {step}", state
    if "adapter_config.json" in files:
        weights = ADAPTER_WEIGHTS
    elif "config.json" in files:
        weights = MODEL_WEIGHTS
    else:
        return False, "no adapter_config.json or config.json yet", state
    if not set(files) & set(weights):
        return False, "no weights yet", state
    try:
        check_weights(folder, weights, set(files))
    except CkptselError as err:
        return False, f"weights not whole yet ({err})", state
    return True, "", state


def is_final_checkpoint(state: Mapping[str, Any], step: int, until_step: int | None = None) -> bool:
    """Whether the checkpoint at ``step`` is the run's last: ``step >= until_step`` when given,
    else what the Trainer's state says (``should_training_stop``, as at the last save and on
    early stopping, or ``global_step >= max_steps``)."""
    if until_step is not None:
        return step >= until_step
    control = (state.get("stateful_callbacks") or {}).get("TrainerControl") or {}
    if (control.get("args") or {}).get("should_training_stop"):
        return True
    max_steps = state.get("max_steps") or 0
    return isinstance(max_steps, int) and max_steps > 0 and step >= max_steps


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


def _is_complete_checkpoint(path: Location) -> bool:
    """A checkpoint folder holding loadable weights (adapter or full model)."""
    names = {name for name, _ in path.children()}
    has_adapter = "adapter_config.json" in names and any(n.startswith("adapter_model.") for n in names)
    has_full = "config.json" in names and any(
        n.startswith("model") and (n.endswith(".safetensors") or n.endswith(".bin") or n.endswith(".json")) and n != "config.json"
        for n in names
    )
    return has_adapter or has_full


def checkpoint_steps(run_dir: Path | Location | str) -> list[int]:
    """Steps of the complete ``checkpoint-<step>/`` folders of a run, ascending."""
    run_dir = as_location(run_dir)
    steps = []
    for name, folder in run_dir.children():
        if folder and name.startswith(CHECKPOINT_PREFIX):
            tail = name[len(CHECKPOINT_PREFIX) :]
            if tail.isascii() and tail.isdigit() and _is_complete_checkpoint(run_dir / name):
                steps.append(_step(run_dir / name, tail))
    return sorted(steps)


def _judge_trajectory(run_dir: Path, steps: tuple[int, ...], expected_final_step: int | None) -> tuple[bool, str]:
    """Whether a run holding checkpoints at ``steps`` is a valid trajectory, and why."""
    if not steps:
        return False, f"no complete checkpoint-<step>/ folder in {run_dir}"
    if expected_final_step is None:
        return True, f"final step {steps[-1]}"
    if expected_final_step not in steps:
        return False, (f"lacks its final checkpoint-{expected_final_step} (last is checkpoint-{steps[-1]}); resume with `ckptsel train`")
    extra = [s for s in steps if s > expected_final_step]
    if extra:
        return False, (f"has checkpoints beyond the expected final step {expected_final_step}: {extra}")
    return True, f"complete: final checkpoint-{expected_final_step}"


def trajectory_status(run_dir: str | Path, expected_final_step: int | None = None) -> TrajectoryStatus:
    """Report a trajectory invalid when it lacks its expected final checkpoint (SPEC §2).

    Without an expected step, the largest checkpoint counts as final (valid if any exists).
    """
    run_dir = Path(run_dir)
    steps = tuple(checkpoint_steps(run_dir))
    valid, reason = _judge_trajectory(run_dir, steps, expected_final_step)
    return TrajectoryStatus(run_dir.name, run_dir, steps, expected_final_step, valid, reason)


# --------------------------------------------------------------------------- what was measured

WHOLE_FILE_BYTES = 256 * 2**20  # weight files up to this size are hashed whole
SAMPLES = 64  # larger files: this many evenly spaced chunks of SAMPLE_BYTES (and the tail)
SAMPLE_BYTES = 64 * 2**10
_NOT_WEIGHTS = ("training_args.bin", "optimizer.pt", "scheduler.pt", "scaler.pt")


def weight_files(path: Path | Location | str) -> list[str]:
    """The names of a checkpoint folder's weight files, sorted: the adapter or model weights
    (every shard of an index), else every ``.safetensors`` / ``.bin`` / ``.pt`` / ``.pth`` file
    that is not trainer state (a torchtune folder)."""
    path = as_location(path)
    present = {name for name, folder in path.children() if not folder}
    named = [n for n in ADAPTER_WEIGHTS + MODEL_WEIGHTS if n in present]
    files: set[str] = set()
    for name in named:
        if name.endswith(".index.json"):
            try:
                index = json.loads((path / name).read_text(encoding="utf-8"))
                files.update(str(s) for s in index["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                raise CkptselError(f"{path / name}: not a valid weight index ({err})") from err
        else:
            files.add(name)
    if not named:
        files = {
            n
            for n in present
            if n.endswith((".safetensors", ".bin", ".pt", ".pth")) and n not in _NOT_WEIGHTS and not n.startswith("rng_state")
        }
    return sorted(files)


def weights_fingerprint(path: Path | Location | str) -> str:
    """A content fingerprint of a checkpoint's weights (``sha256:<hex>``): every weight file
    (:func:`weight_files`) by name and size, and its bytes — whole for files up to
    :data:`WHOLE_FILE_BYTES` (every LoRA adapter), else the safetensors header (tensor names,
    dtypes, shapes, offsets) and :data:`SAMPLES` chunks of :data:`SAMPLE_BYTES` at fixed,
    evenly spaced offsets plus the last chunk (about 4 MiB per file, ranged reads on object
    stores). Equal weights always give equal fingerprints (no modification time, no path);
    a checkpoint trained again, or another run's, changes the sampled bytes (training
    changes every tensor), though an edit confined to unsampled bytes of a large file would
    go unseen."""
    path = as_location(path)
    digest = hashlib.sha256()
    for name in weight_files(path):
        file = path / name
        info = file.info()
        if info is None:
            raise CkptselError(f"{file}: weight file not found")
        digest.update(f"{name}\0{info.size}\0".encode())
        try:
            for chunk in _fingerprint_chunks(file, info.size):
                digest.update(chunk)
        except OSError as err:
            raise CkptselError(f"{file}: cannot read weights ({err.strerror or err})") from err
    return "sha256:" + digest.hexdigest()


def _fingerprint_chunks(file: Location, size: int) -> Iterator[bytes]:
    """The bytes of ``file`` that its fingerprint covers (see :func:`weights_fingerprint`)."""
    if size <= WHOLE_FILE_BYTES:
        if file.is_local:
            with open(file.local, "rb") as fh:
                while chunk := fh.read(8 * 2**20):
                    yield chunk
        else:
            yield file.read_bytes()
        return
    head = SAMPLE_BYTES
    if file.suffix == ".safetensors":
        (n,) = struct.unpack("<Q", file.read_range(0, 8))
        head = 8 + min(n, size - 8)
    yield file.read_range(0, head)
    for i in range(SAMPLES):
        start = head + (size - head - SAMPLE_BYTES) * i // max(1, SAMPLES - 1)
        yield file.read_range(max(head, start), max(head, start) + SAMPLE_BYTES)
    yield file.read_range(max(0, size - SAMPLE_BYTES), size)


# the files besides the weights that define what a checkpoint computes from a prompt: its
# adapter or model config, its generation config, its tokenizer and chat template
FUNCTION_FILES = (
    "adapter_config.json",
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "spiece.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)
BASE_PREFIX = "base/"  # an adapter's base model: its files and weights, under this prefix


def function_files(path: Path | Location | str) -> list[str]:
    """The names of a checkpoint folder's files that define its function besides the weights
    (:data:`FUNCTION_FILES`, and any other ``*.jinja`` template), sorted."""
    present = {name for name, folder in as_location(path).children() if not folder}
    return sorted(n for n in present if n in FUNCTION_FILES or n.endswith(".jinja"))


def _file_digests(path: Location, prefix: str = "") -> dict[str, str]:
    out = {}
    for name in function_files(path):
        try:
            blob = (path / name).read_bytes()
        except OSError as err:
            raise CkptselError(f"{path / name}: cannot read ({err.strerror or err})") from err
        out[prefix + name] = "sha256:" + hashlib.sha256(blob).hexdigest()
    return out


def function_digests(ckpt: Checkpoint, bases: dict[str, dict[str, str]] | None = None) -> dict[str, str]:
    """A content digest (``sha256:<hex>``) per file that defines ``ckpt``'s function besides
    its own weights (:func:`function_files`), by name; an adapter's base model adds its files
    and its weights' fingerprint (:func:`weights_fingerprint`) under ``base/`` (a hub name,
    never read here, adds its name). ``bases``: the base models' digests already taken (a
    run's adapters share one base: read once), filled in here."""
    out = _file_digests(ckpt.path)
    if ckpt.kind == "adapter" and ckpt.base:
        bases = {} if bases is None else bases
        if str(ckpt.base) not in bases:
            base = as_location(ckpt.base)
            found = {BASE_PREFIX + "name": "name:" + str(ckpt.base)}
            if base.is_dir():
                found = _file_digests(base, BASE_PREFIX)
                found[BASE_PREFIX + "weights"] = weights_fingerprint(base)
            bases[str(ckpt.base)] = found
        out.update(bases[str(ckpt.base)])
    return out


def files_fingerprint(digests: Mapping[str, str]) -> str:
    """One fingerprint (``sha256:<hex>``) of :func:`function_digests`: equal files (by name
    and content) give equal fingerprints."""
    blob = json.dumps(dict(sorted(digests.items())), separators=(",", ":"))
    return "sha256:" + hashlib.sha256(blob.encode("utf-8")).hexdigest()
