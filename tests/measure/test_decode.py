"""Continuous batching on the HF path (issue 37): rows leave the batch at their stop token and
waiting items join, and the texts stay those of ``generate`` on each unpadded prompt (float32),
the NLLs those of an unpadded forward; ``--batch-size auto`` sized by hand-checkable rules."""

from __future__ import annotations

import types

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.defaults import BATCH_SIZE  # noqa: E402
from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure import passes  # noqa: E402
from ckptsel.measure.backends.hf import hf_provenance  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.passes import measure_items  # noqa: E402
from ckptsel.measure.tokens import stop_token_ids  # noqa: E402

import archmodels as am  # noqa: E402

pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:.*keys did not match any targeted module:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning"),
]

MAX_NEW = 24
BATCH = 5


@pytest.fixture(scope="module")
def tok():
    return am.tokenizer()


@pytest.fixture(scope="module")
def data():
    return am.items(16, seed=4)


def planted(family, tok, prompts, attn="sdpa"):
    model = am.add_lora(am.build(family, tok, attn=attn))
    return am.plant_eos(model, tok, prompts, MAX_NEW)


def counting_joins(monkeypatch):
    """Count :meth:`_Rows.join` calls (waiting items joining rows that still decode)."""
    calls = []
    real = passes._Rows.join

    def join(self, other):
        calls.append((self.n, other.n))
        return real(self, other)

    monkeypatch.setattr(passes._Rows, "join", join)
    return calls


@pytest.mark.parametrize("family,attn", [("llama", "sdpa"), ("llama", "eager"), ("qwen3_moe", "sdpa")])
def test_spread_stops_texts_equal_generate_and_rows_join(family, attn, tok, data, monkeypatch):
    prompts, responses = data
    model = planted(family, tok, prompts, attn)
    stops = stop_token_ids(model, tok)
    ref = [am.generate_one(model, tok, p, MAX_NEW, stops) for p in prompts]
    joins = counting_joins(monkeypatch)
    texts, scored = measure_items(model, tok, prompts, responses, windows=(40, 0), batch_size=BATCH, max_new_tokens=MAX_NEW)
    assert texts == ref
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert len(set(lengths)) >= 5 and min(lengths) < MAX_NEW // 2  # stops spread over the window
    assert joins and all(n > 0 for n, _ in joins)  # items joined rows still decoding
    for p, r, got in zip(prompts, responses, scored, strict=True):
        for w in (40, 0):
            want, n = am.direct_nll(model, tok, p, r, w)
            assert got[w].n_tokens == n
            assert got[w].nll_sum == pytest.approx(want, rel=1e-6, abs=1e-9)


def test_continuous_equals_the_fixed_batch_loop(tok, data):
    prompts, responses = data
    model = planted("llama", tok, prompts)
    done = []
    new = measure_items(model, tok, prompts, responses, batch_size=BATCH, max_new_tokens=MAX_NEW, on_batch=done.append)
    old = measure_items(model, tok, prompts, responses, batch_size=BATCH, max_new_tokens=MAX_NEW, continuous=False)
    assert new[0] == old[0]
    assert sum(done) == len(prompts)  # progress counts every item once
    for a, b in zip(new[1], old[1], strict=True):
        for w in a:
            assert a[w].n_tokens == b[w].n_tokens
            assert a[w].nll_sum == pytest.approx(b[w].nll_sum, rel=1e-6)
    # generation alone, one row at a time: the same texts
    alone, _ = measure_items(model, tok, prompts, batch_size=1, max_new_tokens=MAX_NEW)
    assert alone == new[0]


def test_caches_that_cannot_move_rows_keep_the_fixed_batches(tok, data, monkeypatch):
    """Sliding-window layers (their cache keeps a window of columns) decode as before."""
    prompts, _ = data
    model = am.add_lora(am.build("mistral_sw", tok, sliding_window=256))
    joins = counting_joins(monkeypatch)
    stops = stop_token_ids(model, tok)
    texts, _ = measure_items(model, tok, prompts[:6], batch_size=3, max_new_tokens=8)
    assert texts == [am.generate_one(model, tok, p, 8, stops) for p in prompts[:6]]
    assert not joins


def test_auto_plan_by_hand():
    # the Qwen3-1.7B shape in bfloat16: 2 x 28 layers x 8 heads x 128 x 2 bytes per token
    cfg = types.SimpleNamespace(
        num_hidden_layers=28, num_key_value_heads=8, head_dim=128, num_attention_heads=16, hidden_size=2048, vocab_size=151936
    )
    per_token = 2 * 28 * 8 * 128 * 2
    free = 8 << 30
    rows, nll = passes.auto_plan(cfg, 2, free, 556, 1024)
    assert rows == int(free * 0.5 // (per_token * 556)) == 67
    assert nll == int(free * 0.2 // (151936 * 10))
    assert passes.auto_plan(cfg, 2, 80 << 30, 556, 1024)[0] == passes.AUTO_MAX_ROWS
    assert passes.auto_plan(cfg, 2, 80 << 30, 556, 40)[0] == 40  # never more rows than items
    assert passes.auto_plan(cfg, 2, 1 << 20, 556, 40) == (1, 556)  # at least one row, one item


def test_batch_plan_on_the_cpu_and_nll_token_budget(tok):
    model = am.build("llama", tok)
    fed = [[1] * n for n in (10, 8, 5, 3)]
    assert passes.batch_plan(model, 7, fed, 4) == (7, passes.NO_LIMIT)
    assert passes.batch_plan(model, "auto", fed, 4) == (BATCH_SIZE, passes.NO_LIMIT)
    # batches of at most 3 items whose count x longest fed length stays within 20 positions
    assert passes._chunks([0, 1, 2, 3], fed, 3, 20) == [[0, 1], [2, 3]]
    assert passes._chunks([0, 1, 2, 3], fed, 3, passes.NO_LIMIT) == [[0, 1, 2], [3]]


def test_batch_size_auto_in_the_config():
    assert MeasureConfig("gsm8k").batch_size == BATCH_SIZE  # auto on the CPU: as before
    assert MeasureConfig("gsm8k", batch_size="auto").batch_size == BATCH_SIZE
    assert MeasureConfig("gsm8k", batch_size="8").batch_size == 8  # the CLI's string
    for bad in ("many", 0, "-2"):
        with pytest.raises(CkptselError, match="--batch-size"):
            MeasureConfig("gsm8k", batch_size=bad)
    on_gpu = MeasureConfig("gsm8k", device="cuda", check_here=False)
    assert on_gpu.batch_size == "auto"
    model = am.build("llama", am.tokenizer())
    assert hf_provenance(model, "auto", "cuda")["batch_size"] == "auto"
    assert hf_provenance(model, 16)["batch_size"] == 16
