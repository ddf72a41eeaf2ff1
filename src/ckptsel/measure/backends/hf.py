"""Models for measurement: the dtype, one model in memory at a time, the run's tokenizer.

The base model is loaded once per run and LoRA adapters are swapped in place
(``PeftModel.from_pretrained`` for the first, then ``load_adapter`` / ``set_adapter`` /
``delete_adapter``); full checkpoints are loaded one at a time and freed.

In float32 on the CPU, with a base of at most :data:`MERGE_MAX_BYTES`, each adapter is instead
merged into a copy of the untouched base: LoRA's extra matmuls cost a quarter of measurement
time there, and a float32 merge moves values only at rounding level (every item's text and
NLL agree with the unmerged adapter in the tests). The base is never merged into and
unmerged from, so results do not depend on the order checkpoints are measured in. A plain
LoRA adapter (:func:`plain_lora`: ``nn.Linear`` targets, no DoRA, patterns, biases or saved
modules) is merged without PEFT: one working copy of the base is made per run, and per
checkpoint the weights the last adapter changed are copied back from the untouched base and
each target gets ``W += (B @ A) * scaling``, PEFT's own merge, operation for operation (the
same bytes as ``merge_and_unload`` on a fresh copy, pinned by a test), for a fraction of the
cost of a copy of the whole model, PEFT's injection and its import. Any other adapter goes
through PEFT (``merge_and_unload`` on a fresh copy). On GPUs (bfloat16, where a merge would
round the adapter's small update away) adapters stay unmerged.

An adapter whose LoRA sits on a module the model's forward never calls (it reads the weight
directly: ``dt_proj`` in HF's Mamba, FalconMamba and Jamba mixers) is refused in one line when
that LoRA is not zero (:func:`check_adapter_reaches`): unmerged, HF ignores it; merged, it
counts, so the same checkpoint's records would depend on the dtype.

Checkpoints and base models at URLs are loaded from this node's copy
(:func:`ckptsel._util.nodecache.local_ref`: downloaded once per node, checked against the
remote listing on every use), so a Ray actor on a node without the run's disk gets only URLs.
"""

from __future__ import annotations

import functools
import gc
import json
import math
import pickle
import re
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ckptsel._util.nodecache import local_ref
from ckptsel.errors import CkptselError
from ckptsel.measure.backends.swap import SwapLog, swap_hf, swap_refusal, timed
from ckptsel.train.checkpoints import Checkpoint
from ckptsel.train.models import load_tokenizer

MERGE_MAX_BYTES = 4 << 30  # a merged copy beside the base: at most this much more memory


def resolve_dtype(dtype: str, device: str) -> Any:
    """``auto``: float32 on CPU (exact, batch-invariant); bfloat16 on GPUs that have it."""
    import torch

    if dtype == "auto":
        if device.startswith("cuda") and torch.cuda.is_available():
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    table = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if dtype not in table:
        raise CkptselError(f"unknown --dtype {dtype!r}: use auto, float32, bfloat16 or float16")
    return table[dtype]


def _pickles_refused(get: Callable[[Any, Checkpoint], Any]) -> Callable[[Any, Checkpoint], Any]:
    """``get`` with a ``.bin`` weight file that torch's weights-only loader refuses (a pickle of
    more than tensors; it is not run) turned into one line naming the checkpoint."""

    @functools.wraps(get)
    def checked(self: Any, ckpt: Checkpoint) -> Any:
        try:
            return get(self, ckpt)
        except pickle.UnpicklingError as err:
            why = [ln.strip() for ln in str(err).splitlines() if "GLOBAL" in ln.upper()]
            raise CkptselError(
                f"{ckpt.path}: its .bin weights are a pickle that torch's weights-only loader "
                f"refuses, not run ({(why or ['not only tensors'])[0][:160]}); save the "
                "checkpoint as safetensors"
            ) from None

    return checked


