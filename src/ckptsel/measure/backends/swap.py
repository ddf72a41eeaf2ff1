"""Full-weight checkpoints swapped into the model already in memory, and the swap proven.

A trajectory's full checkpoints share one architecture: loading each into the model (HF) or
engine (vLLM) already running costs a read of its tensors, where a fresh model or engine per
checkpoint costs a start (tens of seconds for vLLM on a GPU). Weight reloads have failed
silently in the wild, so every swap is **proven**: the float64 sums of a few named tensors
read back from the model (:data:`PROOF_TENSORS` of them, spread over the layers) must equal the
same sums of the checkpoint file's tensors cast to the model's dtype, else one line
(:class:`~ckptsel.errors.CkptselError`) stops the run.

A swap needs what a fresh load would give: the same config (:func:`swap_refusal`: every key
but the checkpoint's name, versions and dtype), tensors in ``*.safetensors`` files that, put
through transformers' own load-time weight conversion (an MoE file's per-expert tensors fused
as the model holds them; :func:`model_tensors`), fit the model; otherwise the model is loaded
afresh and the reason is kept (:class:`SwapLog`), for the provenance and the unit's weights
note: a swap never refuses a checkpoint that a fresh load takes.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ckptsel.errors import CkptselError

PROOF_TENSORS = 3  # tensors whose checksums prove a swap
VOLATILE_CONFIG = ("_name_or_path", "transformers_version", "torch_dtype", "dtype")


@dataclass
class SwapLog:
    """What one model or engine did over a run: fresh starts (loads), swaps and their time,
    and why a checkpoint could not be swapped in (``fallbacks``: reason per checkpoint)."""

    starts: int = 0
    start_seconds: float = 0.0
    swaps: int = 0
    averages: int = 0  # of the swaps, averages of checkpoints (recorded at negative steps)
    swap_seconds: float = 0.0
    fallbacks: dict[str, str] = field(default_factory=dict)
    last: str = ""  # how the current full checkpoint got into the model, in words
    pending: str = ""  # why the next start is a fallback

    def started(self, seconds: float) -> None:
        self.starts += 1
        self.start_seconds += seconds
        self.last, self.pending = self.pending or "loaded", ""

    def swapped(self, seconds: float, step: int) -> None:
        self.swaps += 1
        self.averages += step < 0
        self.swap_seconds += seconds
        self.last = f"swapped in place, proven by {PROOF_TENSORS} tensor checksums"

    def fell_back(self, step: int, why: str) -> None:
        self.fallbacks[f"step {step}"] = why
        self.pending = f"loaded afresh: {why}"

    def words(self, engine: str) -> str:
        """E.g. ``vllm engine started once (31.2 s), 9 checkpoints swapped in place, 0.40 s
        each``."""
        times = {1: "once", 2: "twice"}.get(self.starts, f"{self.starts} times")
        text = f"{engine} started {times} ({self.start_seconds:.1f} s)"
        text += swapped_words(self.swaps, self.averages, self.swap_seconds)
        if self.fallbacks:
            why = next(iter(self.fallbacks.values()))
            text += f", {len(self.fallbacks)} loaded afresh ({why})"
        return text


def swapped_words(swaps: int, averages: int, seconds: float) -> str:
    """``, 9 checkpoints swapped in place, 0.40 s each`` (``, 2 checkpoints and 1 average(s)
    swapped ...`` when averages were among them; nothing when nothing was swapped)."""
    if not swaps:
        return ""
    what = f"{swaps - averages} checkpoints" + (f" and {averages} average(s)" if averages else "")
    return f", {what} swapped in place, {seconds / swaps:.2f} s each"


def _config(ref: str | Path) -> dict[str, Any] | None:
    path = Path(str(ref)) / "config.json"
    if not path.is_file():
        return None
    cfg = json.loads(path.read_text(encoding="utf-8"))
    return {k: v for k, v in cfg.items() if k not in VOLATILE_CONFIG}


def weight_files(ref: str | Path) -> list[Path]:
    """The checkpoint's ``*.safetensors`` files (sharded or not; none: ``[]``)."""
    return sorted(Path(str(ref)).glob("*.safetensors"))


