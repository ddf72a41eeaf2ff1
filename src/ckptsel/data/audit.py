"""Overlap audit between fine-tuning, validation and test questions (SPEC §9).

A checkpoint chosen on validation items that also sit in the training set, or scored on test
items the model trained on, measures memorisation. The audit checks every pair of pools
(train–validation, train–test, validation–test) with four checks:

``exact``
    identical question strings.
``normalized``
    identical after :func:`normalize`: Unicode NFKC, case folding, every punctuation
    character (Unicode category P*) replaced by a space, whitespace collapsed.
``char13``
    Jaccard similarity of the *sets* of character 13-grams of the normalized texts
    ``>= threshold`` (default 0.8). A normalized text shorter than 13 characters is its own
    single gram; an empty one has none and never matches.
``word5``
    the pair shares at least one word 5-gram (normalized text split on whitespace; texts
    under 5 words have none), ignoring *template* 5-grams that occur in at least 5% (and
    at least 20) of the questions of either pool: prompt boilerplate such as the commonsense
    files' "please answer the following question with true or false" would otherwise pair
    every question with every other (no GSM8K 5-gram reaches 5%; BoolQ has 15 such grams). This is deliberately sensitive: common phrasing
    ("calculate the total number of") is shared by unrelated questions, so read its counts
    with the histogram of shared 5-grams per flagged pair that the report gives. Pairs are
    enumerated for the rarest grams first up to a budget (20M); past it the report says the
    pair list is incomplete (the item counts stay exact).

``char13`` is exact and fast: candidates come from an inverted index over *prefixes* (the
AllPairs prefix filter, :class:`JaccardIndex`). Under any global order of grams, two sets with
Jaccard >= t share a gram among the first ``|x| - ceil(t|x|) + 1`` grams of each. The order
puts grams the second pool lacks first (no pair can share them) and the second pool's grams
rarest first, so most prefixes hold no shareable gram and candidates are few (2 for GSM8K
train × test before planting). Every candidate passes a size filter and an exact integer
Jaccard test (the threshold is read as a decimal fraction, 0.8 = 4/5), so nothing at or above
the threshold is missed and nothing below it is reported; :func:`brute_force_jaccard_pairs`
is the all-pairs reference the tests compare against. The first pool of each pair (the
fine-tuning set) is streamed: memory grows with the validation/test pools, time linearly
with the training set.

Planted positive control: for every pair (A, B) the audit copies questions of A into B —
verbatim (``exact``), with changed case and punctuation (``case_punct``) and with one word
replaced (``one_word``) — and checks that the checks meant to find each planted pair find it
(exact: all four; case_punct: normalized, char13, word5; one_word: char13, word5). A
``one_word`` plant is only made from a question long enough that the edited copy still has
char-13 Jaccard >= threshold (computed directly); if A has none, that plant is reported as
skipped. Planted items sit after B's real items and every pair touching them is removed from
the real findings, so the reported overlaps are those of the real pools.
"""

from __future__ import annotations

import json
import random
import re
import time
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from ckptsel._util.io import read_json_records
from ckptsel.data.tasks import QUESTION_FIELDS
from ckptsel.errors import CkptselError

CHAR_N = 13
WORD_N = 5
PLANT_KINDS = ("exact", "case_punct", "one_word")
EXPECTED_CHECKS = {
    "exact": ("exact", "normalized", "char13", "word5"),
    "case_punct": ("normalized", "char13", "word5"),
    "one_word": ("char13", "word5"),
}
_PUNCT_SWAP = {".": ";", ",": ";", "?": "!", "!": "?", ";": ",", ":": ";", "'": '"', '"': "'"}
_WORD_RE = re.compile(r"[A-Za-z]{4,}")
_REPLACEMENTS = ("quokka", "zeppelin")
TEMPLATE_FRACTION = 0.05  # a word 5-gram in >= 5% of a pool's questions is boilerplate
TEMPLATE_MIN_COUNT = 20  # ... and in at least this many (small pools keep their content)
MAX_WORD_PAIRS = 20_000_000  # budget of (first, second) pairs enumerated by the word check
_PUNCT_TABLE: dict[int, str] = {}  # code point -> " " for Unicode punctuation (P*)
_SEEN_CHARS: set[str] = set()


