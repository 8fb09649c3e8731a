"""PIPES' adaptive resource manager: windows and granularities within QoS ranges (seed 002, §4).

Given bounds C on processing cost and M on memory, set every query's window
size and time granularity to the *same fraction* f of its QoS range
``[min, max]``: the closest allowed value to ``min + f·(max − min)``
(:func:`setting`). For a granularity, ``min`` is the coarsest and ``max`` the
finest, so a lower f is a coarser granularity (PIPES §4.3). Then (§4.3):

1. For ``j = 0, 1, …, p`` set windows and granularities at ``f = (p − j)/p``
   and ask the cost model for ``C_j`` and ``M_j``; stop at the first j with
   ``C_j ≤ C`` and ``M_j ≤ M``. The granularities stay at that fraction.
2. Fine-tune the windows' fraction by bisection.

The paper relies on resource use growing with f; so does this module.
Adjustments take effect with the delays of §4.2 (:func:`window_change`,
:func:`granularity_change`, :func:`schedule`):

- a window over a join's input changed from l to l′ at t is first visible at
  ``t + min(l, l′)`` and fully at ``t + max(l, l′)`` (the paper's Figure 7:
  60 s → 30 s at 80 s shows from 110 s, fully at 140 s);
- an aggregation's granularity change starts at once and is full after l
  time units when ``d < l``; with ``d ≥ l`` at the next element.

Readings where the paper leaves a choice open:

- *The estimate* is any callable ``estimate(windows, granularities) ->
  (cost, memory)`` over arrays aligned with the queries (NaN granularity for a
  query without one), so the PIPES model (:mod:`cqopt.costmodel.pipes`) or
  any other plugs in.
- *The bisection's interval.* Step 1 ends at the first feasible
  ``f_g = (p − j)/p``. With the granularities fixed there, the windows' fraction
  is searched on ``[f_g, 1]``: ``f_g`` is known to meet the bounds, and with
  coarser granularities the windows may be able to grow past where step 1
  stopped. The result always lies on the feasible side; ``iterations``
  halvings bound its distance from the largest feasible fraction by
  ``(1 − f_g)/2^iterations``.
- *Bounds met at full QoS*: step 1 stops at j = 0 and nothing changes.
- *Bounds unreachable* even at f = 0: every query runs at its minimum QoS
  and the result says so (``met`` false); nothing better is possible.
- *Allowed values.* Window sizes change in a fine-grained manner and are not
  rounded; a granularity is rounded to the nearest of the query's
  ``granularities`` when given (PIPES' granularities form a small set, e.g.
  ms, s, min), else taken as computed.
- *Delays elsewhere.* The join rule is applied to any stateful operator over
  a window (an aggregation's window too: its state expires the same way); a
  granularity change's purge time l is the *old* window (the elements in the
  state before the change); "at the next element" is the expected arrival
  ``t + d``. Between a change's start and its full effect the effect is
  taken to grow linearly (:meth:`Change.realised`).

>>> ranges = {"q": QosRange(window=(10.0, 110.0))}
>>> memory = lambda w, g: (0.0, 2.0 * float(w.sum()))  # memory linear in the window
>>> result = adapt(ranges, memory, memory_bound=150.0, steps=4, iterations=3)
>>> result.window_fraction, result.windows
(0.625, {'q': 72.5})
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cqopt.errors import CqoptError

Estimate = Callable[[np.ndarray, np.ndarray], tuple[float, float]]


@dataclass(frozen=True)
class QosRange:
    """A query's QoS range for its window size and, optionally, its time granularity.

    Parameters
    ----------
    window : tuple of float
        ``(min, max)``: the smallest window the query accepts and the one it asks for.
    granularity : tuple of float, optional
        ``(min, max)`` in PIPES' sense: the *coarsest* granularity accepted and the
        *finest* wanted (so ``min >= max`` as numbers).
    granularities : sequence of float, optional
        The granularities the system offers; a setting is rounded to the nearest.

    Raises
    ------
    CqoptError
        A window range that is not ``0 < min <= max``, or a granularity range that
        is not ``coarsest >= finest > 0``.
    """

    window: tuple[float, float]
    granularity: tuple[float, float] | None = None
    granularities: Sequence[float] | None = None

    def __post_init__(self):
        lo, hi = self.window
        if not 0 < lo <= hi < math.inf:
            raise CqoptError(f"a window's QoS range needs 0 < min <= max, got [{lo}, {hi}]")
        if self.granularity is not None:
            coarse, fine = self.granularity
            if not coarse >= fine > 0:
                raise CqoptError("a granularity's QoS range runs from the coarsest to the "
                                 f"finest (coarsest >= finest > 0), got [{coarse}, {fine}]")


def setting(qos_range: tuple[float, float], fraction: float,
            allowed: Sequence[float] | None = None) -> float:
    """The value at ``fraction`` of a QoS range: the allowed value closest to
    ``min + f·(max − min)``.

    Parameters
    ----------
    qos_range : tuple of float
        ``(min, max)`` (for a granularity: coarsest, finest).
    fraction : float
        f in [0, 1].
    allowed : sequence of float, optional
        The values that may be set; the nearest is taken.

    Returns
    -------
    float

    Examples
    --------
    >>> setting((10.0, 110.0), 0.5)
    60.0
    >>> setting((10.0, 0.001), 0.5, allowed=[0.001, 0.01, 0.1, 1.0, 10.0])  # coarse to fine
    1.0
    """
    lo, hi = qos_range
    value = (1.0 - fraction) * lo + fraction * hi  # exactly min at f = 0, max at f = 1
    if allowed:
        choices = np.asarray(allowed, dtype=np.float64)
        value = float(choices[np.argmin(np.abs(choices - value))])
    return float(value)


def settings(ranges: Mapping[str, QosRange], window_fraction: float,
             granularity_fraction: float) -> tuple[np.ndarray, np.ndarray]:
    """Every query's window and granularity (NaN where it has none) at the two fractions."""
    windows = np.array([setting(r.window, window_fraction) for r in ranges.values()])
    grains = np.array([setting(r.granularity, granularity_fraction, r.granularities)
                       if r.granularity else math.nan for r in ranges.values()])
    return windows, grains


