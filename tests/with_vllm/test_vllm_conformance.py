"""The conformance check on the vLLM backend (issue 29): vLLM in one batch against vLLM one
request at a time (texts with the top-2 tie rule; prompt log-prob NLL), and against an HF
unpadded forward when the run loads the HF model anyway. Runs in the vLLM environment only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vllm_env import require_vllm

vllm = require_vllm()

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure import conformance  # noqa: E402
from ckptsel.measure.backends.vllm import VllmEngine  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.run import measure_run  # noqa: E402
from ckptsel.records.provenance import read_provenance  # noqa: E402

from tinyrun import build_tiny_run  # noqa: E402

MAX_NEW = 12


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("vllm-conform"), steps=(10,), n_validation=6, n_test=4, hidden_size=128)


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "conformance.json"


def measure(run, out: Path, **kw):
    config = MeasureConfig("gsm8k", batch_size=4, max_new_tokens=MAX_NEW, dtype="float32", **kw)
    return measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=out)


def verdicts(cache: Path) -> list[dict]:
    return list(json.loads(cache.read_text())["verdicts"].values())


def test_vllm_is_checked_against_itself_one_request_at_a_time(run, cache, tmp_path):
    checks = conformance.STATS["checks"]
    res = measure(run, tmp_path / "records", backend="vllm")
    assert res.conformance_checks == 1 and conformance.STATS["checks"] == checks + 1
    (v,) = verdicts(cache)
    assert v["passed"] and v["family"] == "LlamaForCausalLM" and v["dtype"] == "float32"
    assert detail(v).startswith("6 of 6 texts equal vLLM one request at a time; NLL max rel")
    for kind in ("generations", "nll"):
        got = read_provenance(tmp_path / "records", kind)["run-a"]
        assert got.conformance == {
            "passed (6 items: texts vs vLLM one request at a time, NLL vs vLLM one request at "
            f"a time; checked in this run, entry {v['digest'][:19]})"
        }
    # the HF model loaded anyway (NLL through HF): vLLM's NLL is also checked against it
    measure(run, tmp_path / "mixed", backend="hf", nll_backend="vllm")
    (w,) = [x for x in verdicts(cache) if x != v and "HF unpadded forward" in detail(x)]
    assert w["passed"] and "texts not checked" in detail(w)
    assert read_provenance(tmp_path / "mixed", "nll")["run-a"].conformance == {
        f"passed (6 items: NLL vs vLLM one request at a time and an HF unpadded forward; checked in this run, entry {w['digest'][:19]})"
    }


def detail(entry: dict) -> str:
    """A cache entry's finding in words (entries hold numbers only)."""
    return conformance.Verdict(**{k: v for k, v in entry.items() if k != "digest"}).detail


def test_a_vllm_family_that_batches_wrongly_is_refused(run, cache, tmp_path, monkeypatch):
    greedy = VllmEngine.greedy

    def batched_wrong(self, ckpt, prompts, stops, new, top=2):
        out = greedy(self, ckpt, prompts, stops, new, top)
        if len(prompts) == 1:
            return out
        return [(toks[:1] + [t + 1 for t in toks[1:]], lps) for toks, lps in out]

    monkeypatch.setattr(VllmEngine, "greedy", batched_wrong)
    out = tmp_path / "records"
    refused = r"^LlamaForCausalLM float32 \(6 items\): \d of 6 texts equal vLLM"
    with pytest.raises(CkptselError, match=refused):
        measure(run, out, backend="vllm")
    assert not (out / "generations").exists() and not any(out.glob("*.parquet"))
