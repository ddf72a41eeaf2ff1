"""The conformance check (issue 29): ``measure`` checks its fast path against unbatched
``generate`` the first time a model family is measured, refuses a family it is wrong for in one
line (exit 2, nothing written), caches the verdict, stamps it in every unit's provenance, and
``--no-conformance-check`` skips it (stamped too)."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.measure import conformance  # noqa: E402
from ckptsel.measure.config import MeasureConfig  # noqa: E402
from ckptsel.measure.conformance import check_conformance  # noqa: E402
from ckptsel.records.codec import read_schema  # noqa: E402
from ckptsel.records.provenance import provenance_lines  # noqa: E402
from ckptsel.records.units import list_units  # noqa: E402

import archmodels  # noqa: E402
from archmodels import register_positionless_llama  # noqa: E402
from clirun import exit_code  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
MAX_NEW = 12
CHECKED = "texts vs unbatched generate, NLL vs an unpadded forward; checked in this run, entry "
HF_PASSED = f"passed (6 items at batch size 4: {CHECKED}"  # the CLI's --batch-size 4


def passed_here(stamp: str, prefix: str = HF_PASSED) -> bool:
    """A pass checked in this run (the stamp ends with its cache entry's digest)."""
    return bool(re.fullmatch(re.escape(prefix) + r"hmac-sha256:[0-9a-f]{7}\)", stamp))


# ------------------------------------------------------------------ a family never seen before


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("conform")
    run = build_tiny_run(root, steps=(10, 20), n_validation=6, n_test=4)
    broken = root / "base-positionless"
    shutil.copytree(run.base, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg.update(model_type="positionless_llama", architectures=["PositionlessLlamaForCausalLM"])
    (broken / "config.json").write_text(json.dumps(cfg))
    register_positionless_llama()
    return run, broken


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """This test's own verdict cache."""
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "conformance.json"


def measure_args(run, out: Path, *extra: str) -> list[str]:
    return [
        "measure",
        str(run.run_dir),
        "--task",
        "gsm8k",
        "--validation",
        str(run.validation),
        "--test",
        str(run.test),
        "--out",
        str(out),
        "--batch-size",
        "4",
        "--max-new-tokens",
        str(MAX_NEW),
        "--no-progress",
        *extra,
    ]


def recorded_verdicts(out: Path) -> set[str]:
    """The conformance verdicts every unit of ``out`` records (each unit must record one)."""
    found = set()
    for kind in ("generations", "nll"):
        units = list_units(out, kind)
        assert units
        for u in units:
            blob = json.loads(read_schema(u.path).metadata[b"ckptsel.provenance"])
            assert blob["conformance"], u.path
            found.update(blob["conformance"])
    return found


def test_a_correct_family_passes_once_is_cached_and_stamped(tiny, cache, tmp_path):
    run, _ = tiny
    before = dict(conformance.STATS)
    assert exit_code(measure_args(run, tmp_path / "a")) == 0
    assert conformance.STATS["checks"] == before["checks"] + 1  # one family, two checkpoints
    verdicts = json.loads(cache.read_text())["verdicts"]
    ((key, verdict),) = verdicts.items()
    assert json.loads(key)["model"].endswith("LlamaForCausalLM") and verdict["passed"]
    assert verdict["family"] == "LlamaForCausalLM" and verdict["items"] == 6
    assert verdict["equal"] == verdict["texts"] == 6 and verdict["batch"] == 4
    ((stamp,),) = [recorded_verdicts(tmp_path / "a")]
    assert passed_here(stamp) and verdict["digest"][:19] in stamp, stamp
    # a second run (another records folder) reads the verdict: no check at all
    assert exit_code(measure_args(run, tmp_path / "b")) == 0
    assert conformance.STATS["checks"] == before["checks"] + 1
    assert conformance.STATS["cached"] == before["cached"] + 1
    assert recorded_verdicts(tmp_path / "b") == {
        f"passed (6 items at batch size 4: {CHECKED.split(';')[0]}; read from the cache (keyed): "
        f"checked {verdict['checked']}, entry {verdict['digest'][:19]})"
    }
    # the same records measured again after the check: the gate sees one provenance
    assert exit_code(measure_args(run, tmp_path / "a")) == 0
    lines, warnings = provenance_lines(tmp_path / "a")
    assert not warnings and len(lines) == 2


def test_a_new_version_is_checked_again(tiny, cache, tmp_path, monkeypatch):
    run, _ = tiny
    assert exit_code(measure_args(run, tmp_path / "a")) == 0
    checks = conformance.STATS["checks"]
    monkeypatch.setattr(conformance, "CHECK_VERSION", conformance.CHECK_VERSION + 1)
    assert exit_code(measure_args(run, tmp_path / "b")) == 0
    assert conformance.STATS["checks"] == checks + 1
    assert len(json.loads(cache.read_text())["verdicts"]) == 2


def test_an_unseen_broken_family_is_refused_in_one_line_and_nothing_is_written(tiny, cache, tmp_path, capsys):
    run, broken = tiny
    out = tmp_path / "records"
    checks = conformance.STATS["checks"]
    assert exit_code(measure_args(run, out, "--base", str(broken))) == 2
    # one line of ckptsel's (the rest of stderr, if any, is libraries' warnings)
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err.startswith("error: PositionlessLlamaForCausalLM float32 (6 items at batch size 4): "), err
    assert "texts equal unbatched generate" in err and "--no-conformance-check" in err
    assert "6 of 6 texts" not in err
    assert conformance.STATS["checks"] == checks + 1
    assert not out.exists() or not any(p.is_file() for p in out.rglob("*")), list(out.rglob("*"))
    # refused again, at once, from the cache
    assert exit_code(measure_args(run, out, "--base", str(broken))) == 2
    assert "PositionlessLlamaForCausalLM float32" in capsys.readouterr().err
    assert conformance.STATS["checks"] == checks + 1
    (verdict,) = json.loads(cache.read_text())["verdicts"].values()
    assert verdict["passed"] is False and verdict["family"] == "PositionlessLlamaForCausalLM"


def test_no_conformance_check_skips_and_is_stamped(tiny, cache, tmp_path):
    run, broken = tiny
    checks = conformance.STATS["checks"]
    out = tmp_path / "records"
    # at the user's own risk: even the broken family measures
    assert exit_code(measure_args(run, out, "--base", str(broken), "--no-conformance-check")) == 0
    assert conformance.STATS["checks"] == checks and not cache.exists()
    assert recorded_verdicts(out) == {conformance.SKIPPED}
    _, warnings = provenance_lines(out)
    assert any("without the conformance check" in w for w in warnings), warnings


# ------------------------------------------------------------------ the function the callback calls


def _items(n: int) -> list:
    """``n`` of the architecture matrix's items as measurement items (instruction, response)."""
    prompts, responses = archmodels.items(n)
    return [type("Item", (), {"instruction": p, "response": r})() for p, r in zip(prompts, responses, strict=True)]


def test_check_conformance_on_models_in_memory(cache):
    tok = archmodels.tokenizer()
    items = _items(8)
    config = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW)
    good = archmodels.build("llama", tok)
    stamp = check_conformance(good, tok, items, config)
    assert passed_here(stamp, f"passed (8 items at batch size {config.batch_size}: {CHECKED}")
    cls = register_positionless_llama()
    bad = cls(_broken_config(good))
    bad.load_state_dict(good.state_dict())
    bad.eval()
    with pytest.raises(CkptselError, match=r"PositionlessLlamaForCausalLM float32 \(8 items.*\): .* texts equal"):
        check_conformance(bad, tok, items, config)
    off = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW, conformance_check=False)
    assert check_conformance(bad, tok, items, off) == conformance.SKIPPED