# --------------------------------------------------------------------------- text features


def normalize(text: str) -> str:
    """NFKC, casefold, punctuation -> space, whitespace collapsed (the ``normalized`` check)."""
    text = unicodedata.normalize("NFKC", text).casefold()
    for c in set(text).difference(_SEEN_CHARS):  # grow the translate table lazily
        if unicodedata.category(c).startswith("P"):
            _PUNCT_TABLE[ord(c)] = " "
        _SEEN_CHARS.add(c)  # after the table entry, so a concurrent caller never misses it
    return " ".join(text.translate(_PUNCT_TABLE).split())


def char_ngrams(norm: str, n: int = CHAR_N) -> frozenset[str]:
    """Set of character n-grams of a normalized text (a shorter text is its own gram)."""
    if len(norm) < n:
        return frozenset((norm,)) if norm else frozenset()
    return frozenset(norm[i : i + n] for i in range(len(norm) - n + 1))


def word_ngrams(norm: str, n: int = WORD_N) -> frozenset[str]:
    """Set of word n-grams (space-joined) of a normalized text; empty under n words."""
    words = norm.split()
    return frozenset(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))


def jaccard(x: frozenset[str] | set[str], y: frozenset[str] | set[str]) -> float:
    """Set Jaccard |x ∩ y| / |x ∪ y| (0 for two empty sets)."""
    inter = len(x & y)
    union = len(x) + len(y) - inter
    return inter / union if union else 0.0


def _threshold_fraction(threshold: float) -> Fraction:
    t = Fraction(repr(float(threshold)))
    if not (0 < t <= 1):
        raise CkptselError(f"--threshold must lie in (0, 1], got {threshold}")
    return t


