"""Building charts: one kernel over cells, run by the local engine or by Spark.

:func:`evaluate_cells` is the kernel: given a chart's context and a batch of
flat cell indices, it costs every candidate plan at each cell's centroid with
the vectorized cost model and returns the argmin plan and its utility. Plans
are sorted by id, so ``argmin``'s first minimum breaks ties by plan id. The
local engine (:func:`build_local`) runs it over the whole grid in chunks; the
Spark engine (:mod:`charts.spark_build`) runs the same function per Arrow
batch, so both produce the same chart.

>>> from catalog import Catalog
>>> from charts.spec import Axis, ChartSpec
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 1000],
...     "columns": {"a": "int", "b": "int", "c": "int", "d": "int"}}}})
>>> spec = ChartSpec("q", "SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]",
...                  (Axis("sel.S", 0, 1, 4), Axis("rate.S", 10, 1000, 2)))
>>> chart = build_local([spec], cat, progress=False)[0]
>>> chart.plan_ids, chart.plan_index.shape
(('S[πσ]', 'S[σπ]'), (4, 2))
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from catalog import Catalog
from charts.spec import ChartSpec, candidate_plans
from costmodel import Utility, make_model, plan_utilities
from optimizer.plan import Plan

CHUNK_CELLS = 1 << 18  # cells per kernel call: bounds memory at plans x chunk doubles


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
        return make_model(self.spec.model, self.catalog, self.spec.memory_unit)

    @cached_property
    def utility(self) -> Utility:
        return Utility.from_weights(self.spec.weights)


def evaluate_cells(context: ChartContext, flat_cells: np.ndarray) -> tuple[np.ndarray,
                                                                          np.ndarray]:
    """The cheapest plan (index into the sorted plans) and its utility at each cell."""
    flat_cells = np.asarray(flat_cells, dtype=np.int64)
    stats = context.spec.centroid_stats(flat_cells)
    scores = plan_utilities(context.model, context.utility, context.plans, stats)
    scores = np.broadcast_to(scores, (len(context.plans), len(flat_cells)))
    best = np.argmin(np.where(np.isnan(scores), np.inf, scores), axis=0)  # NaN never wins
    return best.astype(np.uint16), scores[best, np.arange(len(flat_cells))]


@dataclass
class Chart:
    """One built chart: the plan index and winning utility of every cell."""

    spec: ChartSpec
    plan_ids: tuple[str, ...]
    plan_explains: tuple[str, ...]
    plan_index: np.ndarray  # spec.shape, uint16 into plan_ids
    cost: np.ndarray  # spec.shape, float64
    seconds: float = 0.0

    @property
    def plans_used(self) -> int:
        return len(np.unique(self.plan_index))


def chart_from_cells(context: ChartContext, plan_index: np.ndarray, cost: np.ndarray,
                     seconds: float = 0.0) -> Chart:
    """A Chart from flat per-cell results in cell order."""
    shape = context.spec.shape
    return Chart(context.spec, tuple(p.id for p in context.plans),
                 tuple(p.explain() for p in context.plans),
                 np.asarray(plan_index, dtype=np.uint16).reshape(shape),
                 np.asarray(cost, dtype=np.float64).reshape(shape), seconds)


def build_chart(context: ChartContext, progress: bool = True) -> Chart:
    """Build one chart in this process with the vectorized kernel, chunk by chunk."""
    spec = context.spec
    start = time.perf_counter()
    plan_index = np.empty(spec.n_cells, dtype=np.uint16)
    cost = np.empty(spec.n_cells, dtype=np.float64)
    for lo in range(0, spec.n_cells, CHUNK_CELLS):
        hi = min(lo + CHUNK_CELLS, spec.n_cells)
        plan_index[lo:hi], cost[lo:hi] = evaluate_cells(context, np.arange(lo, hi))
        if progress:
            _bar(spec.name, hi, spec.n_cells)
    return chart_from_cells(context, plan_index, cost, time.perf_counter() - start)


def build_local(specs: list[ChartSpec], catalog: Catalog, progress: bool = True) -> list[Chart]:
    """Build every chart in this process (see :func:`build_chart`)."""
    return [build_chart(ChartContext(spec, catalog), progress) for spec in specs]


def _bar(name: str, done: int, total: int, width: int = 30) -> None:
    filled = int(width * done / total)
    end = "\n" if done == total else ""
    print(f"\r  {name:<16} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells",
          end=end, file=sys.stderr, flush=True)
