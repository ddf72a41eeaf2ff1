"""What a conformance verdict holds for (issue 38, items 2-4): a verdict is keyed by a digest of
everything that changes the function (the model's config, the adapter's, the prompt format, the
batch shape the check ran at), the check runs at the run's batch size, and a cache entry is
trusted only when it is well formed and its digest holds; a unit's provenance says whether the
verdict was checked in this run or read from the cache, never copying the cache's text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.measure import conformance  # noqa: E402
from ckptsel.records.codec import read_schema  # noqa: E402
from ckptsel.records.units import list_units  # noqa: E402

from clirun import measure_args, run_cli  # noqa: E402
from tinyrun import build_tiny_run  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
MAX_NEW = 10


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """This test's own verdict cache."""
    monkeypatch.setenv("CKPTSEL_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "conformance.json"


def _save_full(model, tok_dir: Path, run_dir: Path, step: int = 10) -> Path:
    from transformers import AutoTokenizer

    path = run_dir / f"checkpoint-{step}"
    model.save_pretrained(str(path))
    AutoTokenizer.from_pretrained(str(tok_dir)).save_pretrained(str(path))
    return run_dir


def _llama4(tok, tuned: bool):
    """A tiny Llama-4 text model; ``tuned``: every layer without RoPE and with
    ``attn_temperature_tuning`` (its query scale follows the cache's length, not the row's
    positions: wrong in ckptsel's right-padded batch, right alone)."""
    from transformers import Llama4ForCausalLM, Llama4TextConfig

    cfg = Llama4TextConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        intermediate_size_mlp=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        initializer_range=0.1,
        moe_layers=[],
        no_rope_layers=[0, 0] if tuned else [1, 1],
        attn_temperature_tuning=tuned,
        floor_scale=2,
        attn_scale=2.0,
        use_qk_norm=False,
        attention_chunk_size=None,
    )
    torch.manual_seed(0)
    model = Llama4ForCausalLM(cfg).eval()
    # the same weights for both: only the config differs
    return model


@pytest.fixture(scope="module")
def llama4_runs(tmp_path_factory):
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("llama4")
    run = build_tiny_run(root, steps=(10,), n_validation=10, n_test=6)
    tok = AutoTokenizer.from_pretrained(str(run.base))
    plain = _save_full(_llama4(tok, False), run.base, root / "runs" / "plain")
    tuned = _save_full(_llama4(tok, True), run.base, root / "runs" / "tuned")
    return run, plain, tuned


def verdicts(out: Path) -> set[str]:
    found = set()
    for kind in ("generations", "nll"):
        for u in list_units(out, kind):
            found.update(json.loads(read_schema(u.path).metadata[b"ckptsel.provenance"])["conformance"])
    return found


def test_item2_a_config_that_changes_the_function_is_checked_on_its_own(llama4_runs, cache, tmp_path, capsys):
    """Llama-4 with ``attn_temperature_tuning`` is refused on its own; measured after a plain
    Llama-4 passed, it was admitted on that verdict (exit 0, wrong texts); the other way round
    the plain one was refused on the tuned one's verdict."""
    run, plain, tuned = llama4_runs
    code, said = run_cli(measure_args(run, tuned, tmp_path / "alone"), capsys)
    assert code == 2 and "Llama4ForCausalLM float32" in said, said
    cache.unlink()
    # plain first, then tuned: the tuned one is checked (and refused), not admitted
    code, said = run_cli(measure_args(run, plain, tmp_path / "plain"), capsys)
    assert code == 0, said
    code, said = run_cli(measure_args(run, tuned, tmp_path / "tuned"), capsys)
    assert code == 2 and "Llama4ForCausalLM float32" in said, said
    assert not list((tmp_path / "tuned").rglob("*.parquet"))
    # tuned first (refused, cached), then plain: the plain one passes on its own check
    cache.unlink()
    assert run_cli(measure_args(run, tuned, tmp_path / "t2"), capsys)[0] == 2
    code, said = run_cli(measure_args(run, plain, tmp_path / "p2"), capsys)
    assert code == 0, said
    keys = [json.loads(k) for k in json.loads(cache.read_text())["verdicts"]]
    assert len({k["config"] for k in keys}) == 2