def _broken_config(model):
    from transformers import AutoConfig

    data = model.config.to_dict()
    data["model_type"] = "positionless_llama"
    cfg = AutoConfig.for_model("positionless_llama", **{k: v for k, v in data.items() if k != "model_type"})
    cfg._attn_implementation = model.config._attn_implementation
    return cfg


# ------------------------------------------------------------------ the tie rule


def test_text_agrees_tolerates_only_a_reference_near_tie():
    stops = [0]
    logits = {5: 10.0, 6: 10.0 - 1e-6, 7: 3.0, 0: 1.0}
    step = conformance.Step(lambda t: logits.get(t), 5, 8 * 2.0**-23 * 10.0)
    stop = conformance.Step(lambda t: {0: 12.0, 5: 4.0}.get(t), 0, 8 * 2.0**-23 * 12.0)
    steps = [step, step, stop]  # the reference: 5, 5, then the stop token
    assert conformance.text_agrees([5, 5, 0], steps, [5, 5], stops) == "equal"
    assert conformance.text_agrees([5, 5, 0], steps, [5, 6, 7], stops) == "tie"  # 1e-6 apart
    assert conformance.text_agrees([5, 5, 0], steps, [5, 7], stops) == "wrong"  # 7 logits apart
    assert conformance.text_agrees([5, 5, 0], steps, [5], stops) == "wrong"  # stopped early
    assert conformance.text_agrees([5, 5, 0], steps, [5, 5, 5], stops) == "wrong"  # ran on


