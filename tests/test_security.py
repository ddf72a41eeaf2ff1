"""Nothing from outside runs or lands where it should not (issue 30): training state read as
data only, local paths built from remote names kept inside their root, environment forwarded to
Ray workers only when asked, files created with the user's umask."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ckptsel.errors import CkptselError

QUESTIONS = [
    (f"What is {a} plus {b}?", f"{a} + {b} = {a + b}.\nThe answer is: {a + b}")
    for a in range(1, 5)
    for b in range(1, 3)
]


# --------------------------------------------------------------------------- resume state


class _Planted:
    """A pickle that touches a marker file when unpickled (what a planted checkpoint does)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """A tiny LoRA trajectory interrupted after its first checkpoint (25 of 30 steps)."""
    pytest.importorskip("torch")
    pytest.importorskip("peft")
    import torch

    from ckptsel.data import format_prompt
    from ckptsel.sim import save_tiny
    from ckptsel.study import Configuration
    from ckptsel.train import load_tokenizer
    from ckptsel.train.trajectory import encode_example, train_trajectory

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("resume")
    texts = [format_prompt(q) + " " + r for q, r in QUESTIONS]
    base = save_tiny(root / "tiny", texts, vocab_size=200, hidden_size=16, layers=1, heads=2)
    tok = load_tokenizer(str(base))
    examples = [encode_example(tok, format_prompt(q), r) for q, r in QUESTIONS]
    cfg = Configuration(
        name="c",
        adaptation="lora",
        rank=2,
        alpha=4,
        lr=1e-2,
        steps=30,
        save_every=25,
        batch_size=2,
        micro_batch=2,
    )

    def train(run: Path, **kw):
        return train_trajectory(
            str(base), examples, cfg, 42, run, tokenizer=tok, progress=False, **kw
        )

    run = root / "run" / "c-s42"
    assert train(run, stop_after=25).saved_steps == [25]
    yield run, train
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", "rng_state.pth"])
def test_planted_pickle_in_training_state_does_not_run(tiny_run, tmp_path, name):
    import torch

    src, train = tiny_run
    run = tmp_path / "c-s42"
    shutil.copytree(src, run)
    marker = tmp_path / "PWNED"
    torch.save({"state": _Planted(marker)}, run / "checkpoint-25" / name)
    with pytest.raises(CkptselError) as e:
        train(run)
    assert not marker.exists(), "a pickle in a checkpoint ran code"
    msg = str(e.value)
    assert "\n" not in msg and name in msg and "cannot resume" in msg and "posix.system" in msg
    # the original (ckptsel-written) state resumes as before
    shutil.copy2(src / "checkpoint-25" / name, run / "checkpoint-25" / name)
    again = train(run)
    assert again.resumed_from == 25 and again.saved_steps == [30]
    assert not marker.exists()


def test_unreadable_training_state_is_one_line(tiny_run, tmp_path):
    src, train = tiny_run
    run = tmp_path / "c-s42"
    shutil.copytree(src, run)
    (run / "checkpoint-25" / "optimizer.pt").write_bytes(b"not a torch file")
    with pytest.raises(CkptselError, match="optimizer.pt: cannot resume") as e:
        train(run)
    assert "\n" not in str(e.value)