@dataclass(frozen=True)
class Adaptation:
    """The resource manager's choice.

    Attributes
    ----------
    window_fraction, granularity_fraction : float
        The common fractions f of the QoS ranges (1: every query at its maximum QoS).
    windows, granularities : dict[str, float]
        The settings per query (granularity only for queries that have one).
    cost, memory : float
        The estimate at these settings.
    met : bool
        Whether the estimate is within both bounds (false: even the minimum QoS is not).
    estimates : int
        How many times the cost model was asked.
    """

    window_fraction: float
    granularity_fraction: float
    windows: dict[str, float]
    granularities: dict[str, float]
    cost: float
    memory: float
    met: bool
    estimates: int

    @property
    def changed(self) -> bool:
        """Whether any query runs below its maximum QoS."""
        return self.window_fraction < 1.0 or self.granularity_fraction < 1.0


def adapt(ranges: Mapping[str, QosRange], estimate: Estimate,
          cost_bound: float = math.inf, memory_bound: float = math.inf,
          steps: int = 10, iterations: int = 20) -> Adaptation:
    """PIPES §4.3: granularities in ``steps`` steps of f, then windows by bisection.

    Parameters
    ----------
    ranges : Mapping[str, QosRange]
        Each query's QoS ranges.
    estimate : callable
        ``estimate(windows, granularities) -> (cost, memory)`` over arrays in the
        order of ``ranges``; must not decrease as the settings' QoS rises.
    cost_bound, memory_bound : float
        C and M (infinite: no bound).
    steps : int
        p, the approximation parameter of step 1 (``f = (p − j)/p``).
    iterations : int
        Halvings of the windows' bisection.

    Returns
    -------
    Adaptation
        The highest common fractions found within the bounds; the minimum QoS
        with ``met`` false when no fraction is.

    Raises
    ------
    CqoptError
        ``steps < 1``, ``iterations < 0``, no queries, or an estimate that is not
        two finite-or-infinite numbers.

    Examples
    --------
    >>> ranges = {"q": QosRange(window=(10.0, 60.0))}
    >>> adapt(ranges, lambda w, g: (0.0, float(w.sum())), memory_bound=100.0).changed
    False
    """
    if steps < 1 or iterations < 0:
        raise CqoptError(f"the adaptation needs steps >= 1 and iterations >= 0, got "
                         f"steps={steps}, iterations={iterations}")
    if not ranges:
        raise CqoptError("the resource manager needs at least one query's QoS range")
    calls = 0

    def within(fw: float, fg: float) -> tuple[bool, float, float]:
        nonlocal calls
        calls += 1
        windows, grains = settings(ranges, fw, fg)
        try:
            cost, memory = (float(x) for x in estimate(windows, grains))
        except (TypeError, ValueError) as e:
            raise CqoptError(f"the cost estimate must return (cost, memory): {e}") from None
        return cost <= cost_bound and memory <= memory_bound, cost, memory

    def result(fw: float, fg: float, met: bool, cost: float, memory: float) -> Adaptation:
        windows, grains = settings(ranges, fw, fg)
        names = list(ranges)
        return Adaptation(fw, fg, dict(zip(names, windows.tolist())),
                          {n: g for n, g in zip(names, grains.tolist()) if not math.isnan(g)},
                          cost, memory, met, calls)

    for j in range(steps + 1):  # step 1: the rough approximation
        f = (steps - j) / steps
        ok, cost, memory = within(f, f)
        if ok:
            break
    else:
        return result(0.0, 0.0, False, cost, memory)
    if j == 0:
        return result(1.0, 1.0, True, cost, memory)
    lo, best = f, (cost, memory)  # step 2: the windows' fraction, granularities fixed at f
    ok, cost, memory = within(1.0, f)
    if ok:
        return result(1.0, f, True, cost, memory)
    hi = 1.0
    for _ in range(iterations):
        mid = (lo + hi) / 2
        ok, cost, memory = within(mid, f)
        if ok:
            lo, best = mid, (cost, memory)
        else:
            hi = mid
    return result(lo, f, True, *best)


