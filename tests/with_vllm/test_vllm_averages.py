"""A LoRA run's average (``ckptsel average --last 2``: a rank-8 adapter of two rank-4 ones)
measured by vLLM like HF: the engine's ``max_lora_rank`` holds the average's rank, its adapter
id is positive, and its texts equal HF's (float32 on the CPU; NLL to float32 rounding)."""

from __future__ import annotations

import pytest

from vllm_env import frames, require_vllm

vllm = require_vllm()

from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.train.average_write import average_run  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402


def config(backend: str) -> MeasureConfig:
    return MeasureConfig("gsm8k", batch_size=4, max_new_tokens=12, window=64, dtype="float32", backend=backend, conformance_check=False)


def test_vllm_measures_the_average_like_hf(tmp_path, monkeypatch):
    run = build_tiny_run(tmp_path / "run", steps=(10, 20), n_validation=6, n_test=4, hidden_size=128)
    average_run(run.run_dir, [2])
    seen: list = []
    real = vllm.LLM.generate

    def counted(self, prompts, params=None, **kw):
        lora = kw.get("lora_request")
        seen.extend(lora if isinstance(lora, list) else [lora])
        return real(self, prompts, params, **kw)

    monkeypatch.setattr(vllm.LLM, "generate", counted)
    kw = dict(validation=run.validation, test=run.test)
    got = measure_run(run.run_dir, config("vllm"), out=tmp_path / "vllm", **kw)
    assert got.measured_steps == [-2, 10, 20]
    ids = {r.lora_name: r.lora_int_id for r in seen if r is not None}
    assert set(ids) == {"step10", "step20", "step-2"} and min(ids.values()) >= 1 and len(set(ids.values())) == 3
    measure_run(run.run_dir, config("hf"), out=tmp_path / "hf", **kw)
    (vgen, vnll), (hgen, hnll) = frames(tmp_path / "vllm"), frames(tmp_path / "hf")
    avg_v, avg_h = vgen[vgen["step"] == -2], hgen[hgen["step"] == -2]
    assert len(avg_v) == 10 and avg_v["text"].tolist() == avg_h["text"].tolist()
    assert vgen["text"].tolist() == hgen["text"].tolist()
    nv, nh = vnll[vnll["step"] == -2]["nll_sum"].to_numpy(), hnll[hnll["step"] == -2]["nll_sum"].to_numpy()
    assert nv == pytest.approx(nh, rel=1e-4, abs=1e-4)
