"""A chart's box as the rounds saw it: observed axis ranges, and fixed values they contradict.

:func:`observed_ranges` is what ``cqopt build --ranges-from`` sets a chart's
axes to. :func:`spec_from_rounds` makes the whole spec of a chart that covers
the rounds: its axes over their observed ranges (the same k), and every fixed
statistic the rounds put more than the coverage factor off re-fixed at its
observed median (a chart built for another join selectivity than the one
the data has covers none of its rounds). A run's background refresh
(:mod:`cqopt.runtime.refresh`) rebuilds from it.

>>> from cqopt.charts.spec import Axis, ChartSpec
>>> spec = ChartSpec("Q", "SELECT 1", (Axis("rate.S", 100.0, 1000.0, 4),),
...                  fixed={"jsel.S.T": 0.001, "sel.S": 0.5})
>>> rounds = {"rate.S": np.arange(1.0, 101.0), "jsel.S.T": np.full(100, 0.2),
...           "sel.S": np.full(100, 0.6)}
>>> new, changes = spec_from_rounds(spec, rounds)
>>> new.axes, new.fixed
((Axis(statistic='rate.S', lo=5.95, hi=95.05, k=4),), {'jsel.S.T': 0.2, 'sel.S': 0.5})
>>> changes
['rate.S from 5.95 to 95.05 (was 100 to 1000), the 5th to 95th percentiles of 100 rounds', 'jsel.S.T fixed at 0.2 (was 0.001), the median of 100 rounds']
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from cqopt.charts.spec import COVERAGE_FACTOR, Axis, ChartSpec


def observed_ranges(spec, observed: Mapping[str, ArrayLike],
                    percentiles: tuple[float, float] = (5.0, 95.0)
                    ) -> dict[str, tuple[float, float, int]]:
    """Each axis of ``spec`` as the data saw it: the ``percentiles`` of its finite values.

    What ``cqopt build --ranges-from`` sets a chart's axes to. An axis whose
    values are all one number gets ±10% around it (an axis needs lo < hi);
    an axis the data never defines is left out.

    Returns
    -------
    dict
        Statistic to ``(lo, hi, rounds)``, ``rounds`` the rounds that define it.

    Examples
    --------
    >>> from cqopt.charts.spec import Axis, ChartSpec
    >>> spec = ChartSpec("Q", "SELECT 1", (Axis("rate.S", 100.0, 1000.0, 4),))
    >>> observed_ranges(spec, {"rate.S": np.arange(1.0, 101.0)})
    {'rate.S': (5.95, 95.05, 100)}
    """
    lo_q, hi_q = percentiles
    if not 0 <= lo_q < hi_q <= 100:
        raise ValueError(f"percentiles must be 0 <= lo < hi <= 100, got {percentiles}")
    out = {}
    for axis in spec.axes:
        if axis.statistic not in observed:
            continue
        x = np.asarray(observed[axis.statistic], dtype=np.float64)
        x = x[np.isfinite(x)]
        if not len(x):
            continue
        lo, hi = (float(v) for v in np.percentile(x, [lo_q, hi_q]))
        if hi <= lo:
            # A selectivity stays within [0, 1].
            top = 1.0 if not axis.statistic.startswith("rate.") else math.inf
            lo, hi = lo * 0.9, min(hi * 1.1 if hi > 0 else 1e-9, top)
        out[axis.statistic] = (round(lo, 12), round(hi, 12), int(len(x)))
    return out


def spec_from_rounds(spec: ChartSpec, observed: Mapping[str, ArrayLike],
                     percentiles: tuple[float, float] = (5.0, 95.0),
                     factor: float = COVERAGE_FACTOR) -> tuple[ChartSpec, list[str]]:
    """``spec`` made to cover the rounds ``observed``, and what changed, in words.

    Parameters
    ----------
    spec : ChartSpec
        The chart's spec now.
    observed : mapping of str to array_like
        Per statistic, its value in each round (NaN where a round does not define it).
    percentiles : (float, float)
        The axes' new ranges, as :func:`observed_ranges` takes them.
    factor : float
        A fixed statistic whose observed median is more than ``factor`` off its
        value is re-fixed at that median.

    Returns
    -------
    (ChartSpec, list of str)
        The new spec (the same k, model and weights; a re-fixed statistic's
        source says where its value came from) and one line per change.
    """
    changes = []
    ranges = observed_ranges(spec, observed, percentiles)
    axes = []
    for axis in spec.axes:
        if axis.statistic not in ranges:
            axes.append(axis)
            continue
        lo, hi, rounds = ranges[axis.statistic]
        axes.append(Axis(axis.statistic, lo, hi, axis.k))
        if (lo, hi) != (axis.lo, axis.hi):
            changes.append(f"{axis.statistic} from {lo:.4g} to {hi:.4g} (was {axis.lo:.4g} to "
                           f"{axis.hi:.4g}), the {percentiles[0]:g}th to {percentiles[1]:g}th "
                           f"percentiles of {rounds} rounds")
    fixed, sources = dict(spec.fixed), dict(spec.sources)
    for name, value in spec.fixed.items():
        if name not in observed:
            continue
        x = np.asarray(observed[name], dtype=np.float64)
        x = x[np.isfinite(x)]
        if not len(x):
            continue
        median = float(np.median(x))
        if value / factor <= median <= value * factor:
            continue
        fixed[name] = median
        sources[name] = f"the median of {len(x)} observed rounds"
        changes.append(f"{name} fixed at {median:.4g} (was {value:.4g}), the median of "
                       f"{len(x)} rounds")
    return dataclasses.replace(spec, axes=tuple(axes), fixed=fixed, sources=sources), changes