class ModelHolder:
    """Keeps at most one model in memory: the base (+ the current adapter), the base and one
    merged copy (float32 CPU), or one full checkpoint. The base is never reloaded for a new
    adapter."""

    def __init__(self, device: str, dtype: Any, swap: bool = True) -> None:
        self.device = device
        self.dtype = dtype
        self.model: Any = None
        self.base: str | None = None  # set while self.model is that base + an adapter
        self.adapter: str | None = None
        self.pristine: Any = None  # the untouched base that adapters are merged into copies of
        self.work: Any = None  # the copy plain LoRA adapters are merged into (plain_lora)
        self.touched: set[str] = set()  # the work copy's weights the last adapter changed
        self.loads = 0  # base/full model loads, for tests and benchmarks
        self.full: str | None = None  # set while self.model is that full checkpoint
        self.swap = swap  # full checkpoints swapped into the model in memory (module doc)
        self.log = SwapLog()

    def _load(self, ref: Any) -> Any:
        from transformers import AutoModelForCausalLM

        self.loads += 1
        t0 = time.perf_counter()
        try:
            model = AutoModelForCausalLM.from_pretrained(local_ref(ref), dtype=self.dtype)
        except (OSError, ValueError) as err:
            raise CkptselError(f"{ref}: cannot load model ({err})") from err
        model = model.to(self.device).eval()
        self.log.started(time.perf_counter() - t0)
        return model

    def free(self) -> None:
        """Drop the model and give its memory back."""
        held = [weakref.ref(m) for m in (self.model, self.pristine, self.work) if m is not None]
        if not held:
            return
        self.model = self.base = self.adapter = self.pristine = self.full = self.work = None
        self.touched = set()
        # models are usually freed right here, by reference counting; a full collection
        # (a quarter second with torch loaded) only when something survived in a cycle
        if any(ref() is not None for ref in held):
            gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    @_pickles_refused
    def get(self, ckpt: Checkpoint) -> Any:
        """The model for ``ckpt``, ready for inference."""
        if ckpt.kind == "full":
            if self.full is not None and self._swapped(ckpt):
                return self.model
            self.free()
            self.model = self._load(ckpt.path)
            self.full = str(local_ref(ckpt.path))
            return self.model
        name = f"step{ckpt.step}"
        if self.pristine is not None and self.base == ckpt.base:
            if name != self.adapter:
                self.model = self._merged(ckpt, name)
            return self.model
        if self.model is None or self.base != ckpt.base:
            self.free()
            base = self._load(ckpt.base)
            if self._merges(base):
                self.pristine, self.base = base, ckpt.base
                self.model = self._merged(ckpt, name)
                return self.model
            from peft import PeftModel  # unmerged adapters (a merged plain LoRA needs no PEFT)

            self.model = PeftModel.from_pretrained(base, local_ref(ckpt.path), adapter_name=name)
            self.model.to(self.device).eval()
            check_adapter_reaches(self.model, name, ckpt.path)
            self.base, self.adapter = ckpt.base, name
            return self.model
        if name != self.adapter:
            old = self.adapter
            self.model.load_adapter(local_ref(ckpt.path), adapter_name=name, torch_device=self.device)
            self.model.set_adapter(name, inference_mode=True)
            self.model.delete_adapter(old)
            self.adapter = name
            self.model.eval()
            check_adapter_reaches(self.model, name, ckpt.path)
        return self.model

    def _swapped(self, ckpt: Checkpoint) -> bool:
        """``ckpt``'s tensors loaded into the full model in memory and proven there
        (:func:`~ckptsel.measure.backends.swap.swap_hf`); False (the reason logged) when its
        config, files or tensors need a fresh load."""
        ref = str(local_ref(ckpt.path))
        if ref == self.full:
            return True
        why = "swapping off (--no-swap)" if not self.swap else swap_refusal(self.full, ref)
        seconds = 0.0
        if not why:  # its tensors that do not fit the model: loaded afresh too, and why
            why, seconds = timed(lambda: swap_hf(self.model, ref))
        if why:
            self.log.fell_back(ckpt.step, why)
            return False
        self.model.generation_config = generation_config(ref)  # its own stop ids
        self.model.config._name_or_path = ref
        self.model.eval()
        self.full = ref
        self.log.swapped(seconds, ckpt.step)
        return True

    def _merges(self, base: Any) -> bool:
        """Merge adapters into copies of ``base``: float32 on the CPU, small enough to copy."""
        import torch

        if self.device != "cpu" or self.dtype != torch.float32:
            return False
        size = sum(p.numel() * p.element_size() for p in base.parameters())
        return size <= MERGE_MAX_BYTES

    def _merged(self, ckpt: Checkpoint, name: str) -> Any:
        """The pristine base with ``ckpt``'s adapter merged in: a plain LoRA adapter
        (:func:`plain_lora`) into the working copy, any other through PEFT into a fresh copy."""
        import copy

        self.model = None  # the previous merged copy goes before the next is made
        ref = local_ref(ckpt.path)
        if self.work is None:
            self.work, self.touched = copy.deepcopy(self.pristine), set()
        plan = plain_lora(ref, self.work)
        if plan is not None:
            self.adapter = None  # until merged and checked
            self.touched = merge_lora(self.work, self.pristine, plan, self.touched)
            check_lora_reaches(self.work, plan, ckpt.path)
            self.adapter = name
            return self.work
        from peft import PeftModel

        self.work, self.touched = None, set()  # not beside a fresh copy
        peft_model = PeftModel.from_pretrained(copy.deepcopy(self.pristine), ref, adapter_name=name)
        check_adapter_reaches(peft_model.eval(), name, ckpt.path)
        self.adapter = name
        return peft_model.merge_and_unload().eval()