def swap_refusal(old: str | Path, new: str | Path) -> str | None:
    """Why ``new`` cannot be swapped into a model loaded from ``old`` (one phrase), or None."""
    a, b = _config(old), _config(new)
    if a is None or b is None:
        return "no config.json"
    if a != b:
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        return f"config differs ({', '.join(keys[:3])})"
    if not weight_files(new):
        return "no safetensors weights"
    return None


def read_tensors(ref: str | Path) -> dict[str, Any]:
    """Every tensor of the checkpoint's safetensors files, by name (on the CPU)."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for path in weight_files(ref):
        tensors.update(load_file(str(path)))
    return tensors


def checksum(tensor: Any, dtype: Any = None) -> float:
    """The float64 sum of ``tensor`` (cast to ``dtype`` first: what the model holds)."""
    import torch

    t = tensor.detach().to("cpu")
    if dtype is not None:
        t = t.to(dtype)
    return float(t.to(torch.float64).sum())


def proof_names(file_shapes: dict[str, tuple[int, ...]], model_shapes: dict[str, tuple]) -> list[str]:
    """Up to :data:`PROOF_TENSORS` tensor names the file and the model share with one shape,
    spread over the sorted list (first, middle, last): different layers, different kinds."""
    both = sorted(n for n, s in file_shapes.items() if model_shapes.get(n) == tuple(s))
    if len(both) <= PROOF_TENSORS:
        return both
    picks = {round(i * (len(both) - 1) / (PROOF_TENSORS - 1)) for i in range(PROOF_TENSORS)}
    return [both[i] for i in sorted(picks)]


def file_checksums(ref: str | Path, model_shapes: dict[str, tuple], dtype: Any) -> dict[str, float]:
    """The checksums (:func:`checksum`, cast to ``dtype``) of the :func:`proof_names` tensors of
    checkpoint ``ref``, read alone from its safetensors files (not the whole checkpoint)."""
    from safetensors import safe_open

    handles = [safe_open(str(path), framework="pt") for path in weight_files(ref)]
    where = {name: h for h in handles for name in h.keys()}  # noqa: SIM118 - no iterator
    shapes = {name: tuple(h.get_slice(name).get_shape()) for name, h in where.items()}
    return {n: checksum(where[n].get_tensor(n), dtype) for n in proof_names(shapes, model_shapes)}


def prove(expected: dict[str, float], got: dict[str, float], where: Any) -> None:
    """Stop (one line) unless every checksum read back equals the checkpoint file's."""
    if not expected:
        raise CkptselError(f"{where}: no weight tensor to prove the swap by")
    bad = [n for n, v in expected.items() if got.get(n) != v]
    if bad:
        n = bad[0]
        raise CkptselError(
            f"{where}: the weights did not swap in ({n}: checksum {got.get(n)!r} in the model, "
            f"{expected[n]!r} in the checkpoint; {len(bad)} of {len(expected)} tensors differ)"
        )


def load_into(model: Any, tensors: dict[str, Any]) -> None:
    """Copy ``tensors`` into the HF ``model``'s parameters and buffers (every one the model's
    state dict names; tied weights may be absent from the file), refusing unknown names."""
    import torch

    own = model.state_dict()
    unknown = sorted(set(tensors) - set(own))
    if unknown:
        raise CkptselError(f"tensor {unknown[0]} of the checkpoint is not in the model")
    with torch.no_grad():
        for name, value in tensors.items():
            own[name].copy_(value)


