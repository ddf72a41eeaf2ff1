"""``ckptsel measure`` on a tiny local run: every record checked against independent code."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from ckptsel.records.scan import read_frame

torch = pytest.importorskip("torch")
pytest.importorskip("peft")

from ckptsel.errors import CkptselError  # noqa: E402
from ckptsel.records.schema import GENERATION_COLUMNS, NLL_COLUMNS  # noqa: E402

from clirun import exit_code  # noqa: E402
from tinyrun import build_tiny_run, make_gsm8k_rows, write_jsonl  # noqa: E402

WINDOW = 64  # small matched window so the long test responses are really truncated
MAX_NEW = 16


pytestmark = pytest.mark.usefixtures("one_thread")


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
        "--window",
        str(WINDOW),
        "--no-progress",
        *extra,
    ]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    run = build_tiny_run(root, steps=(10, 20, 30), n_validation=8, n_test=6, long_every=3)
    out = root / "records"
    assert exit_code(measure_args(run, out)) == 0
    gen = read_frame(out, "generations")
    nll = read_frame(out, "nll")
    return run, out, gen, nll


def load_checkpoint(run, step: int):
    """Independent loading: a fresh base + the step's adapter."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = AutoModelForCausalLM.from_pretrained(str(run.base), dtype=torch.float32)
    model = PeftModel.from_pretrained(base, str(run.run_dir / f"checkpoint-{step}")).eval()
    return model, AutoTokenizer.from_pretrained(str(run.base))


def direct_nll(model, tok, prompt: str, response: str, window: int) -> tuple[float, int]:
    """Reference NLL: one unpadded sequence, truncated to ``window`` tokens before the forward."""
    p = tok(prompt)["input_ids"]
    r = tok(response, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
    seq = (p + r)[:window] if window else p + r
    n = len(seq) - len(p)
    with torch.no_grad():
        logp = model(input_ids=torch.tensor([seq])).logits[0].double().log_softmax(-1)
    return -sum(float(logp[len(p) - 1 + k, r[k]]) for k in range(n)), n


def direct_text(model, tok, prompt: str) -> str:
    ids = torch.tensor([tok(prompt)["input_ids"]])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=MAX_NEW,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
            eos_token_id=tok.eos_token_id,
        )
    new = out[0, ids.shape[1] :].tolist()
    if tok.eos_token_id in new:
        new = new[: new.index(tok.eos_token_id)]
    return tok.decode(new, skip_special_tokens=True)


def test_contract_columns_and_keys(measured):
    run, _, gen, nll = measured
    assert list(gen.columns) == [*GENERATION_COLUMNS, "text"]
    assert list(nll.columns) == list(NLL_COLUMNS)
    assert {c: str(gen[c].dtype) for c in GENERATION_COLUMNS} == {c: ("bool" if t == "bool" else t) for c, t in GENERATION_COLUMNS.items()}
    assert {c: str(nll[c].dtype) for c in NLL_COLUMNS} == NLL_COLUMNS
    assert not gen.duplicated(["trajectory", "step", "split", "item_id"]).any()
    assert not nll.duplicated(["trajectory", "step", "split", "item_id", "window"]).any()
    assert sorted(gen["step"].unique()) == list(run.steps)
    assert gen.groupby("split").size().to_dict() == {"test": 6 * 3, "validation": 8 * 3}
    assert set(nll["window"]) == {0, WINDOW}
    assert len(nll) == 2 * len(gen)
    assert set(gen["trajectory"]) == {"run-a"} and set(gen["configuration"]) == {"run-a"}


def test_every_record_matches_direct_forward_and_generate(measured):
    from ckptsel.data import scoring as answers
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items

    run, _, gen, nll = measured
    items = {"validation": load_items("gsm8k", run.validation), "test": load_items("gsm8k", run.test)}
    g = gen.set_index(["step", "split", "item_id"])
    n = nll.set_index(["step", "split", "item_id", "window"])
    checked = 0
    for step in run.steps:
        model, tok = load_checkpoint(run, step)
        for split, its in items.items():
            for it in its:
                prompt = format_prompt(it.instruction)
                for w in (0, WINDOW):
                    want, k = direct_nll(model, tok, prompt, it.response, w)
                    row = n.loc[(step, split, it.item_id, w)]
                    assert row["n_tokens"] == k
                    assert row["nll_sum"] == pytest.approx(want, rel=1e-6, abs=1e-6)
                text = direct_text(model, tok, prompt)
                row = g.loc[(step, split, it.item_id)]
                assert row["text"] == text
                assert row["answer"] == answers.extract("gsm8k", text)
                assert bool(row["correct"]) == answers.is_correct("gsm8k", text, it.reference)
                checked += 1
    assert checked == 3 * 14