# adapter_config.json keys a plain LoRA adapter may set to anything (the rest must be unset:
# None, False, empty); anything else, or a key a newer PEFT adds, goes through PEFT
_PLAIN_KEYS = frozenset(
    {
        "base_model_name_or_path",
        "auto_mapping",
        "revision",
        "peft_version",
        "task_type",
        "inference_mode",
        "init_lora_weights",
        "lora_dropout",
        "target_modules",
        "r",
        "lora_alpha",
        "use_rslora",
        "peft_type",
        "bias",
        "megatron_core",
        "qalora_group_size",
    }
)
_LORA_KEY = re.compile(r"base_model\.model\.(.+)\.lora_([AB])\.weight")


def plain_lora(ref: Any, model: Any) -> dict[str, tuple[Any, Any, float]] | None:
    """A plain LoRA adapter at ``ref`` for the HF ``model`` (``{module name: (A, B,
    scaling)}``, A and B in the model's dtype, as PEFT loads them), or None when PEFT must
    handle it: a config key beyond :data:`_PLAIN_KEYS` set (DoRA, rank or alpha patterns,
    biases, saved modules, layer selection, ...), ``target_modules`` not a list, weights not
    in ``adapter_model.safetensors``, a tensor not a ``lora_A``/``lora_B`` weight of an
    ``nn.Linear`` of its rank, a target module without both, or a target weight tied to
    another. The modules PEFT would wrap (a name equal to or ending in ``.`` + a target) must
    be exactly those the file has tensors for."""
    import torch
    from safetensors.torch import load_file

    folder = Path(str(ref))
    try:
        config = json.loads((folder / "adapter_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        return None
    if config.get("bias", "none") != "none" or not isinstance(config.get("target_modules"), list):
        return None
    if any(v for k, v in config.items() if k not in _PLAIN_KEYS):
        return None
    if not isinstance(config.get("init_lora_weights", True), bool):  # PiSSA, OLoRA, ...: they
        return None  # change the base weights as PEFT injects the adapter
    r, alpha = config.get("r"), config.get("lora_alpha")
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (r, alpha))
    if not numbers or not isinstance(r, int) or r <= 0:
        return None
    if not (folder / "adapter_model.safetensors").is_file():
        return None
    tensors: dict[str, dict[str, Any]] = {}
    for key, value in load_file(str(folder / "adapter_model.safetensors")).items():
        m = _LORA_KEY.fullmatch(key)
        if m is None:
            return None
        tensors.setdefault(m.group(1), {})[m.group(2)] = value
    modules = dict(model.named_modules())
    wanted = config["target_modules"]
    targets = {n for n in modules if n and any(n == t or n.endswith("." + t) for t in wanted)}
    if set(tensors) != targets or not targets:
        return None
    shared: dict[int, int] = {}
    for t in model.state_dict(keep_vars=True).values():
        shared[t.data_ptr()] = shared.get(t.data_ptr(), 0) + 1
    scaling = alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r
    plan = {}
    for name, ab in tensors.items():
        mod = modules[name]
        tied = shared[mod.weight.data_ptr()] > 1
        if type(mod) is not torch.nn.Linear or set(ab) != {"A", "B"} or tied:
            return None
        a, b = ab["A"], ab["B"]
        if tuple(a.shape) != (r, mod.in_features) or tuple(b.shape) != (mod.out_features, r):
            return None
        plan[name] = (a.to(mod.weight.dtype), b.to(mod.weight.dtype), scaling)
    return plan


def merge_lora(model: Any, pristine: Any, plan: dict[str, tuple[Any, Any, float]], touched: set[str]) -> set[str]:
    """Merge a :func:`plain_lora` adapter into ``model``, a copy of ``pristine``: the weights
    of ``touched`` (the last adapter's modules) and of ``plan`` copied back from ``pristine``,
    then ``W += (B @ A) * scaling`` per module, as PEFT's ``merge`` computes it. Returns the
    modules changed (the next call's ``touched``)."""
    import torch

    modules, originals = dict(model.named_modules()), dict(pristine.named_modules())
    with torch.no_grad():
        for name in sorted(touched | set(plan)):
            modules[name].weight.copy_(originals[name].weight)
        for name, (a, b, scaling) in plan.items():
            modules[name].weight.data += (b @ a) * scaling
    return set(plan)


def check_lora_reaches(model: Any, plan: dict[str, tuple[Any, Any, float]], where: Any) -> None:
    """:func:`check_adapter_reaches` for a :func:`plain_lora` adapter merged into ``model``:
    a target whose B is not zero must be called (by its name's last part) in a short
    forward."""
    import torch

    carrying = [n for n, (_, b, _) in plan.items() if bool(b.any())]
    modules = dict(model.named_modules())
    called: set[str] = set()
    hooks = [modules[n].register_forward_hook(lambda *_, n=n: called.add(n.rsplit(".", 1)[-1])) for n in carrying]
    try:
        device = next(model.parameters()).device
        with torch.inference_mode():
            model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=device))
    finally:
        for h in hooks:
            h.remove()
    missed = [n for n in carrying if n.rsplit(".", 1)[-1] not in called]
    if missed:
        _refuse_unreached(model.config, missed, where)


