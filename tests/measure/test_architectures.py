"""Every architecture measured right: tiny random Llama, Qwen2 (+ sliding window), Qwen3,
Mistral (window shorter than the items), Gemma-2/3, Phi-3, Qwen3-MoE and Mixtral, eager and
sdpa; state-space (Mamba, Mamba2, FalconMamba), hybrid (Jamba, Bamba, FalconH1, GraniteMoeHybrid,
Zamba2, LFM2, Nemotron-H, Qwen3-Next), RecurrentGemma, and RoPE that depends on the call's
length (Phi-3 LongRoPE, Llama dynamic), under an unmerged LoRA adapter (issue 29).

float32: ckptsel's texts equal ``model.generate`` on each unpadded prompt, and its NLLs an
unpadded forward's to 1e-6 relative, with the same ``n_tokens``. bfloat16: no family crashes
(its agreement with HF's own batched ``generate`` is measured by
``benchmarks/bench_architectures.py`` into BENCHMARKS.md).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.measure.passes import (  # noqa: E402
    CacheLayout,
    cache_layout,
    measure_items,  # noqa: E402
)
from ckptsel.measure.tokens import stop_token_ids  # noqa: E402

import archmodels as am  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:.*keys did not match any targeted module:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning"),
]

MAX_NEW = 12
WINDOWS = (40, 0)  # 40 cuts several items; 0 = the complete response
BATCH = 6
RTOL = 1e-6
CASES = [(f, a) for f in am.FAMILIES for a in am.attentions(f)]


def build(family, tok, **kw):
    """``am.build``, skipped when the installed transformers lacks the family (the floor)."""
    try:
        return am.build(family, tok, **kw)
    except ImportError as err:
        pytest.skip(f"{family} is not in this transformers: {err}")


@pytest.fixture(scope="module")
def tok():
    return am.tokenizer()


@pytest.fixture(scope="module")
def data():
    return am.items(12)


def lora(model, family):
    """``am.add_lora``; on transformers 4.x (the floor), a family PEFT cannot wrap there
    (Zamba2's tied-weight keys) skips."""
    import transformers

    try:
        return am.add_lora(model)
    except AttributeError as err:
        if int(transformers.__version__.split(".")[0]) >= 5:
            raise
        pytest.skip(f"PEFT cannot wrap {family} of transformers {transformers.__version__}: {err}")


def few(family, data):
    """The items a family is measured on: 6 for the issue-29 families (pure-PyTorch scans
    are slow; lengths 3 to 64 + responses, both sides of the RoPE boundary), else all 12."""
    n = 6 if family in am.SEAM_FAMILIES else len(data[0])
    return data[0][:n], data[1][:n]


def check_against_references(model, tok, prompts, responses, texts, scored):
    stops = stop_token_ids(model, tok)
    ref_texts = [am.generate_one(model, tok, p, MAX_NEW, stops) for p in prompts]
    assert texts == ref_texts
    for p, r, got in zip(prompts, responses, scored, strict=True):
        for w in WINDOWS:
            want, n = am.direct_nll(model, tok, p, r, w)
            assert got[w].n_tokens == n
            assert got[w].nll_sum == pytest.approx(want, rel=RTOL, abs=1e-9)


@pytest.mark.parametrize("family,attn", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_float32_texts_and_nll_equal_generate_and_an_unpadded_forward(family, attn, tok, data):
    prompts, responses = few(family, data)
    model = lora(build(family, tok, attn=attn), family)
    seconds: dict[str, float] = {}
    texts, scored = measure_items(
        model, tok, prompts, responses, windows=WINDOWS, batch_size=BATCH, max_new_tokens=MAX_NEW, seconds=seconds
    )
    check_against_references(model, tok, prompts, responses, texts, scored)
    # sliding layers that the items outgrow take the split mode, recurrent states the
    # rowwise one (both: their own prefill); hybrids on transformers 4.x return no cache
    # unless given one of their own, and are measured item by item through generate
    if family in am.SLIDING + am.SSM:
        assert "prefill" in seconds
    elif family not in am.HYBRID:
        assert "prefill" not in seconds
    if family in am.SLIDING + am.SSM + am.ROPE:  # generation alone gives the same texts
        alone, _ = measure_items(model, tok, prompts, batch_size=BATCH, max_new_tokens=MAX_NEW)
        assert alone == texts


def test_cache_layouts(tok):
    assert cache_layout(am.build("llama", tok)) == CacheLayout("full")
    assert cache_layout(am.build("qwen3_moe", tok)) == CacheLayout("full")
    for family in am.SLIDING:
        assert cache_layout(am.build(family, tok, attn="eager")) == CacheLayout("sliding", am.WINDOW)
    layout = CacheLayout("sliding", 100)
    assert layout.mode(60, 50, 40) == "single"  # columns 0..89 stay inside the window
    assert layout.mode(60, 50, 60) == "split"
    assert layout.mode(120, 10, 1) == "split"
    assert CacheLayout("other").mode(5, 5, 1) == "rowwise"


def test_cache_layouts_with_one_shared_kwargs_dict(tok, monkeypatch):
    """transformers 5.0-5.2x (5.17 on the first GPU check) return one kwargs dict for every
    layer, not a list per layer: every family crashed in ``cache_layout`` there."""
    import transformers.cache_utils as cu

    if not hasattr(cu, "get_layer_types_and_kwargs"):
        pytest.skip("transformers 4.x reads the config itself (no get_layer_types_and_kwargs)")
    real = cu.get_layer_types_and_kwargs

    def shared_dict(cfg):
        types, per_layer = real(cfg)
        windows = {kw.get("sliding_window") for kw in per_layer} - {None}
        return types, ({"sliding_window": windows.pop()} if windows else {})

    monkeypatch.setattr(cu, "get_layer_types_and_kwargs", shared_dict)
    assert cache_layout(am.build("llama", tok)) == CacheLayout("full")
    for family in am.SLIDING:
        assert cache_layout(am.build(family, tok, attn="eager")) == CacheLayout("sliding", am.WINDOW)


def test_windows_longer_than_the_items_keep_the_single_pass(tok, data):
    prompts, responses = data
    model = am.add_lora(am.build("mistral_sw", tok, sliding_window=256))
    seconds: dict[str, float] = {}
    texts, scored = measure_items(
        model, tok, prompts, responses, windows=WINDOWS, batch_size=BATCH, max_new_tokens=MAX_NEW, seconds=seconds
    )
    assert "prefill" not in seconds
    check_against_references(model, tok, prompts, responses, texts, scored)


def test_unknown_cache_layouts_decode_row_by_row(tok, data, monkeypatch):
    import ckptsel.measure.passes as passes

    prompts, responses = data
    model = am.add_lora(am.build("gemma3", tok))
    monkeypatch.setattr(passes, "cache_layout", lambda m: CacheLayout("other"))
    seconds: dict[str, float] = {}
    texts, scored = measure_items(
        model, tok, prompts, responses, windows=WINDOWS, batch_size=BATCH, max_new_tokens=MAX_NEW, seconds=seconds
    )
    assert "prefill" in seconds
    check_against_references(model, tok, prompts, responses, texts, scored)


@pytest.mark.parametrize("family,attn", CASES, ids=[f"{f}-{a}" for f, a in CASES])
def test_bfloat16_runs_every_family(family, attn, tok, data):
    prompts, responses = few(family, data)
    model = lora(build(family, tok, attn=attn, dtype=torch.bfloat16), family)
    texts, scored = measure_items(model, tok, prompts, responses, windows=WINDOWS, batch_size=BATCH, max_new_tokens=MAX_NEW)
    assert len(texts) == len(prompts) and all(isinstance(t, str) for t in texts)
    n_tok = [len(tok(r, add_special_tokens=False)["input_ids"]) + 1 for r in responses]
    assert [s[0].n_tokens for s in scored] == n_tok
    assert all(s[0].nll_sum > 0 and s[0].nll_sum == s[0].nll_sum for s in scored)
