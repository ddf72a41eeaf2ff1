"""HF and vLLM records of the same run are identical in float32 on the CPU (issue 20).

A tiny Llama (head size 32, which vLLM's CPU attention takes) with LoRA checkpoints, whose
generation config declares an extra end-of-turn id: ``measure`` with ``--backend hf`` and with
``--backend vllm`` (NLL through vLLM's prompt log-probs, and through HF) in this process and in a
Ray actor must give the same texts, answers and ``correct``, the same ``n_tokens``, and NLLs
equal to rtol 1e-4 (they agree to about 1e-6). Runs in the vLLM environment only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from vllm_env import require_vllm

vllm = require_vllm()

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure.backends.vllm import VllmEngine  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.records.provenance import read_provenance  # noqa: E402
from ckptsel.records.scan import read_frame  # noqa: E402
from ckptsel.train.checkpoints import discover_checkpoints  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

STEPS = (10, 20)
WINDOW = 64  # cuts the long responses (long_every=3)
MAX_NEW = 16
GEN_KEY = ["trajectory", "step", "split", "item_id"]
NLL_KEY = [*GEN_KEY, "window"]
RTOL = 1e-4


def config(**kw) -> MeasureConfig:
    return MeasureConfig("gsm8k", batch_size=4, max_new_tokens=MAX_NEW, window=WINDOW, dtype="float32", **kw)


def measure(run, out: Path, executor=None, **kw):
    return measure_run(run.run_dir, config(**kw), validation=run.validation, test=run.test, out=out, executor=executor)


def records(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    gen = read_frame(out, "generations").sort_values(GEN_KEY).reset_index(drop=True)
    nll = read_frame(out, "nll").sort_values(NLL_KEY).reset_index(drop=True)
    return gen, nll


def add_end_of_turn(base: Path) -> int:
    """Declare, as instruction-tuned models do, a second EOS id in the base's generation
    config: the token the base generates most often, so that some rows stop at it."""
    from collections import Counter

    from transformers import AutoModelForCausalLM

    from ckptsel.measure.passes import measure_items
    from ckptsel.train.models import load_tokenizer

    tok = load_tokenizer(base)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    prompts = [f"Question {k}: how many apples?" for k in range(4)]
    texts, _ = measure_items(model, tok, prompts, max_new_tokens=MAX_NEW)
    counts = Counter(t for text in texts for t in tok(text, add_special_tokens=False)["input_ids"])
    extra = next(t for t, _ in counts.most_common() if t != tok.eos_token_id)
    path = base / "generation_config.json"
    cfg = json.loads(path.read_text()) if path.exists() else {}
    cfg["eos_token_id"] = [tok.eos_token_id, int(extra)]
    path.write_text(json.dumps(cfg))
    return int(extra)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run = build_tiny_run(tmp_path_factory.mktemp("vllm"), steps=STEPS, n_validation=8, n_test=6, long_every=3, hidden_size=128)
    add_end_of_turn(run.base)
    return run


@pytest.fixture(scope="module")
def hf(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "records"
    measure(run, out, backend="hf")
    return (*records(out), out)


@pytest.fixture(scope="module")
def by_vllm(run, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm") / "records"
    result = measure(run, out, backend="vllm")
    assert result.measured_steps == list(STEPS) and result.model_loads == 0  # no HF model
    return (*records(out), out)


def assert_same_generations(a: pd.DataFrame, b: pd.DataFrame) -> None:
    cols = [*GEN_KEY, "text", "answer", "correct"]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def assert_same_nll(a: pd.DataFrame, b: pd.DataFrame, rtol: float = RTOL) -> float:
    pd.testing.assert_frame_equal(a[[*NLL_KEY, "n_tokens"]], b[[*NLL_KEY, "n_tokens"]])
    x, y = a["nll_sum"].to_numpy(), b["nll_sum"].to_numpy()
    rel = abs(x - y) / abs(x).clip(min=1e-12)
    assert rel.max() <= rtol, f"NLL max rel. difference {rel.max():.2e}"
    return float(rel.max())


def test_vllm_records_equal_the_hf_records(hf, by_vllm):
    assert_same_generations(hf[0], by_vllm[0])
    assert len(hf[0]) == len(STEPS) * 14
    rel = assert_same_nll(hf[1], by_vllm[1])
    assert rel < 1e-5  # float32 on the CPU: rounding level
    assert (hf[1]["n_tokens"] < hf[1]["n_tokens"].max()).any()  # the window cut some


def engine_of(out: Path, kind: str) -> dict:
    """The one provenance the run's units of ``kind`` record."""
    (one,) = read_provenance(out, kind)["run-a"].measured_by
    return json.loads(one)


