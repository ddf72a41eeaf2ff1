"""The loaded records as named arrays and back: what :func:`ckptsel.records.cache.memo.cached`
stores for :func:`ckptsel.records.load_validation` and :func:`ckptsel.records.load_test`.

The loaders' dataclasses are given by the caller (``make``): the codec knows their fields, not
their home (the contract's loaders in :mod:`ckptsel.records.load`, which import this package).
Shapes, dtypes and memory order are kept (:mod:`ckptsel.records.cache.memo` stores them so).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ckptsel.records.cache.memo import array_json, json_array

_VALIDATION_ARRAYS = ("steps", "item_ids", "groups", "correct", "answers")
_TEST_ARRAYS = ("steps", "item_ids", "subtasks", "correct", "answers", "groups")


def encode_validation(loaded: list) -> dict[str, np.ndarray]:
    """``loaded`` (:class:`~ckptsel.records.ValidationData`) as named arrays (shapes kept)."""
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for i, v in enumerate(loaded):
        meta.append([v.trajectory, v.configuration, v.task, v.exclusions, list(v.nll), list(v.n_tokens)])
        for name in _VALIDATION_ARRAYS:
            arrays[f"{i}.{name}"] = getattr(v, name)
        for w, mat in v.nll.items():
            arrays[f"{i}.nll.{w}"] = mat
        for w, tok in v.n_tokens.items():
            arrays[f"{i}.n_tokens.{w}"] = tok
    return {"meta": json_array(meta), **arrays}


def decode_validation(arrays, make: Callable) -> list:
    """Inverse of :func:`encode_validation`; ``make``: the ``ValidationData`` class."""
    out = []
    for i, (traj, configuration, task, exclusions, nll_w, tok_w) in enumerate(array_json(arrays["meta"])):
        a = {name: arrays[f"{i}.{name}"] for name in _VALIDATION_ARRAYS}
        out.append(
            make(
                trajectory=traj,
                configuration=configuration,
                task=task,
                **a,
                nll={w: arrays[f"{i}.nll.{w}"] for w in nll_w},
                n_tokens={w: arrays[f"{i}.n_tokens.{w}"] for w in tok_w},
                exclusions=exclusions,
            )
        )
    return out


def encode_test(loaded: list) -> dict[str, np.ndarray]:
    """``loaded`` (:class:`~ckptsel.records.TestData`) as named arrays (shapes kept)."""
    arrays = {f"{i}.{name}": getattr(t, name) for i, t in enumerate(loaded) for name in _TEST_ARRAYS}
    meta = [[t.trajectory, t.configuration, t.task] for t in loaded]
    return {"meta": json_array(meta), **arrays}


def decode_test(arrays, make: Callable) -> list:
    """Inverse of :func:`encode_test`; ``make``: the ``TestData`` class."""
    return [
        make(trajectory=traj, configuration=configuration, task=task, **{name: arrays[f"{i}.{name}"] for name in _TEST_ARRAYS})
        for i, (traj, configuration, task) in enumerate(array_json(arrays["meta"]))
    ]
