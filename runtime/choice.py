"""Choosing a plan when the estimate is unsure, falling back when the chart loses, and
pricing a switch.

Three policies an :class:`~cqopt.runtime.adaptive.AdaptiveQuery` can add to OM's
Algorithm 2 (which runs the chart's plan at the point estimate):

- :class:`ExpectedChoice` (uncertainty-aware choice): keep the estimation
  errors of the last N rounds, jointly over the statistics (a rate's as the
  ratio actual / estimate, a selectivity's as the difference), apply each to
  the current estimate, and run the plan with the lowest *mean* cost over those
  scenarios. Every plan's cost at every cell's centroid is computed once, so a
  choice is one vectorized lookup of N points and a mean over N columns. Where
  plan costs are lopsided around a boundary, this picks the plan that is safe
  on both sides.
- :class:`RegretFallback` (regret-aware fallback): after each round every
  plan's cost at the observed statistics is known. Over a sliding window it
  sums the cost of the chart's plans against each fixed plan's; while some
  fixed plan has done better, that plan runs, until the chart is ahead again.
- :class:`PricedSwitch` (hysteresis by price): moving from plan A to plan B
  hands over the state B's joins hold and A's do not (their window contents,
  in bytes by the PIPES join memory formula (9),
  :func:`cqopt.costmodel.pipes.join_memory`, via the PIPES model). The switch
  costs that state once, in the utility's memory term (``w_m`` × bytes: one
  round of holding it). Switch only when the saving at the estimate over the
  next ``horizon`` rounds exceeds that price.

>>> fallback = RegretFallback(plans=2, window=3, warmup=2)
>>> for costs in ([2.0, 1.0], [2.0, 1.0]):  # the chart ran plan 0; plan 1 was cheaper
...     fallback.record(0, np.array(costs))
>>> fallback.plan()
1
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cqopt.optimizer.query.statistics import split_name

_MAX_RATIO = 1e6  # a rate's estimation error, actual / estimate, counts up to this


class ExpectedChoice:
    """The plan with the lowest mean cost over the estimate moved by recent residuals.

    Parameters
    ----------
    chart : QueryChart
        The query's chart (a grid, or a refined chart's finest uniform index).
    cell_costs : numpy.ndarray
        ``(plans, cells)``: every plan's utility at every flat cell's centroid.
    residuals : int
        How many past rounds' estimation errors are kept (N).
    """

    def __init__(self, chart, cell_costs: np.ndarray, residuals: int = 20):
        if residuals < 1:
            raise ValueError(f"residuals must be >= 1, got {residuals}")
        self.chart = chart
        self.axes = tuple(a.statistic for a in chart.spec.axes)
        self.is_rate = np.array([split_name(a)[0] == "rate" for a in self.axes])
        self.lo = np.array([a.lo for a in chart.spec.axes])
        self.hi = np.array([a.hi for a in chart.spec.axes])
        self.cell_costs = np.where(np.isnan(cell_costs), np.inf, cell_costs)
        self.shape = chart.spec.shape
        self.errors: deque[np.ndarray] = deque(maxlen=residuals)

    def __repr__(self) -> str:
        return (f"<ExpectedChoice {self.chart.spec.name}: {len(self.errors)} of "
                f"{self.errors.maxlen} rounds' errors kept>")

    def record(self, estimate: Mapping[str, float], actual: Mapping[str, float]) -> None:
        """Keep this round's error (ratio for rates, difference otherwise) on every axis."""
        error = np.where(self.is_rate, 1.0, 0.0)
        for i, name in enumerate(self.axes):
            if name not in actual:
                continue
            e, a = float(estimate[name]), float(actual[name])
            if self.is_rate[i]:  # finite: an inf ratio times a zero estimate is NaN
                error[i] = min(a / e, _MAX_RATIO) if e > 0 else 1.0
            else:
                error[i] = a - e
        self.errors.append(error)

    def choose(self, estimate: Mapping[str, float]) -> int | None:
        """The plan index of lowest expected cost; None before any residual is kept."""
        if not self.errors:
            return None
        errors = np.asarray(self.errors)
        point = np.array([float(estimate[a]) for a in self.axes])
        with np.errstate(over="ignore"):  # beyond the chart is its edge anyway
            scenarios = np.where(self.is_rate, point * errors, point + errors)
        scenarios = np.clip(scenarios, self.lo, self.hi)  # the chart's edge cells hold beyond
        cells = self.chart.choose_many(dict(zip(self.axes, scenarios.T))).cells
        flat = np.ravel_multi_index(tuple(cells.T), self.shape)
        expected = self.cell_costs[:, flat].mean(axis=1)
        return int(np.argmin(expected))


