"""An answer rule as data: how an answer is found in a generation (``extract``) and judged
against the gold reference (``compare``, or a ``module:function`` scorer) (SPEC §10).

Every task has one :class:`AnswerRule`; the built-in tasks use the rules of their answer family
(``gsm8k``, ``math``, ``commonsense``), a task file (:mod:`ckptsel.data.taskdef`) names its own.

Extraction gives the answer *span* as written ("" when there is none); the comparison's normal
form turns it into the recorded answer (what checkpoint agreement compares), and the comparison
judges the span against the reference. A generation without an answer span is wrong.

``extract`` is one of the names in :data:`EXTRACT_RULES` or, when it is none of them, a Python
regular expression: the first match (``select = "last"``: the last) of ``re.search`` over the
whole text, its group ``group`` (default 1 when the pattern has a group, else the whole match);
no flags are set (write ``(?i)``, ``(?m)`` in the pattern). ``compare`` is one of
:data:`COMPARE_RULES`; ``scorer = "module:function"`` replaces it: ``function(answer, reference)``
gets the extracted span and the gold string and returns a bool. The module is imported when
the rule is built (only then), and a failed import is one line.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from ckptsel.data.answers import commonsense as commonsense_answers
from ckptsel.data.answers import gsm8k as gsm8k_answers
from ckptsel.data.answers import latex as math_answers
from ckptsel.data.answers.numbers import NUMBER_RE, canonical, clean_numeric_text, to_fraction
from ckptsel.errors import CkptselError

EXTRACT_RULES: dict[str, str] = {
    "whole": "the whole generated text, stripped",
    "first_line": "the first non-empty line, stripped",
    "last_number": "the last number in the text ($ and thousands commas ignored)",
    "boxed": "the content of the last complete \\boxed{...}",
    "answer_is": "the text after the last 'The answer is' (to the end of its line, final "
    "periods dropped)",
    "choice": "a capital choice letter A-J: the first one standing alone after the last "
    "'answer is' / 'answer:', else the one the text starts with ('B', '(B)', 'B.', 'B)', 'B:')",
    "label": "the first of the task's labels standing alone in the text (case ignored)",
    "gsm8k": "built-in gsm8k/metamath: after the last 'The answer is' or '####', else the last "
    "number",
    "math": "built-in math: the last complete \\boxed{...}, else after the last 'The answer is'",
    "commonsense": "built-in commonsense: the first label of the item's LLM-Adapters label set",
}
COMPARE_RULES: dict[str, str] = {
    "exact": "equal after lower-casing and collapsing white space",
    "numeric": "the first number of each side; equal within 'tolerance' (absolute, default 0: "
    "exactly, as rationals)",
    "math": "mathematically equal by math-verify (gold first), else the same MATH normal form",
    "labels": "'exact' over a label set: every reference must be one of 'labels'",
    "gsm8k": "built-in gsm8k/metamath: numbers exactly, a LaTeX gold by math-verify",
}
_CHOICE_MARKER_RE = re.compile(r"answer(?:\s+is)?\s*:?", re.IGNORECASE)
_CHOICE_AFTER_RE = re.compile(r"(?<![A-Za-z0-9])\(?([A-J])\)?(?![A-Za-z0-9])")
# at the start: "B", "(B)", "B.", "B)", "B:" (not the article of "A cat")
_CHOICE_START_RE = re.compile(r"^\s*\(?([A-J])(?:\)|[.:]|[ \t]*(?:\n|$))")
_SCORER_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


def _exact(text: str) -> str:
    return " ".join(text.split()).lower()


def _first_number(text: str) -> Fraction | None:
    for token in NUMBER_RE.findall(clean_numeric_text(text)):
        value = to_fraction(token)
        if value is not None:
            return value
    return None


def _choice(text: str) -> str:
    markers = list(_CHOICE_MARKER_RE.finditer(text))
    match = (
        _CHOICE_AFTER_RE.search(text, markers[-1].end()) if markers else _CHOICE_START_RE.match(text)
    )
    return match.group(1) if match else ""


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _last_number(text: str) -> str:
    numbers = NUMBER_RE.findall(clean_numeric_text(text))
    return numbers[-1] if numbers else ""


def _answer_is(text: str) -> str:
    tail = math_answers.after_marker(text)
    return "" if tail is None else math_answers.without_final_periods(tail)


_SPANS: dict[str, Callable[[str], str]] = {
    "whole": str.strip,
    "first_line": _first_line,
    "last_number": _last_number,
    "boxed": lambda text: (math_answers.last_boxed(text) or "").strip(),
    "answer_is": _answer_is,
    "choice": _choice,
    "gsm8k": gsm8k_answers.extract_raw,
    "math": math_answers.extract_raw,
}


def import_scorer(spec: str) -> Callable[[str, str], Any]:
    """The function a ``module:function`` scorer names, imported now; one line when it cannot."""
    if not isinstance(spec, str) or not _SCORER_RE.match(spec):
        raise CkptselError(f"[answer] scorer {spec!r}: write it as 'module:function'")
    module_name, name = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as err:  # ImportError, or whatever the module raises while importing
        raise CkptselError(
            f"[answer] scorer {spec!r}: cannot import {module_name!r} "
            f"({type(err).__name__}: {err})"
        ) from None
    function = getattr(module, name, None)
    if not callable(function):
        raise CkptselError(f"[answer] scorer {spec!r}: {module_name} has no function {name!r}")
    return function


def scorer_digest(spec: str) -> str:
    """Hash of the scorer module's source file ("" when it has none), so an edited scorer is an
    edited task."""
    module = importlib.import_module(spec.split(":")[0])
    source = getattr(module, "__file__", None)
    if not source or not Path(source).is_file():
        return ""
    return hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16]


@dataclass(frozen=True)
class AnswerRule:
    """``extract`` (a rule name of :data:`EXTRACT_RULES` or a regex), ``compare`` (a name of
    :data:`COMPARE_RULES`) or ``scorer`` (``module:function``), and their settings: ``group`` and
    ``select`` of a regex, ``tolerance`` of ``numeric``, ``labels`` of ``labels``/``label``.
    Bad settings raise :class:`CkptselError` naming the key (``[answer] compare``)."""

    extract: str = "whole"
    compare: str = "exact"
    group: int | None = None
    select: str = "first"
    tolerance: float = 0.0
    labels: tuple[str, ...] = ()
    scorer: str = ""
    _regex: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _labels: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _scorer: Callable[..., Any] | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.scorer:
            object.__setattr__(self, "_scorer", import_scorer(self.scorer))
        elif self.compare not in COMPARE_RULES:
            raise CkptselError(
                f"[answer] compare: unknown rule {self.compare!r} (known: "
                f"{', '.join(COMPARE_RULES)}; or a scorer = 'module:function')"
            )
        self._check_labels()
        if self.extract not in EXTRACT_RULES:
            self._compile_regex()
        elif self.group is not None or self.select != "first":
            raise CkptselError(
                f"[answer] group/select: only for a regex extract, not the rule {self.extract!r}"
            )
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, (int, float)):
            raise CkptselError(f"[answer] tolerance: must be a number, got {self.tolerance!r}")
        if self.tolerance < 0 or (self.tolerance and self.compare != "numeric"):
            raise CkptselError("[answer] tolerance: a number >= 0, for compare = 'numeric' only")

    def _check_labels(self) -> None:
        wants = self.compare == "labels" or self.extract == "label"
        if not wants and self.labels:
            raise CkptselError("[answer] labels: only for compare = 'labels' or extract = 'label'")
        if not wants:
            return
        if not self.labels or not all(isinstance(x, str) and x.strip() for x in self.labels):
            raise CkptselError("[answer] labels: a non-empty list of non-empty strings is needed")
        names = "|".join(re.escape(x.strip()) for x in sorted(self.labels, key=len, reverse=True))
        pattern = re.compile(r"(?<![A-Za-z0-9])(?:" + names + r")(?![A-Za-z0-9])", re.IGNORECASE)
        object.__setattr__(self, "_labels", pattern)

    def _compile_regex(self) -> None:
        if not isinstance(self.extract, str) or not self.extract:
            raise CkptselError(f"[answer] extract: a rule name or a regex, got {self.extract!r}")
        try:
            regex = re.compile(self.extract)
        except re.error as err:
            raise CkptselError(
                f"[answer] extract: {self.extract!r} is no rule ({', '.join(EXTRACT_RULES)}) "
                f"and no valid regex ({err})"
            ) from None
        group = self.group if self.group is not None else min(regex.groups, 1)
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group <= regex.groups:
            raise CkptselError(
                f"[answer] group: {self.group!r} is not a group of {self.extract!r} "
                f"(it has {regex.groups})"
            )
        if self.select not in ("first", "last"):
            raise CkptselError(f"[answer] select: 'first' or 'last', got {self.select!r}")
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "_regex", regex)

    # ------------------------------------------------------------------ extraction

    def span(self, text: str, subtask: str = "") -> str:
        """The answer as written in ``text``; "" when there is none. ``subtask`` picks the
        label set of the ``commonsense`` rule."""
        if self._regex is not None:
            if self.select == "last":
                every = list(self._regex.finditer(text))
                match = every[-1] if every else None
            else:
                match = self._regex.search(text)
            found = match.group(self.group) if match else None
            return found.strip() if found else ""
        if self.extract == "commonsense":
            return commonsense_answers.extract(text, subtask)
        if self.extract == "label":
            found = self._labels.search(text) if self._labels else None
            return found.group(0) if found else ""
        return _SPANS[self.extract](text)

    def normal(self, span: str) -> str:
        """The normal form of a span (what agreement compares): two spans the comparison
        treats as equal have the same normal form."""
        if not span:
            return ""
        if self._scorer is not None:
            return " ".join(span.split())
        if self.compare == "gsm8k":
            return gsm8k_answers.normalize_span(span)
        if self.compare == "math":
            return math_answers.normalize_string(span)
        if self.compare == "numeric":
            value = _first_number(span)
            return "" if value is None else canonical(value)
        return _exact(span)

    def answer(self, text: str, subtask: str = "") -> str:
        """The recorded answer of a generation: its span's normal form ("" when none)."""
        return self.normal(self.span(text, subtask))

    def normalize_reference(self, reference: str) -> str:
        """The normal form of a gold answer, comparable with :meth:`answer`."""
        if self.compare == "gsm8k" and not self.scorer:
            return gsm8k_answers.normalize_reference(reference)
        if self.compare == "math" and not self.scorer:
            return math_answers.normalize_reference(reference)
        return self.normal(reference)

    def is_correct(self, text: str, reference: str, subtask: str = "") -> bool:
        """Whether the generation's answer matches the gold ``reference``."""
        span = self.span(text, subtask)
        if not span:
            return False
        if self._scorer is not None:
            return self._call_scorer(span, reference)
        if self.compare == "gsm8k":
            return gsm8k_answers.matches(span, reference)
        if self.compare == "math":
            return math_answers.equivalent(reference, span)
        if self.compare == "numeric":
            pred, gold = _first_number(span), _first_number(reference)
            if pred is None or gold is None:
                return False
            return abs(pred - gold) <= Fraction(str(self.tolerance))
        gold = _exact(reference)
        return bool(gold) and _exact(span) == gold

    def _call_scorer(self, span: str, reference: str) -> bool:
        try:
            verdict = self._scorer(span, reference)  # type: ignore[misc]
        except Exception as err:
            raise CkptselError(
                f"scorer {self.scorer}: raised {type(err).__name__}: {err} (answer {span[:60]!r})"
            ) from None
        if type(verdict).__name__ not in ("bool", "bool_"):
            raise CkptselError(
                f"scorer {self.scorer}: returned {type(verdict).__name__}, not a bool"
            )
        return bool(verdict)

    def reference_problem(self, reference: str) -> str | None:
        """Why ``reference`` cannot be a gold answer of this rule (None when it can)."""
        if not reference.strip():
            return "is empty"
        if self.scorer:
            return None
        if self.compare == "numeric" and _first_number(reference) is None:
            return f"{reference!r} holds no number (compare = 'numeric')"
        if self.compare == "labels" and _exact(reference) not in {_exact(x) for x in self.labels}:
            return f"{reference!r} is not one of the labels {list(self.labels)}"
        return None

    # ------------------------------------------------------------------ description

    def describe(self) -> list[str]:
        """How answers are extracted and compared, in lines a person reads."""
        if self._regex is not None:
            how = f"regex '{self.extract}', group {self.group} of the {self.select} match"
        else:
            how = f"{self.extract}: {EXTRACT_RULES[self.extract]}"
        lines = [f"extract: {how}"]
        if self.labels:
            lines.append(f"labels: {', '.join(self.labels)}")
        if self.scorer:
            lines.append(f"compare: scorer {self.scorer} (function(answer, reference) -> bool)")
        else:
            lines.append(f"compare: {self.compare}: {COMPARE_RULES[self.compare]}")
            if self.compare == "numeric":
                lines.append(f"tolerance: {self.tolerance}")
        return lines


FAMILY_RULES: dict[str, AnswerRule] = {
    "gsm8k": AnswerRule("gsm8k", "gsm8k"),
    "math": AnswerRule("math", "math"),
    "commonsense": AnswerRule("commonsense", "exact"),
}
