"""What every cost model returns, and the readings both models share.

A model scores one plan over whole grids of statistics in one call: the
statistics are numpy arrays (or scalars) that broadcast against each other,
and every result is an array of the broadcast shape. A scalar is the 0-d case
of the same code.

Shared readings, pinned by tests:

- A stream's window in seconds: ``[RANGE w]`` is w; ``[ROWS c]`` is c / λ,
  as PIPES treats tuple-based windows (seed 002, section 2); ``[NOW]`` is 0;
  ``[UNBOUNDED]`` is infinite, so any state that holds the window costs
  infinitely much. A partitioned ``[PARTITION BY ... ROWS c]`` window is read
  as ``[ROWS c]``: the number of partitions is not a statistic here.
- An operator above several streams (a join, or anything above one) sees the
  mean of its inputs' windows: for equal windows, the OM paper's one W.
- Nothing of an unbounded amount is nothing: a product in which one factor
  is 0 is 0 even when another is infinite (:func:`times`). An
  ``[UNBOUNDED]`` window at rate 0, or after a selection that passes
  nothing, holds no memory; no cost is ever NaN.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from cqopt.errors import CqoptError

Array = NDArray[np.float64]


class CostModelError(CqoptError, ValueError):
    """A cost model or utility was set up wrongly (unknown model, bad weights, ...).

    A ValueError too, so that callers catching ValueError keep working.
    """


class MissingStatisticError(CqoptError):
    """A cost model was asked to cost a plan without a statistic it needs."""


@dataclass(frozen=True)
class OperatorCost:
    rate: Array  # output rate, tuples/s
    memory: Array  # bytes (or tuples, in OM's literal unit)
    cpu: Array  # seconds of processing per second of stream time


@dataclass(frozen=True)
class PlanCost:
    rate: Array  # the root's output rate, tuples/s
    memory: Array  # sum over operators
    cpu: Array  # sum over operators
    operators: dict[str, OperatorCost] = field(default_factory=dict)


def statistic(stats: Mapping[str, ArrayLike], name: str) -> Array:
    """``stats[name]`` as a float array, or a clear error naming what is missing."""
    try:
        value = stats[name]
    except KeyError:
        raise MissingStatisticError(
            f"the cost model needs statistic {name!r}; given: {', '.join(sorted(stats)) or 'none'}"
        ) from None
    return np.asarray(value, dtype=np.float64)


def selectivity(stats: Mapping[str, ArrayLike], names: tuple[str, ...]) -> Array:
    """The product of the named selectivities (1 for none: a Cartesian product)."""
    out = np.float64(1.0)
    for name in names:
        out = out * statistic(stats, name)
    return np.asarray(out)


def window_seconds(window, rate: Array) -> Array:
    """A source window's length in seconds at arrival rate ``rate`` (tuples/s)."""
    if window is None or window.kind == "unbounded":
        return np.full_like(rate, np.inf)
    if window.kind == "range":
        return np.full_like(rate, window.seconds)
    if window.kind == "rows":
        with np.errstate(divide="ignore"):
            return window.rows / rate
    return np.zeros_like(rate)  # [NOW]


def times(*factors: ArrayLike) -> Array:
    """The product of ``factors``, 0 wherever one of them is 0 (even if another is ∞).

    >>> float(times(0.0, np.inf, 3.0)), float(times(2.0, np.inf))
    (0.0, inf)
    """
    product, zero = np.float64(1.0), np.False_
    with np.errstate(invalid="ignore"):
        for factor in factors:
            factor = np.asarray(factor, dtype=np.float64)
            product, zero = product * factor, zero | (factor == 0)
    return np.asarray(np.where(zero, 0.0, product))


def sum_arrays(arrays) -> Array:
    total = np.float64(0.0)
    for a in arrays:
        total = total + a
    return np.asarray(total)