def test_checkpoints_differ(measured):
    _, _, gen, nll = measured
    w0 = nll[nll["window"] == 0].pivot_table(index=["split", "item_id"], columns="step", values="nll_sum")
    assert (w0[10] != w0[20]).all() and (w0[20] != w0[30]).all()
    texts = gen.pivot_table(index=["split", "item_id"], columns="step", values="text", aggfunc="first")
    assert (texts[10] != texts[30]).any()


def test_window_truncates_long_responses_and_window0_is_complete(measured):
    from transformers import AutoTokenizer

    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items

    run, _, _, nll = measured
    tok = AutoTokenizer.from_pretrained(str(run.base))
    n = nll[nll["step"] == 10].set_index(["split", "item_id", "window"])["n_tokens"]
    truncated = 0
    for split, path in (("validation", run.validation), ("test", run.test)):
        for it in load_items("gsm8k", path):
            n_p = len(tok(format_prompt(it.instruction))["input_ids"])
            n_r = len(tok(it.response, add_special_tokens=False)["input_ids"]) + 1
            assert n[(split, it.item_id, 0)] == n_r  # complete response + EOS
            assert n[(split, it.item_id, WINDOW)] == max(0, min(n_r, WINDOW - n_p))
            truncated += n[(split, it.item_id, WINDOW)] < n_r
    assert truncated >= 4  # the long responses (every 3rd item) really were cut


def test_n_tokens_constant_across_checkpoints(measured):
    _, _, _, nll = measured
    assert (nll.groupby(["split", "item_id", "window"])["n_tokens"].nunique() == 1).all()


def test_batch_size_does_not_change_answers_or_nll(measured):
    from ckptsel.data.prompts import format_prompt
    from ckptsel.data.tasks import load_items
    from ckptsel.measure.passes import generate_texts, response_nll

    run, *_ = measured
    model, tok = load_checkpoint(run, 20)
    its = load_items("gsm8k", run.validation) + load_items("gsm8k", run.test)
    prompts = [format_prompt(it.instruction) for it in its]
    one = generate_texts(model, tok, prompts, batch_size=1, max_new_tokens=MAX_NEW)
    seven = generate_texts(model, tok, prompts, batch_size=7, max_new_tokens=MAX_NEW)
    assert one == seven
    a = response_nll(model, tok, prompts, [it.response for it in its], windows=(WINDOW, 0), batch_size=1)
    b = response_nll(model, tok, prompts, [it.response for it in its], windows=(WINDOW, 0), batch_size=7)
    for x, y in zip(a, b, strict=True):
        for w in (WINDOW, 0):
            assert x[w].n_tokens == y[w].n_tokens
            assert x[w].nll_sum == pytest.approx(y[w].nll_sum, rel=1e-6)


def test_measure_model_in_memory(measured):
    from ckptsel.data.tasks import load_items
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.measurer import measure_model

    run, _, gen, nll = measured
    model, tok = load_checkpoint(run, 30)
    its = load_items("gsm8k", run.test)
    g, n = measure_model(
        model,
        tok,
        its,
        MeasureConfig("gsm8k", batch_size=3, max_new_tokens=MAX_NEW, window=WINDOW),
        split="test",
        trajectory="run-a",
        step=30,
    )
    ref_g = gen[(gen["step"] == 30) & (gen["split"] == "test")].reset_index(drop=True)
    pd.testing.assert_frame_equal(g.sort_values("item_id").reset_index(drop=True), ref_g)
    ref_n = nll[(nll["step"] == 30) & (nll["split"] == "test")]
    m = n.merge(ref_n, on=["item_id", "window"], suffixes=("", "_ref"))
    assert len(m) == len(ref_n) == 2 * len(its)
    assert (m["n_tokens"] == m["n_tokens_ref"]).all()
    assert m["nll_sum"].to_numpy() == pytest.approx(m["nll_sum_ref"].to_numpy(), rel=1e-6)


def test_lora_run_loads_the_base_once_and_full_run_swaps_into_one_model(tmp_path):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    run = build_tiny_run(tmp_path / "full", steps=(5, 7), n_validation=3, n_test=2, full=True, run_name="full")
    config = MeasureConfig("gsm8k", max_new_tokens=4, window=WINDOW)
    res = measure_run(run.run_dir, config, validation=run.validation, test=run.test, out=tmp_path / "rec")
    assert res.model_loads == 1 and res.measured_steps == [5, 7]  # step 7 swapped in (issue 31)
    lora = build_tiny_run(tmp_path / "lora", steps=(1, 2, 3), n_validation=3, n_test=2)
    res = measure_run(lora.run_dir, config, validation=lora.validation, test=lora.test, out=tmp_path / "rec", trajectory="lora-run")
    assert res.model_loads == 1 and res.measured_steps == [1, 2, 3]
    gen = read_frame(tmp_path / "rec", "generations")
    assert gen.groupby("trajectory")["step"].unique().map(sorted).to_dict() == {"full": [5, 7], "lora-run": [1, 2, 3]}


