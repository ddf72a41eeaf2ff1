"""Exact number handling shared by the GSM8K and MATH scorers.

Numbers are parsed into :class:`fractions.Fraction` so that ``5.0 == 5`` and ``1/2 == 0.5``
hold exactly (no float rounding), and printed in one canonical form so that two answers that
are the same number are also the same *string* (which is what checkpoint agreement compares).
"""

from __future__ import annotations

import re
from fractions import Fraction

# A decimal or integer, optionally a simple fraction ``a/b`` of two such numbers. The sign is
# only taken when the minus is not glued to a preceding word/number (``10-3`` is 10 and 3).
NUMBER = r"(?<![\w.])-?(?:\d+(?:\.\d+)?|\.\d+)(?:/(?:\d+(?:\.\d+)?|\.\d+))?(?![\d])"
NUMBER_RE = re.compile(NUMBER)
_FULL_NUMBER_RE = re.compile(r"-?(?:\d+(?:\.\d+)?|\.\d+)(?:/(?:\d+(?:\.\d+)?|\.\d+))?")
# ``3,000`` / ``1,234,567``: commas between whole groups of three digits are separators.
_THOUSANDS_RE = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_LATEX_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{\s*(-?[\d.]+)\s*\}\s*\{\s*(-?[\d.]+)\s*\}")
_LATEX_FRAC_SHORT_RE = re.compile(r"\\[dt]?frac\s*(\d)\s*(\d)")


def clean_numeric_text(text: str) -> str:
    """Remove what never changes a number's value: ``$``, thousands commas, unicode minus,
    and rewrite integer LaTeX fractions ``\\frac{1}{2}`` as ``1/2`` so one regex finds them."""
    text = text.replace("\u2212", "-").replace("\\$", "").replace("$", "")
    text = _THOUSANDS_RE.sub("", text)
    text = _LATEX_FRAC_RE.sub(r"\1/\2", text)
    text = _LATEX_FRAC_SHORT_RE.sub(r"\1/\2", text)
    return text


def to_fraction(token: str) -> Fraction | None:
    """Exact value of a number token (``-2``, ``0.50``, ``3/4``); None if it is not one or
    divides by zero."""
    token = token.strip()
    if not _FULL_NUMBER_RE.fullmatch(token):
        return None
    try:
        if "/" in token:
            num, den = token.split("/", 1)
            den_value = Fraction(den)
            if den_value == 0:
                return None
            return Fraction(num) / den_value
        return Fraction(token)
    except (ValueError, ZeroDivisionError):
        return None


def canonical(value: Fraction) -> str:
    """One string per number: integers plainly (``3000``), terminating decimals without
    trailing zeros (``0.5``), other rationals as a reduced fraction (``1/3``)."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    digits = max(twos, fives)
    scaled = value * 10**digits  # an integer, exactly
    sign = "-" if scaled < 0 else ""
    text = str(abs(scaled.numerator)).rjust(digits + 1, "0")
    whole, frac = text[:-digits], text[-digits:].rstrip("0")
    return f"{sign}{whole}.{frac}" if frac else f"{sign}{whole}"


def canonical_number(token: str) -> str | None:
    """Canonical string of a number token, or None when the token is not a number."""
    value = to_fraction(token)
    return None if value is None else canonical(value)
