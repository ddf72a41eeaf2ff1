"""What the audit found: per check (:class:`CheckResult`), per pair of pools
(:class:`PairReport`), per planted copy (:class:`PlantedPair`), and the whole audit
(:class:`AuditResult`) with its JSON and Markdown forms."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ckptsel._util.markdown import md_cell
from ckptsel.data.audit.grams import CHAR_N, WORD_N
from ckptsel.data.audit.indexes import TEMPLATE_FRACTION, TEMPLATE_MIN_COUNT


@dataclass
class CheckResult:
    """One check on one pair of pools: flagged pairs and how many items they touch."""

    pairs: int
    items_a: int
    items_b: int
    new_pairs: int | None = None  # pairs the stricter check before it did not flag
    examples: list[dict[str, Any]] = field(default_factory=list)
    pair_list: list[list[Any]] = field(default_factory=list)
    histogram: dict[str, int] | None = None
    template_ngrams: list[list[Any]] | None = None  # word check: ignored boilerplate (top few)
    n_template_ngrams: int | None = None
    dropped_ngrams: int | None = None  # word check: grams past the pair budget

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"pairs": self.pairs, "items_a": self.items_a, "items_b": self.items_b, "examples": self.examples}
        if self.new_pairs is not None:
            d["new_pairs"] = self.new_pairs
        if self.histogram is not None:
            d["shared_ngrams_histogram"] = self.histogram
            d["template_ngrams_ignored"] = self.n_template_ngrams
            d["template_ngrams_top"] = self.template_ngrams
            d["ngrams_left_out_of_pair_list"] = self.dropped_ngrams
        else:
            d["pair_list"] = self.pair_list
        return d


@dataclass
class PairReport:
    """All checks for one pair of pools ``a`` (first) and ``b`` (second)."""

    a: str
    b: str
    n_a: int
    n_b: int
    checks: dict[str, CheckResult]

    def to_dict(self) -> dict[str, Any]:
        checks = {k: v.to_dict() for k, v in self.checks.items()}
        return {**vars(self), "checks": checks}  # the fields in their order, checks as dicts


@dataclass
class PlantedPair:
    """One planted copy of ``source`` (an item of pool ``a``) into pool ``b``."""

    a: str
    b: str
    kind: str
    source_index: int
    source_text: str
    planted_text: str
    expected: tuple[str, ...]
    found: dict[str, bool]
    jaccard: float

    @property
    def ok(self) -> bool:
        return all(self.found[c] for c in self.expected)

    def to_dict(self) -> dict[str, Any]:
        # the fields in their order, the last (jaccard) named for its check and rounded
        d = {k: v for k, v in vars(self).items() if k != "jaccard"}
        d["expected"] = list(self.expected)
        return {**d, "char13_jaccard": round(self.jaccard, 6), "ok": self.ok}


@dataclass
class AuditResult:
    """The audit of all pairs of pools plus the planted positive control."""

    threshold: float
    pools: dict[str, int]
    pairs: list[PairReport]
    planted: list[PlantedPair]
    control_run: bool
    control_notes: list[str]
    seconds: float
    template_fraction: float = TEMPLATE_FRACTION

    @property
    def control_ok(self) -> bool:
        """True when the control ran and found every planted pair (vacuously False if not run)."""
        if not self.control_run:
            return False
        kinds = {p.kind for p in self.planted}
        return {"exact", "case_punct"} <= kinds and all(p.ok for p in self.planted)

    def pair(self, a: str, b: str) -> PairReport:
        for p in self.pairs:
            if (p.a, p.b) == (a, b):
                return p
        raise KeyError((a, b))

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": 1,
            "threshold": self.threshold,
            "checks": {
                "exact": "identical strings",
                "normalized": "identical after NFKC, casefold, punctuation->space, whitespace collapsed",
                "char13": f"Jaccard of character {CHAR_N}-gram sets of normalized text >= {self.threshold}",
                "word5": f"pair shares >= 1 word {WORD_N}-gram of normalized text, ignoring "
                f"template {WORD_N}-grams (in >= {self.template_fraction:.0%} and >= "
                f"{TEMPLATE_MIN_COUNT} of a pool's questions)",
            },
            "template_fraction": self.template_fraction,
            "pools": self.pools,
            "pairs": [p.to_dict() for p in self.pairs],
            "control": {
                "run": self.control_run,
                "ok": self.control_ok,
                "notes": self.control_notes,
                "planted": [p.to_dict() for p in self.planted],
            },
            "seconds": round(self.seconds, 3),
        }

    def to_markdown(self) -> str:
        """The audit as Markdown; every name and text from the pools escaped (:func:`md_cell`)."""
        e = md_cell
        lines = [
            "# Overlap audit",
            "",
            "Pools: " + ", ".join(f"{e(k)} ({v} questions)" for k, v in self.pools.items()) + ".",
            f"Checks: exact; normalized (case, whitespace, punctuation); character {CHAR_N}-gram "
            f"Jaccard >= {self.threshold}; shares >= 1 word {WORD_N}-gram (template "
            f"{WORD_N}-grams, in >= {self.template_fraction:.0%} of a pool's questions, ignored).",
            "",
            "| pools | check | flagged pairs | not flagged by the stricter check | items of first | items of second |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in self.pairs:
            for name, c in p.checks.items():
                new = "—" if c.new_pairs is None else str(c.new_pairs)
                lines.append(f"| {e(p.a)}–{e(p.b)} | {name} | {c.pairs} | {new} | {c.items_a}/{p.n_a} | {c.items_b}/{p.n_b} |")
        lines.append("")
        for p in self.pairs:
            w5 = p.checks["word5"]
            if w5.histogram:
                lines.append(
                    f"- {e(p.a)}–{e(p.b)} word-5-gram pairs by number of shared 5-grams: "
                    + ", ".join(f"{k}: {v}" for k, v in w5.histogram.items())
                )
            if w5.n_template_ngrams:
                top = "; ".join(f"'{e(g)}' ({da}/{p.n_a}, {db}/{p.n_b})" for g, da, db in w5.template_ngrams or [])
                lines.append(
                    f"- {e(p.a)}–{e(p.b)}: {w5.n_template_ngrams} template 5-grams ignored "
                    f"(in >= {self.template_fraction:.0%} of a pool's questions), e.g. {top}"
                )
            if w5.dropped_ngrams:
                lines.append(
                    f"- **{e(p.a)}–{e(p.b)}: word-5-gram pair list incomplete**: {w5.dropped_ngrams} "
                    "most common 5-grams exceeded the pair budget (item counts are complete)"
                )
        lines.append("")
        for p in self.pairs:
            for name, c in p.checks.items():
                if not c.examples:
                    continue
                lines.append(f"### {e(p.a)}–{e(p.b)}, {name}: examples")
                lines.append("")
                for ex in c.examples:
                    extra = ", ".join(f"{k} {ex[k]}" for k in ("jaccard", "shared") if k in ex)
                    lines.append(
                        f"- {e(p.a)}[{ex['i']}] / {e(p.b)}[{ex['j']}]"
                        + (f" ({extra})" if extra else "")
                        + f": {e(repr(ex['a_text'][:240]))} / {e(repr(ex['b_text'][:240]))}"
                    )
                lines.append("")
        verdict = "PASSED" if self.control_ok else "FAILED"
        lines += [
            f"## Planted positive control: {verdict}",
            "",
            "| into | kind | source | expected checks | found by | ok |",
            "|---|---|---:|---|---|---|",
        ]
        for q in self.planted:
            found = ", ".join(c for c, f in q.found.items() if f) or "—"
            lines.append(
                f"| {e(q.a)}→{e(q.b)} | {q.kind} | {q.source_index} | {', '.join(q.expected)} | {found} | {'yes' if q.ok else 'NO'} |"
            )
        if self.control_notes:
            lines += ["", *[f"- {e(n)}" for n in self.control_notes]]
        lines += ["", f"Audit time: {self.seconds:.2f} s.", ""]
        return "\n".join(lines)
