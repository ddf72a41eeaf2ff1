"""The audit itself: every pair of pools through the four checks in one streamed pass over
each first pool, the real findings summarised, the planted copies looked up."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ckptsel.data.audit import grams
from ckptsel.data.audit.findings import AuditResult, CheckResult, PairReport, PlantedPair
from ckptsel.data.audit.indexes import MAX_WORD_PAIRS, TEMPLATE_FRACTION, JaccardIndex, SharedGramIndex
from ckptsel.data.audit.plant import EXPECTED_CHECKS, plant_copies
from ckptsel.errors import CkptselError


def _features(text: str) -> tuple[str, frozenset[str], frozenset[str]]:
    """A question's normalized text and the character and word n-gram sets of it."""
    norm = grams.normalize(text)
    return norm, grams.char_ngrams(norm), grams.word_ngrams(norm)


@dataclass
class _Prepared:
    texts: list[str]
    norm: list[str]
    chars: list[frozenset[str]]
    words: list[frozenset[str]]

    @classmethod
    def of(cls, texts: list[str]) -> _Prepared:
        features = [_features(s) for s in texts]
        return cls(list(texts), [norm for norm, _, _ in features], [chars for _, chars, _ in features], [words for _, _, words in features])

    def __add__(self, other: _Prepared) -> _Prepared:
        return _Prepared(self.texts + other.texts, self.norm + other.norm, self.chars + other.chars, self.words + other.words)


def _items(pairs_i: Iterable[int]) -> int:
    return len(set(int(i) for i in pairs_i))


class _Target:
    """The second pool of a pair (real items, then planted copies), indexed for every check."""

    def __init__(self, name: str, b: _Prepared, n_real: int, threshold: float, word_opts: dict[str, Any]) -> None:
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
        norm, chars, words = _features(s)
        for tg in targets:
            tg.raw["exact"].extend((i, j) for j in tg.exact.get(s, ()))
            tg.raw["normalized"].extend((i, j) for j in tg.norm.get(norm, ()))
            tg.raw["char13"].extend((i, j, jac) for j, jac in tg.chars.query(chars))
            tg.words.add(i, words)
    for tg in targets:
        tg.raw["word5"] = tg.words.pairs(**tg.word_opts)


def _summarise(raw: dict[str, Any], a_texts: list[str], b_texts: list[str], n_b_real: int, max_examples: int) -> dict[str, CheckResult]:
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
            examples=[{"i": i, "j": j, "a_text": a_texts[i], "b_text": b_texts[j]} for i, j in shown],
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
            {"i": i, "j": j, "jaccard": round(jac, 4), "a_text": a_texts[i], "b_text": b_texts[j]} for i, j, jac in shown13[:max_examples]
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
        (f"{lo}" if lo == hi else f"{lo}-{hi}" if hi else f">={lo}"): int(np.count_nonzero((wc >= lo) & ((wc <= hi) if hi else True)))
        for lo, hi in edges
    }
    out["word5"] = CheckResult(
        pairs=int(wi.size),
        items_a=w5["items_a"],
        items_b=w5["items_b"],
        examples=[
            {"i": int(wi[k]), "j": int(wj[k]), "shared": int(wc[k]), "a_text": a_texts[int(wi[k])], "b_text": b_texts[int(wj[k])]}
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
    grams.threshold_fraction(threshold)
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
                plan, more = plant_copies(a_name, a_texts, b_name, n_plant, threshold, seed)
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
                        jaccard=grams.jaccard(grams.char_ngrams(grams.normalize(a_texts[i])), tg.b.chars[j]),
                    )
                )
    for q in planted:
        if not q.ok:
            missed = [c for c in q.expected if not q.found[c]]
            notes.append(f"{q.a}→{q.b}: planted {q.kind} copy of {q.a}[{q.source_index}] NOT found by {', '.join(missed)}")
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
