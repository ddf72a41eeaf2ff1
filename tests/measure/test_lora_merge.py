"""Float32 CPU adapters merged without PEFT (issue 37): a plain LoRA adapter is merged into one
working copy of the base, its weights reset from the untouched base per checkpoint, and must
give the very bytes of PEFT's ``merge_and_unload`` on a fresh copy, in any checkpoint order;
an adapter beyond plain LoRA goes through PEFT as before; the records are the same either way.
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from ckptsel.measure.backends import hf
from ckptsel.measure.backends.hf import ModelHolder, plain_lora
from ckptsel.measure.config import MeasureConfig
from ckptsel.measure.run import measure_run
from ckptsel.records.scan import read_frame
from ckptsel.train.checkpoints import discover_checkpoints

from tinyrun import build_tiny_run

KEY = ["trajectory", "step", "split", "item_id"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("lora_merge")
    return build_tiny_run(root, steps=(2, 4, 6), n_validation=4, n_test=3)


def peft_merged(pristine, path):
    """PEFT's own merge of the adapter at ``path`` into a fresh copy of ``pristine``."""
    from peft import PeftModel

    model = PeftModel.from_pretrained(copy.deepcopy(pristine), str(path), adapter_name="x")
    return model.merge_and_unload().eval()


def same_bytes(a, b) -> list[str]:
    """Names of the state-dict tensors of ``a`` and ``b`` that differ (bit for bit)."""
    import torch

    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    return [k for k in sa if sa[k].dtype != sb[k].dtype or not torch.equal(sa[k], sb[k])]


def test_plain_merge_is_peft_merge_bit_for_bit_in_any_order(run):
    import torch

    ckpts = discover_checkpoints(run.run_dir)
    holder = ModelHolder("cpu", torch.float32)
    for ckpt in [*ckpts, ckpts[0], ckpts[2], ckpts[1], ckpts[0]]:  # back and forth
        model = holder.get(ckpt)
        assert model is holder.work  # merged without PEFT, in the one working copy
        assert same_bytes(model, peft_merged(holder.pristine, ckpt.path)) == []
        assert model.config.to_dict() == peft_merged(holder.pristine, ckpt.path).config.to_dict()
    assert holder.loads == 1
    # the untouched base stayed untouched
    from transformers import AutoModelForCausalLM

    fresh = AutoModelForCausalLM.from_pretrained(str(run.base), dtype=torch.float32)
    assert same_bytes(holder.pristine, fresh) == []
    holder.free()
    assert holder.work is None and holder.pristine is None


@pytest.mark.parametrize(
    "edit",
    [
        {"alpha_pattern": {"q_proj": 16}},
        {"rank_pattern": {"q_proj": 2}},
        {"use_dora": True},
        {"init_lora_weights": "pissa"},  # PEFT changes the base weights as it injects
        {"modules_to_save": ["lm_head"]},
        {"target_modules": "q_proj"},  # a regex: PEFT's matching
        {"a_key_a_newer_peft_adds": {"x": 1}},
    ],
)
def test_an_adapter_beyond_plain_lora_goes_through_peft(run, tmp_path, edit):
    import torch

    ckpt = discover_checkpoints(run.run_dir)[0]
    holder = ModelHolder("cpu", torch.float32)
    assert plain_lora(ckpt.path, holder._load(run.base)) is not None
    folder = tmp_path / "checkpoint-2"
    shutil.copytree(ckpt.path, folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, **edit}))
    assert plain_lora(folder, holder._load(run.base)) is None


def test_a_tensor_for_another_module_goes_through_peft(run, tmp_path):
    import torch
    from safetensors.torch import load_file, save_file

    ckpt = discover_checkpoints(run.run_dir)[0]
    folder = tmp_path / "checkpoint-2"
    shutil.copytree(ckpt.path, folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    dropped = next(k for k in tensors if "q_proj.lora_B" in k)
    save_file({k: v for k, v in tensors.items() if k != dropped}, str(folder / "adapter_model.safetensors"))
    base = ModelHolder("cpu", torch.float32)._load(run.base)
    assert plain_lora(folder, base) is None  # a target module without its B: PEFT decides


def measure(run, out):
    config = MeasureConfig("gsm8k", batch_size=4, max_new_tokens=8, window=32, dtype="float32")
    return measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=out)


def test_records_are_the_same_as_through_peft(run, tmp_path, monkeypatch):
    import re

    from ckptsel.records.provenance import read_provenance

    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache-fast"))  # each checks afresh
    fast = measure(run, tmp_path / "fast")
    monkeypatch.setattr(hf, "plain_lora", lambda ref, model: None)  # every adapter via PEFT
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache-peft"))
    slow = measure(run, tmp_path / "peft")
    assert fast.measured_steps == slow.measured_steps == [2, 4, 6]
    assert fast.model_loads == slow.model_loads == 1
    for kind, key in (("generations", KEY), ("nll", [*KEY, "window"])):
        a = read_frame(tmp_path / "fast", kind).sort_values(key).reset_index(drop=True)
        b = read_frame(tmp_path / "peft", kind).sort_values(key).reset_index(drop=True)
        assert a.equals(b)
        # what measured them, the conformance verdict included (less when it was checked)
        when = lambda p: re.sub(r"checked in this run, entry (hmac-)?sha256:\w+", "", repr(p))  # noqa: E731
        assert when(read_provenance(tmp_path / "fast", kind)) == when(read_provenance(tmp_path / "peft", kind))


@pytest.mark.parametrize("progress", ["--progress", "--no-progress"])
def test_the_cli_measures_with_fewer_collections_and_gives_the_threshold_back(run, tmp_path, monkeypatch, progress):
    """``ckptsel measure`` runs with the collector's first threshold raised (its imports and
    passes make millions of objects) and restores the caller's afterwards (in-process use)."""
    import gc

    import ckptsel.measure.run
    from ckptsel.cli.measure import GC_THRESHOLD

    from clirun import exit_code

    seen, real = [], ckptsel.measure.run.measure_run

    def spy(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(ckptsel.measure.run, "measure_run", spy)
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    before = gc.get_threshold()
    args = ["measure", run.run_dir, "--validation", run.validation, "--test", run.test]
    args += ["--out", tmp_path / "records", "--task", "gsm8k", "--max-new-tokens", 8, progress]
    assert exit_code(args) == 0
    assert seen == [GC_THRESHOLD] and gc.get_threshold() == before
    assert len(read_frame(tmp_path / "records", "generations")) == 3 * 7
