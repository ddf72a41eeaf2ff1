"""All of a LoRA trajectory's adapters in one vLLM batch (issue 31): one engine start, one
``generate`` call per kind carrying every checkpoint's ``LoRARequest``, the rows split back per
checkpoint; records equal to one checkpoint per call (``--max-loras 1``) in float32 on the CPU,
and a run killed between batches resumes without measuring again what it recorded.

Ten adapters; four engine starts in all (the first in a process costs 20-40 s on this CPU).
"""

from __future__ import annotations

import pytest

from vllm_env import assert_same, frames, require_vllm

vllm = require_vllm()

from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

STEPS = tuple(range(2, 21, 2))  # ten adapters, as a trajectory of the paper has


def config(**kw) -> MeasureConfig:
    return MeasureConfig(
        "gsm8k", batch_size=4, max_new_tokens=12, window=64, dtype="float32", backend="vllm", conformance_check=False, **kw
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("vlora"), steps=STEPS, n_validation=6, n_test=4, hidden_size=128)


@pytest.fixture
def calls(monkeypatch):
    """Per ``LLM.generate`` call: the adapters its requests carry (names) and its requests."""
    seen: list[tuple[set[str], int]] = []
    real = vllm.LLM.generate

    def counted(self, prompts, params=None, **kw):
        lora = kw.get("lora_request")
        loras = lora if isinstance(lora, list) else [lora] * len(prompts)
        seen.append(({r.lora_name for r in loras if r is not None}, len(prompts)))
        return real(self, prompts, params, **kw)

    monkeypatch.setattr(vllm.LLM, "generate", counted)
    return seen


@pytest.fixture(scope="module")
def one_per_call(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("seq") / "records"
    result = measure_run(run.run_dir, config(max_loras=1), validation=run.validation, test=run.test, out=out)
    assert result.engine_starts == 1 and result.measured_steps == list(STEPS)
    return frames(out)


def test_a_trajectorys_adapters_go_in_one_batch(run, one_per_call, calls, tmp_path):
    result = measure_run(run.run_dir, config(), validation=run.validation, test=run.test, out=tmp_path / "r")
    assert result.engine_starts == 1 and result.measured_steps == list(STEPS)
    # one call for the NLL, one for the texts, each with every checkpoint's adapter
    assert [names for names, _ in calls] == [{f"step{s}" for s in STEPS}] * 2
    assert [n for _, n in calls] == [len(STEPS) * 10] * 2
    assert_same(frames(tmp_path / "r"), one_per_call)
    # the checkpoints differ: each row came back to its own checkpoint
    assert frames(tmp_path / "r")[1].groupby("step")["nll_sum"].sum().nunique() == len(STEPS)


def test_a_run_killed_between_batches_resumes(run, one_per_call, calls, tmp_path):
    out = tmp_path / "r"
    kw = dict(validation=run.validation, test=run.test, out=out)

    def kill(step: int) -> None:
        if step == STEPS[1]:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # batches of two: killed after the first
        measure_run(run.run_dir, config(max_loras=2), after_checkpoint=kill, **kw)
    assert len(calls) == 2 and calls[0][0] == {"step2", "step4"}
    calls.clear()
    result = measure_run(run.run_dir, config(), **kw)
    assert result.reused_steps == list(STEPS[:2]) and result.measured_steps == list(STEPS[2:])
    assert [names for names, _ in calls] == [{f"step{s}" for s in STEPS[2:]}] * 2
    assert_same(frames(out), one_per_call)
