"""Adaptive refinement: a chart that spends its cells where the best plan changes.

A k-regular grid spends as many cells where one plan wins everywhere as
along the boundaries between plans. A refined chart starts coarse, ``k0``
regions per axis (default 2: every region holds one corner of the chart),
and splits a region in two along every axis (2^n children) only where its
3^n sample points (corners, midpoints of its edges and faces, centroid: the
corners of its children) disagree on the best plan: where the plan of its
centroid is not the cheapest at some sample point (beyond ties), breadth
first, until a budget of regions (leaves) or a depth is reached. When one
round cannot split every disagreeing region within the budget, those whose
plan loses most at a sample point (relative cost) go first.

Points live on the lattice of half-cells of the finest level, so a corner
shared by many regions is costed once. A round of splits is one call of
the kernel (:func:`cqopt.charts.kernel.evaluate_points`) over the new
points: in this process, or as one Spark job
(:func:`cqopt.spark.chart_build.build_spark_refined`). A leaf's plan is the
best plan at its centroid, as in a grid.

Storage and lookup: the leaves are stored (level, flat index in their
level's grid, plan, cost); loading expands them into a uniform index at the
finest level (``k0 · 2^depth`` cells per axis), so ``choose`` is the same
arithmetic as for a grid. The finest index is capped at
:data:`MAX_INDEX_CELLS` cells, which bounds the depth.

>>> from cqopt.catalog import Catalog
>>> from cqopt.charts.kernel import ChartContext
>>> from cqopt.charts.spec import Axis, ChartSpec
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 1000],
...     "columns": {"a": "int", "b": "int", "c": "int", "d": "int"}}}})
>>> spec = ChartSpec("q", "SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]",
...                  (Axis("sel.S", 0, 1, 2), Axis("rate.S", 10, 1000, 2)))
>>> chart = refine_chart(ChartContext(spec, cat), budget=40, depth=4)
>>> chart.leaves.depth, len(chart.leaves.plan) <= 40, chart.plans_used
(4, True, 1)
>>> fine = chart.leaves.expand()
>>> fine.shape
(32, 32)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cqopt.charts.kernel import Chart, ChartContext, point_utilities
from cqopt.charts.spec import Axis, ChartSpec
from cqopt.errors import CqoptError

MAX_INDEX_CELLS = 1 << 20  # the finest uniform index: 1 Mi entries, a few MB in memory
MAX_DEPTH = 12
SPLIT_TOLERANCE = 1e-9  # a plan that loses less than this at a sample point ties there


class RefineError(CqoptError):
    """A refinement that cannot be built as asked (budget, depth)."""


@dataclass
class Leaves:
    """A refined chart's regions: each a cell of the grid of its level.

    Level ``L`` has ``k0 · 2^L`` regions per axis; ``cell`` is a region's flat
    (C-order) index in its level's grid.
    """

    k0: tuple[int, ...]
    depth: int
    level: np.ndarray  # (n,) uint8
    cell: np.ndarray  # (n,) int64
    plan: np.ndarray  # (n,) uint16, into the chart's plans
    cost: np.ndarray  # (n,) float64, the plan's utility at the leaf's centroid

    @property
    def fine_shape(self) -> tuple[int, ...]:
        return tuple(k << self.depth for k in self.k0)

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Each leaf's first fine cell per axis, (n, axes), and its side in fine cells, (n,)."""
        lo = np.empty((len(self.level), len(self.k0)), dtype=np.int64)
        for level in np.unique(self.level):
            rows = self.level == level
            shape = tuple(k << int(level) for k in self.k0)
            lo[rows] = np.stack(np.unravel_index(self.cell[rows], shape), axis=-1)
        side = np.left_shift(1, self.depth - self.level.astype(np.int64))
        return lo * side[:, None], side

    def expand(self, values: np.ndarray | None = None) -> np.ndarray:
        """The uniform index at the finest level: each fine cell holds its leaf's value
        (by default its plan); a fine cell no leaf covers is an error."""
        values = self.plan if values is None else values
        out = np.full(self.fine_shape, -1 if values.dtype.kind in "iu" else np.nan,
                      dtype=np.int32 if values.dtype.kind in "iu" else values.dtype)
        n = len(self.k0)
        for level in np.unique(self.level):
            rows = self.level == level
            side = 1 << (self.depth - int(level))
            shape = tuple(k << int(level) for k in self.k0)
            # View the fine grid as (region, offset) pairs per axis; index regions, fill offsets.
            view = out.reshape([d for k in shape for d in (k, side)])
            index = np.unravel_index(self.cell[rows], shape)
            key = tuple(x for i in index for x in (i, slice(None)))
            view[key] = values[rows].reshape(-1, *[1] * n)
        if values.dtype.kind in "iu" and (out < 0).any():
            raise RefineError("refined chart: its leaves do not cover the chart; rebuild it")
        return out

    def centroids(self, axes: tuple[Axis, ...]) -> dict[str, np.ndarray]:
        """The statistics at every leaf's centroid."""
        lo, side = self.bounds()
        return {a.statistic: a.lo + (lo[:, i] + side / 2) / fine * (a.hi - a.lo)
                for i, (a, fine) in enumerate(zip(axes, self.fine_shape))}