@pytest.mark.parametrize("command", ["measure", "watch"])
def test_the_opt_out_is_on_measure_and_watch(command, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich's help table: option names not cut
    assert exit_code([command, "--help"]) == 0
    assert "--no-conformance-check" in capsys.readouterr().out


def test_the_watcher_refuses_an_unseen_broken_family(tiny, cache, tmp_path, capsys):
    run, broken = tiny
    out = tmp_path / "records"
    args = measure_args(run, out, "--base", str(broken), "--poll", "0.05", "--settle", "0.1")
    assert exit_code(["watch", *args[1:], "--timeout", "120"]) == 2
    (err,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]
    assert err.startswith("error: PositionlessLlamaForCausalLM float32 (6 items at"), err
    assert not list(out.rglob("*.parquet"))  # no unit, no part: only the watcher's status


# ------------------------------------------------------------------ the Trainer callback


def test_the_trainer_callback_checks_the_family_and_stamps_it(cache, tmp_path):
    """The recording callback runs the same check once, on the training model in the precision
    it measures in: a correct family is stamped in every unit, a broken one refused before a
    row is written."""
    from ckptsel.integrations.hf_trainer import RecordingCallback

    tok = archmodels.tokenizer()
    prompts, _ = archmodels.items(8)  # prompts of different lengths: padding in the batch
    rows = [{"question": p, "answer": f"#### {a}"} for a, p in enumerate(prompts)]
    data = tmp_path / "val.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW)
    good = archmodels.build("llama", tok)
    rec = tmp_path / "rec"
    cb = RecordingCallback(data, config, rec, "good-s1", tokenizer=tok, verbose=False)
    cb.measure(good, tok, 1)
    cb.measure(good, tok, 2)  # checked once per callback
    ((stamp,),) = [recorded_verdicts(rec)]
    assert passed_here(stamp, f"passed (8 items at batch size {config.batch_size}: {CHECKED}")
    bad = register_positionless_llama()(_broken_config(good))
    bad.load_state_dict(good.state_dict())
    rec_bad = tmp_path / "rec-bad"
    cb = RecordingCallback(data, config, rec_bad, "bad-s1", tokenizer=tok, verbose=False)
    with pytest.raises(CkptselError, match="PositionlessLlamaForCausalLM float32"):
        cb.measure(bad, tok, 1)
    assert not rec_bad.exists() or not any(rec_bad.rglob("*.parquet"))


def test_a_length_dependent_rope_is_a_family_of_its_own(cache):
    """A dynamic-RoPE Llama is measured by another path than a plain Llama (items past the
    boundary alone): it gets its own verdict, never the plain Llama's (the first GPU check
    found it passing on that cached verdict in 0.00 s)."""
    tok = archmodels.tokenizer()
    items = _items(8)
    config = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW)
    assert check_conformance(archmodels.build("llama", tok, attn="eager"), tok, items, config)
    checks = conformance.STATS["checks"]
    dynamic = archmodels.build("llama_dynamic", tok, attn="eager")
    assert conformance.hf_key(dynamic, "cpu", config)["rope"] == "dynamic"
    stamp = check_conformance(dynamic, tok, items, config)
    assert passed_here(stamp, f"passed (8 items at batch size {config.batch_size}: {CHECKED}")
    assert conformance.STATS["checks"] == checks + 1
