"""The tensor math of ``ckptsel average`` (no I/O): the weights of an average, the checks that
checkpoints can be averaged, the mean of full weights and the exact mean of LoRA adapters.

* **mean** of the last ``k`` checkpoints: every source weighs ``1/k``;
* **EMA** of all ``n`` checkpoints in step order (``i = 0 … n-1``):
  ``w_i = decay^(n-1-i) / Σ_j decay^(n-1-j)``, so the last checkpoint weighs most, decay in
  ``(0, 1)``.

A full checkpoint's average is ``Σ w_i θ_i`` per tensor, summed in float32 and stored in the
checkpoints' dtype. A LoRA adapter's average is the weighted mean of the adapters' weight
deltas, exactly, not the mean of their A and B matrices: with ``Δ_i = s B_i A_i`` (``s =
lora_alpha / r``, or ``/ √r`` with rsLoRA), ``Σ w_i Δ_i = s [w_1 B_1 … w_k B_k] [A_1; … ; A_k]``,
an adapter of rank ``k·r`` whose ``lora_alpha`` keeps ``s`` (:func:`averaged_lora_config`).
Tensors of an adapter that are not LoRA factors (``modules_to_save``, biases, trainable token
rows) get the weighted mean. Variants whose update is not ``s B A`` (DoRA, LoRA biases, aLoRA,
…) cannot be averaged so and are refused. torch is imported inside functions only.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ckptsel.errors import CkptselError

if TYPE_CHECKING:
    import torch

MEAN, EMA = "mean", "ema"
# adapter_config.json keys of LoRA variants whose update is not s·B·A: set (truthy), refused
LORA_VARIANTS = (
    "use_dora",
    "lora_bias",
    "use_qalora",
    "use_bdlora",
    "alora_invocation_tokens",
    "velora_config",
    "monteclora_config",
    "arrow_config",
    "kasa_config",
    "target_parameters",
    "megatron_config",
)
# safetensors' dtype names, as torch says them
DTYPES = {"F64": "float64", "F32": "float32", "BF16": "bfloat16", "F16": "float16", "I64": "int64", "I32": "int32", "BOOL": "bool"}
CONFIG_KEYS_IGNORED = ("peft_version",)  # may differ between the checkpoints of one run
LORA_A = re.compile(r"\.(lora_A|lora_embedding_A)(?=\.|$)")
LORA_B = {"lora_A": "lora_B", "lora_embedding_A": "lora_embedding_B"}


# --------------------------------------------------------------------------- weights


def mean_weights(n: int) -> tuple[float, ...]:
    """Each of ``n`` sources weighs ``1/n``."""
    return tuple(1.0 / n for _ in range(n))


def ema_weights(n: int, decay: float) -> tuple[float, ...]:
    """``w_i = decay^(n-1-i) / Σ_j decay^(n-1-j)`` for ``i = 0 … n-1`` (step order): the
    exponential moving average's weights, the last checkpoint weighing most."""
    raw = [decay ** (n - 1 - i) for i in range(n)]
    total = math.fsum(raw)
    return tuple(r / total for r in raw)


def check_decay(decay: float) -> None:
    """An EMA decay is a number in ``(0, 1)``."""
    if not (isinstance(decay, (int, float)) and math.isfinite(decay) and 0.0 < decay < 1.0):
        raise CkptselError(f"--ema {decay}: the decay must be a number between 0 and 1 (exclusive)")


def check_count(k: int, steps: Sequence[int], where: Any) -> None:
    """``k`` sources exist among the run's checkpoints (``steps``) and make an average."""
    if k < 2:
        raise CkptselError(f"{where}: --last {k}: an average needs at least 2 checkpoints")
    if k > len(steps):
        shown = ", ".join(str(s) for s in steps)
        raise CkptselError(f"{where}: --last {k}: the run has only {len(steps)} checkpoint(s) (steps {shown})")


# --------------------------------------------------------------------------- checks


def check_same_tensors(layouts: Mapping[str, Mapping[str, tuple[str, tuple[int, ...]]]], where: Any) -> None:
    """Every source (name -> ``{tensor: (dtype, shape)}``) holds the same tensors, each of the
    same dtype and shape; else one line naming the run and the first difference."""
    (first, ref), *rest = layouts.items()
    for name, layout in rest:
        missing, extra = sorted(set(ref) - set(layout)), sorted(set(layout) - set(ref))
        if missing or extra:
            what = f"lacks {missing[0]}" if missing else f"has {extra[0]}, which {first} lacks"
            raise CkptselError(f"{where}: {name} and {first} hold different tensors ({name} {what}); cannot average them")
        for tensor, meta in ref.items():
            if layout[tensor] != meta:
                raise CkptselError(
                    f"{where}: tensor {tensor} is {_shown(layout[tensor])} in {name} but {_shown(meta)} in {first}; cannot average them"
                )


def _shown(meta: tuple[str, tuple[int, ...]]) -> str:
    return f"{DTYPES.get(meta[0], meta[0])} {list(meta[1])}"


