"""Build records tables (SPEC §2) from small arrays, for hand-computed and randomized tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ckptsel.records.load import ValidationData, load_test, load_validation
from ckptsel.records.schema import GENERATION_COLUMNS, NLL_COLUMNS
from ckptsel.records.store import write_records


@dataclass
class Traj:
    name: str
    configuration: str
    task: str
    steps: list[int]
    val_correct: np.ndarray  # (T, n) bool
    val_answers: np.ndarray  # (T, n) str
    val_nll: np.ndarray  # (T, n) float
    val_tokens: np.ndarray  # (n,) int
    test_correct: np.ndarray  # (T, N) bool
    test_answers: np.ndarray  # (T, N) str
    val_ids: list[str] | None = None
    test_ids: list[str] | None = None
    val_groups: list[str] | None = None
    test_subtasks: list[str] | None = None
    val_nll0: np.ndarray | None = None  # complete-response nll (window 0)
    extra: dict = field(default_factory=dict)


def tables(trajs: list[Traj]) -> tuple[pd.DataFrame, pd.DataFrame]:
    gens, nlls = [], []
    for t in trajs:
        T, n = t.val_correct.shape
        N = t.test_correct.shape[1]
        vids = t.val_ids or [f"v{i:04d}" for i in range(n)]
        tids = t.test_ids or [f"t{i:04d}" for i in range(N)]
        groups = t.val_groups or vids
        subt = t.test_subtasks or [""] * N
        for c, step in enumerate(t.steps):
            gens.append(
                pd.DataFrame(
                    {
                        "trajectory": t.name,
                        "configuration": t.configuration,
                        "task": t.task,
                        "step": step,
                        "split": "validation",
                        "item_id": vids,
                        "group": groups,
                        "subtask": "",
                        "answer": t.val_answers[c].astype(str),
                        "correct": t.val_correct[c].astype(bool),
                    }
                )
            )
            gens.append(
                pd.DataFrame(
                    {
                        "trajectory": t.name,
                        "configuration": t.configuration,
                        "task": t.task,
                        "step": step,
                        "split": "test",
                        "item_id": tids,
                        "group": tids,
                        "subtask": subt,
                        "answer": t.test_answers[c].astype(str),
                        "correct": t.test_correct[c].astype(bool),
                    }
                )
            )
            nlls.append(
                pd.DataFrame(
                    {
                        "trajectory": t.name,
                        "step": step,
                        "split": "validation",
                        "item_id": vids,
                        "nll_sum": t.val_nll[c].astype(float),
                        "n_tokens": np.asarray(t.val_tokens, dtype=np.int64),
                        "window": 512,
                    }
                )
            )
            if t.val_nll0 is not None:
                nlls.append(
                    pd.DataFrame(
                        {
                            "trajectory": t.name,
                            "step": step,
                            "split": "validation",
                            "item_id": vids,
                            "nll_sum": t.val_nll0[c].astype(float),
                            "n_tokens": np.asarray(t.val_tokens, dtype=np.int64) + 5,
                            "window": 0,
                        }
                    )
                )
    gen = pd.concat(gens, ignore_index=True).astype(GENERATION_COLUMNS)
    nll = pd.concat(nlls, ignore_index=True).astype(NLL_COLUMNS)
    return gen, nll


def write(dir_: Path, gen: pd.DataFrame, nll: pd.DataFrame) -> Path:
    dir_ = Path(dir_)
    write_records(dir_ / "generations.parquet", gen)
    write_records(dir_ / "nll.parquet", nll)
    return dir_


def one_trajectory(dir_: Path, name: str, val, test=None, groups=None) -> Path:
    """Records of one trajectory ``name`` (under ``dir_/name``) whose checkpoints (steps 25, 50,
    …) are right on ``val`` (T, n) validation items and ``test`` (T, N) test items (default:
    ``val``); ``groups``: the validation items' groups."""
    val = np.asarray(val, dtype=bool)
    test = val if test is None else np.asarray(test, dtype=bool)
    T, n = val.shape
    traj = Traj(
        name=name,
        configuration="c",
        task="gsm8k",
        steps=[25 * (i + 1) for i in range(T)],
        val_correct=val,
        val_answers=np.where(val, "A", "B"),
        val_nll=np.ones((T, n)),
        val_tokens=np.full(n, 3),
        test_correct=test,
        test_answers=np.where(test, "A", "B"),
        val_groups=groups,
    )
    return write(Path(dir_) / name, *tables([traj]))


def estimates_in(node, path=()):
    """``(path, estimate)`` of every estimate (``{"mean", "lo", "hi", "unresolved", …}``) in a
    summary.json-like tree, depth first."""
    if isinstance(node, dict):
        if {"mean", "lo", "hi", "unresolved"} <= set(node):
            yield path, node
        else:
            for k, v in node.items():
                yield from estimates_in(v, (*path, k))


