"""Swaps that never refuse a correct run, and adapters PEFT cannot run refused in one line
(issue 38, items 5 and 6), through ``ckptsel measure`` as a user types it.

* Full-weight Qwen2-MoE and OLMoE runs: their files name each expert
  (``experts.<i>.gate_proj.weight``), the model holds them fused (``experts.gate_up_proj``).
  Each checkpoint after the first is swapped in through transformers' own weight conversion
  (the one ``from_pretrained`` runs), its records equal to a fresh load per checkpoint
  (``--no-swap``). Before, the run stopped at the second checkpoint ("checkpoint lacks
  model.layers.0.mlp.experts.gate_up_proj").
* A checkpoint whose tensors do not fit the model in memory is loaded afresh, and its unit's
  weights note says why.
* An ``all-linear`` LoRA on Llama-4's MoE wraps its router (an ``nn.Linear`` returning a tuple,
  which PEFT's LoRA cannot add to): one line naming the router, exit 2, nothing written. Before:
  a traceback (``'tuple' object has no attribute 'dtype'``).
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from ckptsel.records.scan import read_frame  # noqa: E402
from ckptsel.records.units import unit_path  # noqa: E402

import archmodels as am  # noqa: E402
from clirun import run_cli  # noqa: E402
from tinyrun import make_gsm8k_rows, write_jsonl  # noqa: E402

STEPS = (2, 4)
KEY = ["trajectory", "step", "split", "item_id"]


@pytest.fixture(scope="module")
def tok():
    return am.tokenizer()


@pytest.fixture(scope="module")
def items(tmp_path_factory):
    root = tmp_path_factory.mktemp("items")
    return (write_jsonl(root / "validation.jsonl", make_gsm8k_rows(3)), write_jsonl(root / "test.jsonl", make_gsm8k_rows(2, seed=100)))


def measure(run, items, out, capsys, *extra):
    return run_cli(
        [
            "measure",
            run,
            "--task",
            "gsm8k",
            "--validation",
            items[0],
            "--test",
            items[1],
            "--out",
            out,
            "--batch-size",
            "4",
            "--max-new-tokens",
            "4",
            "--window",
            "32",
            "--dtype",
            "float32",
            "--no-conformance-check",
            *extra,
        ],
        capsys,
    )


def frames(out):
    gen = read_frame(out, "generations").sort_values(KEY).reset_index(drop=True)
    nll = read_frame(out, "nll").sort_values([*KEY, "window"]).reset_index(drop=True)
    return (gen.drop(columns=["provenance"], errors="ignore"), nll.drop(columns=["provenance"], errors="ignore"))


def weights_note(out, step: int) -> list[str]:
    import pyarrow.parquet as pq

    meta = pq.read_schema(unit_path(out, "nll", "run", step).local).metadata
    return json.loads(meta[b"ckptsel.provenance"])["weights"]


@pytest.mark.parametrize("family", ["qwen2_moe", "olmoe"])
def test_a_full_weight_moe_run_is_swapped_through_transformers_conversion(family, tok, items, tmp_path, capsys):
    run = am.save_run(family, tok, tmp_path / family, STEPS)
    code, said = measure(run, items, tmp_path / "swap", capsys, "--progress")
    assert code == 0, said
    assert "hf model started once" in said and "1 checkpoints swapped in place" in said
    assert weights_note(tmp_path / "swap", 4) == ["swapped in place, proven by 3 tensor checksums"]
    code, said = measure(run, items, tmp_path / "fresh", capsys, "--no-swap", "--no-progress")
    assert code == 0, said
    swapped, fresh = frames(tmp_path / "swap"), frames(tmp_path / "fresh")
    assert swapped[0].equals(fresh[0]) and swapped[1].equals(fresh[1])


def test_tensors_that_do_not_fit_are_loaded_afresh_and_the_note_says_why(tok, items, tmp_path, capsys):
    """A second checkpoint carrying a tensor the model has no place for (a fresh load drops it
    with a warning): the swap does not refuse the run, it loads afresh and says why."""
    from safetensors.torch import load_file, save_file

    run = am.save_run("qwen2_moe", tok, tmp_path / "q", STEPS)
    path = run / "checkpoint-4" / "model.safetensors"
    tensors = load_file(str(path))
    tensors["model.extra.weight"] = tensors["model.norm.weight"].clone()
    save_file(tensors, str(path), metadata={"format": "pt"})
    code, said = measure(run, items, tmp_path / "rec", capsys, "--no-progress")
    assert code == 0, said
    assert weights_note(tmp_path / "rec", 4) == ["loaded afresh: its tensor model.extra.weight is not in the model"]


@pytest.mark.parametrize(("dtype", "progress"), [("float32", "--progress"), ("bfloat16", "--no-progress")])
def test_a_lora_on_llama4s_router_is_refused_in_one_line(dtype, progress, tok, items, tmp_path, capsys):
    run = am.save_run("llama4", tok, tmp_path / "l4", (2,), lora=True)
    out = tmp_path / "rec"
    code, said = measure(run, items, out, capsys, "--base", tmp_path / "l4" / "base", "--dtype", dtype, progress)
    assert code == 2, said
    [line] = [ln for ln in said.splitlines() if ln.startswith("error:")]
    assert "Traceback" not in said, said
    assert "feed_forward.router" in line and "tuple" in line and "target_modules" in line
    assert not out.exists() or not any(out.rglob("*.parquet"))
