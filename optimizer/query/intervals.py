"""Unions of intervals over one column's ordered values.

A selection on one column (``=``, ``<>``, ``<``, ``BETWEEN``, ``IN``, and
``AND``/``OR``/``NOT`` of those) denotes a set of values; the OM paper's
heuristic 1 groups such predicates into one interval (``S.a > 5 AND S.a < 10``
is ``5 < S.a < 10``). An :class:`IntervalSet` is that set in normal form:
sorted, disjoint, non-adjacent intervals. Values are numbers or strings (one
kind per set); ``None`` as a bound means unbounded.

>>> s = IntervalSet.compare(">", 5) & IntervalSet.compare("<", 10)
>>> s, s.is_empty, s.is_points
((5, 10), False, False)
>>> (IntervalSet.compare("=", 1) | IntervalSet.compare("=", 3)).points
(1, 3)
>>> (IntervalSet.compare("<", 1) & IntervalSet.compare(">", 2)).is_empty
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Value = Any  # float, int or str: comparable within one set


@dataclass(frozen=True, order=False)
class Interval:
    lo: Value | None  # None: unbounded below
    hi: Value | None  # None: unbounded above
    lo_closed: bool = False
    hi_closed: bool = False

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    def __repr__(self) -> str:
        left = "[" if self.lo_closed else "("
        right = "]" if self.hi_closed else ")"
        lo = "-inf" if self.lo is None else repr(self.lo)
        hi = "inf" if self.hi is None else repr(self.hi)
        return f"{lo}" if self.is_point else f"{left}{lo}, {hi}{right}"


def _lo_key(iv: Interval) -> tuple:
    # An unbounded lower end sorts first; at equal bounds a closed end starts earlier.
    return (0,) if iv.lo is None else (1, iv.lo, 0 if iv.lo_closed else 1)


def _nonempty(lo, hi, lo_closed, hi_closed) -> bool:
    if lo is None or hi is None:
        return True
    return lo < hi or (lo == hi and lo_closed and hi_closed)


@dataclass(frozen=True)
class IntervalSet:
    intervals: tuple[Interval, ...]

    # -- construction -------------------------------------------------------
    @classmethod
    def everything(cls) -> IntervalSet:
        return cls((Interval(None, None),))

    @classmethod
    def nothing(cls) -> IntervalSet:
        return cls(())

    @classmethod
    def compare(cls, op: str, value: Value) -> IntervalSet:
        """The values ``x`` with ``x op value``; op in = <> != < <= > >=."""
        if op == "=":
            return cls((Interval(value, value, True, True),))
        if op in ("<>", "!="):
            return cls.compare("=", value).complement()
        if op in ("<", "<="):
            return cls((Interval(None, value, False, op == "<="),))
        if op in (">", ">="):
            return cls((Interval(value, None, op == ">=", False),))
        raise ValueError(f"not a comparison operator: {op!r}")

    @classmethod
    def points_of(cls, values) -> IntervalSet:
        """The set of the given values (an IN list): one sort, n log n.

        >>> IntervalSet.points_of([3, 1, 3]).points
        (1, 3)
        """
        return cls(tuple(Interval(v, v, True, True) for v in sorted(set(values))))

    @classmethod
    def between(cls, lo: Value, hi: Value) -> IntervalSet:
        return cls((Interval(lo, hi, True, True),)) if lo <= hi else cls.nothing()

    @classmethod
    def of(cls, intervals) -> IntervalSet:
        """Normal form of any collection of intervals: sorted, merged."""
        ivs = sorted((iv for iv in intervals
                      if _nonempty(iv.lo, iv.hi, iv.lo_closed, iv.hi_closed)), key=_lo_key)
        merged: list[Interval] = []
        for iv in ivs:
            if merged and _touches(merged[-1], iv):
                last = merged.pop()
                if last.hi is None or (iv.hi is not None and (
                        last.hi > iv.hi or (last.hi == iv.hi and last.hi_closed))):
                    hi, hi_closed = last.hi, last.hi_closed
                else:
                    hi, hi_closed = iv.hi, iv.hi_closed
                iv = Interval(last.lo, hi, last.lo_closed, hi_closed)
            merged.append(iv)
        return cls(tuple(merged))

    # -- algebra ------------------------------------------------------------
    def __or__(self, other: IntervalSet) -> IntervalSet:
        return IntervalSet.of(self.intervals + other.intervals)

    def __and__(self, other: IntervalSet) -> IntervalSet:
        # Both are sorted and disjoint: one merge-like sweep, linear in their sizes
        # (an IN list of 100,000 values meets a NOT IN list in no time).
        out = []
        a, b = self.intervals, other.intervals
        i = j = 0
        while i < len(a) and j < len(b):
            lo, lo_closed = _max_lo(a[i], b[j])
            hi, hi_closed = _min_hi(a[i], b[j])
            if _nonempty(lo, hi, lo_closed, hi_closed):
                out.append(Interval(lo, hi, lo_closed, hi_closed))
            if _ends_first(a[i], b[j]):
                i += 1
            else:
                j += 1
        return IntervalSet.of(out)

    def complement(self) -> IntervalSet:
        out, lo, lo_closed = [], None, False
        for iv in self.intervals:
            if iv.lo is not None:  # the gap below iv
                out.append(Interval(lo, iv.lo, lo_closed, not iv.lo_closed))
            if iv.hi is None:
                return IntervalSet.of(out)
            lo, lo_closed = iv.hi, not iv.hi_closed
        out.append(Interval(lo, None, lo_closed, False))
        return IntervalSet.of(out)

    # -- properties ---------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return not self.intervals

    @property
    def is_everything(self) -> bool:
        return self.intervals == (Interval(None, None),)

    @property
    def is_points(self) -> bool:
        """Every member interval is a single value (an equality or IN list)."""
        return bool(self.intervals) and all(iv.is_point for iv in self.intervals)

    @property
    def points(self) -> tuple:
        return tuple(iv.lo for iv in self.intervals if iv.is_point)

    def contains(self, value: Value) -> bool:
        for iv in self.intervals:
            above = iv.lo is None or value > iv.lo or (iv.lo_closed and value == iv.lo)
            below = iv.hi is None or value < iv.hi or (iv.hi_closed and value == iv.hi)
            if above and below:
                return True
        return False

    def __repr__(self) -> str:
        if not self.intervals:
            return "{}"
        return " | ".join(repr(iv) for iv in self.intervals) if len(self.intervals) > 1 \
            else repr(self.intervals[0])


def _ends_first(a: Interval, b: Interval) -> bool:
    """Whether ``a`` ends no later than ``b`` (an open end before a closed one)."""
    if a.hi is None:
        return False
    if b.hi is None or a.hi < b.hi:
        return True
    return a.hi == b.hi and (not a.hi_closed or b.hi_closed)


def _touches(a: Interval, b: Interval) -> bool:
    """Whether b (starting at or after a) overlaps or abuts a, so they merge."""
    if a.hi is None or b.lo is None:
        return True
    return b.lo < a.hi or (b.lo == a.hi and (a.hi_closed or b.lo_closed))


def _max_lo(a: Interval, b: Interval):
    if a.lo is None:
        return b.lo, b.lo_closed
    if b.lo is None:
        return a.lo, a.lo_closed
    if a.lo != b.lo:
        return (a.lo, a.lo_closed) if a.lo > b.lo else (b.lo, b.lo_closed)
    return a.lo, a.lo_closed and b.lo_closed


def _min_hi(a: Interval, b: Interval):
    if a.hi is None:
        return b.hi, b.hi_closed
    if b.hi is None:
        return a.hi, a.hi_closed
    if a.hi != b.hi:
        return (a.hi, a.hi_closed) if a.hi < b.hi else (b.hi, b.hi_closed)
    return a.hi, a.hi_closed and b.hi_closed