def random_study(
    rng: np.random.Generator,
    n_configs=4,
    seeds=2,
    T=(3, 6),
    n_val=(20, 70),
    n_test=(15, 40),
    n_answers=3,
    tasks=("a", "b"),
    dyadic=True,
    groups=True,
    nll0=True,
) -> list[Traj]:
    """Random small study with heavy ties: few answers, few checkpoints, dyadic NLLs (exact sums)."""
    trajs = []
    pools = {}
    for task in tasks:
        nv, nt = int(rng.integers(*n_val)), int(rng.integers(*n_test))
        pools[task] = (nv, nt, [f"g{int(i)}" for i in rng.integers(0, max(2, nv // 3), nv)] if groups else None)
    for k in range(n_configs):
        task = tasks[k % len(tasks)]
        nv, nt, grp = pools[task]
        Tk = int(rng.integers(*T))
        for s in range(seeds):

            def answers(shape):
                return rng.integers(0, n_answers, shape)

            va, ta = answers((Tk, nv)), answers((Tk, nt))
            nll = (rng.integers(1, 9, (Tk, nv)) / 8.0) if dyadic else rng.gamma(2.0, 1.0, (Tk, nv))
            trajs.append(
                Traj(
                    name=f"c{k}-s{s}",
                    configuration=f"c{k}",
                    task=task,
                    steps=[25 * (i + 1) for i in range(Tk)],
                    val_correct=va == 0,
                    val_answers=np.char.add("ans", va.astype(str)),
                    val_nll=nll,
                    val_tokens=rng.integers(1, 30, nv),
                    test_correct=ta == 0,
                    test_answers=np.char.add("ans", ta.astype(str)),
                    val_groups=grp,
                    val_nll0=(nll + rng.integers(0, 3, (Tk, nv)) / 4.0) if nll0 else None,
                )
            )
    return trajs


def as_zero_width(d):
    """``summary.json`` as written before estimates could be *not estimable* (issue 29): every
    ``{"mean", "lo": null, "hi": null, "unresolved": true, "not_estimable": why}`` back to the
    zero-width interval ``[mean, mean]`` it used to be (unresolved only when the mean is 0).
    Pinned hashes of older summaries hold for the result iff nothing else changed."""
    if isinstance(d, list):
        return [as_zero_width(v) for v in d]
    if not isinstance(d, dict):
        return d
    if "not_estimable" in d and {"mean", "lo", "hi", "unresolved"} <= set(d):
        m = d["mean"]
        return {"mean": m, "lo": m, "hi": m, "unresolved": m == 0.0}
    return {k: as_zero_width(v) for k, v in d.items()}


def as_resolvable(d, found: list | None = None):
    """``summary.json`` as written before the small-design rule (issue 38): every
    ``{"mean", "lo", "hi", "unresolved": true, "cannot_resolve": why}`` back to the resolved
    interval it used to be (``found`` collects the reasons). Pinned hashes of older summaries
    hold for the result iff nothing else changed."""
    if isinstance(d, list):
        return [as_resolvable(v, found) for v in d]
    if not isinstance(d, dict):
        return d
    if "cannot_resolve" in d and {"mean", "lo", "hi", "unresolved"} <= set(d):
        if found is not None:
            found.append(d["cannot_resolve"])
        return {"mean": d["mean"], "lo": d["lo"], "hi": d["hi"], "unresolved": False}
    return {k: as_resolvable(v, found) for k, v in d.items()}


def same_loads(a: Path, b: Path) -> None:
    va, vb = load_validation(a), load_validation(b)
    ta, tb = load_test(a, va), load_test(b, vb)
    assert [v.trajectory for v in va] == [v.trajectory for v in vb]
    for x, y in zip(va + ta, vb + tb, strict=True):
        for name, value in vars(x).items():
            other = getattr(y, name)
            if isinstance(value, dict):
                assert value.keys() == other.keys()
                for k in value:
                    np.testing.assert_array_equal(value[k], other[k])
            elif name == "answers":  # integer codes: equal up to a relabelling
                pairs = np.unique(np.stack([value.ravel(), other.ravel()]), axis=1)
                assert value.shape == other.shape
                assert pairs.shape[1] == len(np.unique(value)) == len(np.unique(other))
            else:
                np.testing.assert_array_equal(value, other)


def val(correct, answers=None, nll=None, tokens=None, groups=None, nll0=None) -> ValidationData:
    correct = np.asarray(correct, dtype=bool)
    T, n = correct.shape
    nll = np.ones((T, n)) if nll is None else np.asarray(nll, dtype=float)
    tokens = np.ones(n, dtype=np.int64) if tokens is None else np.asarray(tokens)
    windows = {512: nll}
    if nll0 is not None:
        windows[0] = np.asarray(nll0, dtype=float)
    return ValidationData(
        trajectory="t",
        configuration="c",
        task="x",
        steps=np.arange(1, T + 1) * 25,
        item_ids=np.array([f"i{k:03d}" for k in range(n)]),
        groups=np.array(groups if groups is not None else [f"i{k:03d}" for k in range(n)]),
        correct=correct,
        answers=np.zeros((T, n), dtype=np.int64) if answers is None else np.asarray(answers),
        nll=windows,
        n_tokens={w: tokens for w in windows},
    )