def _register_big_batch():
    """``BigBatchLlamaForCausalLM``: a Llama that drops the attention mask and positions in a
    batch of more than 6 rows (a kernel that takes another path at larger batches): right
    alone and in the check's old batch of 6, wrong at batch 8."""
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

    class BigBatchConfig(LlamaConfig):
        model_type = "bigbatch_llama"

    class BigBatchLlamaForCausalLM(LlamaForCausalLM):
        config_class = BigBatchConfig

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, **kwargs):
            if input_ids is not None and input_ids.shape[0] > 6:
                attention_mask = position_ids = None
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, **kwargs)

    try:
        AutoConfig.register("bigbatch_llama", BigBatchConfig)
        AutoModelForCausalLM.register(BigBatchConfig, BigBatchLlamaForCausalLM)
    except ValueError:  # registered by an earlier test of this process
        pass


def test_item3_the_check_runs_at_the_runs_batch_size(tmp_path, cache, capsys):
    import shutil

    run = build_tiny_run(tmp_path / "tiny", steps=(10,), n_validation=10, n_test=6)
    base = tmp_path / "base-bigbatch"
    shutil.copytree(run.base, base)
    cfg = json.loads((base / "config.json").read_text())
    cfg.update(model_type="bigbatch_llama", architectures=["BigBatchLlamaForCausalLM"])
    (base / "config.json").write_text(json.dumps(cfg))
    _register_big_batch()
    out = tmp_path / "records"
    code, said = run_cli(measure_args(run, run.run_dir, out, "--base", str(base), batch=8), capsys)
    assert code == 2 and "BigBatchLlamaForCausalLM float32" in said, said
    assert "at batch size 8" in said, said
    assert not list(out.rglob("*.parquet"))
    # at batch 4 the class is right: checked again at that shape, and passes
    code, said = run_cli(measure_args(run, run.run_dir, out, "--base", str(base)), capsys)
    assert code == 0, said
    ((stamp,),) = [verdicts(out)]
    assert stamp.startswith(
        "passed (6 items at batch size 4: texts vs unbatched generate, NLL vs an unpadded forward; checked in this run, entry hmac-sha256:"
    ), stamp


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_run(tmp_path_factory.mktemp("forge"), steps=(10, 20), n_validation=6, n_test=4)


def _forge(cache: Path, **changes) -> None:
    data = json.loads(cache.read_text())
    for entry in data["verdicts"].values():
        entry.update(changes)
    cache.write_text(json.dumps(data))


def test_item4_a_forged_cache_entry_is_not_trusted_nor_copied(tiny, cache, tmp_path, capsys):
    broken = tmp_path / "base-broken"
    import shutil

    from archmodels import register_positionless_llama

    shutil.copytree(tiny.base, broken)
    cfg = json.loads((broken / "config.json").read_text())
    cfg.update(model_type="positionless_llama", architectures=["PositionlessLlamaForCausalLM"])
    (broken / "config.json").write_text(json.dumps(cfg))
    register_positionless_llama()
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "a", "--base", broken), capsys)[0] == 2
    checks = conformance.STATS["checks"]
    # the refusal turned into a pass by hand, with markup and newlines in its text
    _forge(cache, passed=True, detail="<b>fine</b>\nall good", reference="[red]ok[/red]\n\nyes")
    out = tmp_path / "b"
    code, said = run_cli(measure_args(tiny, tiny.run_dir, out, "--base", broken), capsys)
    assert code == 2 and "PositionlessLlamaForCausalLM float32" in said, said  # checked again
    assert conformance.STATS["checks"] == checks + 1
    assert "<b>" not in said and "[red]" not in said
    assert not list(out.rglob("*.parquet"))
    # a real pass read from the cache: the stamp says so, with the entry's time and digest
    cache.unlink()
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "c"), capsys)[0] == 0
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "d"), capsys)[0] == 0
    (first,) = verdicts(tmp_path / "c")
    (second,) = verdicts(tmp_path / "d")
    assert "; checked in this run, entry hmac-sha256:" in first, first
    assert "; read from the cache (keyed): checked " in second and "entry hmac-sha256:" in second, second
    ((_, entry),) = json.loads(cache.read_text())["verdicts"].items()
    assert entry["checked"] in second and entry["digest"][:19] in second
    # a passing entry whose text was edited: markup never reaches a unit
    _forge(cache, reference="texts vs <i>anything</i>\nmore")
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "e"), capsys)[0] == 0
    for stamp in verdicts(tmp_path / "e"):
        assert "<" not in stamp and "\n" not in stamp and "checked in this run" in stamp


