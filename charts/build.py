"""The local build engine: the chart kernel over every cell, in this process.

:func:`build_local` runs :func:`cqopt.charts.kernel.evaluate_cells` over
each chart's grid in chunks of :data:`~cqopt.charts.kernel.CHUNK_CELLS`
cells; :mod:`cqopt.spark.chart_build` runs the same kernel on Spark, so both
engines produce the same chart.

>>> from cqopt.catalog import Catalog
>>> from cqopt.charts.spec import Axis, ChartSpec
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 1000],
...     "columns": {"a": "int", "b": "int"}}}})
>>> spec = ChartSpec("q", "SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]",
...                  (Axis("sel.S", 0, 1, 4), Axis("rate.S", 10, 1000, 2)))
>>> build_local([spec], cat, progress=False)[0].plan_index.shape
(4, 2)
"""

from __future__ import annotations

import sys
import time

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.kernel import (
    CHUNK_CELLS,
    Chart,
    ChartContext,
    chart_from_cells,
    evaluate_cells,
)
from cqopt.charts.settings import check_cells
from cqopt.charts.spec import ChartSpec


def build_chart(context: ChartContext, progress: bool = True) -> Chart:
    """Build one chart in this process with the vectorized kernel, chunk by chunk."""
    spec = context.spec
    check_cells(spec.name, spec.shape)  # before allocating: more cells than memory holds
    start = time.perf_counter()
    plan_index = np.empty(spec.n_cells, dtype=np.uint16)
    cost = np.empty(spec.n_cells, dtype=np.float64)
    for lo in range(0, spec.n_cells, CHUNK_CELLS):
        hi = min(lo + CHUNK_CELLS, spec.n_cells)
        plan_index[lo:hi], cost[lo:hi] = evaluate_cells(context, np.arange(lo, hi))
        if progress:
            _bar(spec.name, hi, spec.n_cells)
    return chart_from_cells(context, plan_index, cost, time.perf_counter() - start)


def build_local(specs: list[ChartSpec], catalog: Catalog, progress: bool = True, *,
                refine: int | None = None, depth: int | None = None,
                reduce: float | None = None) -> list[Chart]:
    """Build every chart in this process (see :func:`build_chart`).

    Parameters
    ----------
    specs : list of ChartSpec
        What to build: a query, its axes and fixed statistics, model and weights.
    catalog : Catalog
    progress : bool
        Show each chart's progress on stderr.
    refine : int, optional
        Build refined charts of at most this many regions instead of grids
        (:func:`cqopt.charts.refine.refine_chart`, to ``depth``).
    depth : int, optional
        The refinement's depth (default: the deepest the lookup index allows).
    reduce : float, optional
        Reduce every chart with this cost-increase threshold λ
        (:func:`cqopt.charts.reduce.reduce_chart`).

    Returns
    -------
    list of Chart
        One per spec, in order, with the plan index and winning utility per cell.

    Raises
    ------
    CqoptError
        A query that does not plan, an unknown model, or bad weights; a
        refinement budget below the corner regions; λ outside [0, 1).
    """
    from cqopt.charts.reduce import check_threshold, reduce_chart
    from cqopt.charts.refine import check_refinement, refine_chart

    if reduce is not None:
        check_threshold(reduce)
    contexts = [ChartContext(spec, catalog) for spec in specs]
    if refine is not None:  # every bad budget or depth before any work
        for spec in specs:
            check_refinement(spec, refine, depth)
    charts = [build_chart(c, progress) if refine is None else refine_chart(c, refine, depth)
              for c in contexts]
    if reduce is not None:
        charts = [reduce_chart(c, chart, reduce) for c, chart in zip(contexts, charts)]
    return charts


def _bar(name: str, done: int, total: int, width: int = 30) -> None:
    filled = int(width * done / total)
    end = "\n" if done == total else ""
    print(f"\r  {name:<16} [{'#' * filled}{'.' * (width - filled)}] {done}/{total} cells",
          end=end, file=sys.stderr, flush=True)
