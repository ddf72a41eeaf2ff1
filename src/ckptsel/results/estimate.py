"""An estimate and how it is printed: :class:`Estimate` (percentage points, with its interval;
*unresolved* when the interval contains 0; *not estimable*, with the reason, when the design
gives no information about its variance) and :func:`fmt`, the one way a cell is printed, so
the terminal, Markdown, LaTeX and HTML show the same numbers.

An estimate whose design carries no variance information (one configuration, one test-question
cluster, no spread at all across the sampling units, a method that needs more units than there
are) has no interval: ``lo``/``hi`` are None, ``not_estimable`` says why (e.g. ``"1
configuration"``), it is never *resolved*, and it prints as ``+1.78 not estimable: 1
configuration``. ``summary.json`` stores it as ``{"mean", "lo": null, "hi": null, "unresolved":
true, "not_estimable": reason}``.

An estimate whose interval excludes 0 but is not valid at this size (``stats.exact``, the one
small-design rule: its coverage not measured near nominal there, and the exact test does not
reject) keeps its interval and reads *unresolved*, with the reason in ``cannot_resolve``; it
prints as ``+80.00 [+40.00, +100.00] unresolved: the exact McNemar test's p = 0.125 > 0.05 (4
discordant items: …)`` and ``summary.json``
stores ``{"mean", "lo", "hi", "unresolved": true, "cannot_resolve": reason}``.

An estimate is made either from computed values (``Estimate(mean, lo, hi)``, kept unrounded)
or as ``summary.json`` stores it (:meth:`Estimate.rounded`, :meth:`Estimate.from_dict`): rounded
to :data:`DIGITS` decimals, with the ``unresolved`` flag decided on the unrounded bounds kept as
it was (a lower bound of 1e-9 is stored as 0.0 and stays resolved). The stored form is what
is printed and serialised, so a summary read back writes the same bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ckptsel.errors import CkptselError

DIGITS = 6  # decimals stored in summary.json


def _finite(x: float | None) -> bool:
    return x is not None and math.isfinite(x)


def stored_value(x: float | None) -> float | None:
    """As stored: rounded to :data:`DIGITS` (an exact -0.0 becomes 0.0); None if not finite."""
    return round(float(x) + 0.0, DIGITS) if _finite(x) else None


def _contains_zero(lo: float | None, hi: float | None) -> bool:
    if not (_finite(lo) and _finite(hi)):
        return True
    return bool(lo <= 0.0 <= hi)


@dataclass(frozen=True)
class Estimate:
    """A point estimate and its interval; ``unresolved`` when the interval contains 0 (or is
    missing).

    A computed estimate keeps its values as given and :meth:`to_dict` rounds them; an estimate
    *as stored* (``stored``: made by :meth:`rounded` or :meth:`from_dict`) holds the values of
    ``summary.json`` and :meth:`to_dict` gives them back unchanged (a stored ``-0.0`` stays).
    ``stored_unresolved`` is set only where the stored ``unresolved`` flag differs from what the
    rounded bounds say (the flag was decided on the unrounded bounds); it is None otherwise, so
    ``Estimate.from_dict(d)`` equals ``Estimate(d["mean"], d["lo"], d["hi"])`` in the usual case.
    """

    mean: float | None
    lo: float | None
    hi: float | None
    stored_unresolved: bool | None = None
    stored: bool = field(default=False, compare=False, repr=False)
    not_estimable: str | None = None  # why there is no interval (then lo = hi = None)
    cannot_resolve: str | None = None  # why the interval cannot be resolved (then unresolved)

    @classmethod
    def without_interval(cls, mean: float | None, reason: str) -> Estimate:
        """A point estimate whose interval is not estimable (``reason``, e.g. "1 configuration"),
        as stored."""
        return cls(stored_value(mean), None, None, None, stored=True, not_estimable=str(reason))

    @property
    def estimable(self) -> bool:
        """Whether the estimate has an interval (``not_estimable`` is None)."""
        return self.not_estimable is None

    @property
    def unresolved(self) -> bool:
        """Whether the interval contains 0 (or is missing); never False without an interval."""
        if self.not_estimable is not None or self.cannot_resolve is not None:
            return True
        if self.stored_unresolved is not None:
            return self.stored_unresolved
        return _contains_zero(self.lo, self.hi)

    @classmethod
    def rounded(cls, mean: float | None, lo: float | None, hi: float | None) -> Estimate:
        """The estimate as ``summary.json`` stores it: values rounded to :data:`DIGITS`, the
        ``unresolved`` flag decided on the unrounded bounds."""
        return cls(mean, lo, hi).as_stored()

    def cannot_be_resolved(self, reason: str) -> Estimate:
        """This estimate as stored, reading unresolved because the design cannot resolve it
        (``reason``); its interval is kept."""
        e = self.as_stored()
        if e.not_estimable is not None:
            return e
        flag = None if _contains_zero(e.lo, e.hi) else True
        return Estimate(e.mean, e.lo, e.hi, flag, stored=True, cannot_resolve=str(reason))

    def as_stored(self) -> Estimate:
        """This estimate as ``summary.json`` stores it (itself when it is stored already)."""
        if self.stored:
            return self
        if self.not_estimable is not None:
            return Estimate.without_interval(self.mean, self.not_estimable)
        lo, hi = stored_value(self.lo), stored_value(self.hi)
        flag = None if _contains_zero(lo, hi) == self.unresolved else self.unresolved
        return Estimate(stored_value(self.mean), lo, hi, flag, stored=True, cannot_resolve=self.cannot_resolve)

    def to_dict(self) -> dict:
        """``{"mean", "lo", "hi", "unresolved"}``, rounded to :data:`DIGITS` (None if not finite);
        ``"not_estimable": reason`` follows when there is no interval, ``"cannot_resolve":
        reason`` when the design cannot resolve it."""
        e = self.as_stored()
        out = {"mean": e.mean, "lo": e.lo, "hi": e.hi, "unresolved": e.unresolved}
        if e.not_estimable is not None:
            out["not_estimable"] = e.not_estimable
        elif e.cannot_resolve is not None:
            out["cannot_resolve"] = e.cannot_resolve
        return out

    @classmethod
    def from_dict(cls, d: dict | None) -> Estimate | None:
        """An estimate read back from ``summary.json`` (None when absent or without a mean).

        The stored values and ``unresolved`` flag are kept exactly.
        """
        if not isinstance(d, dict) or d.get("mean") is None:
            return None
        reason = d.get("not_estimable")
        if reason is not None:  # the stored mean kept as it is (a stored -0.0 stays)
            return cls(d["mean"], None, None, None, stored=True, not_estimable=str(reason))
        mean, lo, hi = d["mean"], d.get("lo"), d.get("hi")
        flag = d.get("unresolved")
        keep = flag if isinstance(flag, bool) and flag != _contains_zero(lo, hi) else None
        why = d.get("cannot_resolve")
        return cls(mean, lo, hi, keep, stored=True, cannot_resolve=None if why is None else str(why))

    @classmethod
    def read(cls, d: Any, where: str) -> Estimate:
        """A stored estimate, checked: ``{"mean", "lo", "hi", "unresolved"}`` with numbers (or
        null bounds) and a boolean flag, or that and ``"not_estimable": reason`` with null bounds
        and ``unresolved`` true, or ``"cannot_resolve": reason`` with ``unresolved`` true;
        raises :class:`CkptselError` naming ``where``."""
        keys = ["mean", "lo", "hi", "unresolved"]
        shapes = (keys, [*keys, "not_estimable"], [*keys, "cannot_resolve"])
        if not isinstance(d, dict) or list(d) not in shapes:
            raise CkptselError(f"{where}: expected an estimate {{mean, lo, hi, unresolved}}, got {d!r}")
        if "not_estimable" in d and not (
            isinstance(d["not_estimable"], str) and d["not_estimable"] and d["lo"] is None and d["hi"] is None and d["unresolved"] is True
        ):
            raise CkptselError(f"{where}/not_estimable: expected a reason with null lo/hi and unresolved true, got {d!r}")
        if "cannot_resolve" in d and not (isinstance(d["cannot_resolve"], str) and d["cannot_resolve"] and d["unresolved"] is True):
            raise CkptselError(f"{where}/cannot_resolve: expected a reason with unresolved true, got {d!r}")
        for key in ("mean", "lo", "hi"):
            v = d[key]
            if not (v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))):
                raise CkptselError(f"{where}/{key}: expected a number, got {v!r}")
        if not isinstance(d["unresolved"], bool):
            raise CkptselError(f"{where}/unresolved: expected true or false, got {d['unresolved']!r}")
        if d["mean"] is None:
            raise CkptselError(f"{where}/mean: an estimate without a mean is never stored")
        return cls.from_dict(d)

    @classmethod
    def coerce(cls, e: Estimate | dict | None) -> Estimate | None:
        """An :class:`Estimate` from an estimate or its stored dict (None when there is none)."""
        return e if isinstance(e, Estimate) else cls.from_dict(e)


# --------------------------------------------------------------------------- formatting
def fmt(e: Estimate | dict | None, *, mean: bool = True, unit: str = "", mark: bool = True) -> str:
    """``"+1.23 [-0.40, +2.10] unresolved"`` (pp, two decimals); "–" when there is no estimate.

    ``mean=False`` prints the interval only, ``unit`` follows the mean (e.g. ``" pp"``), and
    ``mark=False`` leaves out the "unresolved" mark. The numbers printed are those stored
    (rounded to :data:`DIGITS` first); a stored dict keeps its ``unresolved`` flag. An estimate
    without an interval prints ``"+1.78 not estimable: 1 configuration"`` (whatever ``mark``);
    one its design cannot resolve adds the reason to the mark (``"… unresolved: the exact
    McNemar test's p = 0.125 > 0.05 (…)"``).
    """
    e = Estimate.coerce(e)
    if e is None or e.mean is None:
        return "–"
    e = e.as_stored()
    if e.not_estimable is not None:
        text = f"not estimable: {e.not_estimable}"
        return f"{e.mean:+.2f}{unit} {text}" if mean else text
    text = f"[{e.lo:+.2f}, {e.hi:+.2f}]"
    if mean:
        text = f"{e.mean:+.2f}{unit} {text}"
    if mark and e.cannot_resolve is not None:
        return f"{text} unresolved: {e.cannot_resolve}"
    return text + (" unresolved" if mark and e.unresolved else "")
