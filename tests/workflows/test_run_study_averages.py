"""``[averages]`` in study.toml: read and checked key by key (one line naming the key and its
line), covered by the frozen protocol and the study's fingerprint, and, in ``ckptsel run``,
written beside each trajectory once it has its checkpoints (trained here, or run folders found
by a glob), then measured with them at their reserved steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError
from ckptsel.study.protocol import check_protocol, freeze, protocol_content
from ckptsel.study.spec import load_spec
from ckptsel.workflows.study_run.fingerprint import fingerprint_diff

from tinyrun import MINIMAL, gsm_rows, jsonl, write


@pytest.fixture
def study_dir(tmp_path: Path) -> Path:
    for name, n in (("train", 10), ("val", 6), ("test", 6)):
        jsonl(tmp_path / f"{name}.jsonl", gsm_rows(n))
    return tmp_path


def test_averages_are_read(study_dir: Path) -> None:
    spec = load_spec(write(study_dir / "s.toml", MINIMAL + "[averages]\nlast = [3, 5]\nema = 0.9\n"))
    assert spec.averages == {"last": [3, 5], "ema": 0.9}
    assert spec.average_names() == ["average-last3", "average-last5", "ema-0.9"]
    only = load_spec(write(study_dir / "s.toml", MINIMAL + "[averages]\nema = 0.99\n"))
    assert only.averages == {"last": [], "ema": 0.99} and only.average_names() == ["ema-0.99"]
    assert load_spec(write(study_dir / "s.toml", MINIMAL)).averages == {}


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("last = 3", r"line 19: \[averages\] last: must be list, got 3"),
        ('last = ["3"]', r"line 19: \[averages\] last: must be a list of integers K"),
        ("last = [true]", r"\[averages\] last: must be a list of integers K"),
        ("last = [2.5]", r"\[averages\] last: must be a list of integers K"),
        ("last = [1]", r"\[averages\] last: K must be between 2 and 999 .*got 1"),
        ("last = [3, 1000]", r"\[averages\] last: K must be between 2 and 999 .*got 1000"),
        ("last = [3, 3]", r"\[averages\] last: contains duplicates"),
        ('ema = "0.9"', r"\[averages\] ema: must be int or float"),
        ("ema = 1", r"\[averages\] ema: the decay must be between 0 and 1"),
        ("ema = 0.0", r"\[averages\] ema: the decay must be between 0 and 1"),
        ("ema = nan", r"\[averages\] ema: the decay must be between 0 and 1"),
        ("ema = 0.1234567", r"\[averages\] ema: a decay of at most six decimals"),
        ("ema = 1e-7", r"\[averages\] ema: a decay of at most six decimals"),
        ("k = 3", r"line 19: \[averages\] k: unknown key \(known: ema, last\)"),
        ("last = []", r"line 18: \[averages\]: give last = \[K, ...\] and/or ema = DECAY"),
    ],
)
def test_bad_averages_name_the_key_and_line(study_dir: Path, table: str, message: str) -> None:
    with pytest.raises(CkptselError, match=message) as err:
        load_spec(write(study_dir / "s.toml", MINIMAL + f"[averages]\n{table}\n"))
    assert "\n" not in str(err.value)


def test_averages_is_a_table(study_dir: Path) -> None:
    with pytest.raises(CkptselError, match=r"averages: must be a table"):
        load_spec(write(study_dir / "s.toml", "averages = 3\n" + MINIMAL))


def test_the_protocol_covers_the_averages(study_dir: Path) -> None:
    study = write(study_dir / "s.toml", MINIMAL + "[averages]\nlast = [3]\n")
    assert protocol_content(study)["study"]["averages"] == {"last": [3]}
    freeze(study)
    assert check_protocol(study) is not None
    write(study, MINIMAL + "[averages]\nlast = [3, 5]\n")
    with pytest.raises(CkptselError, match=r"averages\.last"):
        check_protocol(study)


def test_the_fingerprint_takes_added_averages_as_new_work() -> None:
    before = {"averages": ["average-last3"], "seeds": [1]}
    assert fingerprint_diff({"seeds": [1]}, before) == []
    assert fingerprint_diff(before, {**before, "averages": ["average-last3", "ema-0.9"]}) == []
    assert fingerprint_diff(before, {"seeds": [1]}) == ["averages ['average-last3'] were removed (their records remain)"]


# --------------------------------------------------------------------------- ckptsel run


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """A study of one configuration trained here (3 checkpoints) and one of run folders found
    by a glob (2 checkpoints each), ``[averages] last = [2]``, run to the end of ``measure``."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    from ckptsel.cli.app import main

    from tinyrun import TEMPLATE_HINT, build_tiny_base, save_lora_checkpoints

    root = tmp_path_factory.mktemp("study")
    for name, n in (("train", 12), ("val", 4), ("test", 4)):
        jsonl(root / f"{name}.jsonl", gsm_rows(n))
    texts = [TEMPLATE_HINT.format(instruction=r["question"]) + " " + r["answer"] for r in gsm_rows(12)]
    base = build_tiny_base(root / "base", texts, hidden_size=32)
    for seed in (1, 2):
        save_lora_checkpoints(base, root / "ext" / f"b-s{seed}", [5, 10], seed=seed)
    study = write(
        root / "s.toml",
        MINIMAL.replace('base_model = "base"', f'base_model = "{base}"').replace("steps = 2", "steps = 3\nbatch_size = 4\nmicro_batch = 4")
        + '[[configurations]]\nname = "b"\nruns = "ext/b-s*"\n'
        + '[measure]\nmax_new_tokens = 4\nbatch_size = 8\ndevice = "cpu"\n[averages]\nlast = [2]\n',
    )

    def run(*extra: str) -> None:
        try:
            main(["run", str(study), "--until", "measure", *extra])
        except SystemExit as exc:
            assert exc.code in (0, None)

    return root, study, run


def test_run_writes_and_measures_the_averages(ran, capsys) -> None:
    from ckptsel.records.scan import read_frame

    root, study, run = ran
    capsys.readouterr()
    run("--dry-run")  # the averages are candidates of the plan: 3 + 1, 2 + 1, 2 + 1
    assert "3 trajectories x 10 checkpoints in all x 8 items: 80 generations to do" in capsys.readouterr().out
    run()
    said = capsys.readouterr()
    text = said.out + said.err
    for traj, folder in (("a-s1", root / "runs" / "a-s1"), ("b-s1", root / "ext" / "b-s1"), ("b-s2", root / "ext" / "b-s2")):
        record = json.loads((folder / "average-last2" / "ckptsel_average.json").read_text())
        assert record["method"] == "mean" and len(record["sources"]) == 2, traj
    assert "averages average-last2 written" in text
    gen = read_frame(root / "records", "generations")
    steps = {t: sorted(set(g["step"])) for t, g in gen.groupby("trajectory")}
    assert steps == {"a-s1": [-2, 1, 2, 3], "b-s1": [-2, 5, 10], "b-s2": [-2, 5, 10]}
    # again: nothing written, nothing measured
    before = gen.sort_values(["trajectory", "step", "split", "item_id"]).reset_index(drop=True)
    capsys.readouterr()
    run()
    again = capsys.readouterr().out
    assert "written" not in again and "0 measured" in again
    after = read_frame(root / "records", "generations").sort_values(["trajectory", "step", "split", "item_id"]).reset_index(drop=True)
    assert after.drop(columns="provenance", errors="ignore").equals(before.drop(columns="provenance", errors="ignore"))
