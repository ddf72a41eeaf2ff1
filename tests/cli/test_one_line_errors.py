"""Loud over wrong (issue 38, items 1, 10, 11), through the command line as a user types it:
each of these was a traceback, a crash or a silent pass, and is now one line naming the
file, key or option, exit 2 (``verify``: 1, the verification failed), nothing written.

* the progress bars of a batch of checkpoints whose events come interleaved (item 1: a
  ``KeyError``; the vLLM run end to end is ``tests/with_vllm/test_vllm_cli.py``);
* ``audit --threshold nan``; a step past int64 in ``ingest lm-eval`` / ``ingest inspect``;
  ``measure --only both``; ``--max-new-tokens`` past the limit; a pickled ``.bin`` that torch's
  weights-only loader refuses; a study of 99999999999999 steps (``--dry-run`` too);
* ``verify`` of a results folder holding a file its manifest does not list; a single record
  past the line limit in each log reader; ``measure --out`` into a folder of the user's files;
  the shipped inspect logs folder (a ``.json`` log beside an ``.eval`` of one checkpoint)
  ingested as-is.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ckptsel.cli.output import progress_bars
from ckptsel.measure.progress import ProgressEvent
from lmevalcase import gsm8k_checkpoint

from clirun import run_cli

DATA = Path(__file__).parents[1] / "data" / "harness_logs"
INSPECT = DATA / "inspect"
DETAILS = DATA / "lighteval" / "details"
BIG = "9" * 20  # a step of 20 digits: past int64


def one_line(code: int, said: str, expected_code: int = 2) -> str:
    """The one ``error:`` line of a refused command (no traceback)."""
    assert code == expected_code, said
    assert "Traceback" not in said, said
    errors = [ln for ln in said.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, said
    return errors[0]


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# ------------------------------------------------------------------- item 1: progress bars


@pytest.mark.parametrize("enabled", [True, False])
def test_progress_bars_take_a_batchs_interleaved_events(enabled):
    """Three adapters measured in one vLLM call: their ``step`` events come first, then their
    items, then each is recorded in turn; every bar ends whole (before: ``KeyError``)."""
    ev = ProgressEvent
    events = [ev("run", "t", total=36, units=3)]
    events += [ev("step", "t", step=s, total=12) for s in (25, 50, 75)]
    events += [ev("items", "t", step=s, done=6) for s in (25, 50, 75, 75, 50, 25)]
    events += [ev("step_done", "t", step=s, total=12) for s in (25, 50, 75)]
    events += [ev("step", "t", step=100, total=0), ev("step_done", "t", step=100, total=12)]
    with progress_bars(enabled) as on_event:
        for e in events:
            on_event(e)


# ------------------------------------------------------------------- item 10


def test_audit_threshold_nan_is_one_line(tmp_path, capsys):
    from tinyrun import make_gsm8k_rows, write_jsonl

    a = write_jsonl(tmp_path / "a.jsonl", make_gsm8k_rows(3))
    b = write_jsonl(tmp_path / "b.jsonl", make_gsm8k_rows(3, seed=5))
    for bad in ("nan", "inf"):
        line = one_line(*run_cli(["audit", "--train", a, "--validation", b, "--threshold", bad], capsys))
        assert "--threshold" in line


def test_a_step_past_int64_in_an_ingested_log_is_one_line(tmp_path, capsys):
    folder = gsm8k_checkpoint(tmp_path / "evals" / "run-x" / f"checkpoint-{BIG}", ["#### 18"], [True])
    out = tmp_path / "records"
    line = one_line(*run_cli(["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k", "--filter", "strict-match"], capsys))
    assert BIG in line and "int64" in line
    log = sorted(INSPECT.glob("*.eval"))[0]
    line = one_line(*run_cli(["ingest", "inspect", log, "--out", out, "--scorer", "match", "--steps", f"{log.name}={BIG}"], capsys))
    assert BIG in line and log.name in line
    assert not out.exists()


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    from tinyrun import build_tiny_run

    return build_tiny_run(tmp_path_factory.mktemp("loud"), steps=(2,), n_validation=2, n_test=2)


def measure_args(run, out, *extra) -> list:
    return [
        "measure",
        run.run_dir,
        "--task",
        "gsm8k",
        "--validation",
        run.validation,
        "--test",
        run.test,
        "--out",
        out,
        "--max-new-tokens",
        "4",
        "--window",
        "16",
        "--dtype",
        "float32",
        "--no-progress",
        *extra,
    ]


def test_measure_only_both_is_one_line(lora_run, tmp_path, capsys):
    """Before: a ``TypeError`` (the choices' None joined into the message)."""
    out = tmp_path / "records"
    line = one_line(*run_cli(measure_args(lora_run, out, "--only", "both"), capsys))
    assert "--only must be one of generation, nll, not 'both'" in line
    assert not out.exists()


def test_max_new_tokens_is_checked_before_anything_is_read(tmp_path, capsys):
    """Before: no upper bound (10**9 new tokens: a run that never ends, or a cache the size
    of the memory); checked with the other options, before any file is opened."""
    gone = tmp_path / "gone"
    line = one_line(
        *run_cli(
            [
                "measure",
                gone,
                "--task",
                "gsm8k",
                "--validation",
                gone,
                "--test",
                gone,
                "--out",
                gone / "r",
                "--max-new-tokens",
                "1000000000",
            ],
            capsys,
        )
    )
    assert "--max-new-tokens" in line and "131072" in line


def _evil_pickle(path: Path) -> None:
    import torch

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {path.parent / 'ran'}",))

    torch.save({"x": Evil()}, path)


@pytest.mark.parametrize("kind", ["lora", "full"])
def test_a_pickled_bin_is_refused_in_one_line_and_not_run(tmp_path, capsys, kind):
    from tinyrun import build_tiny_run

    run = build_tiny_run(tmp_path, steps=(2,), n_validation=2, n_test=2, full=kind == "full")
    ckpt = run.run_dir / "checkpoint-2"
    name = "adapter_model" if kind == "lora" else "model"
    (ckpt / f"{name}.safetensors").unlink()
    _evil_pickle(ckpt / ("adapter_model.bin" if kind == "lora" else "pytorch_model.bin"))
    out = tmp_path / "records"
    line = one_line(*run_cli(measure_args(run, out), capsys))
    assert "checkpoint-2" in line and "weights-only" in line and "safetensors" in line
    assert not (ckpt / "ran").exists()
    assert not any(out.rglob("*.parquet")) if out.exists() else True


STUDY = """schema = 2
[study]
base_model = "base"
seeds = [3]
[train]
task = "gsm8k"
file = "train.jsonl"
[validation]
task = "gsm8k"
file = "val.jsonl"
[test]
task = "gsm8k"
file = "test.jsonl"
[[configurations]]
name = "big"
steps = 99999999999999
save_every = 50
"""


@pytest.mark.parametrize("dry", [True, False])
def test_a_study_of_too_many_checkpoints_is_one_line(tmp_path, capsys, dry):
    for name in ("train", "val", "test"):
        rows = [{"question": f"q{a}?", "answer": f"x\n#### {a}"} for a in range(4)]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    before = files_under(tmp_path)
    line = one_line(*run_cli(["run", study, *(["--dry-run"] if dry else [])], capsys))
    assert "99999999999999" in line and "save_every" in line
    assert files_under(tmp_path) == before


# ------------------------------------------------------------------- item 11


@pytest.fixture(scope="module")
def analysed(tmp_path_factory):
    from ckptsel.sim.simulate import write_simulation
    from ckptsel.workflows.analysis import analyze

    tmp = tmp_path_factory.mktemp("verify")
    records = write_simulation(tmp / "sim", "small")
    analyze(records, tmp / "res", permutations=20, draws=300)
    return tmp / "res"


def test_verify_names_a_file_the_manifest_does_not_list(analysed, tmp_path, capsys):
    res = tmp_path / "res"
    shutil.copytree(analysed, res)
    code, said = run_cli(["verify", res], capsys)
    assert code == 0, said
    (res / "tables" / "extra.csv").parent.mkdir(exist_ok=True)
    (res / "tables" / "extra.csv").write_text("rule,gain\naccuracy,9.9\n")
    line = one_line(*run_cli(["verify", res], capsys), expected_code=1)
    assert "extra.csv" in line and "not listed in manifest.json" in line


def test_verify_names_the_users_files_kept_under_force(tmp_path, capsys):
    """A user's notes kept beside the results (``--force``) are named in the manifest as not
    results: verify passes and names them; one added later fails."""
    from ckptsel.sim.simulate import write_simulation
    from ckptsel.workflows.analysis import analyze

    records = write_simulation(tmp_path / "sim", "small")
    res = tmp_path / "res"
    res.mkdir()
    (res / "my-notes.md").write_text("mine\n")
    analyze(records, res, permutations=20, draws=300, force=True)
    code, said = run_cli(["verify", res], capsys)
    assert code == 0 and "my-notes.md" in said, said
    (res / "later.md").write_text("added after\n")
    line = one_line(*run_cli(["verify", res], capsys), expected_code=1)
    assert "later.md" in line


@pytest.fixture
def small_lines(monkeypatch):
    monkeypatch.setenv("CKPTSEL_MAX_LINE_BYTES", "20000")


def test_a_long_lm_eval_line_is_refused_before_it_is_parsed(tmp_path, capsys, small_lines):
    folder = gsm8k_checkpoint(tmp_path / "run-x" / "checkpoint-10", ["#### 18" + " " * 30000], [True])
    out = tmp_path / "records"
    line = one_line(*run_cli(["ingest", "lm-eval", folder, "--out", out, "--task", "gsm8k", "--filter", "strict-match"], capsys))
    assert "samples_gsm8k" in line and ":1:" in line and "CKPTSEL_MAX_LINE_BYTES" in line
    assert not out.exists()


def test_a_long_inspect_sample_is_refused_before_it_is_parsed(tmp_path, capsys, small_lines):
    from inspectcase import eval_members, write_eval

    log = write_eval(tmp_path / "long.eval", eval_members(pad_sample=30000))
    out = tmp_path / "records"
    line = one_line(*run_cli(["ingest", "inspect", log, "--out", out, "--scorer", "match"], capsys))
    assert "long.eval" in line and "member samples/" in line and "20000 bytes" in line
    assert not out.exists()


def test_a_long_lighteval_cell_is_refused_before_it_is_parsed(tmp_path, capsys, small_lines):
    """A details file whose first generation (``model_response.text``) is padded long."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    src = sorted(DETAILS.rglob("*.parquet"))[0]
    dst = tmp_path / "details" / src.relative_to(DETAILS)
    dst.parent.mkdir(parents=True)
    table = pq.read_table(src)
    col = table.column("model_response")
    kind, i = col.type, col.type.get_field_index("text")
    fields = [pc.struct_field(col, [k]).combine_chunks() for k in range(kind.num_fields)]
    texts = fields[i].to_pylist()
    texts[0] = ["#### 18" + " " * 30000]
    fields[i] = pa.array(texts, type=kind.field(i).type)
    rebuilt = pa.StructArray.from_arrays(fields, fields=list(kind))
    where = table.column_names.index("model_response")
    pq.write_table(table.set_column(where, "model_response", rebuilt), dst)
    out = tmp_path / "records"
    line = one_line(*run_cli(["ingest", "lighteval", tmp_path / "details", "--out", out], capsys))
    assert dst.name in line and "model_response.text" in line
    assert not out.exists()


def test_measure_refuses_an_out_of_the_users_files(lora_run, tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "thesis.tex").write_text("my work\n")
    (out / "data").mkdir()
    line = one_line(*run_cli(measure_args(lora_run, out), capsys))
    assert "not a records folder" in line and "'data' and 1 more" in line
    assert files_under(out) == ["data", "thesis.tex"]


def test_the_shipped_inspect_folder_ingests_as_is(tmp_path, capsys):
    """The folder holds a ``.json`` log beside an ``.eval`` of one checkpoint (tiny-b, step
    80): the newest is used and the other named in a note (before: 'given twice')."""
    out = tmp_path / "records"
    code, said = run_cli(["ingest", "inspect", INSPECT, "--out", out, "--scorer", "match"], capsys)
    assert code == 0, said
    assert "the newest is used" in said and "ignoring" in said and ".eval" in said
    from ckptsel.records.scan import read_frame

    gen = read_frame(out, "generations")
    assert len(gen) == 6 * 12 and not gen.duplicated(["trajectory", "step", "item_id"]).any()