def default_depth(n_axes: int, k0: int = 2) -> int:
    """The deepest level whose uniform index stays within :data:`MAX_INDEX_CELLS`."""
    depth = 0
    while depth < MAX_DEPTH and (k0 << (depth + 1)) ** n_axes <= MAX_INDEX_CELLS:
        depth += 1
    return depth


def check_refinement(spec: ChartSpec, budget: int, depth: int | None, k0: int = 2) -> int:
    """The depth to refine ``spec`` to; a RefineError for a budget or depth that cannot be."""
    n = len(spec.axes)
    corners = 1 << n
    if budget < max(corners, k0 ** n):
        raise RefineError(f"query {spec.name}: a cell budget of {budget} is below the "
                          f"{max(corners, k0 ** n)} corner regions of its {n} axes; give "
                          f"--refine {max(corners, k0 ** n)} or more")
    if depth is None:
        return default_depth(n, k0)
    if depth < 0 or depth > MAX_DEPTH or (k0 << depth) ** n > MAX_INDEX_CELLS:
        # 2^depth is never formatted: at a depth of 100,000 it has 30,000 digits
        cells = ("no" if depth < 0 else f"{(k0 << depth) ** n}" if depth <= MAX_DEPTH
                 else f"about 2^{(depth + k0.bit_length() - 1) * n}")
        raise RefineError(f"query {spec.name}: depth {depth} needs a finest index of "
                          f"{cells} cells, above the {MAX_INDEX_CELLS} allowed; give a "
                          f"depth from 0 to {default_depth(n, k0)}")
    return depth


Evaluate = Callable[[ChartContext, dict[str, np.ndarray]], np.ndarray]


def refine_chart(context: ChartContext, budget: int, depth: int | None = None, k0: int = 2,
                 evaluate: Evaluate = point_utilities) -> Chart:
    """Refine ``context``'s chart adaptively (see the module docstring).

    Parameters
    ----------
    context : ChartContext
        The chart's spec (its axes' ranges; their k is ignored), plans, model.
    budget : int
        At most this many leaves (regions stored).
    depth : int, optional
        At most this many splits of a coarse region; default: the deepest
        whose finest index has at most :data:`MAX_INDEX_CELLS` cells.
    k0 : int
        Coarse regions per axis to start from.
    evaluate : callable
        ``(context, stats) -> utilities`` (plans, points); one call per round.
        :func:`cqopt.charts.kernel.point_utilities` here, a Spark job there.

    Returns
    -------
    Chart
        With ``leaves`` set; ``plan_index`` and ``cost`` are per leaf.

    Raises
    ------
    RefineError
        A budget below the corner regions, or a depth beyond the index cap.
    """
    start = time.perf_counter()
    depth = check_refinement(context.spec, budget, depth, k0)
    samples = _Samples(context, depth, k0, evaluate)
    level, index, ids = _split_where_plans_disagree(samples, budget, k0, depth)
    leaves = _leaves(samples, level, index, ids[:, samples.centre], k0, depth)
    return refined_chart(context, leaves, time.perf_counter() - start)


