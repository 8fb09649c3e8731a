"""Reduced charts: Picasso's anorexic reduction, applied to a stream query's chart.

With a cost-increase threshold λ in [0, 1), a region may give up its optimal
plan for a plan used elsewhere if that plan costs at most (1 + λ) × the
optimum at the region's centroid. Which plans to keep is a set cover: plan
``p`` covers the regions where it is within the threshold; the greedy
algorithm (as Picasso's CostGreedy) repeatedly keeps the plan covering the
most still-uncovered chart volume (ties: the plan optimal over more volume,
then the lowest plan id), until every region is covered. A region keeps its
own plan if that plan was kept, else the first kept plan that covers it.
Then, to cut region boundaries, each region takes, among the kept plans that
cover it, the one most of its face neighbours (at the finest level) use, if
that beats its current plan; two such passes. Every region's plan stays
within (1 + λ) of its optimum, and the number of plans is at most the size
of the greedy cover.

Works on grids and refined charts alike: regions are cells or leaves
(weighted by volume). Costs come from the same kernel as the build
(:func:`cqopt.charts.kernel.point_utilities`).

>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.build import build_chart
>>> from cqopt.charts.kernel import ChartContext
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.workload import load_workload
>>> from cqopt.examples import example
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> spec = workload_specs(load_workload(example("workload.toml")), cat)[1][0]
>>> context = ChartContext(spec, cat)
>>> chart = build_chart(context, progress=False)
>>> small = reduce_chart(context, chart, 0.1)
>>> small.plans_used <= chart.plans_used, small.reduction["lambda"]
(True, 0.1)
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from cqopt.charts.kernel import Chart, ChartContext, point_utilities
from cqopt.charts.settings import judge_settings
from cqopt.errors import CqoptError

SMOOTHING_PASSES = 2


class ReduceError(CqoptError):
    """A reduction that cannot be: a threshold outside [0, 1)."""


def check_threshold(lam: float) -> float:
    """``lam`` as a float if it is a threshold in [0, 1), else a ReduceError (the chart
    settings' rule, :mod:`cqopt.charts.settings`).

    >>> check_threshold(0.1)
    0.1
    """
    judged = judge_settings({"reduce": lam}, lambda path, value: f"--reduce {value!r}",
                            ReduceError).get("reduce")
    if judged is None:
        raise ReduceError("--reduce None: expected a cost-increase threshold in [0, 1)")
    return judged


def reduce_chart(context: ChartContext, chart: Chart, lam: float) -> Chart:
    """``chart`` with anorexic reduction at threshold ``lam`` (see the module docstring).

    Parameters
    ----------
    context : ChartContext
        The chart's context (its plans, model and utility).
    chart : Chart
        A grid or refined chart built from ``context``.
    lam : float
        Cost-increase threshold in [0, 1).

    Returns
    -------
    Chart
        The same regions with reduced plans; ``reduction`` records λ, the plans
        before and after, and the largest cost increase.

    Raises
    ------
    ReduceError
        ``lam`` outside [0, 1).
    """
    return reduce_judged(context, chart, check_threshold(lam))


def reduce_judged(context: ChartContext, chart: Chart, lam: float) -> Chart:
    """:func:`reduce_chart` at a threshold judged already (:func:`check_threshold`), as a
    build judges it once for all its charts."""
    leaves = chart.leaves
    axes = tuple(replace(a, k=k) for a, k in zip(context.spec.axes, chart.spec.shape))
    if leaves is None:
        n_regions = chart.spec.n_cells
        stats = {k: v for k, v in replace(context.spec, axes=axes).centroid_stats(
            np.arange(n_regions)).items() if k in {a.statistic for a in axes}}
        volume = np.ones(n_regions)
        region_of_fine = np.arange(n_regions).reshape(chart.spec.shape)
    else:
        n_regions = len(leaves.plan)
        stats = leaves.centroids(axes)
        _, side = leaves.bounds()
        volume = side.astype(np.float64) ** len(axes)
        region_of_fine = leaves.expand(np.arange(n_regions, dtype=np.int64))
    utilities = point_utilities(context, stats)  # (plans, regions)
    optimal = np.argmin(utilities, axis=0)
    optimum = utilities[optimal, np.arange(n_regions)]
    covers = utilities <= (1 + lam) * optimum  # inf <= inf: a round without output ties
    covers[optimal, np.arange(n_regions)] = True
    kept = _greedy_cover(covers, volume, optimal)
    allowed = covers & np.isin(np.arange(len(covers)), kept)[:, None]
    rank = np.full(len(covers), len(kept))
    rank[kept] = np.arange(len(kept))
    # Own plan if kept, else the first kept plan (in cover order) that covers the region.
    assigned = np.where(allowed[optimal, np.arange(n_regions)], optimal,
                        np.argmin(np.where(allowed, rank[:, None], len(kept) + 1), axis=0))
    for _ in range(SMOOTHING_PASSES):
        assigned = _smooth(assigned, allowed, region_of_fine)
    cost = utilities[assigned, np.arange(n_regions)]
    with np.errstate(invalid="ignore", divide="ignore"):
        increase = np.where(cost <= optimum, 0.0, cost / optimum - 1.0)
    reduction = {"lambda": lam, "plans_before": int(len(np.unique(optimal))),
                 "plans_after": int(len(np.unique(assigned))),
                 "max_cost_increase": float(np.nanmax(increase)) if n_regions else 0.0}
    plan = assigned.astype(np.uint16)
    if leaves is None:
        return replace(chart, plan_index=plan.reshape(chart.spec.shape),
                       cost=cost.reshape(chart.spec.shape), reduction=reduction)
    return replace(chart, plan_index=plan, cost=cost,
                   leaves=replace(leaves, plan=plan, cost=cost), reduction=reduction)


def _greedy_cover(covers: np.ndarray, volume: np.ndarray, optimal: np.ndarray) -> list[int]:
    """Plans, in the order kept, that together cover every region (greedy set cover)."""
    n_plans = len(covers)
    own = np.bincount(optimal, weights=volume, minlength=n_plans)
    uncovered = np.ones(covers.shape[1], dtype=bool)
    kept: list[int] = []
    while uncovered.any():
        gain = covers[:, uncovered].astype(np.float64) @ volume[uncovered]
        # The most new volume, then the most volume where the plan is optimal, then lowest id.
        best = max(range(n_plans), key=lambda p: (gain[p], own[p], -p))
        kept.append(best)
        uncovered &= ~covers[best]
    return kept


def _smooth(assigned: np.ndarray, allowed: np.ndarray, region_of_fine: np.ndarray
            ) -> np.ndarray:
    """Each region takes the allowed plan most of its face neighbours use (ties: keep)."""
    n_plans, n_regions = allowed.shape
    votes = np.zeros((n_regions, n_plans))
    for axis in range(region_of_fine.ndim):
        for a, b in ((slice(None, -1), slice(1, None)), (slice(1, None), slice(None, -1))):
            here = region_of_fine[(slice(None),) * axis + (a,)].ravel()
            there = region_of_fine[(slice(None),) * axis + (b,)].ravel()
            other = here != there
            np.add.at(votes, (here[other], assigned[there[other]]), 1.0)
    votes = np.where(allowed.T, votes, -math.inf)
    mine = votes[np.arange(n_regions), assigned]
    best = np.argmax(votes, axis=1)
    return np.where(votes[np.arange(n_regions), best] > mine, best, assigned)