def _ceil_frac(t: Fraction, n: int) -> int:
    return -((-t.numerator * n) // t.denominator)


def brute_force_jaccard_pairs(
    sa: list[frozenset[str]], sb: list[frozenset[str]], threshold: float
) -> list[tuple[int, int, float]]:
    """All-pairs reference for :func:`jaccard_pairs` (same exact comparison); for tests."""
    t = _threshold_fraction(threshold)
    out = []
    for i, x in enumerate(sa):
        for j, y in enumerate(sb):
            inter = len(x & y)
            union = len(x) + len(y) - inter
            if union and inter * t.denominator >= t.numerator * union:
                out.append((i, j, inter / union))
    return out


class JaccardIndex:
    """Exact search for sets with Jaccard >= t against a fixed pool (AllPairs prefix filter).

    Global order of grams: grams absent from the pool first (no query can share them with a
    pool set, so their order among themselves is irrelevant), then the pool's grams by
    (document frequency in the pool, gram). Under any total order, sets x, y with
    J(x, y) >= t share a gram among the first ``|x| - ceil(t|x|) + 1`` of x and the first
    ``|y| - ceil(t|y|) + 1`` of y; only the pool's prefixes are indexed, each query probes
    with its own prefix, and every candidate is verified exactly. Queries are streamed, so
    memory grows with the pool, not with the (large) fine-tuning set."""

    def __init__(self, pool: list[frozenset[str]], threshold: float) -> None:
        self.t = _threshold_fraction(threshold)
        self.pool = pool
        df: Counter[str] = Counter()
        for y in pool:
            df.update(y)
        ordered = sorted(df)  # tie-break by the gram itself: a total order
        ordered.sort(key=df.__getitem__)  # stable: (df, gram), rarest first
        self.rank = {g: k for k, g in enumerate(ordered)}
        self.vocab = frozenset(self.rank)
        self.index: dict[int, list[int]] = defaultdict(list)
        for j, y in enumerate(pool):
            for r in self._prefix(y):
                self.index[r].append(j)

    def _prefix(self, x: frozenset[str]) -> list[int]:
        n = len(x)
        p = n - _ceil_frac(self.t, n) + 1  # prefix length
        s = x & self.vocab
        k = p - (n - len(s))  # prefix places left after the grams the pool lacks
        if k <= 0:
            return []
        return sorted(map(self.rank.__getitem__, s))[:k]

    def query(self, x: frozenset[str]) -> list[tuple[int, float]]:
        """(j, J) for every pool set with Jaccard(x, pool[j]) >= t, sorted by j."""
        cands: set[int] = set()
        for r in self._prefix(x):
            cands.update(self.index.get(r, ()))
        if not cands:
            return []
        t, nx = self.t, len(x)
        lo, hi = _ceil_frac(t, nx), (nx * t.denominator) // t.numerator  # size filter
        out = []
        for j in sorted(cands):
            y = self.pool[j]
            if not lo <= len(y) <= hi:
                continue
            inter = len(x & y)
            union = nx + len(y) - inter
            if inter * t.denominator >= t.numerator * union:
                out.append((j, inter / union))
        return out


def jaccard_pairs(
    sa: Iterable[frozenset[str]], sb: list[frozenset[str]], threshold: float
) -> list[tuple[int, int, float]]:
    """All (i, j, J) with Jaccard(sa[i], sb[j]) >= threshold, exactly (see
    :class:`JaccardIndex`); ``sa`` may be a generator."""
    index = JaccardIndex(sb, threshold)
    return [(i, j, jac) for i, x in enumerate(sa) for j, jac in index.query(x)]


class SharedGramIndex:
    """Pairs sharing >= 1 n-gram with a fixed pool: feed query sets with :meth:`add`, then
    :meth:`pairs` builds all pairs with one numpy outer product per shared gram.

    Two guards keep this linear-ish on prompt-formatted data. *Template* n-grams — in at least
    ``template_fraction`` (and at least ``TEMPLATE_MIN_COUNT``) of the questions of either
    pool, like the "please answer the following question with true or false" of the
    commonsense files — are instruction boilerplate, not content, and are ignored. And pairs are
    enumerated for the rarest grams first up to ``max_pairs`` (sum over grams of the two
    document frequencies' product); grams past that budget still count for the item totals but
    not for the pair list, and the result says how many were left out."""

    def __init__(self, pool: list[frozenset[str]], n_real: int | None = None) -> None:
        self.n_pool = len(pool)
        self.n_real = len(pool) if n_real is None else n_real  # items after it are planted
        self.post_b: dict[str, list[int]] = defaultdict(list)
        for j, y in enumerate(pool):
            for g in y:
                self.post_b[g].append(j)
        self.vocab = frozenset(self.post_b)
        self.post_a: dict[str, list[int]] = defaultdict(list)
        self.n_a = 0

    def add(self, i: int, x: frozenset[str]) -> None:
        self.n_a = max(self.n_a, i + 1)
        for g in x & self.vocab:  # only grams that the pool has
            self.post_a[g].append(i)

    def pairs(
        self, template_fraction: float = TEMPLATE_FRACTION, max_pairs: int = MAX_WORD_PAIRS
    ) -> dict[str, Any]:
        """``i, j, count`` arrays (pairs and their number of distinct shared non-template
        n-grams, sorted by (i, j)), ``items_a``/``items_b`` (items with a shared non-template
        n-gram; real items of the pool only), ``template`` ([gram, df_a, df_b] ignored) and
        ``dropped`` (non-template grams left out of the pair list by ``max_pairs``)."""
        grams = list(self.post_a)
        n_real = self.n_real

        def real(js: list[int]) -> list[int]:
            return js if n_real == self.n_pool else [j for j in js if j < n_real]

        df_a = np.array([len(self.post_a[g]) for g in grams], dtype=np.int64)
        df_b = np.array([len(real(self.post_b[g])) for g in grams], dtype=np.int64)
        limit_a = max(template_fraction * self.n_a, TEMPLATE_MIN_COUNT)
        limit_b = max(template_fraction * n_real, TEMPLATE_MIN_COUNT)
        is_template = (df_a >= limit_a) | (df_b >= limit_b)
        template = sorted(
            ([grams[k], int(df_a[k]), int(df_b[k])] for k in np.flatnonzero(is_template)),
            key=lambda t: (-(t[1] + t[2]), t[0]),
        )
        content = np.flatnonzero(~is_template)
        # item totals over every non-template shared gram (exact, linear in the postings)
        with_real = [k for k in content if df_b[k] > 0]
        items_a = np.unique(np.concatenate([[]] + [self.post_a[grams[k]] for k in with_real]))
        items_b = np.unique(np.concatenate([[]] + [real(self.post_b[grams[k]]) for k in content]))
        # pair enumeration, rarest (smallest product) first, within the budget
        products = df_a[content] * df_b[content]
        order = content[np.lexsort((content, products))]
        within = np.cumsum(df_a[order] * df_b[order]) <= max_pairs
        kept = order[within]
        nb = max(self.n_pool, 1)
        codes = [
            (
                np.asarray(self.post_a[grams[k]], dtype=np.int64)[:, None] * nb
                + np.asarray(self.post_b[grams[k]], dtype=np.int64)[None, :]
            ).ravel()
            for k in kept
        ]
        if codes:
            uniq, counts = np.unique(np.concatenate(codes), return_counts=True)
        else:
            uniq = counts = np.zeros(0, dtype=np.int64)
        return {
            "i": uniq // nb,
            "j": uniq % nb,
            "count": counts.astype(np.int64),
            "items_a": int(items_a.size),
            "items_b": int(items_b.size),
            "template": template,
            "dropped": int(order.size - kept.size),
        }


def shared_ngram_pairs(
    sa: Iterable[frozenset[str]],
    sb: list[frozenset[str]],
    *,
    template_fraction: float = TEMPLATE_FRACTION,
    max_pairs: int = MAX_WORD_PAIRS,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs sharing >= 1 non-template n-gram: arrays ``(i, j, number of distinct shared
    n-grams)``, sorted by (i, j) (see :class:`SharedGramIndex` for the two guards)."""
    index = SharedGramIndex(sb)
    for i, x in enumerate(sa):
        index.add(i, x)
    out = index.pairs(template_fraction, max_pairs)
    return out["i"], out["j"], out["count"]


# --------------------------------------------------------------------------- results


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
        d: dict[str, Any] = {
            "pairs": self.pairs,
            "items_a": self.items_a,
            "items_b": self.items_b,
            "examples": self.examples,
        }
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
        return {
            "a": self.a,
            "b": self.b,
            "n_a": self.n_a,
            "n_b": self.n_b,
            "checks": {k: v.to_dict() for k, v in self.checks.items()},
        }


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
        return {
            "a": self.a,
            "b": self.b,
            "kind": self.kind,
            "source_index": self.source_index,
            "source_text": self.source_text,
            "planted_text": self.planted_text,
            "expected": list(self.expected),
            "found": self.found,
            "char13_jaccard": round(self.jaccard, 6),
            "ok": self.ok,
        }


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
                "normalized": "identical after NFKC, casefold, punctuation->space, "
                "whitespace collapsed",
                "char13": f"Jaccard of character {CHAR_N}-gram sets of normalized text "
                f">= {self.threshold}",
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
        lines = [
            "# Overlap audit",
            "",
            "Pools: " + ", ".join(f"{k} ({v} questions)" for k, v in self.pools.items()) + ".",
            f"Checks: exact; normalized (case, whitespace, punctuation); character {CHAR_N}-gram "
            f"Jaccard >= {self.threshold}; shares >= 1 word {WORD_N}-gram (template "
            f"{WORD_N}-grams, in >= {self.template_fraction:.0%} of a pool's questions, ignored).",
            "",
            "| pools | check | flagged pairs | not flagged by the stricter check | "
            "items of first | items of second |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for p in self.pairs:
            for name, c in p.checks.items():
                new = "—" if c.new_pairs is None else str(c.new_pairs)
                lines.append(
                    f"| {p.a}–{p.b} | {name} | {c.pairs} | {new} | {c.items_a}/{p.n_a} | "
                    f"{c.items_b}/{p.n_b} |"
                )
        lines.append("")
        for p in self.pairs:
            w5 = p.checks["word5"]
            if w5.histogram:
                lines.append(
                    f"- {p.a}–{p.b} word-5-gram pairs by number of shared 5-grams: "
                    + ", ".join(f"{k}: {v}" for k, v in w5.histogram.items())
                )
            if w5.n_template_ngrams:
                top = "; ".join(
                    f"'{g}' ({da}/{p.n_a}, {db}/{p.n_b})" for g, da, db in w5.template_ngrams or []
                )
                lines.append(
                    f"- {p.a}–{p.b}: {w5.n_template_ngrams} template 5-grams ignored "
                    f"(in >= {self.template_fraction:.0%} of a pool's questions), e.g. {top}"
                )
            if w5.dropped_ngrams:
                lines.append(
                    f"- **{p.a}–{p.b}: word-5-gram pair list incomplete**: {w5.dropped_ngrams} "
                    "most common 5-grams exceeded the pair budget (item counts are complete)"
                )
        lines.append("")
        for p in self.pairs:
            for name, c in p.checks.items():
                if not c.examples:
                    continue
                lines.append(f"### {p.a}–{p.b}, {name}: examples")
                lines.append("")
                for ex in c.examples:
                    extra = ", ".join(f"{k} {ex[k]}" for k in ("jaccard", "shared") if k in ex)
                    lines.append(
                        f"- {p.a}[{ex['i']}] / {p.b}[{ex['j']}]"
                        + (f" ({extra})" if extra else "")
                        + f": {ex['a_text'][:240]!r} / {ex['b_text'][:240]!r}"
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
                f"| {q.a}→{q.b} | {q.kind} | {q.source_index} | {', '.join(q.expected)} | "
                f"{found} | {'yes' if q.ok else 'NO'} |"
            )
        if self.control_notes:
            lines += ["", *[f"- {n}" for n in self.control_notes]]
        lines += ["", f"Audit time: {self.seconds:.2f} s.", ""]
        return "\n".join(lines)


# --------------------------------------------------------------------------- planting


@dataclass
class _Prepared:
    texts: list[str]
    norm: list[str]
    chars: list[frozenset[str]]
    words: list[frozenset[str]]

    @classmethod
    def of(cls, texts: list[str]) -> _Prepared:
        norm = [normalize(s) for s in texts]
        return cls(
            list(texts),
            norm,
            [char_ngrams(s) for s in norm],
            [word_ngrams(s) for s in norm],
        )

    def __add__(self, other: _Prepared) -> _Prepared:
        return _Prepared(
            self.texts + other.texts,
            self.norm + other.norm,
            self.chars + other.chars,
            self.words + other.words,
        )


def _case_punct(text: str) -> str:
    """Upper-case (or lower-case), swap punctuation marks, double the spaces, add ' ?!'."""
    out = text.upper() if text != text.upper() else text.lower()
    out = "".join(_PUNCT_SWAP.get(c, c) for c in out)
    return out.replace(" ", "  ") + " ?!"


def _one_word(text: str) -> str | None:
    """Replace the alphabetic word (>= 4 letters) nearest the middle by another word."""
    words = list(_WORD_RE.finditer(text))
    if not words:
        return None
    mid = len(text) / 2
    m = min(words, key=lambda w: abs((w.start() + w.end()) / 2 - mid))
    new = next(r for r in _REPLACEMENTS if r != m.group().lower())
    return text[: m.start()] + new + text[m.end() :]


def _plant(
    a_name: str, a_texts: list[str], b_name: str, n_plant: int, t: float, seed: int
) -> tuple[list[tuple[str, int, str]], list[str]]:
    """Choose (kind, source index, planted text) copies of pool-a questions for pool b."""
    rng = random.Random(f"{seed}:{a_name}:{b_name}")
    order = list(range(len(a_texts)))
    rng.shuffle(order)
    tf = _threshold_fraction(t)
    plan = [PLANT_KINDS[k % len(PLANT_KINDS)] for k in range(n_plant)]
    used: set[int] = set()
    out: list[tuple[str, int, str]] = []
    notes: list[str] = []
    for kind in plan:
        made = None
        # unused questions first; a small pool may reuse one for another kind of copy
        for i in [i for i in order if i not in used] + [i for i in order if i in used]:
            source = a_texts[i]
            norm = normalize(source)
            n_words = len(norm.split())
            if kind in ("exact", "case_punct") and n_words >= WORD_N:
                text = source if kind == "exact" else _case_punct(source)
                if kind == "case_punct" and (text == source or normalize(text) != norm):
                    continue
                made = (kind, i, text)
            elif kind == "one_word" and n_words >= 2 * WORD_N + 1:
                text = _one_word(source)
                if text is None or normalize(text) == norm:
                    continue
                x, y = char_ngrams(norm), char_ngrams(normalize(text))
                inter = len(x & y)
                union = len(x) + len(y) - inter
                if inter * tf.denominator < tf.numerator * union:
                    continue  # too short for a one-word edit to stay above the threshold
                if not (word_ngrams(norm) & word_ngrams(normalize(text))):
                    continue
                made = (kind, i, text)
            if made:
                break
        if made is None:
            notes.append(
                f"{a_name}→{b_name}: no question of {a_name} suits a {kind!r} plant; skipped"
            )
            continue
        used.add(made[1])
        out.append(made)
    return out, notes


# --------------------------------------------------------------------------- the audit


def _items(pairs_i: Iterable[int]) -> int:
    return len(set(int(i) for i in pairs_i))


class _Target:
    """The second pool of a pair (real items, then planted copies), indexed for every check."""

    def __init__(
        self, name: str, b: _Prepared, n_real: int, threshold: float, word_opts: dict[str, Any]
    ) -> None:
        self.name, self.b, self.n_real, self.word_opts = name, b, n_real, word_opts
        self.exact: dict[str, list[int]] = defaultdict(list)
        self.norm: dict[str, list[int]] = defaultdict(list)
        for j, (s, n) in enumerate(zip(b.texts, b.norm, strict=True)):
            self.exact[s].append(j)
            self.norm[n].append(j)
        self.chars = JaccardIndex(b.chars, threshold)
        self.words = SharedGramIndex(b.words, n_real)
        self.raw: dict[str, Any] = {"exact": [], "normalized": [], "char13": []}


def _scan(a_texts: list[str], targets: list[_Target], progress: str | None) -> None:
    """One streamed pass over the first pool: each question's features are computed once and
    probed against every target; of the first pool only its flagged pairs and the postings
    of 5-grams the other pool has are kept."""
    items: Iterable[int] = range(len(a_texts))
    if progress:
        from rich.progress import track

        items = track(items, description=progress, total=len(a_texts))
    for i in items:
        s = a_texts[i]
        norm = normalize(s)
        chars, words = char_ngrams(norm), word_ngrams(norm)
        for tg in targets:
            tg.raw["exact"].extend((i, j) for j in tg.exact.get(s, ()))
            tg.raw["normalized"].extend((i, j) for j in tg.norm.get(norm, ()))
            tg.raw["char13"].extend((i, j, jac) for j, jac in tg.chars.query(chars))
            tg.words.add(i, words)
    for tg in targets:
        tg.raw["word5"] = tg.words.pairs(**tg.word_opts)


def _summarise(
    raw: dict[str, Any], a_texts: list[str], b_texts: list[str], n_b_real: int, max_examples: int
) -> dict[str, CheckResult]:
    """Counts and examples of the real pairs (planted items, j >= n_b_real, left out)."""
    out: dict[str, CheckResult] = {}
    stricter: set[tuple[int, int]] = set()  # pairs the previous (stricter) check flagged
    for name in ("exact", "normalized"):
        pairs = [(i, j) for i, j in raw[name] if j < n_b_real]
        # examples: pairs this check adds over the stricter one first
        shown = sorted(pairs, key=lambda p: (p in stricter, p))[:max_examples]
        out[name] = CheckResult(
            pairs=len(pairs),
            items_a=_items(i for i, _ in pairs),
            items_b=_items(j for _, j in pairs),
            new_pairs=sum(p not in stricter for p in pairs),
            examples=[
                {"i": i, "j": j, "a_text": a_texts[i], "b_text": b_texts[j]} for i, j in shown
            ],
            pair_list=[[i, j] for i, j in pairs],
        )
        stricter = set(pairs)
    c13 = [(i, j, jac) for i, j, jac in raw["char13"] if j < n_b_real]
    shown13 = sorted(c13, key=lambda p: ((p[0], p[1]) in stricter, -p[2], p[0], p[1]))
    out["char13"] = CheckResult(
        pairs=len(c13),
        items_a=_items(i for i, _, _ in c13),
        items_b=_items(j for _, j, _ in c13),
        new_pairs=sum((i, j) not in stricter for i, j, _ in c13),
        examples=[
            {"i": i, "j": j, "jaccard": round(jac, 4), "a_text": a_texts[i], "b_text": b_texts[j]}
            for i, j, jac in shown13[:max_examples]
        ],
        pair_list=[[i, j, round(jac, 6)] for i, j, jac in sorted(c13)],
    )
    w5 = raw["word5"]
    wi, wj, wc = w5["i"], w5["j"], w5["count"]
    keep = wj < n_b_real
    wi, wj, wc = wi[keep], wj[keep], wc[keep]
    top = np.lexsort((wj, wi, -wc))[:max_examples]
    edges = [(1, 1), (2, 4), (5, 9), (10, None)]
    hist = {
        (f"{lo}" if lo == hi else f"{lo}-{hi}" if hi else f">={lo}"): int(
            np.count_nonzero((wc >= lo) & ((wc <= hi) if hi else True))
        )
        for lo, hi in edges
    }
    out["word5"] = CheckResult(
        pairs=int(wi.size),
        items_a=w5["items_a"],
        items_b=w5["items_b"],
        examples=[
            {
                "i": int(wi[k]),
                "j": int(wj[k]),
                "shared": int(wc[k]),
                "a_text": a_texts[int(wi[k])],
                "b_text": b_texts[int(wj[k])],
            }
            for k in top
        ],
        histogram=hist,
        template_ngrams=w5["template"][:max_examples],
        n_template_ngrams=len(w5["template"]),
        dropped_ngrams=w5["dropped"],
    )
    return out


def _found(raw: dict[str, Any], i: int, j: int) -> dict[str, bool]:
    wi, wj = raw["word5"]["i"], raw["word5"]["j"]
    return {
        "exact": (i, j) in set(raw["exact"]),
        "normalized": (i, j) in set(raw["normalized"]),
        "char13": any(p[0] == i and p[1] == j for p in raw["char13"]),
        "word5": bool(np.any((wi == i) & (wj == j))),
    }


def audit_pools(
    pools: dict[str, list[str]],
    *,
    threshold: float = 0.8,
    plant: bool = True,
    seed: int = 0,
    n_plant: int = 6,
    max_examples: int = 5,
    progress: bool = False,
    template_fraction: float = TEMPLATE_FRACTION,
    max_word_pairs: int = MAX_WORD_PAIRS,
) -> AuditResult:
    """Audit every pair of pools (in the dict's order: first–second, first–third, ...).

    ``pools`` maps a pool name (train, validation, test, ...) to its question strings. With
    ``plant`` the positive control plants ``n_plant`` copies (cycling exact, case_punct,
    one_word) of first-pool questions into the second pool of every pair. The first pool is
    streamed (its n-gram sets are never all held in memory): put the largest pool first.
    ``template_fraction`` and ``max_word_pairs`` are the word check's two guards
    (:class:`SharedGramIndex`)."""
    if len(pools) < 2:
        raise CkptselError(f"the audit needs at least two pools, got {list(pools)}")
    for name, texts in pools.items():
        if not isinstance(texts, list) or not all(isinstance(s, str) for s in texts):
            raise CkptselError(f"pool {name!r}: expected a list of question strings")
    _threshold_fraction(threshold)
    start = time.perf_counter()
    names = list(pools)
    word_opts = {"template_fraction": template_fraction, "max_pairs": max_word_pairs}
    prepared: dict[str, _Prepared] = {}  # second pools only: the first pool is streamed
    reports: list[PairReport] = []
    planted: list[PlantedPair] = []
    notes: list[str] = []
    for ai, a_name in enumerate(names[:-1]):
        a_texts = pools[a_name]
        targets: list[_Target] = []
        plans: dict[str, list[tuple[str, int, str]]] = {}
        for b_name in names[ai + 1 :]:
            if b_name not in prepared:
                prepared[b_name] = _Prepared.of(pools[b_name])
            b = prepared[b_name]
            plan: list[tuple[str, int, str]] = []
            if plant:
                plan, more = _plant(a_name, a_texts, b_name, n_plant, threshold, seed)
                notes += more
            b_all = b + _Prepared.of([text for _, _, text in plan]) if plan else b
            targets.append(_Target(b_name, b_all, len(b.texts), threshold, word_opts))
            plans[b_name] = plan
        label = f"{a_name} vs {', '.join(tg.name for tg in targets)}" if progress else None
        _scan(a_texts, targets, label)
        for tg in targets:
            summary = _summarise(tg.raw, a_texts, tg.b.texts, tg.n_real, max_examples)
            reports.append(PairReport(a_name, tg.name, len(a_texts), tg.n_real, summary))
            for k, (kind, i, text) in enumerate(plans[tg.name]):
                j = tg.n_real + k
                planted.append(
                    PlantedPair(
                        a=a_name,
                        b=tg.name,
                        kind=kind,
                        source_index=i,
                        source_text=a_texts[i],
                        planted_text=text,
                        expected=EXPECTED_CHECKS[kind],
                        found=_found(tg.raw, i, j),
                        jaccard=jaccard(char_ngrams(normalize(a_texts[i])), tg.b.chars[j]),
                    )
                )
    for q in planted:
        if not q.ok:
            missed = [c for c in q.expected if not q.found[c]]
            notes.append(
                f"{q.a}→{q.b}: planted {q.kind} copy of {q.a}[{q.source_index}] "
                f"NOT found by {', '.join(missed)}"
            )
    return AuditResult(
        threshold=threshold,
        pools={k: len(v) for k, v in pools.items()},
        pairs=reports,
        planted=planted,
        control_run=plant,
        control_notes=notes,
        seconds=time.perf_counter() - start,
        template_fraction=template_fraction,
    )


# --------------------------------------------------------------------------- files


def read_questions(path: Path) -> list[str]:
    """Question strings of a JSON-list or JSON-Lines file: per file, the first of
    query/question/problem/instruction present in its first record (all records need it)."""
    path = Path(path)
    data = read_json_records(path)
    records = list(zip(data.locations, data.records, strict=True))
    if not records:
        raise CkptselError(f"{path}: no records")
    loc0, first = records[0]
    if not isinstance(first, dict):
        raise CkptselError(f"{path}, {loc0}: expected a JSON object")
    fld = next((f for f in QUESTION_FIELDS if f in first), None)
    if fld is None:
        raise CkptselError(
            f"{path}, {loc0}: no question field (expected one of "
            f"{', '.join(QUESTION_FIELDS)}; fields present: {sorted(first)})"
        )
    out = []
    for loc, rec in records:
        value = rec.get(fld) if isinstance(rec, dict) else None
        if not isinstance(value, str):
            raise CkptselError(f"{path}, {loc}: missing or non-string question field {fld!r}")
        out.append(value)
    return out


def audit_files(files: dict[str, Path], **kwargs: Any) -> AuditResult:
    """:func:`audit_pools` over question files (``{"train": path, ...}``)."""
    return audit_pools({name: read_questions(p) for name, p in files.items()}, **kwargs)


def write_audit(result: AuditResult, out_dir: Path) -> None:
    """Write ``audit.json`` and ``audit.md`` atomically."""
    from ckptsel._util.io import write_text

    out_dir = Path(out_dir)
    write_text(
        out_dir / "audit.json", json.dumps(result.to_dict(), indent=2, ensure_ascii=False) + "\n"
    )
    write_text(out_dir / "audit.md", result.to_markdown())