def test_units_say_which_engine_measured_them_and_engines_do_not_mix(run, hf, by_vllm):
    import transformers

    for kind in ("generations", "nll"):
        assert engine_of(hf[2], kind)["engine"] == "hf"
        assert engine_of(hf[2], kind)["version"] == transformers.__version__
        p = engine_of(by_vllm[2], kind)
        assert (p["engine"], p["version"], p["dtype"], p["device"]) == ("vllm", vllm.__version__, "float32", "cpu")
        assert p["batch_size"] >= 1  # the engine's max_num_seqs
    # vLLM into the HF records: refused in one line before an engine starts; records intact
    before = records(hf[2])
    with pytest.raises(CkptselError, match=r"measured by hf .*, not vllm 0\.32") as err:
        measure(run, hf[2], backend="vllm")
    assert "\n" not in str(err.value)
    pd.testing.assert_frame_equal(records(hf[2])[0], before[0])
    pd.testing.assert_frame_equal(records(hf[2])[1], before[1])


def test_vllm_generation_with_hf_nll(run, hf, tmp_path):
    measure(run, tmp_path / "records", backend="vllm", nll_backend="hf")
    gen, nll = records(tmp_path / "records")
    assert_same_generations(hf[0], gen)
    assert_same_nll(hf[1], nll, rtol=1e-6)


def test_in_a_ray_actor(run, hf, tmp_path):
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        result = measure(run, tmp_path / "records", executor="ray", backend="vllm")
    finally:
        ray.shutdown()
    assert result.measured_steps == list(STEPS)
    gen, nll = records(tmp_path / "records")
    assert_same_generations(hf[0], gen)
    assert_same_nll(hf[1], nll)
    assert engine_of(tmp_path / "records", "generations")["engine"] == "vllm"  # the actor's


def test_the_engine_is_sized_and_set_from_the_work(run):
    ckpts = discover_checkpoints(run.run_dir, None)
    engine = VllmEngine(config(backend="vllm"), ckpts, None, str(run.base))
    plan = engine._plan(str(run.base), [300, 40, 40])
    args = engine.engine_args(str(run.base), plan)
    assert args["dtype"] == "float32"  # never vLLM's "auto" (bfloat16 on the CPU)
    assert args["max_model_len"] == 384 and args["enforce_eager"] is True
    # one max_model_len request at least: 2 layers x 4 heads x 32 x 2 (K, V) x 4 bytes a token
    assert args["kv_cache_memory_bytes"] == 384 * 2048 + 2 * 128 * 2048
    assert args["worker_extension_cls"].endswith("vllm_patch.PatchedWorker")
    assert args["enable_lora"] and args["max_lora_rank"] == 8
    assert engine.starts == 0  # nothing started before there is work


def test_refusals_come_before_the_engine_starts(tmp_path):
    small = build_tiny_run(tmp_path / "h16", steps=(10,), n_validation=2, n_test=2)  # head 16
    with pytest.raises(CkptselError, match=r"head size 16 is not supported by vLLM's CPU"):
        measure(small, tmp_path / "r1", backend="vllm")
    with pytest.raises(CkptselError, match="CPU build"):
        VllmEngine(MeasureConfig("gsm8k", backend="vllm", device="cuda", check_here=False), discover_checkpoints(small.run_dir, None), None)
    cfg = small.run_dir / "checkpoint-10" / "adapter_config.json"
    cfg.write_text(json.dumps({**json.loads(cfg.read_text()), "modules_to_save": ["lm_head"]}))
    with pytest.raises(CkptselError, match="modules_to_save"):
        measure(small, tmp_path / "r2", backend="vllm")