def _missing_untied(model: Any, names: Iterable[str]) -> list[str]:
    """The model's state-dict entries the file lacks that share no storage with one it has."""
    own = model.state_dict()
    present = {own[n].data_ptr() for n in names if n in own}
    return [n for n, t in own.items() if n not in names and t.data_ptr() not in present]


class _Unfit(ValueError):
    """A checkpoint's tensors that do not fit the model in memory (the message says why)."""


def model_tensors(model: Any, ref: str | Path) -> tuple[dict[str, Any] | None, str]:
    """Checkpoint ``ref``'s tensors under the HF ``model``'s names, as a fresh load would give
    them: through transformers' own weight conversion (``from_pretrained``'s: an MoE file's
    per-expert ``experts.<i>.gate_proj.weight`` fused into the model's ``experts.gate_up_proj``,
    renamed or transposed keys), run on a copy of the model on the meta device; the file's own
    names where that transformers has none. ``(None, why)`` when they do not fit the model (a
    fresh load then; ``why`` goes in the unit's weights note)."""
    try:
        converted = _converted(model, ref)
    except ImportError:  # a transformers without load-time conversion: the file's own names
        converted = read_tensors(ref)
    except _Unfit as err:
        return None, str(err)
    except Exception as err:  # noqa: BLE001 - any failure of the conversion: load afresh
        return None, f"transformers could not convert its tensors ({type(err).__name__})"
    own = model.state_dict()
    unknown = sorted(set(converted) - set(own))
    if unknown:
        return None, f"its tensor {unknown[0]} is not in the model"
    missing = _missing_untied(model, set(converted))
    if missing:
        return None, f"it lacks {missing[0]} ({len(missing)} tensors)"
    bad = [n for n, t in converted.items() if tuple(t.shape) != tuple(own[n].shape)]
    if bad:
        return None, f"its {bad[0]} has shape {tuple(converted[bad[0]].shape)}"
    return converted, ""


def _converted(model: Any, ref: str | Path) -> dict[str, Any]:
    """:func:`model_tensors` through ``transformers.core_model_loading`` (ImportError where
    that transformers has none)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import convert_and_load_state_dict_in_model
    from transformers.modeling_utils import LoadStateDictConfig

    with torch.device("meta"):
        shadow = AutoModelForCausalLM.from_config(model.config, dtype=model.dtype)
    files = [safe_open(str(path), framework="pt") for path in weight_files(ref)]
    lazy = {name: f.get_slice(name) for f in files for name in f.keys()}  # noqa: SIM118
    config = LoadStateDictConfig(dtype=model.dtype, weight_mapping=get_model_conversion_mapping(shadow))
    info, _ = convert_and_load_state_dict_in_model(shadow, lazy, config)
    if info.unexpected_keys:
        raise _Unfit(f"its tensor {sorted(info.unexpected_keys)[0]} is not in the model")
    if info.mismatched_keys:
        name, got, want = sorted(info.mismatched_keys, key=str)[0]
        raise _Unfit(f"its {name} has shape {tuple(got)}, the model's {tuple(want)}")
    if info.conversion_errors:
        raise _Unfit(f"transformers could not convert {next(iter(info.conversion_errors))}")
    return {n: t for n, t in shadow.state_dict().items() if t.device.type != "meta"}


def swap_hf(model: Any, ref: str | Path) -> str:
    """Load checkpoint ``ref``'s tensors (:func:`model_tensors`) into the HF ``model`` and
    prove it (:func:`prove`): ``""``; or why they do not fit the model (it is left untouched:
    load the checkpoint afresh)."""
    tensors, why = model_tensors(model, ref)
    if tensors is None:
        return why
    load_into(model, tensors)
    own = model.state_dict()
    names = proof_names({n: tuple(t.shape) for n, t in tensors.items()}, {n: tuple(t.shape) for n, t in own.items()})
    prove({n: checksum(tensors[n], own[n].dtype) for n in names}, {n: checksum(own[n]) for n in names}, ref)
    return ""


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