def check_lora_configs(configs: Mapping[str, Mapping[str, Any]], where: Any) -> None:
    """The sources' ``adapter_config.json`` objects agree (all but :data:`CONFIG_KEYS_IGNORED`)
    and describe plain LoRA (no :data:`LORA_VARIANTS`); else one line naming the run."""
    (first, ref), *rest = configs.items()
    for name, cfg in configs.items():
        if cfg.get("peft_type", "LORA") != "LORA":
            raise CkptselError(f"{where}: {name} is a {cfg.get('peft_type')} adapter; only LoRA adapters can be averaged")
        variant = next((key for key in LORA_VARIANTS if cfg.get(key)), None)
        if variant is not None:
            raise CkptselError(
                f"{where}: {name}'s adapter sets {variant}; its update is not s·B·A, so its average is not an adapter: not averaged"
            )
    for name, cfg in rest:
        for key in sorted((set(ref) | set(cfg)) - set(CONFIG_KEYS_IGNORED)):
            if ref.get(key) != cfg.get(key):
                raise CkptselError(
                    f"{where}: {name} and {first} differ in adapter_config.json's {key} ({cfg.get(key)!r} vs {ref.get(key)!r}); "
                    "cannot average them"
                )


def lora_factor_pairs(names: Sequence[str], where: Any) -> dict[str, str]:
    """``{A tensor: its B tensor}`` of an adapter's tensor names; a LoRA tensor that is neither
    (a DoRA magnitude, ...) or an A without its B is refused."""
    pairs = {}
    for name in names:
        m = LORA_A.search(name)
        if m:
            b = name[: m.start(1)] + LORA_B[m.group(1)] + name[m.end(1) :]
            if b not in names:
                raise CkptselError(f"{where}: adapter tensor {name} has no {b}; cannot average it")
            pairs[name] = b
    factors = set(pairs) | set(pairs.values())
    odd = next((n for n in names if "lora_" in n and n not in factors), None)
    if odd is not None:
        raise CkptselError(f"{where}: adapter tensor {odd} is neither a LoRA A nor a B factor; cannot average it exactly")
    return pairs


# --------------------------------------------------------------------------- averages


def weighted_mean(tensors: Sequence[torch.Tensor], weights: Sequence[float], where: Any = "") -> torch.Tensor:
    """``Σ w_i t_i`` summed in float32 (float64 kept; equal weights: the sum over ``k``), in the
    sources' dtype; a tensor that is not floating point (an index, a count) must be equal in
    every source and is kept."""
    import torch

    first = tensors[0]
    if not first.is_floating_point():
        if any(not torch.equal(t, first) for t in tensors[1:]):
            raise CkptselError(f"{where}: a {first.dtype} tensor differs between the checkpoints; cannot average it")
        return first.clone()
    acc_dtype = torch.float64 if first.dtype == torch.float64 else torch.float32
    acc = torch.zeros(first.shape, dtype=acc_dtype)
    equal = len(set(weights)) == 1  # a mean: the sum over k, one rounding fewer
    for w, t in zip(weights, tensors, strict=True):
        acc.add_(t.to(acc_dtype), alpha=1.0 if equal else w)
    return (acc / len(tensors) if equal else acc).to(first.dtype)


def average_lora(adapters: Sequence[Mapping[str, torch.Tensor]], weights: Sequence[float], where: Any = "") -> dict[str, torch.Tensor]:
    """The adapter whose delta is ``Σ w_i Δ_i`` exactly: each A factor the sources' A's stacked
    along the rank (dim 0), each B factor their ``w_i B_i`` side by side (dim 1), in the sources'
    dtype; every other tensor the weighted mean. ``adapters``: the sources' tensors, by name."""
    import torch

    names = list(adapters[0])
    pairs = lora_factor_pairs(names, where)
    out: dict[str, torch.Tensor] = {}
    for a, b in pairs.items():
        out[a] = torch.cat([ad[a] for ad in adapters], dim=0)
        dtype = adapters[0][b].dtype
        out[b] = torch.cat([(ad[b].to(torch.float32) * w).to(dtype) for w, ad in zip(weights, adapters, strict=True)], dim=1)
    factors = set(pairs) | set(pairs.values())
    for name in names:
        if name not in factors:
            out[name] = weighted_mean([ad[name] for ad in adapters], weights, f"{where}: {name}")
    return {name: out[name] for name in names}


def averaged_lora_config(config: Mapping[str, Any], k: int) -> dict[str, Any]:
    """The averaged adapter's ``adapter_config.json``: every rank (``r``, ``rank_pattern``) ×k,
    every ``lora_alpha`` (and ``alpha_pattern``) ×k, or ×√k with rsLoRA (``s = alpha/√r``), so
    each module's scaling ``s`` is the sources'."""
    factor = math.sqrt(k) if config.get("use_rslora") else k
    out = dict(config)
    out["r"] = int(config["r"]) * k
    out["lora_alpha"] = _times(config.get("lora_alpha", 8), factor)
    out["rank_pattern"] = {key: int(r) * k for key, r in (config.get("rank_pattern") or {}).items()}
    out["alpha_pattern"] = {key: _times(a, factor) for key, a in (config.get("alpha_pattern") or {}).items()}
    return out


def _times(value: Any, factor: float) -> int | float:
    product = float(value) * factor
    return int(product) if isinstance(factor, int) and float(value).is_integer() else product
