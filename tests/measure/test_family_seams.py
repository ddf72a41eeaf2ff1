"""Issue 29's model-family seams, beyond the architecture matrix (tests/measure/test_architectures.py):
the cache keyword (no deprecation warning per checkpoint on transformers 5), LongRoPE's batch
independence, and a LoRA the model's forward never calls (Jamba's ``dt_proj``) refused in one
line whatever the dtype."""

from __future__ import annotations

import logging
import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure.passes import measure_items  # noqa: E402

import archmodels as am  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:.*keys did not match any targeted module:RuntimeWarning"),
]


@pytest.fixture(scope="module")
def tok():
    return am.tokenizer()


def build(family, tok, **kw):
    try:
        return am.build(family, tok, attn="eager", **kw)
    except ImportError as err:
        pytest.skip(f"{family} is not in this transformers: {err}")


@pytest.mark.parametrize("family", ["llama", "mamba2"])
def test_no_deprecated_cache_keyword(family, tok):
    """transformers 5 deprecates ``past_key_values``/``cache_params`` (removal announced for
    5.40): ckptsel passes and reads the cache by the name the model takes, so neither the
    FutureWarning nor the logged deprecation appears."""
    import transformers

    model = build(family, tok)
    prompts, responses = am.items(4)
    logged: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: logged.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    once = getattr(transformers.utils.logging, "warning_once", None)
    if hasattr(once, "cache_clear"):
        once.cache_clear()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for batch in (1, 4):
                measure_items(model, tok, prompts, responses, batch_size=batch, max_new_tokens=6)
    finally:
        logger.removeHandler(handler)
    said = [str(w.message) for w in caught] + logged
    assert not [m for m in said if "past_key_values" in m or "cache_params" in m]
    if int(transformers.__version__.split(".")[0]) >= 5:
        from ckptsel.measure.passes import cache_name

        assert cache_name(model) == "cache"


def test_longrope_item_does_not_depend_on_its_batch(tok):
    """A short item beside a long one: the long one no longer switches the whole forward to
    the long factors (the short item's NLL and text are what they are alone)."""
    model = build("phi3_longrope", tok)
    prompts, responses = am.items(8)
    lengths = [len(tok(p + " " + r)["input_ids"]) for p, r in zip(prompts, responses, strict=True)]
    short = min(range(8), key=lambda i: lengths[i])
    long = max(range(8), key=lambda i: lengths[i])
    assert lengths[short] + 8 < am.ROPE_BOUNDARY < lengths[long]
    kw = dict(windows=(0,), max_new_tokens=8)
    alone_t, alone_s = measure_items(model, tok, [prompts[short]], [responses[short]], **kw)
    both_t, both_s = measure_items(model, tok, [prompts[short], prompts[long]], [responses[short], responses[long]], batch_size=2, **kw)
    assert both_s[0][0].nll_sum == pytest.approx(alone_s[0][0].nll_sum, rel=1e-6)
    assert both_t[0] == alone_t[0]
    want, _ = am.direct_nll(model, tok, prompts[long], responses[long], 0)
    assert both_s[1][0].nll_sum == pytest.approx(want, rel=1e-6)


def _jamba_checkpoint(tmp_path, tok, targets):
    from peft import LoraConfig, get_peft_model

    from ckptsel._util.locations import Location
    from ckptsel.train.checkpoints import Checkpoint

    base = build("jamba", tok)
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    cfg = LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, target_modules=targets)
    torch.manual_seed(3)
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_" in n:
                p.copy_(torch.randn_like(p) * 0.3)
    ckpt_dir = tmp_path / "run" / "checkpoint-1"
    peft_model.save_pretrained(ckpt_dir)
    return Checkpoint(1, Location(ckpt_dir), "adapter", str(tmp_path / "base"))


def _calls_dt_proj(model) -> bool:
    """Whether the installed Jamba's forward calls its ``dt_proj`` modules (plain hooks)."""
    called = []
    mods = [m for n, m in model.named_modules() if n.endswith("dt_proj")]
    hooks = [m.register_forward_hook(lambda *_: called.append(1)) for m in mods]
    with torch.inference_mode():
        model(input_ids=torch.zeros((1, 2), dtype=torch.long))
    for h in hooks:
        h.remove()
    assert mods
    return bool(called)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lora_on_a_module_the_forward_never_calls_is_refused(dtype, tok, tmp_path):
    """Jamba reads ``dt_proj.weight`` directly: float32 on the CPU merges the adapter (the LoRA
    counts), bfloat16 keeps it unmerged (HF ignores it). Both refuse, naming the module; an
    adapter off ``dt_proj`` loads in both."""
    from ckptsel.measure.backends.hf import ModelHolder

    bad = _jamba_checkpoint(tmp_path / "bad", tok, ["dt_proj", "q_proj", "x_proj"])
    if _calls_dt_proj(build("jamba", tok)):  # transformers 4.x's slow path calls it: no seam
        assert ModelHolder("cpu", getattr(torch, dtype)).get(bad) is not None
    else:
        with pytest.raises(CkptselError, match=r"dt_proj") as err:
            ModelHolder("cpu", getattr(torch, dtype)).get(bad)
        assert "\n" not in str(err.value)
    good = _jamba_checkpoint(tmp_path / "good", tok, ["q_proj", "x_proj"])
    assert ModelHolder("cpu", getattr(torch, dtype)).get(good) is not None
