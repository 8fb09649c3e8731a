"""Does the data stay inside the chart? Alarms for statistics the chart does not cover.

A chart covers a box of the statistics space: an axis's range, and the value
each fixed statistic was built at. Rounds whose statistics fall outside it
are looked up at the clamped edge (an axis) or at a value they contradict (a
fixed statistic), and the chart's plan there says little about them. When
that happens in more than ``share`` of the rounds that define the
statistic, :func:`coverage_alarms` gives one alarm per statistic: what was
observed, what the chart covers, and how to rebuild it.

- an **axis** alarms when the observed value lies outside ``[lo, hi]``;
- a **fixed** statistic alarms when the observed value differs from the
  fixed one by more than ``factor`` (either way).

Ranges to rebuild with are the observed 5th to 95th percentiles, widened to
take in the old range.

>>> from cqopt.charts.spec import Axis, ChartSpec
>>> spec = ChartSpec("Q", "SELECT 1", (Axis("rate.S", 100.0, 1000.0, 4),),
...                  fixed={"jsel.S.T": 0.001})
>>> observed = {"rate.S": np.r_[np.full(80, 500.0), np.full(20, 3000.0)],
...             "jsel.S.T": np.full(100, 0.001)}
>>> [a.statistic for a in coverage_alarms(spec, observed)]
['rate.S']
>>> print(coverage_alarms(spec, observed)[0].message)
rate.S left the chart in 20% of 100 rounds (observed 500 to 3000; the chart covers 100 to 1000): rebuild with ranges = { "rate.S" = [100, 3000] } in the workload
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cqopt.charts.ranges import observed_ranges  # noqa: F401 - its home before charts had it
from cqopt.charts.spec import COVERAGE_FACTOR as FACTOR  # a fixed value this many times off

SHARE = 0.10  # alarm when more than this share of rounds leave the chart


@dataclass(frozen=True)
class CoverageAlarm:
    """One statistic the chart does not cover in enough of the rounds."""

    statistic: str
    share: float  # of the rounds that define the statistic
    rounds: int  # rounds that define it
    observed: tuple[float, float]  # 5th and 95th percentiles
    covered: tuple[float, float]  # the axis range, or the fixed value twice
    fixed: bool
    message: str

    def to_dict(self) -> dict:
        return {"statistic": self.statistic, "share": self.share, "rounds": self.rounds,
                "observed": list(self.observed), "covered": list(self.covered),
                "fixed": self.fixed, "message": self.message}


def coverage_alarms(spec, observed: Mapping[str, ArrayLike], *, share: float = SHARE,
                    factor: float = FACTOR) -> list[CoverageAlarm]:
    """The statistics that leave ``spec``'s chart in more than ``share`` of the rounds.

    Parameters
    ----------
    spec : ChartSpec
        The chart's axes and fixed statistics.
    observed : mapping of str to array_like
        Per statistic, its value in each round (NaN where a round does not define
        it); statistics the chart does not have are ignored.
    share : float
        The share of rounds above which a statistic alarms.
    factor : float
        How far (either way) an observation may be from a fixed value.

    Returns
    -------
    list of CoverageAlarm
        In the chart's order: axes first, then fixed statistics.
    """
    alarms = []
    for name, lo, hi, fixed in spec.coverage(factor):
        if name not in observed:
            continue
        x = np.asarray(observed[name], dtype=np.float64)
        x = x[np.isfinite(x)]
        if not len(x):
            continue
        outside = float(np.mean((x < lo) | (x > hi)))
        if outside <= share:
            continue
        p5, p95 = (float(v) for v in np.percentile(x, [5, 95]))
        if fixed:
            value = spec.fixed[name]
            covered = (value, value)
            message = (f"{name} is fixed at {value:g} but was more than {factor:g}x off in "
                       f"{outside:.0%} of {len(x)} rounds (observed {p5:.4g} to {p95:.4g}): give "
                       f'it an axis, ranges = {{ "{name}" = [{p5:.4g}, {p95:.4g}] }} in the '
                       f"workload, or fix it at the observed median {float(np.median(x)):.4g}")
        else:
            covered = (lo, hi)
            new_lo, new_hi = min(lo, p5), max(hi, p95)
            message = (f"{name} left the chart in {outside:.0%} of {len(x)} rounds (observed "
                       f"{p5:.4g} to {p95:.4g}; the chart covers {lo:.4g} to {hi:.4g}): rebuild "
                       f'with ranges = {{ "{name}" = [{new_lo:.4g}, {new_hi:.4g}] }} in the '
                       "workload")
        alarms.append(CoverageAlarm(name, outside, len(x), (p5, p95), covered, fixed, message))
    return alarms