def test_item4_entries_missing_fields_or_of_the_old_format_are_checked_again(tiny, cache, tmp_path, capsys):
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "a"), capsys)[0] == 0
    data = json.loads(cache.read_text())
    ((key, entry),) = data["verdicts"].items()
    old = {k: entry[k] for k in ("passed", "family", "dtype", "items", "checked")}
    old.update(detail="6 of 6 texts equal", reference="texts vs unbatched generate")
    cache.write_text(json.dumps({"format": 1, "verdicts": {key: old}}))
    checks = conformance.STATS["checks"]
    assert run_cli(measure_args(tiny, tiny.run_dir, tmp_path / "b"), capsys)[0] == 0
    assert conformance.STATS["checks"] == checks + 1


def test_the_settings_and_adapter_config_key_the_verdict(cache):
    """The key's digest covers the model config (less where it was loaded from), the adapter
    config (less its base's path) and the measurement settings (prompt format, batch size)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from ckptsel.measure.config import MeasureConfig

    import archmodels

    tok = archmodels.tokenizer()
    model = archmodels.build("llama", tok)
    config = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW)
    key = conformance.hf_key(model, "cpu", config)
    model.config._name_or_path = "/somewhere/else"
    assert conformance.hf_key(model, "cpu", config) == key
    other = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "rms_norm_eps": 1e-3}))
    assert conformance.hf_key(other, "cpu", config)["config"] != key["config"]
    bigger = MeasureConfig("gsm8k", max_new_tokens=MAX_NEW, batch_size=32)
    assert conformance.hf_key(model, "cpu", bigger)["settings"] != key["settings"]
    assert set(config.conformance_settings()) >= {"prompt", "batch_size", "max_new_tokens"}
    a = archmodels.add_lora(archmodels.build("llama", tok))
    b = archmodels.add_lora(archmodels.build("llama", tok))
    assert conformance.hf_key(a, "cpu", config) == conformance.hf_key(b, "cpu", config)
    b.peft_config["default"].lora_alpha += 1
    assert conformance.hf_key(b, "cpu", config)["config"] != conformance.hf_key(a, "cpu", config)["config"]


def test_tokens_that_decode_alike_are_each_compared():
    """Two items whose different tokens decode to one text (ids the tokenizer lacks decode to
    nothing): the check compares each item with the sequence that is its own, not with the
    last one decoded (a 32-item check of a random model found this)."""
    import archmodels

    tok = archmodels.tokenizer()
    rec = conformance._Recorder(tok)
    unknown = len(tok) + 5
    a, b = [7, 7, unknown, 7], [7, 7, 7, unknown]
    assert rec.decode(a) == rec.decode(b)
    assert rec.tokens[rec.decode(a)] == [a, b]
    margin = conformance.Step(lambda t: 1.0 if t == unknown else 0.0, unknown, 1e-6)
    plain = conformance.Step(lambda t: 1.0 if t == 7 else 0.0, 7, 1e-6)
    steps = [plain, plain, margin, plain]
    found = [conformance.text_agrees(a, steps, fast, [1]) for fast in rec.tokens[rec.decode(a)]]
    assert found == ["equal", "wrong"]
