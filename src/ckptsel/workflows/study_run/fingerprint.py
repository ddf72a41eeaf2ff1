"""The study's fingerprint: the settings its recorded work depends on (base model, data and
pools, measurement fingerprints, seeds, configurations, the ``[averages]`` folders), stored in
``<workdir>/.ckptsel/fingerprint.json``. :func:`check_fingerprint` refuses a study whose changes
would mix old and new work, naming each difference (:func:`fingerprint_diff`); added
configurations, seeds or averages are new work, not a change.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from ckptsel._util.io import write_text
from ckptsel.data.pools import pool_digest
from ckptsel.errors import CkptselError
from ckptsel.workflows.study_run.context import StudyContext

FINGERPRINT_FILE = "fingerprint.json"


def fingerprint(ctx: StudyContext) -> dict[str, Any]:
    """The settings that recorded work depends on."""
    spec = ctx.spec
    st, (val, test) = spec.study, ctx.pools
    cfg = ctx.measure_config
    stated = cfg.measured.fmt
    if stated is not None and stated.kind == "chat" and not stated.chat_template:
        from ckptsel._util.nodecache import local_ref
        from ckptsel.train.models import load_tokenizer

        # a chat format is named by its template: the base model's (trained here, it is the
        # template every checkpoint's tokenizer carries)
        cfg = cfg.bind_format(load_tokenizer(local_ref(st.base_model)), where=str(st.base_model))
    averages = {"averages": spec.average_names()} if spec.averages else {}
    return {
        **averages,
        "base_model": st.base_model,
        "train": {
            "task": st.task,
            "file": str(st.train) if st.configurations else None,
            "split": None if spec.split is None else _jsonable(asdict(spec.split)),
        },
        "validation": {**ctx.validation_spec.settings(), "items": pool_digest(val)},
        "test": {**spec.test.settings(), "items": pool_digest(test)},
        "measure": {"generation": cfg.generation_fingerprint(), "nll": cfg.nll_fingerprint()},
        "seeds": list(st.seeds),
        "configurations": {
            **{c.name: _jsonable(asdict(c)) for c in st.configurations},
            **{e.name: _jsonable(asdict(e)) for e in spec.external},
        },
    }


def check_fingerprint(ctx: StudyContext, write: bool = True) -> None:
    """Raise :class:`CkptselError` listing the differences from the stored fingerprint that
    invalidate recorded work; store the current one when ``write``."""
    path = ctx.spec.state_dir / FINGERPRINT_FILE
    now = fingerprint(ctx)
    if path.is_file():
        before = json.loads(path.read_text(encoding="utf-8"))
        diffs = fingerprint_diff(before, now)
        if diffs:
            raise CkptselError(
                f"{ctx.spec.source}: the study changed in a way that invalidates its recorded "
                f"work in {ctx.spec.workdir}:\n  " + "\n  ".join(diffs) + "\nundo the change, "
                f"or start in a new --workdir (or delete {path} and the records to redo it)"
            )
    if write:
        write_text(path, json.dumps(now, indent=2, sort_keys=True) + "\n")


def fingerprint_diff(before: dict, now: dict) -> list[str]:
    """Changes from ``before`` that invalidate recorded work (added configurations or seeds
    do not: they are new work)."""
    diffs = []
    for key in sorted(set(before) | set(now)):
        a, b = before.get(key), now.get(key)
        if key == "configurations":
            diffs += _configuration_diffs(a or {}, b or {})
        elif key == "averages":  # one added is new work; one removed leaves its records
            gone = sorted(set(a or []) - set(b or []))
            if gone:
                diffs.append(f"averages {gone} were removed (their records remain)")
        elif key == "seeds":
            gone = sorted(set(a or []) - set(b or []))
            if gone:
                diffs.append(f"seeds {gone} were removed (their records remain)")
        elif a != b:
            old, new = json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)
            diffs.append(f"{key}: {old} -> {new}")
    return diffs


def _configuration_diffs(a: dict, b: dict) -> list[str]:
    diffs = []
    for name in sorted(a):
        if name not in b:
            diffs.append(f"configuration {name!r} was removed (its records remain)")
        elif a[name] != b[name]:
            both = set(a[name]) | set(b[name])
            keys = sorted(k for k in both if a[name].get(k) != b[name].get(k))
            diffs.append(f"configuration {name!r}: " + ", ".join(f"{k} {a[name].get(k)!r} -> {b[name].get(k)!r}" for k in keys))
    return diffs


def _jsonable(d: dict) -> dict:
    return json.loads(json.dumps(d, default=str))