@dataclass(frozen=True)
class Change:
    """One adjustment and when it shows (§4.2).

    Attributes
    ----------
    query, what : str
        The query and ``"window"`` or ``"granularity"``.
    old, new : float
        The settings before and after.
    at, starts, full : float
        When it was made, when its effect starts to show, when it is complete.
    """

    query: str
    what: str
    old: float
    new: float
    at: float
    starts: float
    full: float

    def realised(self, now: float) -> float:
        """The share of the effect in place at ``now``: 0 before it starts, 1 once full,
        linear between.

        >>> window_change("q", 80.0, 60.0, 30.0).realised(125.0)
        0.5
        """
        if now < self.starts:
            return 0.0
        if now >= self.full:
            return 1.0
        return (now - self.starts) / (self.full - self.starts)


def window_change(query: str, at: float, old: float, new: float) -> Change:
    """A window over a stateful operator's input changed at ``at``: visible from
    ``at + min(old, new)``, complete at ``at + max(old, new)`` (PIPES §4.2, join).

    Parameters
    ----------
    query : str
        The query changed.
    at : float
        When the change is made (application time, seconds).
    old, new : float
        The window sizes before and after, seconds.

    Returns
    -------
    Change

    Examples
    --------
    The paper's Figure 7:

    >>> c = window_change("q", 80.0, 60.0, 30.0)
    >>> c.starts, c.full
    (110.0, 140.0)
    >>> c = window_change("q", 150.0, 30.0, 60.0)
    >>> c.starts, c.full
    (180.0, 210.0)
    """
    return Change(query, "window", old, new, at, at + min(old, new), at + max(old, new))


def granularity_change(query: str, at: float, old: float, new: float, distance: float,
                       length: float) -> Change:
    """An aggregation's input granularity changed at ``at`` (PIPES §4.2, aggregation).

    Parameters
    ----------
    query : str
        The query changed.
    at : float
        When the change is made.
    old, new : float
        The granularities before and after.
    distance, length : float
        d and l of the aggregation's input: the mean gap between start
        timestamps and the mean validity (the window before the change).

    Examples
    --------
    >>> c = granularity_change("q", 100.0, 0.001, 1.0, distance=0.5, length=600.0)
    >>> c.starts, c.full
    (100.0, 700.0)
    >>> granularity_change("q", 100.0, 0.001, 1.0, distance=5.0, length=2.0).full
    105.0
    """
    full = at + length if distance < length else at + distance
    return Change(query, "granularity", old, new, at, at, full)


def schedule(at: float, old: Adaptation, new: Adaptation,
             distances: Mapping[str, float]) -> list[Change]:
    """The changes from one adaptation to the next, each with its delays.

    Parameters
    ----------
    at : float
        When the new adaptation is applied.
    old, new : Adaptation
        The settings in force and the ones chosen now.
    distances : Mapping[str, float]
        Each query's d: seconds between its input's start timestamps (1/rate).
        A granularity change's l is the query's window before the change.

    Returns
    -------
    list of Change
        One per window or granularity that differs, in the order of ``new``.

    Examples
    --------
    >>> before = Adaptation(1.0, 1.0, {"q": 60.0}, {"q": 1.0}, 0.0, 0.0, True, 1)
    >>> after = Adaptation(0.5, 0.5, {"q": 30.0}, {"q": 10.0}, 0.0, 0.0, True, 1)
    >>> [(c.what, c.starts, c.full) for c in schedule(80.0, before, after, {"q": 0.1})]
    [('window', 110.0, 140.0), ('granularity', 80.0, 140.0)]
    """
    changes = []
    for query, w in new.windows.items():
        w_old = old.windows.get(query, w)
        if w != w_old:
            changes.append(window_change(query, at, w_old, w))
        g, g_old = new.granularities.get(query), old.granularities.get(query)
        if g is not None and g_old is not None and g != g_old:
            changes.append(granularity_change(query, at, g_old, g, distances[query], w_old))
    return changes