def check_adapter_reaches(peft_model: Any, name: str, where: Any) -> None:
    """Refuse (one line, naming the module) an adapter ``name`` whose non-zero LoRA sits on a
    module that a short forward never calls: the model reads that module's weight directly
    (HF's Mamba/FalconMamba/Jamba ``dt_proj``), so the unmerged LoRA is ignored while a merged
    one counts. Modules are judged by name (``...dt_proj``): one call of any module of that
    name (an MoE expert the two probe tokens route to) clears them all. A LoRA on a module
    that returns a tuple (Llama-4's MoE router), which PEFT's LoRA cannot run, is refused too."""
    import torch
    from peft.tuners.lora import LoraLayer

    layers = {n: m for n, m in peft_model.named_modules() if isinstance(m, LoraLayer) and name in m.lora_B}
    carrying = {n: m for n, m in layers.items() if bool(m.lora_B[name].weight.any())}
    called: set[str] = set()
    odd: list[str] = []  # LoRA layers whose base module returns no tensor (Llama-4's router)
    hooks = [m.register_forward_hook(lambda *_, n=n: called.add(n.rsplit(".", 1)[-1])) for n, m in carrying.items()] + [
        m.get_base_layer().register_forward_hook(lambda _m, _i, out, n=n: None if torch.is_tensor(out) else odd.append(n))
        for n, m in layers.items()
    ]
    try:
        device = next(peft_model.parameters()).device
        with torch.inference_mode():
            peft_model(input_ids=torch.zeros((1, 2), dtype=torch.long, device=device))
    except (AttributeError, TypeError, RuntimeError):
        if not odd:
            raise
        _refuse_wrapped(peft_model, odd, where)
    finally:
        for h in hooks:
            h.remove()
    missed = [n for n in carrying if n.rsplit(".", 1)[-1] not in called]
    if missed:
        _refuse_unreached(peft_model.get_base_model().config, missed, where)


