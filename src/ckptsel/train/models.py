from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ckptsel.errors import CkptselError
from ckptsel.study.configuration import LORA_TARGETS, Configuration

# --------------------------------------------------------------------------- model setup


def pick_device(device: str | None = None) -> str:
    """``device`` when given (checked by :func:`check_device`: anything else is one line), else
    ``cuda`` when torch sees a GPU, else ``cpu`` (also without torch installed: the
    analysis-only install never needs one)."""
    if device:
        return check_device(device)
    try:
        import torch
    except ImportError:  # pragma: no cover - the [ml] extra is not installed
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: str) -> str:
    """``cpu``, ``cuda`` / ``cuda:N`` (when torch sees that GPU) or ``mps`` (when available);
    anything else is refused in one line before any work."""
    kind, _, index = device.partition(":")
    if kind == "cpu" and not index:
        return device
    import torch

    if kind == "cuda" and (not index or index.isdigit()):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if n == 0:
            raise CkptselError(f"--device {device}: torch sees no CUDA device here; use --device cpu")
        if index and int(index) >= n:
            raise CkptselError(f"--device {device}: torch sees {n} CUDA GPU(s) (cuda:0..{n - 1})")
        return device
    if kind == "mps" and not index:
        if not torch.backends.mps.is_available():
            raise CkptselError("--device mps: torch sees no MPS device here; use --device cpu")
        return device
    raise CkptselError(f"--device {device!r}: expected cpu, cuda, cuda:N or mps")


def use_bf16(device: str) -> bool:
    """bf16 autocast where the hardware has it (SPEC §11), fp32 elsewhere (e.g. CPU)."""
    import torch

    return device.startswith("cuda") and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def load_tokenizer(ref: str | Path):
    """The tokenizer of a model (a folder or a hub name), as training and measurement use it:
    it must have an EOS token (every response ends with one); without a pad token, EOS pads
    (padding is masked out of attention and loss, and cut from generations)."""
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(str(ref))
    except (OSError, ValueError) as err:
        raise CkptselError(f"{ref}: cannot load tokenizer ({err})") from err
    if tok.eos_token_id is None:
        raise CkptselError(f"{ref}: tokenizer has no EOS token (needed to end responses)")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    return tok


def _load_causal_lm(path: str, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(path, dtype=dtype or torch.float32)
    except (OSError, ValueError) as err:
        raise CkptselError(f"cannot load model {path!r}: {err}") from err


def _lora_targets(model, wanted: Sequence[str]) -> list[str]:
    """The target modules the model has. The default list (:data:`LORA_TARGETS`) needs one of
    its names in the model; a list the configuration names needs every one (a misspelt module
    is refused, never dropped silently)."""
    present = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules()}
    targets = [t for t in wanted if t in present]
    missing = [t for t in wanted if t not in present]
    if not targets or (missing and tuple(wanted) != LORA_TARGETS):
        raise CkptselError(
            f"LoRA target module(s) {missing} do not exist in the model "
            f"{model.config._name_or_path!r}; set target_modules in the configuration"
        )
    return targets


def check_lora_targets(base_model: str, config: Configuration) -> bool:
    """Refuse (one line) LoRA target modules ``base_model`` lacks (see :func:`_lora_targets`),
    from the model's skeleton on the meta device: no weights are read, nothing is downloaded.
    Returns False (nothing checked) when the base model's config is neither a local folder nor
    in the local Hugging Face cache."""
    if config.adaptation != "lora":
        return True
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    try:
        cfg = AutoConfig.from_pretrained(base_model, local_files_only=True)
    except OSError:
        if Path(base_model).is_dir():
            raise CkptselError(f"cannot read the base model {base_model!r}: no config.json") from None
        return False  # a hub name not in the local cache: checked when training loads it
    except ValueError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CkptselError(f"cannot read the base model {base_model!r}: {first}") from err
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(cfg)
    skeleton.config._name_or_path = base_model
    _lora_targets(skeleton, config.target_modules)
    return True


def build_trainable(base_model: str, config: Configuration, seed: int, resume_from: Path | None, frozen_bf16: bool = False):
    """The model to train: base + fresh (seeded) LoRA, base + LoRA from a checkpoint, or a full
    model (from the base or from a checkpoint).

    Trainable weights are fp32 (bf16 enters through autocast). With ``frozen_bf16`` (a GPU with
    bf16) the frozen LoRA base is loaded in bf16 to halve its memory; peft keeps the adapter
    weights in fp32 (``autocast_adapter_dtype``)."""
    import torch

    if config.adaptation == "full":
        return _load_causal_lm(str(resume_from) if resume_from else base_model)
    from peft import LoraConfig, PeftModel, get_peft_model

    base = _load_causal_lm(base_model, torch.bfloat16 if frozen_bf16 else None)
    if resume_from is not None:
        return PeftModel.from_pretrained(base, str(resume_from), is_trainable=True)
    lcfg = LoraConfig(
        r=config.rank,
        lora_alpha=config.alpha,
        lora_dropout=0.0,
        target_modules=_lora_targets(base, config.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    torch.manual_seed(seed)  # LoRA A matrices are randomly initialised
    return get_peft_model(base, lcfg)
