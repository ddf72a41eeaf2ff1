"""Train/validation split by whole group, with a lineage table (SPEC §9).

Augmented variants of one source question share a ``group``; if variants of one question sat
on both sides, validation accuracy would measure memorisation of the training set, not the
checkpoint. So whole groups go to validation, chosen by a keyed SHA-256 hash of
``(seed, group key)``: deterministic across machines and Python versions (Python's ``hash()``
is salted per process) and *stable*: a group's side never depends on which other groups are
in the file, so adding or removing data does not reshuffle existing groups.

Rule (threshold on the hash)::

    u(group) = int.from_bytes(sha256(f"{seed}:{group}".encode("utf-8")).digest()[:8], "big") / 2**64
    group goes to validation  iff  u(group) < val_fraction

Each group lands in validation independently with probability ``val_fraction``, so the number
of validation groups is Binomial(G, val_fraction): about 10% of groups, not exactly 10%
(GSM8K train, 7,473 groups, seed 42: see the lineage table). Records follow their group.

The split writes the input's own format back (JSON list or JSON Lines; JSON Lines lines are
copied byte for byte) so the outputs feed every loader that reads the input.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from ckptsel._util.io import read_json_records, write_text
from ckptsel._util.locations import Location, as_location
from ckptsel._util.nodecache import local_copy
from ckptsel.data.tasks import QUESTION_FIELDS
from ckptsel.defaults import DATA_SEED
from ckptsel.errors import CkptselError

DEFAULT_GROUP_FIELD = "original_question"
LINEAGE_SCHEMA = 1
_MAX_EXAMPLES = 5


def group_unit(group: str, seed: int = DATA_SEED) -> float:
    """The group's position in [0, 1): the first 8 bytes of SHA-256(f"{seed}:{group}")."""
    digest = hashlib.sha256(f"{seed}:{group}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def is_validation_group(group: str, seed: int = DATA_SEED, val_fraction: float = 0.1) -> bool:
    """Whether a group goes to validation (the threshold rule of the module docstring)."""
    return group_unit(group, seed) < val_fraction


def question_field(record: dict[str, Any]) -> str | None:
    """The question field of a record: the first of query/question/problem/instruction present."""
    for name in QUESTION_FIELDS:
        if name in record:
            return name
    return None


def resolve_group_field(first: dict[str, Any], group_field: str | None) -> str:
    """``original_question`` when the records carry it (MetaMathQA), else the question itself
    (GSM8K/MATH: every question is its own group)."""
    if group_field is not None:
        return group_field
    if DEFAULT_GROUP_FIELD in first:
        return DEFAULT_GROUP_FIELD
    field = question_field(first)
    if field is None:
        raise CkptselError(
            f"no group field: expected {DEFAULT_GROUP_FIELD!r} or one of {', '.join(QUESTION_FIELDS)}; fields present: {sorted(first)}"
        )
    return field


def _check_fraction(val_fraction: float) -> None:
    if not (0.0 < float(val_fraction) < 1.0):
        raise CkptselError(f"--val-fraction must lie strictly between 0 and 1, got {val_fraction}")


def _group_keys(records: list[dict[str, Any]], group_field: str, where: list[str] | None, source: str) -> list[str]:
    keys: list[str] = []
    for k, rec in enumerate(records):
        loc = where[k] if where is not None else f"record {k + 1}"
        if not isinstance(rec, dict):
            raise CkptselError(f"{source}, {loc}: expected a JSON object, got {type(rec).__name__}")
        value = rec.get(group_field)
        if value is None:
            raise CkptselError(f"{source}, {loc}: missing group field {group_field!r} (fields present: {sorted(rec)})")
        if not isinstance(value, str) or not value.strip():
            raise CkptselError(f"{source}, {loc}: group field {group_field!r} must be a non-empty string, got {value!r}")
        keys.append(value)
    return keys


def _assign(
    records: list[dict[str, Any]],
    *,
    seed: int,
    val_fraction: float,
    group_field: str | None,
    where: list[str] | None = None,
    source: str = "<records>",
) -> tuple[list[bool], list[str], str]:
    """Per record: goes to validation?  Plus the group keys and the resolved group field."""
    _check_fraction(val_fraction)
    if not records:
        raise CkptselError(f"{source}: no records to split")
    if not isinstance(records[0], dict):
        raise CkptselError(f"{source}, {where[0] if where else 'record 1'}: expected a JSON object")
    try:
        field = resolve_group_field(records[0], group_field)
    except CkptselError as err:
        raise CkptselError(f"{source}, {where[0] if where else 'record 1'}: {err}") from None
    keys = _group_keys(records, field, where, source)
    side = {g: is_validation_group(g, seed, val_fraction) for g in dict.fromkeys(keys)}
    return [side[g] for g in keys], keys, field


def lineage(
    train: list[dict[str, Any]], validation: list[dict[str, Any]], *, group_field: str, seed: int, val_fraction: float
) -> dict[str, Any]:
    """Records and groups on each side and the two intersections, recomputed from the outputs
    (not trusted from the assignment) so the table checks the split rather than restating it."""
    g_train = {r[group_field] for r in train}
    g_val = {r[group_field] for r in validation}
    qfield = question_field(train[0] if train else validation[0])
    q_train = {r.get(qfield) for r in train} if qfield else set()
    q_val = {r.get(qfield) for r in validation} if qfield else set()
    q_both = sorted(q for q in q_train & q_val if isinstance(q, str))
    n_groups = len(g_train | g_val)
    n_records = len(train) + len(validation)
    return {
        "schema": LINEAGE_SCHEMA,
        "seed": seed,
        "val_fraction": val_fraction,
        "group_field": group_field,
        "question_field": qfield,
        "rule": ('validation iff int.from_bytes(sha256(f"{seed}:{group}".encode("utf-8")).digest()[:8], "big") / 2**64 < val_fraction'),
        "records": {"total": n_records, "train": len(train), "validation": len(validation)},
        "groups": {"total": n_groups, "train": len(g_train), "validation": len(g_val)},
        "validation_share": {
            "records": len(validation) / n_records if n_records else 0.0,
            "groups": len(g_val) / n_groups if n_groups else 0.0,
        },
        "intersections": {"groups": len(g_train & g_val), "question_text": len(q_both)},
        "question_text_examples": q_both[:_MAX_EXAMPLES],
    }


def split_records(
    records: list[dict[str, Any]], *, seed: int = DATA_SEED, val_fraction: float = 0.1, group_field: str | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Split records by whole group; returns ``(train, validation, lineage)``, each side in
    input order. ``group_field=None`` picks ``original_question`` when present, else the
    question field (the question is its own group)."""
    to_val, _, field = _assign(records, seed=seed, val_fraction=val_fraction, group_field=group_field)
    train = [r for r, v in zip(records, to_val, strict=True) if not v]
    validation = [r for r, v in zip(records, to_val, strict=True) if v]
    lin = lineage(train, validation, group_field=field, seed=seed, val_fraction=val_fraction)
    if lin["intersections"]["groups"]:  # impossible by construction; guard against regressions
        raise RuntimeError(f"internal error: {lin['intersections']['groups']} groups on both sides")
    return train, validation, lin


def read_records(path: Path) -> tuple[list[dict[str, Any]], str, list[str], list[str]]:
    """Read a JSON list or a JSON Lines file (:func:`ckptsel._util.io.read_json_records`).

    Returns ``(records, format, raw_lines, locations)``; ``raw_lines`` is the verbatim text
    of each JSON Lines record (empty for a JSON list) and ``locations`` names each record's
    place in the file for error messages ("line 12" / "record 12")."""
    data = read_json_records(path)
    for loc, rec in zip(data.locations, data.records, strict=True):
        if not isinstance(rec, dict):
            raise CkptselError(f"{path}, {loc}: expected a JSON object")
    return data.records, data.format, data.raw_lines, data.locations


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as err:
        raise CkptselError(f"{path}: cannot read ({err.strerror or err})") from err
    except UnicodeDecodeError as err:
        raise CkptselError(f"{path}: not UTF-8 text ({err})") from err


def _sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def lineage_markdown(lin: dict[str, Any]) -> str:
    """The lineage table a person reads (also written as ``lineage.md``)."""
    rec, grp, inter = lin["records"], lin["groups"], lin["intersections"]
    lines = [
        "# Train/validation split lineage",
        "",
        f"- source: `{lin.get('source', '<records>')}`" + (f" (sha256 `{lin['source_sha256'][:16]}…`)" if "source_sha256" in lin else ""),
        f"- group field: `{lin['group_field']}`; question field: `{lin['question_field']}`",
        f"- seed {lin['seed']}, validation fraction {lin['val_fraction']}",
        f"- rule: `{lin['rule']}`",
        "",
        "| side | records | groups |",
        "|---|---:|---:|",
        f"| train | {rec['train']} | {grp['train']} |",
        f"| validation | {rec['validation']} | {grp['validation']} |",
        f"| total | {rec['total']} | {grp['total']} |",
        "",
        "| intersection (must be 0) | count |",
        "|---|---:|",
        f"| groups on both sides | {inter['groups']} |",
        f"| identical question text on both sides | {inter['question_text']} |",
        "",
    ]
    if inter["question_text"]:
        lines += [
            f"**WARNING: {inter['question_text']} question strings occur on both sides under different groups.** Examples:",
            "",
            *[f"- {q[:200]!r}" for q in lin["question_text_examples"]],
            "",
        ]
    if "files" in lin:
        lines += ["| file | sha256 |", "|---|---|"]
        lines += [f"| `{f['path']}` | `{f['sha256']}` |" for f in lin["files"].values()]
        lines.append("")
    return "\n".join(lines)


LINEAGE_FILES = ("lineage.json", "lineage.md")


def _written_by_split(out_dir: Path) -> dict[str, str]:
    """``{file name: sha256}`` of the outputs an earlier split recorded in ``out_dir``'s
    ``lineage.json`` (empty when there is none, or it is not a split's); ``lineage.md`` is
    the split's when ``lineage.json`` is."""
    try:
        lin = json.loads((out_dir / "lineage.json").read_text(encoding="utf-8"))
        files = {f["path"]: f["sha256"] for f in lin["files"].values()}
        lin["source_sha256"], lin["group_field"]  # noqa: B018 - a split's lineage has both
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return {**files, "lineage.json": "", "lineage.md": ""}


def check_outputs(source: Path, out_dir: Path, names: list[str], *, force: bool) -> None:
    """Refuse (one line) a split that would overwrite its own input, or a file in ``out_dir``
    that no earlier split wrote (or that changed since), unless ``force``."""
    targets = [out_dir / n for n in [*names, *LINEAGE_FILES]]
    for target in targets:
        if target.exists() and target.resolve() == source.resolve():
            raise CkptselError(f"{source}: the split would overwrite its own input ({target.name} in {out_dir}); choose another --out")
    if force:
        return
    ours = _written_by_split(out_dir)
    for target in targets:
        if not target.exists():
            continue
        digest = ours.get(target.name)
        if digest is None or (digest and _sha256_text(_read_text(target)) != digest):
            raise CkptselError(
                f"{target} exists and was not written by an earlier split (or changed since); "
                "choose another --out, or pass --force to overwrite it"
            )


def split_file(
    path: Path | Location | str,
    out_dir: Path,
    *,
    seed: int = DATA_SEED,
    val_fraction: float = 0.1,
    group_field: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Split a data file into ``out_dir/train.<ext>`` and ``out_dir/validation.<ext>`` in the
    input's format, plus ``lineage.json`` and ``lineage.md``; returns the lineage dict.
    ``path`` may be a URL (read from this node's copy; the lineage names the URL).

    Never overwrites the input, and overwrites an existing output file only when an earlier
    split wrote it (``lineage.json`` names it with its unchanged SHA-256) or ``force``."""
    source = str(as_location(path))
    path, out_dir = local_copy(path), Path(out_dir)
    ext = path.suffix or None
    records, fmt, raw, locs = read_records(path)
    ext = ext or (".json" if fmt == "json" else ".jsonl")
    check_outputs(path, out_dir, [f"train{ext}", f"validation{ext}"], force=force)
    text = _read_text(path)  # the layout (indentation) of a JSON list is kept
    to_val, _, field = _assign(records, seed=seed, val_fraction=val_fraction, group_field=group_field, where=locs, source=source)
    train = [r for r, v in zip(records, to_val, strict=True) if not v]
    validation = [r for r, v in zip(records, to_val, strict=True) if v]
    lin = lineage(train, validation, group_field=field, seed=seed, val_fraction=val_fraction)
    if lin["intersections"]["groups"]:
        raise RuntimeError(f"internal error: {lin['intersections']['groups']} groups on both sides")

    texts: dict[str, str] = {}
    if fmt == "jsonl":
        for side, want in (("train", False), ("validation", True)):
            lines = [line for line, v in zip(raw, to_val, strict=True) if v == want]
            texts[side] = "".join(line + "\n" for line in lines)
    else:
        indent = 4 if "\n" in text.strip() else None  # pretty input, pretty output
        for side, rows in (("train", train), ("validation", validation)):
            texts[side] = json.dumps(rows, ensure_ascii=False, indent=indent) + "\n"
    files = {}
    for side, body in texts.items():
        name = f"{side}{ext}"
        write_text(out_dir / name, body)
        files[side] = {"path": name, "sha256": _sha256_text(body)}
    lin = {
        **lin,
        "source": source,
        "source_sha256": hashlib.sha256(path.read_bytes()).hexdigest(),  # bytes as on disk
        "format": fmt,
        "files": files,
    }
    write_text(out_dir / "lineage.json", json.dumps(lin, indent=2, ensure_ascii=False) + "\n")
    write_text(out_dir / "lineage.md", lineage_markdown(lin))
    return lin
