"""The planted positive control: copies of first-pool questions planted into the second pool
— verbatim (``exact``), with changed case and punctuation (``case_punct``), with one word
replaced (``one_word``) — and the checks each kind must be found by."""

from __future__ import annotations

import random
import re

from ckptsel.data.audit.grams import WORD_N, char_ngrams, normalize, threshold_fraction, word_ngrams

PLANT_KINDS = ("exact", "case_punct", "one_word")
EXPECTED_CHECKS = {
    "exact": ("exact", "normalized", "char13", "word5"),
    "case_punct": ("normalized", "char13", "word5"),
    "one_word": ("char13", "word5"),
}
_PUNCT_SWAP = {".": ";", ",": ";", "?": "!", "!": "?", ";": ",", ":": ";", "'": '"', '"': "'"}
_WORD_RE = re.compile(r"[A-Za-z]{4,}")
_REPLACEMENTS = ("quokka", "zeppelin")


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


def plant_copies(
    a_name: str, a_texts: list[str], b_name: str, n_plant: int, t: float, seed: int
) -> tuple[list[tuple[str, int, str]], list[str]]:
    """Choose (kind, source index, planted text) copies of pool-a questions for pool b."""
    rng = random.Random(f"{seed}:{a_name}:{b_name}")
    order = list(range(len(a_texts)))
    rng.shuffle(order)
    tf = threshold_fraction(t)
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
            notes.append(f"{a_name}→{b_name}: no question of {a_name} suits a {kind!r} plant; skipped")
            continue
        used.add(made[1])
        out.append(made)
    return out, notes
