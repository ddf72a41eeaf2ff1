"""Text features of the audit's checks: the normalized text, character and word n-gram sets,
set Jaccard, and the threshold read as an exact fraction."""

from __future__ import annotations

import math
import unicodedata
from fractions import Fraction

from ckptsel.errors import CkptselError

CHAR_N = 13
WORD_N = 5
_PUNCT_TABLE: dict[int, str] = {}  # code point -> " " for Unicode punctuation (P*)
_SEEN_CHARS: set[str] = set()


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


def threshold_fraction(threshold: float) -> Fraction:
    """``threshold`` as the decimal fraction it is written as (0.8 = 4/5), checked in (0, 1]."""
    value = float(threshold)
    t = Fraction(repr(value)) if math.isfinite(value) else Fraction(-1)  # nan, inf: refused
    if not (0 < t <= 1):
        raise CkptselError(f"--threshold must lie in (0, 1], got {threshold}")
    return t
