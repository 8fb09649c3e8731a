"""The chart as the optimizer's cache: a round the chart does not cover is costed at its point.

A chart answers for a box of the statistics space (:meth:`ChartSpec.coverage
<cqopt.charts.spec.ChartSpec.coverage>`): each axis's range, and each fixed
statistic within a factor of 2 of the value the chart was built at. A round
whose statistics leave that box is looked up at a clamped edge, or in a
chart built for a selectivity it contradicts, and the chart's plan there says
little about it. :class:`OffChart` decides every round in one place:

- inside the box, the chart's plan (a lookup: nothing is costed);
- outside it, every candidate costed at the round's statistics with the
  chart's own model, memory unit and weights (the kernel's formulas, as code
  generated once for the plan set: :class:`~cqopt.costmodel.point.PointUtilities`),
  and the cheapest runs. The chart's plan keeps a tie. The answer says that
  the round was off the chart, and why.

Replays count these rounds ("off-chart rounds"); the run loop can call the
same :meth:`OffChart.choose`.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.build import build_local
>>> from cqopt.charts.lookup import QueryChart
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.workload import load_workload
>>> from cqopt.examples import example
>>> catalog = load_catalog(example("dec-pkt.toml"))
>>> spec = [s for s, _ in workload_specs(load_workload(example("workload.toml")), catalog)
...         if s.name == "Q2"][0]
>>> built = build_local([spec], catalog, progress=False)[0]
>>> chart = QueryChart(spec, built.plans, built.plan_index, built.cost)
>>> cache = OffChart(chart, catalog)
>>> rates = {"rate.TCP": 300.0, "rate.UDP": 300.0, "rate.SF": 60.0}
>>> cache.choose({**rates, **spec.fixed}).off_chart
False
>>> off = cache.choose({**rates, "jsel.TCP.UDP": 0.1, "jsel.SF.UDP": 0.4, "jsel.SF.TCP": 0.001})
>>> off.off_chart, off.reason
(True, 'jsel.SF.UDP = 0.4 is 400x the 0.001 the chart fixes; jsel.TCP.UDP = 0.1 is 100x the 0.001 the chart fixes')
>>> off.chart_plan_id, off.plan_id  # the chart's plan, and the cheapest at the round's point
('UDP⋈SF⋈TCP', 'TCP⋈SF⋈UDP')
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np

from cqopt.charts.spec import COVERAGE_FACTOR
from cqopt.costmodel.point import PointUtilities


class OffChartChoice(NamedTuple):
    """The plan for a round, whether the chart covered its statistics, and why not."""

    plan: Any
    plan_id: str
    off_chart: bool
    reason: str  # "" when the chart covers the round
    chart_plan_id: str  # the chart's own plan at the (clamped) statistics
    cell: tuple[int, ...]


class OffChart:
    """One query's choice: the chart's plan where it covers a round, else the costed best.

    Parameters
    ----------
    chart : QueryChart
        The query's chart, with its candidate plans.
    catalog : Catalog
        The catalog the chart was built with: its model costs the plans.
    factor : float
        How far (either way) a fixed statistic may be from the chart's value.
    """

    def __init__(self, chart, catalog, factor: float = COVERAGE_FACTOR):
        if not (math.isfinite(factor) and factor > 1):
            raise ValueError(f"the off-chart factor must be a number > 1, got {factor!r}")
        spec = chart.spec
        self.chart, self.factor = chart, factor
        self.box = spec.coverage(factor)
        self._fixed = {name: value for name, value in spec.fixed.items()}
        self.axes = tuple(a.statistic for a in spec.axes)
        self.costs = PointUtilities(spec.cost_model(catalog), spec.utility, chart.plans)
        self._position = {id(p): i for i, p in enumerate(chart.plans)}

    def __repr__(self) -> str:
        return (f"<OffChart {self.chart.spec.name}: {len(self.box)} statistics covered, "
                f"fixed ones within {self.factor:g}x>")

    def outside(self, stats: Mapping[str, float]) -> str:
        """Why the chart does not cover ``stats`` (each statistic it leaves), or ``""``.

        A statistic ``stats`` lacks, or gives as NaN, is not judged.
        """
        reasons = []
        for name, lo, hi, fixed in self.box:
            x = stats.get(name)
            if x is None or not (x < lo or x > hi):  # NaN compares false: not judged
                continue
            reasons.append(self._reason(name, float(x), lo, hi, fixed))
        return "; ".join(reasons)

    def _reason(self, name: str, x: float, lo: float, hi: float, fixed: bool) -> str:
        if not fixed:
            side = "below" if x < lo else "above"
            return f"{name} = {x:.4g} is {side} the chart's range [{lo:.4g}, {hi:.4g}]"
        value = self._fixed[name]
        if value > 0 and x > 0:
            ratio = x / value
            how = f"{ratio:.3g}x" if ratio >= 1 else f"1/{1 / ratio:.3g} of"
        else:
            how = "far from"
        return f"{name} = {x:.4g} is {how} the {value:.4g} the chart fixes"

    def choose(self, stats: Mapping[str, float], choice=None,
               judged: Mapping[str, float] | None = None) -> OffChartChoice:
        """The plan for a round at ``stats`` (every statistic of the chart, valid values).

        Parameters
        ----------
        stats : mapping of str to float
            The round's statistics: its axes and the statistics the chart fixes.
        choice : Choice, optional
            The chart's lookup at ``stats`` when the caller has it already.
        judged : mapping of str to float, optional
            What the chart's cover is judged at, when not ``stats`` (the
            adaptive query's mean of each fixed statistic over recent rounds);
            the plans are costed at ``stats`` either way.

        Returns
        -------
        OffChartChoice
            Inside the chart, its plan; outside, the candidate of lowest cost at
            ``stats`` (the chart's plan on a tie, or when no plan has a finite
            cost), with ``off_chart`` set and ``reason`` saying what left the chart.
        """
        if choice is None:
            choice = self.chart.locate([float(stats[a]) for a in self.axes])
        reason = self.outside(stats if judged is None else judged)
        if not reason:
            return OffChartChoice(choice.plan, choice.plan_id, False, "", choice.plan_id,
                                  choice.cell)
        plan = self.cheapest(stats, choice.plan)
        plan_id = choice.plan_id if plan is choice.plan else plan.id
        return OffChartChoice(plan, plan_id, True, reason, choice.plan_id, choice.cell)

    def cheapest(self, stats: Mapping[str, float], default):
        """The plan of lowest cost at ``stats``; ``default`` on a tie with it, or if none is
        finite (a NaN cost counts as infinite)."""
        costs = self.costs(stats)
        costs = np.where(np.isnan(costs), np.inf, costs)
        best = int(np.argmin(costs))
        if not np.isfinite(costs[best]):
            return default
        i = self._position.get(id(default))
        if i is not None and costs[i] <= costs[best]:
            return default
        return self.chart.plans[best]