class RegretFallback:
    """Run the best fixed plan of the last ``window`` rounds while the chart trails it.

    Parameters
    ----------
    plans : int
        The number of candidate plans.
    window : int
        The sliding window, in rounds.
    warmup : int, optional
        Rounds to observe before falling back at all (default ``min(window, 10)``).
    """

    def __init__(self, plans: int, window: int, warmup: int | None = None):
        if window < 1:
            raise ValueError(f"the fallback window must be >= 1 round, got {window}")
        self.window = window
        self.warmup = min(window, 10) if warmup is None else warmup
        self.chart_costs: deque[float] = deque(maxlen=window)
        self.plan_costs: deque[np.ndarray] = deque(maxlen=window)
        self.n_plans = plans
        self.active: int | None = None
        self.fallbacks = 0  # times the fallback took over

    def __repr__(self) -> str:
        state = "the chart runs" if self.active is None else f"plan {self.active} runs"
        return (f"<RegretFallback over {self.window} rounds of {self.n_plans} plans: {state}, "
                f"{self.fallbacks} fallbacks>")

    def record(self, chart_plan: int, costs: np.ndarray) -> None:
        """One round: the plan the chart chose and every plan's cost at the actual statistics."""
        costs = np.where(np.isnan(costs), np.inf, np.asarray(costs, dtype=np.float64))
        if not np.isfinite(costs).any():
            return  # a round no plan can be scored on says nothing
        self.chart_costs.append(float(costs[chart_plan]))
        self.plan_costs.append(costs)
        if len(self.chart_costs) < self.warmup:
            return
        with np.errstate(invalid="ignore"):
            totals = np.sum(self.plan_costs, axis=0)
            chart = float(np.sum(self.chart_costs))
        best = int(np.argmin(totals))
        if totals[best] < chart:
            if self.active is None:
                self.fallbacks += 1
            # Keep the running fallback plan while it is still ahead of the chart.
            if self.active is None or not totals[self.active] < chart:
                self.active = best
        else:
            self.active = None

    def plan(self) -> int | None:
        """The fixed plan to run instead of the chart's, or None to follow the chart."""
        return self.active


@dataclass(frozen=True)
class PricedSwitch:
    """Switch when the estimated saving over ``horizon`` rounds exceeds the switch's price.

    Needs ``cost`` and ``switch_cost`` in :class:`~cqopt.runtime.adaptive.AdaptiveQuery`
    (:func:`chart_costing` makes both from a catalog).
    """

    # The handover is paid once and the saving lasts while the plan runs. On the
    # developers' traces (scripts/chart_quality.py) a horizon of 5 rounds never paid for
    # a 4-way join's window state, and the plan of the first round ran throughout;
    # 100 rounds kept the chart's regret and cut Q4's switches by a third to two thirds.
    horizon: float = 100.0


def join_signatures(plan) -> dict[frozenset, str]:
    """Each join of ``plan`` by the pair of stream sets it joins: its state's identity."""
    from cqopt.costmodel.base import plan_operators
    from cqopt.optimizer.plans.nodes import JoinNode

    streams: dict[str, frozenset] = {}
    joins = {}
    for key, node in plan_operators(plan):
        # a node's streams, as a set: the same for every kind (see the plan contract)
        streams[key] = frozenset(node.streams)
        if isinstance(node, JoinNode):
            joins[frozenset(streams[i] for i in node.inputs)] = key
    return joins


def handover_bytes(model, old_plan, new_plan, stats: Mapping[str, float]) -> float:
    """Bytes of join state ``new_plan`` needs that ``old_plan``'s joins do not hold.

    ``model`` is a PIPES model: its join memory is formula (9) over the
    inputs' window contents.
    """
    held = join_signatures(old_plan)
    needed = {sig: key for sig, key in join_signatures(new_plan).items() if sig not in held}
    if not needed:
        return 0.0
    operators = model.cost(new_plan, stats).operators
    return float(sum(float(operators[key].memory) for key in needed.values()))


def chart_costing(chart, catalog) -> tuple[Callable[[Mapping[str, Any]], np.ndarray],
                                           Callable[[Any, Any, Mapping[str, float]], float],
                                           Callable[[Any, Mapping[str, float]], float]]:
    """``plan_costs(stats)`` (every plan's utility, vectorized), ``switch_cost(a, b, stats)``
    and ``plan_cost(plan, stats)`` (one plan's utility at one point, for hysteresis).

    Costs use the chart's model, memory unit and weights; a switch's price is
    the handed-over bytes (PIPES) times the utility's memory weight.
    """
    from cqopt.costmodel import make_model, plan_utilities

    spec = chart.spec
    model, utility = spec.cost_model(catalog), spec.utility
    pipes = make_model("pipes", catalog)
    plans: Sequence = list(chart.plans)

    def plan_costs(stats: Mapping[str, Any]) -> np.ndarray:
        return plan_utilities(model, utility, plans, stats)

    def switch_cost(old_plan, new_plan, stats: Mapping[str, float]) -> float:
        return utility.w_m * handover_bytes(pipes, old_plan, new_plan, stats)

    def plan_cost(plan, stats: Mapping[str, float]) -> float:  # the generated scalar path
        return float(plan_utilities(model, utility, [plan], stats)[0])

    return plan_costs, switch_cost, plan_cost
