"""An answer rule as data: how an answer is found in a generation (``extract``) and judged
against the gold reference (``compare``, or a ``module:function`` scorer) (SPEC §10).

Every task has one :class:`AnswerRule`; the built-in tasks use the rules of their answer family
(``gsm8k``, ``math``, ``commonsense``), a task file (:mod:`ckptsel.data.taskdef`) names its own.

Extraction gives the answer *span* as written ("" when there is none); the comparison's normal
form turns it into the recorded answer (what checkpoint agreement compares), and the comparison
judges the span against the reference. A generation without an answer span is wrong.

``extract`` is one of the names in :data:`EXTRACT_RULES` or, when it is none of them, a
regular expression (Python syntax, run by the ``regex`` package under a time bound of
:data:`REGEX_TIMEOUT_S` seconds per match, so a pattern that backtracks is one line, not a hang):
the first match (``select = "last"``: the last) over the whole text, its group ``group`` (default
1 when the pattern has a group, else the whole match); no flags are set (write ``(?i)``, ``(?m)``
in the pattern). ``compare`` is one of :data:`COMPARE_RULES`; ``scorer = "score.py:function"``
replaces it: a function in a Python file beside the task file (a path relative to the task
file's folder, inside it), ``function(answer, reference)`` gets the extracted span and the gold
string and returns a bool. A scorer is code: it is imported only when an answer is judged
(:meth:`AnswerRule.load_scorer`), never when a task is shown or listed, and whatever it raises
at import or at call (``SystemExit`` too) is one line naming it.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import regex

from ckptsel._util.usercode import code_path, file_digest, import_function, one_line
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
    "answer_is": "the text after the last 'The answer is' (to the end of its line, final periods dropped)",
    "choice": "a capital choice letter A-J: the first one standing alone after the last "
    "'answer is' / 'answer:', else the one the text starts with ('B', '(B)', 'B.', 'B)', 'B:')",
    "label": "the first of the task's labels standing alone in the text (case ignored)",
    "gsm8k": "built-in gsm8k/metamath: after the last 'The answer is' or '####', else the last number",
    "math": "built-in math: the last complete \\boxed{...}, else after the last 'The answer is'",
    "commonsense": "built-in commonsense: the first label of the item's LLM-Adapters label set",
}
COMPARE_RULES: dict[str, str] = {
    "exact": "equal after lower-casing and collapsing white space",
    "numeric": "the first number of each side; equal within 'tolerance' (absolute, default 0: exactly, as rationals)",
    "math": "mathematically equal by math-verify (gold first), else the same MATH normal form",
    "labels": "'exact' over a label set: every reference must be one of 'labels'",
    "gsm8k": "built-in gsm8k/metamath: numbers exactly, a LaTeX gold by math-verify",
}
_CHOICE_MARKER_RE = re.compile(r"answer(?:\s+is)?\s*:?", re.IGNORECASE)
_CHOICE_AFTER_RE = re.compile(r"(?<![A-Za-z0-9])\(?([A-J])\)?(?![A-Za-z0-9])")
# at the start: "B", "(B)", "B.", "B)", "B:" (not the article of "A cat")
_CHOICE_START_RE = re.compile(r"^\s*\(?([A-J])(?:\)|[.:]|[ \t]*(?:\n|$))")
REGEX_TIMEOUT_S = 1.0  # per match of a task file's regex
REGEX_MAX_CHARS = 1000  # the longest regex a task file may hold
REGEX_MAX_REPEATS = 100_000  # the product of its counted repeats ({n}, {n,m}): compile time
_REPEAT_RE = re.compile(r"(?<!\\)\{(\d*)(?:,(\d*))?\}")
_IMPORT_LOCK = threading.Lock()


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
    match = _CHOICE_AFTER_RE.search(text, markers[-1].end()) if markers else _CHOICE_START_RE.match(text)
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


class AnswerRuleError(CkptselError):
    """A rule that failed on one text (a regex past its time bound, a scorer that raised or
    returned no bool): ``origin`` (the task file) and ``detail``; a caller that knows which item
    it was scoring names it with :meth:`at`."""

    def __init__(self, origin: str, detail: str, item: str = "") -> None:
        self.origin, self.detail, self.item = origin, detail, item
        parts = [origin] if origin else []
        super().__init__(": ".join([*parts, *([f"item {item!r}"] if item else []), detail]))

    def at(self, item: str) -> AnswerRuleError:
        """The same error naming the item (unchanged when it names one already)."""
        return self if self.item else AnswerRuleError(self.origin, self.detail, str(item))


class BoundedRegex:
    """A task file's regex (``key`` names it in messages): checked when built (a string of at
    most :data:`REGEX_MAX_CHARS`, counted repeats whose product is at most
    :data:`REGEX_MAX_REPEATS`, compiled by ``regex``: any failure is one line), run under
    :data:`REGEX_TIMEOUT_S` seconds per match."""

    def __init__(self, pattern: Any, key: str, invalid: str = "is no valid regex") -> None:
        if not isinstance(pattern, str) or not pattern:
            raise CkptselError(f"{key}: a non-empty regex string is needed, got {pattern!r}")
        if len(pattern) > REGEX_MAX_CHARS:
            raise CkptselError(f"{key}: the regex has {len(pattern)} characters (at most {REGEX_MAX_CHARS})")
        product = math.prod(max(int(n or 1), int(m or 1)) for n, m in _REPEAT_RE.findall(pattern))
        if product > REGEX_MAX_REPEATS:
            raise CkptselError(
                f"{key}: {pattern!r}: counted repeats of {product} in all (at most "
                f"{REGEX_MAX_REPEATS}: the compiled pattern would be too large)"
            )
        try:
            self.compiled = regex.compile(pattern)
        except Exception as err:  # regex.error, RecursionError, OverflowError, MemoryError, ...
            raise CkptselError(f"{key}: {pattern!r} {invalid} ({one_line(err)})") from None
        self.pattern, self.key, self.groups = pattern, key, self.compiled.groups

    def find(self, text: str, group: int, select: str = "first", origin: str = "") -> str | None:
        """Group ``group`` of the first (``last``) match in ``text`` (None without a match);
        past the time bound: :class:`AnswerRuleError` naming the pattern."""
        try:
            if select == "last":
                match = None
                for match in self.compiled.finditer(text, timeout=REGEX_TIMEOUT_S):  # noqa: B007
                    pass
            else:
                match = self.compiled.search(text, timeout=REGEX_TIMEOUT_S)
        except TimeoutError:
            raise AnswerRuleError(
                origin,
                f"{self.key} {self.pattern!r}: no match decided within {REGEX_TIMEOUT_S:g} s on a "
                f"text of {len(text)} characters (the pattern backtracks; simplify it)",
            ) from None
        return match.group(group) if match else None


def scorer_path(spec: Any, base: str | Path) -> tuple[Path, str]:
    """``(file, function)`` of a ``score.py:function`` scorer: the file a path relative to the
    folder ``base`` (the task file's), inside it once links are followed, a regular file; the
    file is not imported here. Anything else is one line naming the scorer."""
    return code_path(spec, base, "[answer] scorer", "task file", "score.py:function")


def import_scorer(path: Path, name: str, spec: str) -> Callable[[str, str], Any]:
    """The function ``name`` of the Python file ``path``, imported now. Whatever the file raises
    while importing (``SystemExit`` too; not ``KeyboardInterrupt``) is one line naming ``spec``."""
    return import_function(path, name, spec, "[answer] scorer")


def scorer_digest(path: Path) -> str:
    """Hash of a scorer file's source, so an edited scorer is an edited task (not imported)."""
    return file_digest(path, 16)


@dataclass(frozen=True)
class AnswerRule:
    """``extract`` (a rule name of :data:`EXTRACT_RULES` or a regex), ``compare`` (a name of
    :data:`COMPARE_RULES`) or ``scorer`` (``score.py:function``, relative to the folder
    ``scorer_base``), and their settings: ``group`` and ``select`` of a regex, ``tolerance`` of
    ``numeric``, ``labels`` of ``labels``/``label``. ``origin`` (the task file) starts the
    messages of a rule that fails on a text. Bad settings raise :class:`CkptselError` naming the
    key (``[answer] compare``)."""

    extract: str = "whole"
    compare: str = "exact"
    group: int | None = None
    select: str = "first"
    tolerance: float = 0.0
    labels: tuple[str, ...] = ()
    scorer: str = ""
    scorer_base: str = ""
    origin: str = field(default="", compare=False)
    _regex: BoundedRegex | None = field(default=None, init=False, repr=False, compare=False)
    _labels: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)
    _scorer: Callable[..., Any] | None = field(default=None, init=False, repr=False, compare=False)
    _scorer_file: Path | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for key in ("extract", "compare", "select", "scorer"):
            if not isinstance(getattr(self, key), str):
                raise CkptselError(f"[answer] {key}: must be a string, got {getattr(self, key)!r}")
        if self.scorer:
            file, _ = scorer_path(self.scorer, self.scorer_base)  # checked, not imported
            object.__setattr__(self, "_scorer_file", file)
        elif self.compare not in COMPARE_RULES:
            raise CkptselError(
                f"[answer] compare: unknown rule {self.compare!r} (known: {', '.join(COMPARE_RULES)}; or a scorer = 'score.py:function')"
            )
        self._check_labels()
        if self.extract not in EXTRACT_RULES:
            self._compile_regex()
        elif self.group is not None or self.select != "first":
            raise CkptselError(f"[answer] group/select: only for a regex extract, not the rule {self.extract!r}")
        self._check_tolerance()

    def _check_tolerance(self) -> None:
        value = self.tolerance
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise CkptselError(f"[answer] tolerance: must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise CkptselError(f"[answer] tolerance: a finite number >= 0, got {value!r}")
        if value and self.compare != "numeric":
            raise CkptselError("[answer] tolerance: a number >= 0, for compare = 'numeric' only")

    def _check_labels(self) -> None:
        wants = self.compare == "labels" or self.extract == "label"
        if not isinstance(self.labels, (tuple, list)):
            raise CkptselError(f"[answer] labels: must be a list of strings, got {self.labels!r}")
        if not wants and self.labels:
            raise CkptselError("[answer] labels: only for compare = 'labels' or extract = 'label'")
        if not wants:
            return
        if not self.labels or not all(isinstance(x, str) and x.strip() for x in self.labels):
            raise CkptselError("[answer] labels: a non-empty list of non-empty strings is needed")
        seen: dict[str, str] = {}
        for label in self.labels:
            if _exact(label) in seen:
                raise CkptselError(f"[answer] labels: {label!r} is listed twice (as {seen[_exact(label)]!r})")
            seen[_exact(label)] = label
        names = "|".join(re.escape(x.strip()) for x in sorted(self.labels, key=len, reverse=True))
        pattern = re.compile(r"(?<![A-Za-z0-9])(?:" + names + r")(?![A-Za-z0-9])", re.IGNORECASE)
        object.__setattr__(self, "_labels", pattern)

    def _compile_regex(self) -> None:
        if not self.extract:
            raise CkptselError(f"[answer] extract: a rule name or a regex, got {self.extract!r}")
        rules = ", ".join(EXTRACT_RULES)
        bounded = BoundedRegex(self.extract, "[answer] extract", f"is no rule ({rules}) and no valid regex")
        group = self.group if self.group is not None else min(bounded.groups, 1)
        if isinstance(group, bool) or not isinstance(group, int) or not 0 <= group <= bounded.groups:
            raise CkptselError(f"[answer] group: {self.group!r} is not a group of {self.extract!r} (it has {bounded.groups})")
        if self.select not in ("first", "last"):
            raise CkptselError(f"[answer] select: 'first' or 'last', got {self.select!r}")
        object.__setattr__(self, "group", group)
        object.__setattr__(self, "_regex", bounded)

    @property
    def runs_code(self) -> str:
        """The scorer (``score.py:function``) this rule runs to judge an answer ("" when none)."""
        return self.scorer

    @property
    def scorer_file(self) -> Path | None:
        """The scorer's Python file (None without a scorer); it is read, never imported, here."""
        return self._scorer_file

    def load_scorer(self) -> None:
        """Import the scorer now (once; nothing without one), so a broken scorer stops a command
        before it measures: a failure is one line naming the task file and the scorer."""
        if self._scorer_file is None or self._scorer is not None:
            return
        with _IMPORT_LOCK:
            if self._scorer is None:
                try:
                    function = import_scorer(self._scorer_file, self.scorer.strip().rsplit(":", 1)[1], self.scorer)
                except CkptselError as err:
                    raise CkptselError(f"{self.origin}: {err}" if self.origin else str(err)) from None
                object.__setattr__(self, "_scorer", function)

    # ------------------------------------------------------------------ extraction

    def span(self, text: str, subtask: str = "") -> str:
        """The answer as written in ``text``; "" when there is none. ``subtask`` picks the
        label set of the ``commonsense`` rule."""
        if self._regex is not None:
            found = self._regex.find(text, self.group or 0, self.select, self.origin)
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
        if self.scorer:
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
        if self.scorer:
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
        self.load_scorer()
        try:
            verdict = self._scorer(span, reference)  # type: ignore[misc]
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # SystemExit included: a scorer never ends the command
            raise AnswerRuleError(self.origin, f"[answer] scorer {self.scorer}: raised {one_line(err)} (answer {span[:60]!r})") from None
        if not isinstance(verdict, (bool, np.bool_)):  # neither can be subclassed
            raise AnswerRuleError(
                self.origin, f"[answer] scorer {self.scorer}: returned {type(verdict).__name__}, not a bool (answer {span[:60]!r})"
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
            how = f"regex '{self.extract}', group {self.group} of the {self.select} match (at most {REGEX_TIMEOUT_S:g} s a match)"
        else:
            how = f"{self.extract}: {EXTRACT_RULES[self.extract]}"
        lines = [f"extract: {how}"]
        if self.labels:
            lines.append(f"labels: {', '.join(self.labels)}")
        if self.scorer:
            lines.append(
                f"compare: scorer {self.scorer} (function(answer, reference) -> bool; runs code: "
                f"{self.scorer}, imported only to judge answers)"
            )
        else:
            lines.append(f"compare: {self.compare}: {COMPARE_RULES[self.compare]}")
            if self.compare == "numeric":
                lines.append(f"tolerance: {self.tolerance}")
        return lines

    def fallback_used(self, text: str, subtask: str = "") -> bool:
        """Whether the answer of ``text`` came only from a fallback extraction: for
        the built-in gsm8k rule, no ``The answer is`` / ``####`` marker, so the last number in
        the text was taken (:func:`ckptsel.data.answers.gsm8k.fallback_used`). Every other rule
        reads one stated form (a marker, a box, a label, a regex) and has no fallback: False."""
        if self._regex is not None or self.extract != "gsm8k":
            return False
        return gsm8k_answers.fallback_used(text)


FAMILY_RULES: dict[str, AnswerRule] = {
    "gsm8k": AnswerRule("gsm8k", "gsm8k"),
    "math": AnswerRule("math", "math"),
    "commonsense": AnswerRule("commonsense", "exact"),
}