class _Samples:
    """The lattice of half-cells of the finest level, and the utilities costed on it so far.

    A region's 3^n sample points are the corners, edge and face midpoints and, in the
    middle (column :attr:`centre`), the centroid; a point shared by many regions is
    costed once.
    """

    def __init__(self, context: ChartContext, depth: int, k0: int, evaluate: Evaluate):
        n = len(context.spec.axes)
        self.context, self.evaluate, self.depth = context, evaluate, depth
        self.fine = [k0 << depth for _ in context.spec.axes]
        self.lattice = tuple(2 * f + 1 for f in self.fine)  # half-cell points per axis
        self.ids = np.zeros(0, np.int64)
        self.u = np.zeros((len(context.plans), 0))
        self.offsets = np.array(np.unravel_index(np.arange(3 ** n), (3,) * n)).T  # (3^n, n)
        self.centre = (3 ** n - 1) // 2

    def points(self, level: np.ndarray, index: np.ndarray) -> np.ndarray:
        """Lattice ids of each region's 3^n sample points: (regions, 3^n)."""
        side = 2 << (self.depth - level.astype(np.int64))  # the region's side in half-cells
        coords = (index * side[:, None])[:, None, :] \
            + self.offsets[None] * (side // 2)[:, None, None]
        return np.ravel_multi_index(tuple(np.moveaxis(coords, -1, 0)), self.lattice)

    def cost(self, ids: np.ndarray) -> None:
        """One round: cost the points not costed before, in one kernel call (one job)."""
        new = np.setdiff1d(ids, self.ids)
        if not len(new):
            return
        coords = np.unravel_index(new, self.lattice)
        stats = {a.statistic: a.lo + c / (2 * f) * (a.hi - a.lo)
                 for a, c, f in zip(self.context.spec.axes, coords, self.fine)}
        u = np.asarray(self.evaluate(self.context, stats), dtype=np.float64)
        ids_all = np.concatenate([self.ids, new])
        order = np.argsort(ids_all, kind="stable")
        self.ids, self.u = ids_all[order], np.concatenate([self.u, u], axis=1)[:, order]

    def utilities(self, ids: np.ndarray) -> np.ndarray:
        """The costed utilities at lattice ids ``ids``: (plans, *ids.shape)."""
        return self.u[:, np.searchsorted(self.ids, ids)]

    def regret(self, ids: np.ndarray) -> np.ndarray:
        """Per region, the most its centroid's plan loses at a sample point (relative)."""
        u = self.utilities(ids)  # (plans, regions, 3^n)
        plan = np.argmin(u[:, :, self.centre], axis=0)
        mine = np.take_along_axis(u, plan[None, :, None], axis=0)[0]
        best = u.min(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            loss = np.where(mine <= best, 0.0, mine / best - 1.0)
        return np.nan_to_num(loss, nan=0.0, posinf=np.inf).max(axis=1)


def _split_where_plans_disagree(samples: _Samples, budget: int, k0: int,
                                depth: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every coarse region, split breadth first where its sample points disagree on the
    best plan, within ``budget`` leaves: the leaves' (level, index, sample ids)."""
    n = len(samples.fine)
    corner_offsets = np.array(np.unravel_index(np.arange(1 << n), (2,) * n)).T  # (2^n, n)
    level = np.zeros(k0 ** n, dtype=np.int64)
    index = np.stack(np.unravel_index(np.arange(k0 ** n), (k0,) * n), axis=-1)
    ids = samples.points(level, index)
    samples.cost(ids)
    leaves_level, leaves_index, leaves_ids = [level], [index], [ids]
    total = len(level)
    per_split = (1 << n) - 1
    for current in range(depth):
        loss = samples.regret(ids) if len(ids) else np.zeros(0)
        candidates = np.flatnonzero(loss > SPLIT_TOLERANCE)
        room = (budget - total) // per_split
        if not len(candidates) or room <= 0:
            break
        if len(candidates) > room:  # the regions whose plan loses most go first
            order = np.lexsort((candidates, -loss[candidates]))
            candidates = np.sort(candidates[order[:room]])
        keep = np.ones(len(level), dtype=bool)
        keep[candidates] = False
        # The split regions leave the leaves; their children join them.
        leaves_level[-1], leaves_index[-1], leaves_ids[-1] = \
            level[keep], index[keep], ids[keep]
        index = (2 * index[candidates][:, None, :] + corner_offsets[None]).reshape(-1, n)
        level = np.full(len(index), current + 1, dtype=np.int64)
        ids = samples.points(level, index)
        samples.cost(ids)
        leaves_level.append(level)
        leaves_index.append(index)
        leaves_ids.append(ids)
        total += len(candidates) * per_split
    return (np.concatenate(leaves_level), np.concatenate(leaves_index),
            np.concatenate(leaves_ids))


def _leaves(samples: _Samples, level: np.ndarray, index: np.ndarray, centre: np.ndarray,
            k0: int, depth: int) -> Leaves:
    """The leaves in storage order (level, then cell), each with its centroid's best plan."""
    n = index.shape[1]
    cell = np.empty(len(level), dtype=np.int64)
    for lv in np.unique(level):
        rows = level == lv
        cell[rows] = np.ravel_multi_index(tuple(index[rows].T), (k0 << int(lv),) * n)
    order = np.lexsort((cell, level))
    u = samples.utilities(centre[order])
    plan = np.argmin(u, axis=0)  # first minimum: ties go to the lowest plan id, as in a grid
    return Leaves((k0,) * n, depth, level[order].astype(np.uint8), cell[order],
                  plan.astype(np.uint16), u[plan, np.arange(len(plan))])


def refined_chart(context: ChartContext, leaves: Leaves, seconds: float = 0.0) -> Chart:
    """A Chart holding ``leaves`` (its spec's axes get k = k0)."""
    spec = context.spec
    coarse = tuple(Axis(a.statistic, a.lo, a.hi, k) for a, k in zip(spec.axes, leaves.k0))
    from dataclasses import replace

    return Chart(replace(spec, axes=coarse), tuple(p.id for p in context.plans),
                 tuple(p.explain() for p in context.plans), leaves.plan, leaves.cost,
                 seconds, leaves=leaves, plans=tuple(context.plans))


def fine_spec(spec: ChartSpec, leaves: Leaves) -> ChartSpec:
    """``spec`` with the axes of the finest level: the uniform index's grid."""
    from dataclasses import replace

    return replace(spec, axes=tuple(Axis(a.statistic, a.lo, a.hi, f)
                                    for a, f in zip(spec.axes, leaves.fine_shape)))
