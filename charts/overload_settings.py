"""How queries behave under overload: deadlines, shares kept, error bounds, memory budgets.

:class:`OverloadSettings` holds these values and judges each one when it is
made: a workload file's QoS keys (``deadline``, ``min_kept``,
``error_bound``, ``quality``), ``cqopt fidelity``'s and ``cqopt run``'s
options. The code that sheds, negotiates or shrinks windows reads them
without checking again. :meth:`OverloadSettings.judged` names a bad value as
its caller spells it (``--deadline 0``, ``w.toml: query[0].deadline = 0``).

>>> OverloadSettings(deadline=0.5, min_kept=0.2).deadline
0.5
>>> OverloadSettings.judged({"min_kept": 2}, lambda key, value: f"--min-kept {value}")
Traceback (most recent call last):
...
cqopt.errors.CqoptError: --min-kept 2: needs a share in [0, 1]
>>> OverloadSettings(quality=[[0, 1.0], [0.5, 0.4]]).quality
((0.0, 1.0), (0.5, 0.4))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from cqopt.charts.settings import setting_label
from cqopt.errors import CqoptError

# The confidence of a shed aggregate's promised error: it fails with probability at most
# DELTA, Babcock et al.'s 0.01 (004, §3.1). The one default of the replay, the live run's
# shedders and the error-bound formula.
DELTA = 0.01

# Each bounded number (None: not given) and what it needs.
_RULES: dict[str, tuple[Callable[[float], bool], str]] = {
    "deadline": (lambda v: v > 0, "needs a number of seconds > 0"),
    "min_kept": (lambda v: 0 <= v <= 1, "needs a share in [0, 1]"),
    "delta": (lambda v: 0 < v < 1, "needs a probability in (0, 1)"),
    "error_bound": (lambda v: 0 < v < 1, "needs a relative error in (0, 1), e.g. 0.05"),
    "memory_budget": (lambda v: v > 0, "needs a size in bytes > 0"),
    "window_min": (lambda v: 0 < v <= 1, "needs a share in (0, 1]"),
}


class OverloadValueError(CqoptError):
    """One overload setting out of its range: which, its value, and what it needs."""

    def __init__(self, key: str, value: Any, problem: str):
        super().__init__(f"{setting_label(key, value)}: {problem}")
        self.key, self.value, self.problem = key, value, problem


@dataclass(frozen=True)
class OverloadSettings:
    """The bounds a query (or a workload) keeps under overload, each judged when made.

    Parameters
    ----------
    deadline : float, optional
        Seconds a round may take.
    min_kept : float
        The least share of a round's input kept when it is shed to its deadline.
    delta : float
        The confidence ``1 - delta`` of a COUNT's promised error under shedding
        (default :data:`DELTA`).
    error_bound : float, optional
        The relative error a query's aggregate accepts.
    quality : rows of (share dropped, quality), optional
        A query's quality as its input is dropped: shares strictly increasing,
        qualities never rising, all in [0, 1].
    memory_budget : float, optional
        Bytes the queries may hold together.
    window_min : float
        With ``memory_budget``: the smallest window a query accepts, a share of its own.

    Raises
    ------
    OverloadValueError
        A value out of its range, or not a number.
    """

    deadline: float | None = None
    min_kept: float = 0.0
    delta: float = DELTA
    error_bound: float | None = None
    quality: tuple[tuple[float, float], ...] | None = None
    memory_budget: float | None = None
    window_min: float = 0.25

    def __post_init__(self) -> None:
        for key, (ok, needs) in _RULES.items():
            value = getattr(self, key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value):
                raise OverloadValueError(key, value, "expected a number")
            if not ok(value):
                raise OverloadValueError(key, value, needs)
            object.__setattr__(self, key, float(value))
        if self.quality is not None:
            object.__setattr__(self, "quality", _quality(self.quality))

    @classmethod
    def judged(cls, values: Mapping[str, Any], name: Callable[[str, Any], str] = setting_label,
               error: type[CqoptError] = CqoptError) -> OverloadSettings:
        """The settings ``values`` give (``None`` values left at their defaults), a bad one
        refused as ``error``, named by ``name(key, value)``."""
        known = {f.name for f in fields(cls)}
        unknown = [k for k in values if k not in known]
        if unknown:
            raise error(f"{name(unknown[0], values[unknown[0]])}: not an overload setting "
                        f"(they are {', '.join(sorted(known))})")
        try:
            return cls(**{k: v for k, v in values.items() if v is not None})
        except OverloadValueError as err:
            raise error(f"{name(err.key, err.value)}: {err.problem}") from None


def _quality(rows: Any) -> tuple[tuple[float, float], ...]:
    """A quality table judged: rows of (share dropped, quality), monotone."""
    if not (isinstance(rows, (list, tuple)) and rows and all(
            isinstance(r, (list, tuple)) and len(r) == 2 and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in r)
            for r in rows)):
        raise OverloadValueError("quality", rows, "expected rows [share dropped, quality], "
                                                  "e.g. [[0, 1.0], [0.2, 0.8], [0.5, 0.4]]")
    dropped = [float(r[0]) for r in rows]
    quality = [float(r[1]) for r in rows]
    if not all(0 <= d <= 1 for d in dropped) or not all(0 <= q <= 1 for q in quality):
        raise OverloadValueError("quality", rows, "shares dropped and qualities lie in [0, 1]")
    if any(b <= a for a, b in zip(dropped, dropped[1:])) or \
            any(b > a for a, b in zip(quality, quality[1:])):
        raise OverloadValueError("quality", rows, "the table is not monotone: as more input is "
                                                  "dropped (strictly increasing), the quality "
                                                  "must not rise")
    return tuple(zip(dropped, quality))
