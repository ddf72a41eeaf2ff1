"""MATH-style answers: the last ``\boxed{...}``, judged by ``math-verify`` (SPEC §10).

Extraction: the last *complete* ``\boxed{...}`` / ``\fbox{...}`` (brace-matched; a box left
open by a truncated generation is ignored), also the brace-less ``\boxed 5``; otherwise the
text after the last ``The answer is`` marker (up to the end of that line); otherwise nothing.

Equivalence: first the normalized strings (cheap, and covers most identical answers), then
``math_verify.verify(gold, pred)`` with the **gold first** (the library is not symmetric).
math-verify's timeouts use ``signal.alarm``, which only works in the main thread, so outside
it the timeouts are switched off (``parsing_timeout=None`` / ``timeout_seconds=None``). When
math-verify cannot parse one side or raises, the string comparison is the answer.

The normalized answer (what checkpoint agreement compares) is :func:`normalize_string` of the
extracted content: spacing/sizing commands, ``$``, ``\text{}`` wrappers, degree signs,
percent signs and a trailing period removed, ``dfrac``/``tfrac`` written ``frac``, a leading
single-letter ``x=`` dropped, and plain numbers (also integer ``\frac{a}{b}``) in the
canonical number form of :mod:`ckptsel.data.answers.numbers` (``3,000`` -> ``3000``,
``\frac{1}{2}`` -> ``0.5``).
"""

from __future__ import annotations

import logging
import re
import threading
from functools import lru_cache

from ckptsel.data.answers.numbers import canonical_number, clean_numeric_text

MARKER_RE = re.compile(r"the\s+(?:final\s+)?answer\s+is\b\s*:?", re.IGNORECASE)
_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![a-zA-Z])")
_MV_TIMEOUT = 5  # seconds per parse / comparison, main thread only

# Wrappers whose content is the answer: \text{(B)} -> (B), \mathrm{cm} -> cm.
_WRAPPER_RE = re.compile(r"\\(?:text|textbf|textit|textnormal|mbox|mathrm|mathbf)\s*\{([^{}]*)\}")
_UNITS_RE = re.compile(r"^(.*\S)\s*\\(?:text|mbox|mathrm)\s*\{\s+[^{}]*\}$")
_REMOVE = (
    "\\left",
    "\\right",
    "\\displaystyle",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "^{\\circ}",
    "^\\circ",
    "\u00b0",
    "\\%",
    "%",
    "\\$",
    "$",
)
_ASSIGN_RE = re.compile(r"^[a-zA-Z]\s*=(?!=)")
_CHOICE_RE = re.compile(r"^\(([a-eA-E])\)$")


def last_boxed(text: str) -> str | None:
    """Content of the last complete ``\\boxed{...}``/``\\fbox{...}`` (or ``\\boxed 5``)."""
    for match in reversed(list(_BOX_RE.finditer(text))):
        pos = match.end()
        while pos < len(text) and text[pos] == " ":
            pos += 1
        if pos < len(text) and text[pos] == "{":
            depth = 0
            for end in range(pos, len(text)):
                char = text[end]
                if char == "{":
                    depth += 1
                elif char == "}":
                    depth -= 1
                    if depth == 0:
                        return text[pos + 1 : end]
            continue  # unbalanced: a truncated box, try the one before
        if pos > match.end():  # "\boxed 5": the token up to whitespace or "$"
            token = re.match(r"[^\s$]+", text[pos:])
            if token:
                return token.group(0)
    return None


def line_after_last(marker: re.Pattern[str], text: str) -> str | None:
    """Text after the last match of ``marker`` up to the end of its line, stripped (``None``
    when ``marker`` does not occur)."""
    matches = list(marker.finditer(text))
    if not matches:
        return None
    tail = text[matches[-1].end() :].lstrip()
    return tail.split("\n", 1)[0].strip()


def without_final_periods(span: str) -> str:
    """``span`` stripped, without the periods (and the spaces between them) it ends with."""
    span = span.strip()
    while span.endswith("."):
        span = span[:-1].rstrip()
    return span


def after_marker(text: str) -> str | None:
    """Text after the last ``The answer is`` marker, up to the end of its line."""
    return line_after_last(MARKER_RE, text)


def extract_raw(text: str) -> str:
    """The answer span as written (boxed content, else after the marker); "" if none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed.strip()
    tail = after_marker(text)
    if tail is None:
        return ""
    return without_final_periods(tail).strip("$ ").strip()


def _unwrap(text: str) -> str:
    previous = None
    while previous != text:
        previous = text
        text = _WRAPPER_RE.sub(r"\1", text)
    return text


def normalize_string(answer: str) -> str:
    """String normal form of a MATH answer: what agreement compares and the fallback judge."""
    s = answer.strip().replace("\n", " ")
    units = _UNITS_RE.match(s)
    if units and units.group(1).strip():
        s = units.group(1)
    for token in _REMOVE:
        s = s.replace(token, "")
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _unwrap(s)
    s = s.strip()
    while s.endswith("."):
        s = s[:-1].rstrip()
    if _ASSIGN_RE.match(s):
        s = s.split("=", 1)[1]
    s = re.sub(r"\s+", "", s)
    s = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\frac(\d)\{", r"\\frac{\1}{", s)
    s = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", s)
    s = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", s)
    choice = _CHOICE_RE.match(s)
    if choice:
        s = choice.group(1).upper()
    number = canonical_number(clean_numeric_text(s))
    return number if number is not None else s


def extract(text: str) -> str:
    """Normalized extracted answer; "" when the text holds no answer."""
    raw = extract_raw(text)
    return normalize_string(raw) if raw else ""


def normalize_reference(reference: str) -> str:
    """The same normal form for a gold answer (a ``\\boxed{}`` around it is unwrapped)."""
    boxed = last_boxed(reference)
    return normalize_string(boxed if boxed is not None else reference)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@lru_cache(maxsize=65536)
def _parse(answer: str, with_timeout: bool) -> tuple:
    from math_verify import parse

    timeout = _MV_TIMEOUT if with_timeout else None
    return tuple(parse("\\boxed{" + answer + "}", parsing_timeout=timeout))


def verify_equal(gold: str, pred: str) -> bool | None:
    """``math_verify.verify(parse(gold), parse(pred))``; None when math-verify cannot judge
    (a side does not parse, or the library raises), so the caller falls back to strings."""
    if not gold.strip() or not pred.strip():
        return None
    from math_verify import verify
    from math_verify.errors import TimeoutException

    main = _in_main_thread()
    try:
        gold_parsed = _parse(gold, main)
        pred_parsed = _parse(pred, main)
        if not gold_parsed or not pred_parsed:
            return None
        return bool(verify(list(gold_parsed), list(pred_parsed), timeout_seconds=_MV_TIMEOUT if main else None))
    except (Exception, TimeoutException) as err:  # never let sympy crash a measurement
        logging.getLogger(__name__).debug("math-verify failed on %r vs %r: %s", gold, pred, err)
        return None


def equivalent(reference: str, answer: str) -> bool:
    """Whether an extracted answer span equals the gold answer."""
    gold_raw = last_boxed(reference)
    gold_raw = (gold_raw if gold_raw is not None else reference).strip()
    answer = answer.strip()
    if not answer or not gold_raw:
        return False
    if normalize_string(gold_raw) == normalize_string(answer):
        return True
    return bool(verify_equal(gold_raw, answer))


def is_correct(text: str, reference: str) -> bool:
    """Whether the generation's extracted answer is mathematically the gold answer."""
    return equivalent(reference, extract_raw(text))
