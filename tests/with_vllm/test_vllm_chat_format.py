"""A chat-template run measured through vLLM from the command line gives the records the HF
path gives (issue 36: the prompt format on both backends): the same prompt tokens, texts,
answers and NLL targets, and the same prompt format in the provenance."""

from __future__ import annotations

import json

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from ckptsel.records.provenance import read_provenance  # noqa: E402

from clirun import run_cli  # noqa: E402
from tinyrun import CHAT_TEMPLATE, build_tiny_run  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from transformers import AutoTokenizer

    tiny = build_tiny_run(tmp_path_factory.mktemp("chat"), steps=(10, 20), hidden_size=128)
    tok = AutoTokenizer.from_pretrained(str(tiny.base))
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(str(tiny.base))
    return tiny


def test_vllm_measures_a_chat_run_as_hf_does(run, tmp_path, capsys):
    common = [
        "measure",
        run.run_dir,
        "--task",
        "gsm8k",
        "--validation",
        run.validation,
        "--test",
        run.test,
        "--max-new-tokens",
        12,
        "--batch-size",
        4,
        "--dtype",
        "float32",
        "--prompt-format",
        "chat",
        "--system-prompt",
        "Be brief.",
    ]
    code, said = run_cli([*common, "--out", tmp_path / "hf"], capsys)
    assert code == 0, said
    code, said = run_cli([*common, "--out", tmp_path / "vllm", "--backend", "vllm"], capsys)
    assert code == 0, said
    assert "prompt format: chat" in said
    assert_same(frames(tmp_path / "hf"), frames(tmp_path / "vllm"))
    formats = {
        json.loads(p).get("prompt_format")
        for out in ("hf", "vllm")
        for p in read_provenance(tmp_path / out, "generations", ["run-a"])["run-a"].measured_by
    }
    assert len(formats) == 1 and next(iter(formats)).startswith("chat[")
    # with no format stated, the chat template is refused on the vLLM path too
    code, said = run_cli([*common[:-4], "--out", tmp_path / "x", "--backend", "vllm"], capsys)
    assert code == 2 and "chat template" in said