# --------------------------------------------------------------------------- bad input


@pytest.fixture()
def recorded(measured, tmp_path):
    """A copy of the run and of its records, to break things in."""
    run, out, *_ = measured
    root = tmp_path / "copy"
    shutil.copytree(run.run_dir, root / "run-a")
    shutil.copytree(out, root / "records")
    before = {p.name: p.read_bytes() for p in (root / "records").glob("*.parquet")}
    return run, root / "run-a", root / "records", before


def assert_bad(args: list[str], capsys, *needles: str) -> None:
    assert exit_code(args) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


def unchanged(records: Path, before: dict[str, bytes]) -> bool:
    return {p.name: p.read_bytes() for p in records.glob("*.parquet")} == before


def _args(run, run_dir: Path, out: Path, **over: str) -> list[str]:
    opts = {"--task": "gsm8k", "--validation": str(run.validation), "--test": str(run.test)}
    opts.update(over)
    args = ["measure", str(run_dir), "--out", str(out), "--no-progress", "--max-new-tokens", "4"]
    for k, v in opts.items():
        args += [k, v]
    return args


def test_bad_malformed_checkpoint(recorded, capsys):
    run, run_dir, out, before = recorded
    (run_dir / "checkpoint-40").mkdir()
    assert_bad(_args(run, run_dir, out), capsys, "checkpoint-40", "adapter_config.json")
    assert unchanged(out, before)
    shutil.rmtree(run_dir / "checkpoint-40")
    (run_dir / "checkpoint-final").mkdir()
    assert_bad(_args(run, run_dir, out), capsys, "checkpoint-final", "integer")
    assert unchanged(out, before)


def test_bad_adapter_base_missing(recorded, capsys):
    run, run_dir, out, before = recorded
    cfg_path = run_dir / "checkpoint-20" / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = str(run.base.parent / "no-such-base")
    cfg_path.write_text(json.dumps(cfg))
    assert_bad(_args(run, run_dir, out), capsys, "no-such-base", "base_model_name_or_path", "--base")
    assert unchanged(out, before)
    (run_dir / "checkpoint-30" / "adapter_config.json").write_text("{not json")
    assert_bad(_args(run, run_dir, out, **{"--base": str(run.base)}), capsys, "checkpoint-30", "JSON")
    assert unchanged(out, before)


def test_bad_no_checkpoints_unknown_task_and_items(recorded, tmp_path, capsys):
    run, run_dir, out, before = recorded
    empty = tmp_path / "empty-run"
    empty.mkdir()
    assert_bad(_args(run, empty, out), capsys, "no checkpoint-<step> folders", str(empty))
    assert_bad(_args(run, run_dir, out, **{"--task": "nosuchtask"}), capsys, "nosuchtask")
    rows = make_gsm8k_rows(3)
    del rows[1]["answer"]
    bad = write_jsonl(tmp_path / "missing.jsonl", rows)
    assert_bad(_args(run, run_dir, out, **{"--validation": str(bad)}), capsys, "missing.jsonl", "answer")
    rows = [dict(r, id="same") for r in make_gsm8k_rows(2)]
    dup = write_jsonl(tmp_path / "dup.jsonl", rows)
    assert_bad(_args(run, run_dir, out, **{"--test": str(dup)}), capsys, "dup.jsonl", "same")
    assert_bad(_args(run, run_dir, out, **{"--test": str(tmp_path / "absent.jsonl")}), capsys, "absent.jsonl")
    assert unchanged(out, before)


def test_bad_options(recorded, capsys):
    run, run_dir, out, before = recorded
    assert_bad(_args(run, run_dir, out, **{"--batch-size": "0"}), capsys, "--batch-size")
    assert_bad(_args(run, run_dir, out, **{"--trajectory": "a/b"}), capsys, "trajectory name")
    assert_bad(_args(run, run_dir, out, **{"--backend": "tgi"}), capsys, "--backend")
    assert unchanged(out, before)


def test_vllm_backend_without_vllm_says_how_to_install(recorded, capsys):
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vllm is installed here")
    run, run_dir, out, before = recorded
    assert_bad(_args(run, run_dir, out, **{"--backend": "vllm"}), capsys, "vllm", "pip install")
    assert unchanged(out, before)


def test_measure_run_raises_ckptsel_error(measured, tmp_path):
    from ckptsel.measure.config import MeasureConfig
    from ckptsel.measure.run import measure_run

    run, *_ = measured
    with pytest.raises(CkptselError, match="run directory not found"):
        measure_run(tmp_path / "nope", MeasureConfig("gsm8k"), validation=run.validation, test=run.test, out=tmp_path / "rec")
    assert not (tmp_path / "rec").exists()
