"""Building charts: one orchestrator (:func:`build_charts`) over an engine that costs cells.

:func:`build_charts` checks every setting and chart, then asks its engine for
grids or, in a refinement, for the utilities at each round's new points, and
reduces the charts if asked. The engine is a parameter (:class:`BuildEngine`):
:class:`LocalEngine` runs :func:`cqopt.charts.kernel.evaluate_cells` over
each chart's grid in chunks of :data:`~cqopt.charts.kernel.CHUNK_CELLS` cells
in this process (:func:`build_local`); :class:`cqopt.spark.chart_build.SparkEngine`
runs the same kernel on Spark, so both engines produce the same chart.

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

import contextlib
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.kernel import (
    CHUNK_CELLS,
    Chart,
    ChartContext,
    chart_from_cells,
    evaluate_cells,
    point_utilities,
)
from cqopt.charts.settings import JudgedSettings, check_cells, check_together, judge_settings
from cqopt.charts.spec import ChartSpec
from cqopt.progress import counter


def build_chart(context: ChartContext, progress: bool = True) -> Chart:
    """Build one chart in this process with the vectorized kernel, chunk by chunk."""
    spec = context.spec
    check_cells(spec.name, spec.shape)  # before allocating: more cells than memory holds
    start = time.perf_counter()
    plan_index = np.empty(spec.n_cells, dtype=np.uint16)
    cost = np.empty(spec.n_cells, dtype=np.float64)
    with counter(spec.name, spec.n_cells, "cells costed", enabled=progress) as done:
        for lo in range(0, spec.n_cells, CHUNK_CELLS):
            hi = min(lo + CHUNK_CELLS, spec.n_cells)
            plan_index[lo:hi], cost[lo:hi] = evaluate_cells(context, np.arange(lo, hi))
            done(hi - lo)
    return chart_from_cells(context, plan_index, cost, time.perf_counter() - start)


class BuildEngine(Protocol):
    """Where a build's cells are costed: this process (:class:`LocalEngine`) or Spark
    (:class:`cqopt.spark.chart_build.SparkEngine`). :func:`build_charts` decides
    what to cost; an engine only costs it.
    """

    def running(self) -> AbstractContextManager:
        """The engine's life around a build (a Spark session's; nothing locally)."""

    def cost_grids(self, contexts: list[ChartContext]) -> list[Chart]:
        """Every cell of each context's k-regular grid: its chart."""

    def cost_points(self, context: ChartContext, stats: dict[str, np.ndarray]) -> np.ndarray:
        """Every candidate plan's utility at each point (a refinement's new regions):
        ``(plans, points)``, as :func:`cqopt.charts.kernel.point_utilities`."""


@dataclass
class LocalEngine:
    """The chart kernel in this process, chunk by chunk (:func:`build_chart`)."""

    progress: bool = True

    def running(self) -> AbstractContextManager:
        return contextlib.nullcontext()

    def cost_grids(self, contexts: list[ChartContext]) -> list[Chart]:
        return [build_chart(c, self.progress) for c in contexts]

    def cost_points(self, context: ChartContext, stats: dict[str, np.ndarray]) -> np.ndarray:
        return point_utilities(context, stats)


def build_charts(specs: list[ChartSpec], catalog: Catalog, engine: BuildEngine, *,
                 refine: int | None = None, depth: int | None = None,
                 reduce: float | None = None,
                 settings: JudgedSettings | None = None) -> list[Chart]:
    """Build every chart on ``engine``: grids, or refined charts, then reduced if asked.

    The one build orchestration: every setting and every chart's query, model
    and weights is checked here before the engine starts; the engine costs
    what this asks.

    Parameters
    ----------
    specs : list of ChartSpec
        What to build: a query, its axes and fixed statistics, model and weights.
    catalog : Catalog
    engine : BuildEngine
        :class:`LocalEngine` or :class:`cqopt.spark.chart_build.SparkEngine`.
    refine : int, optional
        Build refined charts of at most this many regions instead of grids
        (:func:`cqopt.charts.refine.refine_chart`, to ``depth``).
    depth : int, optional
        The refinement's depth (default: the deepest the lookup index allows).
    reduce : float, optional
        Reduce every chart with this cost-increase threshold λ
        (:func:`cqopt.charts.reduce.reduce_chart`), in this process.
    settings : JudgedSettings, optional
        A build's options judged where they were given (``judge_options``): its
        ``refine``, ``depth`` and ``reduce`` are taken as they are, in place of the
        three keywords, which are judged here.

    Returns
    -------
    list of Chart
        One per spec, in order.

    Raises
    ------
    CqoptError
        A query that does not plan, an unknown model, or bad weights; a grid
        larger than memory holds; a refinement budget below the corner
        regions; λ outside [0, 1).

    Examples
    --------
    >>> from cqopt.catalog import Catalog
    >>> from cqopt.charts.spec import Axis, ChartSpec
    >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [10, 1000],
    ...     "columns": {"a": "int", "b": "int"}}}})
    >>> spec = ChartSpec("q", "SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]",
    ...                  (Axis("sel.S", 0, 1, 4), Axis("rate.S", 10, 1000, 2)))
    >>> build_charts([spec], cat, LocalEngine(progress=False))[0].plan_index.shape
    (4, 2)
    >>> refined = build_charts([spec], cat, LocalEngine(progress=False), refine=8)[0]
    >>> refined.leaves is not None, refined.plan_index.size <= 8
    (True, True)
    """
    from cqopt.charts.reduce import reduce_judged
    from cqopt.charts.refine import check_refinement, refine_chart

    refine, depth, reduce = build_shape(refine, depth, reduce, settings)
    specs = list(specs)
    if not specs:
        return []
    contexts = [ChartContext(spec, catalog) for spec in specs]
    for context in contexts:  # fail fast, before the engine starts
        _ = (context.plans, context.model, context.utility)
        if refine is None:
            check_cells(context.spec.name, context.spec.shape)
        else:
            check_refinement(context.spec, refine, depth)
    with engine.running():
        if refine is None:
            charts = engine.cost_grids(contexts)
        else:
            charts = [refine_chart(c, refine, depth, evaluate=engine.cost_points)
                      for c in contexts]
    if reduce is not None:
        charts = [reduce_judged(c, chart, reduce) for c, chart in zip(contexts, charts)]
    return charts


