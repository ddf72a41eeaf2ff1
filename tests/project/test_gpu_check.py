"""``benchmarks/gpu_check.py`` runs its CPU-safe parts here (toy sizes, float32), so the script
that validates a GPU box cannot rot: the architecture matrix, the HF vs vLLM comparison (skipped
with its reason without vLLM) and the throughput table, written as its BENCHMARKS.md section."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("peft")

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
pytestmark = [
    pytest.mark.usefixtures("one_thread"),
    pytest.mark.filterwarnings("ignore:.*keys did not match any targeted module:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning"),
]


@pytest.fixture(scope="module")
def gpu_check():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(BENCHMARKS))
    return gpu_check


def test_cpu_parts_write_the_section(gpu_check, tmp_path):
    out = tmp_path / "BENCHMARKS.md"
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(out)]) == 0
    text = out.read_text()
    assert "<!-- gpu_check -->" in text and "Device: CPU" in text
    for family in ("llama", "mistral_sw"):
        for attn in ("eager", "sdpa"):  # float32 on the CPU: ckptsel equals generate
            assert f"| {family} | {attn} | 8/8 |" in text
    assert "crash" not in text
    assert "| tiny | ckptsel-hf |" in text
    # a full trajectory: 3 fresh loads vs 1 load and 2 proven swaps, the same texts
    assert "| tiny | hf | restart per checkpoint |" in text
    row = next(r for r in text.splitlines() if r.startswith("| tiny | hf | swap in place |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[4] == "1" and cells[6] == "2" and cells[-1] == "96/96 texts", row
    try:
        import vllm  # noqa: F401
    except ImportError:
        assert "skipped: vllm is not installed" in text


def test_without_a_gpu_it_says_so(gpu_check, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    assert gpu_check.main([]) == 2
    assert "no CUDA device" in capsys.readouterr().out


def test_gpu_conformance_runs_on_the_cpu(tmp_path, monkeypatch):
    """``benchmarks/gpu_conformance.py`` (the conformance check per family on a GPU) runs its
    code on the CPU: a family passes, and its texts equal ``generate`` in float32."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import gpu_conformance
    finally:
        sys.path.remove(str(BENCHMARKS))
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "conformance.md"
    args = ["--device", "cpu", "--families", "llama", "--dtypes", "float32", "--no-real-shape"]
    assert gpu_conformance.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "| llama | eager | float32 | passed |" in text and "| 8/8 |" in text


def test_throughput_runs_on_the_cpu(gpu_check, tmp_path):
    """``gpu_check.py --throughput`` (issue 37) on the CPU: every HF side on the same planted
    model and items, the same texts as today's loop in float32, its own section."""
    out = tmp_path / "BENCHMARKS.md"
    args = ["--device", "cpu", "--throughput", "--shapes", "tiny", "--decode-work", "12x16"]
    assert gpu_check.main([*args, "--out", str(out)]) == 0
    text = out.read_text()
    assert "<!-- decode_throughput_cpu -->" in text and "Device: CPU" in text
    for side in ("before", "after", "after-texts", "paged", "hf-static", "hf-generate-batch"):
        row = next(r for r in text.splitlines() if r.startswith(f"| tiny | 12 | 16 | {side} |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[4]) > 0 and cells[9] == "12/12", row  # items/s; texts = before
    try:
        import vllm  # noqa: F401
    except ImportError:
        assert "| tiny | 12 | 16 | vllm | skipped: vllm is not installed |" in text


def test_throughput_of_some_sides_only(gpu_check, tmp_path):
    """``--sides`` without ``before`` or ``hf-static``: the texts are compared with
    ``hf-generate-batch``'s, and the tokens/s counted from its generated tokens."""
    out = tmp_path / "BENCHMARKS.md"
    args = ["--device", "cpu", "--throughput", "--shapes", "tiny", "--decode-work", "12x16", "--sides", "after,paged,hf-generate-batch"]
    assert gpu_check.main([*args, "--out", str(out)]) == 0
    rows = [r for r in out.read_text().splitlines() if r.startswith("| tiny | 12 | 16 |")]
    assert [r.split("|")[4].strip() for r in rows] == ["after", "paged", "hf-generate-batch"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[5]) > 0 and cells[9] == "12/12", row  # tokens/s; texts = hf-generate-batch