def _refuse_unreached(config: Any, missed: list[str], where: Any) -> None:
    """One line for an adapter whose LoRA on ``missed`` modules the forward never calls."""
    kind = getattr(config, "model_type", "this model")
    leaf = missed[0].rsplit(".", 1)[-1]
    raise CkptselError(
        f"{where}: the adapter's LoRA on {missed[0]} ({len(missed)} {leaf} modules) is never "
        f"called by {kind}'s forward, which reads the weight directly: unmerged (bfloat16) "
        f"it is ignored, merged (float32 CPU) it counts; train without {leaf} in "
        "target_modules"
    )


def _refuse_wrapped(peft_model: Any, odd: list[str], where: Any) -> None:
    """One line for an adapter whose LoRA wraps a module returning a tuple (Llama-4's MoE
    router: scores and logits), which PEFT's LoRA cannot add its update to."""
    kind = getattr(peft_model.get_base_model().config, "model_type", "this model")
    leaf = odd[0].rsplit(".", 1)[-1]
    module = odd[0].removeprefix("base_model.model.")
    raise CkptselError(
        f"{where}: the adapter's LoRA on {module} wraps a module of {kind} that returns a "
        f"tuple, not a tensor: PEFT cannot run it unmerged (bfloat16) while merged (float32 "
        f"CPU) it would count; train without {leaf} in target_modules"
    )


def dtype_name(dtype: Any) -> str:
    """``torch.float32`` -> ``float32``."""
    return str(dtype).removeprefix("torch.")


def device_kind(device: Any) -> str:
    """``cpu`` or ``cuda`` (whatever the index): the device kind records name."""
    return "cuda" if str(device).startswith("cuda") else str(device).split(":")[0]


def hf_provenance(model: Any, batch_size: int | str, device: Any = None) -> dict[str, Any]:
    """What measured with ``model`` on the Hugging Face path (see
    :mod:`ckptsel.records.provenance`): transformers' version, the model's dtype and attention
    implementation, the batch size (``auto``: sized from free GPU memory) and the device kind
    (default: the model's). The texts' rows add :func:`decoder_field`."""
    import transformers

    config = getattr(model, "config", None)
    attention = getattr(config, "_attn_implementation", None) or "unknown"
    return {
        "engine": "hf",
        "version": transformers.__version__,
        "dtype": dtype_name(model.dtype),
        "attention": str(attention),
        "batch_size": batch_size if batch_size == "auto" else int(batch_size),
        "device": device_kind(device if device is not None else model.device),
    }


def decoder_field(decoder: str) -> dict[str, str]:
    """The generations' provenance field naming the HF ``decoder`` that made their texts: none
    for ckptsel's own loop (what every older record implies), else ``{"decoder": name}``."""
    return {} if decoder == "ckptsel" else {"decoder": decoder}


def tokenizer_source(ckpts: Sequence[Checkpoint], base: str | None) -> Any:
    """Where the run's one tokenizer is, as found (a path, a URL or a hub name): the first
    checkpoint that ships one, else the base."""
    refs: list[Any] = [c.path for c in ckpts if (c.path / "tokenizer_config.json").exists()]
    refs += [c.base for c in ckpts if c.base] + ([base] if base else [])
    if not refs:
        raise CkptselError("no tokenizer found in the checkpoints; pass --base MODEL_DIR")
    return refs[0]


def tokenizer_ref(ckpts: Sequence[Checkpoint], base: str | None) -> str:
    """:func:`tokenizer_source` loadable here (a URL: this node's copy,
    :func:`~ckptsel._util.nodecache.local_ref`)."""
    return str(local_ref(tokenizer_source(ckpts, base)))


def run_tokenizer(ckpts: Sequence[Checkpoint], base: str | None) -> Any:
    """One tokenizer for the whole run (:func:`tokenizer_ref`)."""
    return load_tokenizer(tokenizer_ref(ckpts, base))


def generation_config(ref: str | Path) -> Any:
    """The generation config a model loaded from ``ref`` gets (``generation_config.json``, else
    one derived from its config), without loading the model: where its extra EOS ids are."""
    from transformers import AutoConfig, GenerationConfig

    try:
        return GenerationConfig.from_pretrained(str(ref))
    except OSError:
        return GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(ref)))