def build_shape(refine: int | None, depth: int | None, reduce: float | None,
                settings: JudgedSettings | None = None
                ) -> tuple[int | None, int | None, float | None]:
    """A build's ``refine``, ``depth`` and ``reduce``, each judged once: taken as they are
    from ``settings`` (judged where they were given), else the keywords judged here.

    >>> build_shape(None, None, 0.1)
    (None, None, 0.1)
    >>> from cqopt.charts.settings import judge_options
    >>> build_shape(None, None, None, judge_options({"refine": 64, "reduce": 0.2}))
    (64, None, 0.2)
    """
    from cqopt.charts.reduce import check_threshold

    if settings is not None:
        if not isinstance(settings, JudgedSettings):
            raise TypeError("settings: expected the JudgedSettings judge_options returns")
        if (refine, depth, reduce) != (None, None, None):
            raise TypeError("give refine, depth and reduce in settings or as keywords, "
                            "not both")
        return settings.get("refine"), settings.get("depth"), settings.get("reduce")
    if reduce is not None:
        reduce = check_threshold(reduce)  # the settings' rule, as a ReduceError
    judged = judge_settings({"refine": refine, "depth": depth})
    check_together(judged)
    return judged.get("refine"), judged.get("depth"), reduce


def build_local(specs: list[ChartSpec], catalog: Catalog, progress: bool = True, *,
                refine: int | None = None, depth: int | None = None,
                reduce: float | None = None,
                settings: JudgedSettings | None = None) -> list[Chart]:
    """Build every chart in this process: :func:`build_charts` on a :class:`LocalEngine`.

    Parameters
    ----------
    specs : list of ChartSpec
    catalog : Catalog
    progress : bool
        Show each chart's progress on stderr.
    refine, depth, reduce, settings
        As :func:`build_charts` takes them.

    Returns
    -------
    list of Chart
        One per spec, in order, with the plan index and winning utility per cell.

    Raises
    ------
    CqoptError
        As :func:`build_charts`.
    """
    return build_charts(specs, catalog, LocalEngine(progress), refine=refine, depth=depth,
                        reduce=reduce, settings=settings)


# Measured on this project's 2-core machine: the in-process kernel costs about 100 ns per
# cell and plan (Q2 at k = 100: 3,000,000 cell·plans in 0.28 s), and a build on Spark
# pays its session's start (10-15 s on local[2]) and a job (1-2 s) before the first cell.
# On c cores Spark takes about start + T/c against the in-process T, so it pays from
# T = start·c/(c − 1): 30 s on two cores, which SPARK_FROM_SECONDS keeps.
SECONDS_PER_CELL_PLAN = 1.0e-7
SPARK_FROM_SECONDS = 30.0


def pick_engine(specs: list[ChartSpec], catalog: Catalog, refine: int | None = None
                ) -> tuple[str, str]:
    """The engine a build of ``specs`` should use when none is asked for, and why.

    In this process while the cells would take less than
    :data:`SPARK_FROM_SECONDS` here (at :data:`SECONDS_PER_CELL_PLAN`), else Spark.

    Returns
    -------
    (str, str)
        ``"local"`` or ``"spark"``, and one sentence saying why.

    Examples
    --------
    >>> from cqopt.catalog import load_catalog
    >>> from cqopt.charts.spec import workload_specs
    >>> from cqopt.charts.workload import load_workload
    >>> from cqopt.examples import example
    >>> cat = load_catalog(example("dec-pkt.toml"))
    >>> specs = [s for s, _ in workload_specs(load_workload(example("workload.toml")), cat)]
    >>> pick_engine(specs, cat)[0]
    'local'
    """
    size = sum((min(refine, spec.n_cells) if refine else spec.n_cells)
               * len(ChartContext(spec, catalog).plans) for spec in specs)
    seconds = size * SECONDS_PER_CELL_PLAN
    if seconds < SPARK_FROM_SECONDS:
        return "local", (f"in this process: {size:,} cell·plans take about {seconds:.1f} s "
                         f"here, less than the {SPARK_FROM_SECONDS:g} s from which Spark's "
                         "start-up pays (--engine spark to use Spark anyway)")
    return "spark", (f"on Spark: {size:,} cell·plans would take about {seconds:.0f} s in "
                     f"this process, more than the {SPARK_FROM_SECONDS:g} s from which "
                     "Spark's start-up pays (--engine local to stay in this process)")
