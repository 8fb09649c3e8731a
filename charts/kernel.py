"""The chart kernel: the cheapest plan at a batch of cells, for every build engine.

:func:`evaluate_cells` is the kernel: given a chart's context and a batch of
flat cell indices, it costs every candidate plan at each cell's centroid with
the vectorized cost model and returns the argmin plan and its utility. Plans
are sorted by id, so ``argmin``'s first minimum breaks ties by plan id. The
local engine (:func:`cqopt.charts.build.build_local`) runs it over the whole
grid in chunks; the Spark engine (:mod:`cqopt.spark.chart_build`) runs the
same function per Arrow batch, so both produce the same chart.

>>> from cqopt.catalog import Catalog
>>> from cqopt.charts.spec import Axis, ChartSpec
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 1000],
...     "columns": {"a": "int", "b": "int", "c": "int", "d": "int"}}}})
>>> spec = ChartSpec("q", "SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]",
...                  (Axis("sel.S", 0, 1, 4), Axis("rate.S", 10, 1000, 2)))
>>> context = ChartContext(spec, cat)
>>> [p.id for p in context.plans]
['S[πσ]', 'S[σπ]']
>>> plan, cost = evaluate_cells(context, np.arange(spec.n_cells))
>>> plan.shape, plan.dtype.name
((8,), 'uint16')
>>> shipped = ChartContext.from_bytes(context.to_bytes())
>>> np.array_equal(evaluate_cells(shipped, np.arange(spec.n_cells))[0], plan)
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.spec import ChartSpec, candidate_plans
from cqopt.costmodel import Utility, plan_utilities
from cqopt.errors import CqoptError
from cqopt.optimizer.plans.codec import plans_from_json, plans_json
from cqopt.optimizer.plans.plan import Plan

CHUNK_CELLS = 1 << 18  # cells per kernel call: bounds memory at plans x chunk doubles
# Cells the cost model sees at once. Every temporary of the model is one float64 per cell:
# at 15,360 cells that is 120 KiB, under glibc's 128 KiB mmap threshold, so temporaries come
# from (and go back to) the heap. Whole 2 MiB chunks would be mapped and unmapped, page
# fault by page fault, on every call, until some large free raised the threshold.
BLOCK_CELLS = 15 << 10


@dataclass
class ChartContext:
    """What the kernel needs for one chart: its spec, sorted plans, model, utility."""

    spec: ChartSpec
    catalog: Catalog

    @cached_property
    def plans(self) -> list[Plan]:
        return candidate_plans(self.spec, self.catalog)

    @cached_property
    def model(self):
        return self.spec.cost_model(self.catalog)

    @property
    def utility(self) -> Utility:
        return self.spec.utility

    def to_bytes(self) -> bytes:
        """The context as a build task receives it: spec, catalog and the plans themselves.

        A task then costs cells without parsing or enumerating the query. The
        plans travel as plan data (:mod:`cqopt.optimizer.plans.codec`, JSON),
        as they are stored in a chart set: never pickled.
        """
        return json.dumps({"spec": self.spec.to_dict(), "catalog": self.catalog.to_dict(),
                           "plans": plans_json(self.plans)}).encode("utf-8")

    @classmethod
    def from_bytes(cls, blob: bytes) -> ChartContext:
        """The context of :meth:`to_bytes`, its plans already there.

        Raises
        ------
        CqoptError
            The bytes do not read back here (another cqopt than the driver's).
        """
        try:
            data = json.loads(blob)
            context = cls(ChartSpec.from_dict(data["spec"]),
                          Catalog.from_dict(data["catalog"], "<the driver's catalog>"))
            plans = plans_from_json(data["plans"])
        except Exception as err:  # another cqopt than the driver's
            raise CqoptError(f"cannot unpack a chart's context sent by the driver "
                             f"({type(err).__name__}: {err}); every executor must run the "
                             "driver's cqopt version") from None
        return context.with_plans(plans)

    def with_plans(self, plans: list[Plan]) -> ChartContext:
        """This context with its candidate plans given (stored ones): no re-enumeration."""
        self.__dict__["plans"] = list(plans)  # fills the cached property
        return self


def evaluate_cells(context: ChartContext, flat_cells: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """The cheapest plan (index into the sorted plans) and its utility at each cell.

    The cells are costed :data:`BLOCK_CELLS` at a time into two result arrays.
    """
    flat_cells = np.asarray(flat_cells, dtype=np.int64)
    best = np.empty(len(flat_cells), dtype=np.uint16)
    cost = np.empty(len(flat_cells), dtype=np.float64)
    for lo in range(0, len(flat_cells), BLOCK_CELLS):
        block = flat_cells[lo:lo + BLOCK_CELLS]
        stats = context.spec.centroid_stats(block)
        scores = plan_utilities(context.model, context.utility, context.plans, stats)
        scores = np.broadcast_to(scores, (len(context.plans), len(block)))
        winner = np.argmin(np.where(np.isnan(scores), np.inf, scores), axis=0)  # NaN never wins
        best[lo:lo + len(block)] = winner
        cost[lo:lo + len(block)] = scores[winner, np.arange(len(block))]
    return best, cost


def winning_costs(context: ChartContext, plan_index: np.ndarray) -> np.ndarray:
    """Each cell's utility under its plan in ``plan_index``: the chart's per-cell costs.

    Each plan is costed on its own cells only, so this takes about one plan's
    share of a build. The formulas are elementwise, so the floats are those
    :func:`evaluate_cells` returned for the same cells: a chart set stores no
    costs, and a loaded chart works them out from its plan index when asked.

    Parameters
    ----------
    context : ChartContext
        The chart's spec, catalog and plans.
    plan_index : numpy.ndarray
        Plan index per cell, of shape ``context.spec.shape`` (or flat).

    Returns
    -------
    numpy.ndarray
        float64 utilities, of ``plan_index``'s shape.

    Examples
    --------
    >>> from cqopt.catalog import load_catalog
    >>> from cqopt.charts.spec import ChartSpec, Axis
    >>> from cqopt.examples import example
    >>> catalog = load_catalog(example("dec-pkt.toml"))
    >>> spec = ChartSpec("q", "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host "
    ...                  "WINDOW [1]", (Axis("rate.TCP", 100, 1000, 4),
    ...                  Axis("rate.UDP", 100, 1000, 4)), fixed={"jsel.TCP.UDP": 0.01})
    >>> context = ChartContext(spec, catalog)
    >>> plan, cost = evaluate_cells(context, np.arange(spec.n_cells))
    >>> bool(np.array_equal(winning_costs(context, plan), cost))
    True
    """
    flat = np.ravel(plan_index)
    cost = np.empty(flat.size, dtype=np.float64)
    for p in np.unique(flat).tolist():
        cells = np.flatnonzero(flat == p)
        for lo in range(0, len(cells), BLOCK_CELLS):
            block = cells[lo:lo + BLOCK_CELLS]
            [scores] = plan_utilities(context.model, context.utility, [context.plans[p]],
                                      context.spec.centroid_stats(block))
            cost[block] = np.broadcast_to(scores, block.shape)
    return cost.reshape(np.shape(plan_index))


def point_utilities(context: ChartContext, stats: dict[str, np.ndarray]) -> np.ndarray:
    """Every candidate plan's utility at each point: (plans, points), NaN as +inf.

    ``stats`` gives each axis statistic an array of one value per point; the
    chart's fixed statistics fill in the rest. Costed :data:`BLOCK_CELLS`
    points at a time.
    """
    n = len(next(iter(stats.values())))
    out = np.empty((len(context.plans), n), dtype=np.float64)
    for lo in range(0, n, BLOCK_CELLS):
        block = {k: np.asarray(v[lo:lo + BLOCK_CELLS], dtype=np.float64)
                 for k, v in stats.items()}
        size = len(next(iter(block.values())))
        scores = plan_utilities(context.model, context.utility, context.plans,
                                {**context.spec.fixed, **block})
        out[:, lo:lo + size] = np.broadcast_to(scores, (len(context.plans), size))
    return np.where(np.isnan(out), np.inf, out)  # NaN never wins


def evaluate_points(context: ChartContext, stats: dict[str, np.ndarray]) -> tuple[np.ndarray,
                                                                                 np.ndarray]:
    """:func:`evaluate_cells` at arbitrary points: the cheapest plan index and its
    utility at each point."""
    scores = point_utilities(context, stats)
    best = np.argmin(scores, axis=0)
    return best.astype(np.uint16), scores[best, np.arange(scores.shape[1])]


@dataclass
class Chart:
    """One built chart: the plan index and winning utility of every cell."""

    spec: ChartSpec
    plan_ids: tuple[str, ...]
    plan_explains: tuple[str, ...]
    plan_index: np.ndarray  # spec.shape, uint16 into plan_ids
    # spec.shape, float64; None where the engine returned plan indices only (Spark):
    # winning_costs gives them.
    cost: np.ndarray | None
    seconds: float = 0.0
    # A refined chart (cqopt.charts.refine.Leaves): plan_index and cost are per leaf then.
    leaves: Any = None
    reduction: dict | None = None  # anorexic reduction: lambda, plans before (reduce.py)
    plans: tuple[Plan, ...] = ()  # the candidate plans themselves, stored with the chart

    @property
    def plans_used(self) -> int:
        return len(np.unique(self.plan_index))


def chart_from_cells(context: ChartContext, plan_index: np.ndarray, cost: np.ndarray | None,
                     seconds: float = 0.0) -> Chart:
    """A Chart from flat per-cell results in cell order."""
    shape = context.spec.shape
    return Chart(context.spec, tuple(p.id for p in context.plans),
                 tuple(p.explain() for p in context.plans),
                 np.asarray(plan_index, dtype=np.uint16).reshape(shape),
                 None if cost is None else np.asarray(cost, dtype=np.float64).reshape(shape),
                 seconds,
                 plans=tuple(context.plans))
