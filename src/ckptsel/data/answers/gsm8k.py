"""GSM8K / MetaMathQA-style answers (SPEC §10).

Extraction: the text after the **last** ``The answer is`` marker (case-insensitive, optional
colon; ``The final answer is`` and GSM8K's own ``#### N`` line count too, so a model tuned on
raw GSM8K answers is read the same way), up to the end of that line. A marker commits:
if nothing follows it the answer is "" (we do not fall back to an earlier number, since the
model did state where its answer was). Without any marker, the **last number** in the text.

Normalization: ``$``/``\\$``, thousands commas (``3,000``), a trailing period, a leading
single-letter assignment (``x = 5``) and a trailing ``%`` / units are dropped, so the span
``$3,000.`` is the number 3000 and ``50%`` is 50. Numbers are compared **exactly** as
rationals and written in one canonical form (``3000``, ``5`` for ``5.0``, ``0.5`` for ``1/2``
or ``\\frac{1}{2}``, ``1/3`` for a non-terminating fraction): fractions are numbers, so
``1/2`` is correct for a gold ``0.5``. GSM8K golds are integers, so this is never lenient
there. Because the canonical form is injective, ``is_correct`` is exactly
``extract(text) == normalize_reference(reference)`` for numeric golds.

MetaMathQA also holds MATH-type items whose gold is LaTeX (``\\frac{\\pi}{2}``). A span that
is not a plain number (it contains LaTeX, or does not start with a number) is normalized with
the MATH string normal form, and a non-numeric gold is judged with the MATH scorer
(math-verify, gold first), so the same ``metamath`` task scores both kinds of items.
"""

from __future__ import annotations

import re

from ckptsel.data.answers import latex as math_answers
from ckptsel.data.answers.numbers import NUMBER, NUMBER_RE, canonical_number, clean_numeric_text, to_fraction

_ASSIGN_RE = re.compile(r"^[a-zA-Z]\s*=\s*")
# A number at the start of the span followed by the end, space, punctuation, a percent sign,
# a degree sign or a \text{} unit; "2\pi", "2x" or "2^3" are not plain numbers.
_LEADING_NUMBER_RE = re.compile(
    r"^\s*(" + NUMBER + r")"
    r"(?=$|\s|[.,;:!?)%\u00b0]|\\%|\\text|\\mbox|\\,|\\!|\\ |\^\\circ|\^\{\\circ\})"
)
_LATEX_CHARS = re.compile(r"[\\^{}_]")


_MARKER_RE = re.compile(r"(?:the\s+(?:final\s+)?answer\s+is\b\s*:?|^[ \t]*####)", re.IGNORECASE | re.MULTILINE)


def after_marker(text: str) -> str | None:
    """Text after the last ``The answer is`` (or GSM8K ``####``) marker, to the line end."""
    return math_answers.line_after_last(_MARKER_RE, text)


def extract_raw(text: str) -> str:
    """The answer span as written: the marker's line, else the last number; "" if none."""
    tail = after_marker(text)
    if tail is not None:
        return math_answers.without_final_periods(tail)
    numbers = NUMBER_RE.findall(clean_numeric_text(text))
    return numbers[-1] if numbers else ""


def fallback_used(text: str) -> bool:
    """Whether :func:`extract_raw` found its answer only by the fallback: no marker, and a last
    number was taken (a text with neither gives "" and no fallback answer)."""
    if after_marker(text) is not None:
        return False
    return bool(NUMBER_RE.findall(clean_numeric_text(text)))


def normalize_span(span: str) -> str:
    """Canonical number when the span states a number, else the MATH string normal form."""
    cleaned = clean_numeric_text(span).strip()
    cleaned = _ASSIGN_RE.sub("", cleaned)
    leading = _LEADING_NUMBER_RE.match(cleaned)
    if leading:
        number = canonical_number(leading.group(1))
        if number is not None:
            return number
    if not _LATEX_CHARS.search(cleaned):
        # Plain prose such as "approximately 18 eggs": the first number it states.
        for token in NUMBER_RE.findall(cleaned):
            number = canonical_number(token)
            if number is not None:
                return number
    return math_answers.normalize_string(span) if span.strip() else ""


def extract(text: str) -> str:
    """Normalized answer of a generation; "" when none was found."""
    raw = extract_raw(text)
    return normalize_span(raw) if raw else ""


def reference_span(reference: str) -> str:
    """The gold answer span: the value after ``####`` when a full GSM8K answer is given."""
    if "####" in reference:
        reference = reference.rsplit("####", 1)[1]
    return reference.strip()


def normalize_reference(reference: str) -> str:
    """The same normal form for a gold answer (``#### 1,080`` -> ``1080``)."""
    return normalize_span(reference_span(reference))


def is_numeric(normalized: str) -> bool:
    """Whether a normalized answer is a canonical number."""
    return to_fraction(normalized) is not None


def is_correct(text: str, reference: str) -> bool:
    """Exact numeric match for numeric golds; MATH equivalence for LaTeX golds (MetaMath)."""
    return matches(extract_raw(text), reference)


def matches(raw: str, reference: str) -> bool:
    """Whether an answer span as written (:func:`extract_raw`) matches the gold answer."""
    gold = normalize_reference(reference)
    if not gold:
        return False
    pred = normalize_span(raw) if raw else ""
    if pred == gold:
        return True
    if is_numeric(gold):
        return False
    return math_answers.equivalent(reference_span(reference), raw)
