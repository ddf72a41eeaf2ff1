"""``--decoder transformers``: the HF path's texts from transformers' continuous batching
(:mod:`ckptsel.measure.paged`), the NLL from ckptsel's forward.

* every family of the architecture matrix it serves (full and sliding-window attention,
  static RoPE) gives ckptsel's own loop's texts exactly and its NLL to float rounding, in float32, at batch 4 and 1,
  under a LoRA adapter too; every other family (state-space, hybrid, recurrent,
  length-dependent RoPE) is refused in one line before anything runs;
* the conformance check checks it (texts against unbatched ``generate``) and keys its verdict
  apart from ckptsel's loop, whose key is unchanged;
* a request transformers loses, fails, or returns too long is an error, not a text;
* the option is refused for vLLM and for unknown names; ``ckptsel measure --decoder
  transformers`` (progress on) records the default run's rows, its generations say the
  decoder, and a trajectory measured with the other decoder is not mixed into silently.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers.generation.continuous_batching")

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure import paged  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.conformance import check_hf, hf_key  # noqa: E402
from ckptsel.measure.passes import cache_layout, length_rope, measure_items  # noqa: E402
from ckptsel.records.provenance import canonical, describe, read_provenance  # noqa: E402
from ckptsel.records.scan import read_frame  # noqa: E402

import archmodels as am  # noqa: E402
from clirun import measure_args, run_cli  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
SERVED = ("llama", "qwen2", "qwen2_sw", "qwen3", "mistral_sw", "gemma2", "gemma3", "phi3_sw", "qwen3_moe", "mixtral_sw")
REFUSED = (*am.SSM, *am.HYBRID, *am.STATEFUL, *am.ROPE)


@pytest.fixture(scope="module")
def tok():
    return am.tokenizer()


def both(model, tok, prompts, responses, **kw):
    """(ckptsel's texts and NLL, transformers' texts and NLL, what transformers' counted)."""
    done: list[int] = []
    ours = measure_items(model, tok, prompts, responses, max_new_tokens=24, **kw)
    theirs = measure_items(model, tok, prompts, responses, max_new_tokens=24, decoder="transformers", on_batch=done.append, **kw)
    return ours, theirs, done


def test_the_served_families_are_what_the_refusal_lets_through(tok):
    for family in am.FAMILIES:
        if family not in SERVED + REFUSED:
            continue
        model = am.build(family, tok, attn=am.attentions(family)[-1])
        why = paged.paged_refusal(model, cache_layout(model).kind, length_rope(model))
        assert (why is None) == (family in SERVED), (family, why)


@pytest.mark.parametrize("family", SERVED)
def test_each_served_family_gives_ckptsels_texts_and_nll(family, tok):
    prompts, responses = am.items(12)
    for attn in am.attentions(family):
        model = am.build(family, tok, attn=attn)
        for batch in (4, 1):
            (texts, nll), (paged_texts, paged_nll), done = both(model, tok, prompts, responses, batch_size=batch)
            assert paged_texts == texts, (family, attn, batch)
            # the same forward, its batches cut otherwise (ckptsel's loop refills): float rounding
            for mine, ref in zip(paged_nll, nll, strict=True):
                assert {w: s.n_tokens for w, s in mine.items()} == {w: s.n_tokens for w, s in ref.items()}
                assert [mine[w].nll_sum for w in ref] == pytest.approx([ref[w].nll_sum for w in ref], rel=1e-6)
            assert sum(done) == len(prompts)  # progress counts each finished text once
            assert model.config._attn_implementation == attn  # transformers put it back


def test_texts_only_and_under_a_lora_adapter(tok):
    prompts, responses = am.items(10, seed=3)
    model = am.add_lora(am.build("qwen2_sw", tok))
    (texts, _), (paged_texts, paged_nll), _ = both(model, tok, prompts, None, batch_size=3)
    assert paged_texts == texts and paged_nll is None
    assert any(texts)  # something was generated


@pytest.mark.parametrize("family", REFUSED)
def test_other_families_are_refused_in_one_line(family, tok):
    model = am.build(family, tok, attn=am.attentions(family)[-1])
    prompts, responses = am.items(3)
    with pytest.raises(CkptselError, match=r"^--decoder transformers: .*; use --decoder ckptsel$") as err:
        measure_items(model, tok, prompts, responses, max_new_tokens=8, decoder="transformers")
    assert "\n" not in str(err.value)
    # the NLL alone needs no decoder
    _, nll = measure_items(model, tok, prompts, responses, generate=False, decoder="transformers")
    assert len(nll) == 3


def test_the_conformance_check_checks_it_under_its_own_key(tok):
    model = am.build("gemma3", tok)
    prompts, responses = am.items(8)
    items = [SimpleNamespace(instruction=p, response=r) for p, r in zip(prompts, responses, strict=True)]
    verdict = check_hf(model, tok, items, 16, batch_size=4, decoder="transformers")
    assert verdict.passed and verdict.equal == verdict.texts == 8, verdict
    ours = MeasureConfig("gsm8k", batch_size=4)
    theirs = MeasureConfig("gsm8k", batch_size=4, decoder="transformers")
    assert "decoder" not in ours.conformance_settings()  # the key older verdicts have
    assert theirs.conformance_settings() == {**ours.conformance_settings(), "decoder": "transformers"}
    assert hf_key(model, "cpu", ours) != hf_key(model, "cpu", theirs)


def lost(*_a, **_k):
    return None


@pytest.mark.parametrize(
    ("result", "words"),
    [
        (None, "no result"),
        (SimpleNamespace(error="out of blocks", generated_tokens=[]), "transformers failed it (out of blocks)"),
        (SimpleNamespace(error=None, generated_tokens=list(range(30))), "30 new tokens for at most 24"),
        (SimpleNamespace(error=None, generated_tokens=[5, 2, 7]), "ending at the first stop"),
    ],
)
def test_a_lost_failed_or_overlong_request_is_an_error(result, words):
    with pytest.raises(CkptselError, match=r"--decoder transformers: item 3 of the batch: .*use --decoder ckptsel") as err:
        paged._checked_tokens(result, 3, 24, [2])
    assert words in str(err.value)


def test_the_option_is_refused_where_it_means_nothing():
    with pytest.raises(CkptselError, match=r"--decoder must be one of"):
        MeasureConfig("gsm8k", decoder="vllm")
    with pytest.raises(CkptselError, match=r"--decoder transformers: the HF path's decoder; --backend vllm decodes on its own"):
        MeasureConfig("gsm8k", backend="vllm", decoder="transformers")


def test_provenance_names_the_decoder_only_when_not_ckptsels():
    base = {"engine": "hf", "version": "5", "dtype": "float32", "attention": "sdpa", "batch_size": 4, "device": "cpu"}
    assert canonical({**base, "decoder": "ckptsel"}) == canonical(base)  # older units keep their bytes
    assert json.loads(canonical({**base, "decoder": "transformers"}))["decoder"] == "transformers"
    assert "decoder transformers" in describe({**base, "decoder": "transformers"})
    assert "decoder" not in describe(base)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("paged")
    return build_tiny_run(root, steps=(10, 20), n_validation=6, n_test=4, long_every=3)


def rows(out: Path, kind: str):
    frame = read_frame(out, kind)
    keys = ["step", "split", "item_id"] + (["window"] if kind == "nll" else [])
    return frame.sort_values(keys).reset_index(drop=True)


def decoders(out: Path, kind: str) -> set:
    return {json.loads(p).get("decoder") for p in read_provenance(out, kind)["run-a"].measured_by}


def test_measure_with_the_transformers_decoder_records_the_default_runs_rows(tiny, tmp_path, capsys):
    code, said = run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "ckptsel"), capsys)
    assert code == 0, said
    args = [a for a in measure_args(tiny, tiny.run_dir, tmp_path / "paged", "--decoder", "transformers") if a != "--no-progress"]
    code, said = run_cli(args, capsys)
    assert code == 0, said
    ours, theirs = rows(tmp_path / "ckptsel", "generations"), rows(tmp_path / "paged", "generations")
    assert theirs["text"].tolist() == ours["text"].tolist() and theirs["answer"].tolist() == ours["answer"].tolist()
    assert decoders(tmp_path / "paged", "generations") == {"transformers"}
    assert decoders(tmp_path / "ckptsel", "generations") == {None}
    assert decoders(tmp_path / "paged", "nll") == {None}  # the NLL's pass is ckptsel's either way
    nll_ours, nll_theirs = rows(tmp_path / "ckptsel", "nll"), rows(tmp_path / "paged", "nll")
    assert nll_theirs["nll_sum"].to_numpy() == pytest.approx(nll_ours["nll_sum"].to_numpy(), rel=1e-6)


def test_a_trajectory_measured_with_the_other_decoder_is_not_mixed_into(tiny, tmp_path, capsys):
    run_dir, out = tmp_path / "run-a", tmp_path / "records"
    shutil.copytree(tiny.run_dir, run_dir)
    code, said = run_cli(measure_args(tiny, run_dir, out, "--decoder", "transformers"), capsys)
    assert code == 0, said
    shutil.copytree(run_dir / "checkpoint-20", run_dir / "checkpoint-30")  # a new checkpoint
    before = {p: p.read_bytes() for p in sorted(out.rglob("*.parquet"))}
    code, said = run_cli(measure_args(tiny, run_dir, out), capsys)
    assert code == 2 and len(said.strip().splitlines()) == 1, said
    assert "decoder transformers" in said and "--allow-mixed-engines" in said
    assert {p: p.read_bytes() for p in sorted(out.rglob("*.parquet"))} == before
    # the same decoder measures just the new checkpoint
    code, said = run_cli(measure_args(tiny, run_dir, out, "--decoder", "transformers"), capsys)
    assert code == 0 and "1 measured" in said, said
