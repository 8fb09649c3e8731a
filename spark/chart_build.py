"""Building charts on Spark: every cell of every chart is one row of one job.

The job, and why it is shaped this way:

1. **Driver.** Each chart's :class:`~cqopt.charts.kernel.ChartContext` (plans,
   model, utility) is built first, so a bad query, model or weights fails
   here as in the local engine, not as an executor traceback. The charts'
   cells are then laid end to end: chart ``c`` owns the global row ids
   ``offsets[c] <= id < offsets[c + 1]``, and its local flat (C-order) cell
   is ``id - offsets[c]``.
2. **Rows.** ``spark.range(total_cells, numPartitions=P)`` makes one row per
   cell of ALL charts, in P contiguous id slices (P: enough tasks for every
   core a few times over, never thousands of tiny ones). Contiguous slices
   keep most Arrow batches inside one or two charts.
3. **Kernel.** ``mapInArrow`` hands each Arrow batch of ids to
   :func:`_cost_batches`, which maps ids to (chart, cell) with
   ``searchsorted`` on the offsets, groups the rows by chart with numpy and
   calls the same kernel as the local engine,
   :func:`cqopt.charts.kernel.evaluate_cells`, once per chart per batch. No per-row
   Python UDF. The shipped function captures plain data only (spec dicts,
   the catalog dict, the offsets, the expected plan ids), so cloudpickle
   ships it anywhere; each Python worker rebuilds a chart's context the
   first time it sees the chart and caches it for the rest of the job.
4. **Result.** The (chart int32, cell int64, plan int32, cost double) rows
   are written as Parquet to a scratch directory and read back on the
   driver with pyarrow; millions of rows never go through py4j. Each row is
   placed at its global id (a counting sort: the order of (chart, cell)),
   and every cell must be present exactly once.

Both engines run the same elementwise numpy code on the same cell centroids,
so their charts are identical: the same plan ids, the same plan index and
bitwise-equal costs. A chart's ``seconds`` is the job's wall time (from
submitting the job to the checked result; not the session's start-up) split
in proportion to the chart's cell·plan evaluations.

On a multi-machine cluster the executors write the Parquet files, so
``scratch`` must be a directory mounted at the same path on the driver and
every executor (e.g. NFS); the default is a temporary directory on the
driver, which a cluster on the driver's machine (or ``local[*]``) can use.
"""

from __future__ import annotations

import contextlib
import functools
import math
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.kernel import (
    CHUNK_CELLS,
    Chart,
    ChartContext,
    chart_from_cells,
    evaluate_cells,
)
from cqopt.charts.spec import ChartSpec
from cqopt.spark.session import (
    SparkBuildError,
    _is_local,
    ship_packages,
    spark_errors,
    spark_session,
)

if TYPE_CHECKING:  # pyspark and pyarrow load only when a Spark build runs
    import pyarrow as pa
    from pyspark.sql import SparkSession

PACKAGES = ("catalog", "optimizer", "costmodel", "charts")  # what executors must import
PACKAGES_ZIP = "cqopt-packages.zip"
MIN_PARTITION_CELLS = 1 << 15  # below this a task's fixed cost outweighs its kernel time
TASKS_PER_CORE = 4  # a few tasks per core balance charts whose plans cost unequally
RESULT_DDL = "chart int, cell long, plan int, cost double"
ARROW_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


# -- the driver ----------------------------------------------------------------
def build_spark(specs: list[ChartSpec], catalog: Catalog, spark: SparkSession | None = None,
                master: str = "local[*]", progress: bool = True,
                scratch: Path | None = None, *, refine: int | None = None,
                depth: int | None = None, reduce: float | None = None) -> list[Chart]:
    """Build every chart in one Spark job; the same charts as
    :func:`cqopt.charts.build.build_local`.

    Parameters
    ----------
    specs : list of ChartSpec
    catalog : Catalog
    spark : SparkSession, optional
        A running session, left running; without it a session on ``master``
        is started and stopped at the end.
    master : str
        A Spark master URL (``local[*]``, ``spark://HOST:PORT``, ``yarn``, ...).
    progress : bool
        Say on stderr what the job does.
    scratch : Path, optional
        Where the job's Parquet goes (a fresh subdirectory, removed
        afterwards); on a cluster, a directory every executor shares.
    refine, depth : int, optional
        Build refined charts (:mod:`cqopt.charts.refine`): each round of
        splits of each chart is one Spark job over the round's new points.
    reduce : float, optional
        Anorexic reduction at this λ (:mod:`cqopt.charts.reduce`), on the
        driver: it costs each region's centroid once.

    Returns
    -------
    list of Chart

    Raises
    ------
    SparkBuildError
        Spark cannot start, the job fails, or its result is not every cell once.
    """
    from cqopt.charts.reduce import check_threshold, reduce_chart
    from cqopt.charts.refine import check_refinement, refine_chart

    specs = list(specs)
    if not specs:
        return []
    contexts = [ChartContext(spec, catalog) for spec in specs]
    for context in contexts:  # fail fast, on the driver, on a bad query, model or weights
        _ = (context.plans, context.model, context.utility)  # each a cached property
        if refine is not None:
            check_refinement(context.spec, refine, depth)
    if reduce is not None:
        check_threshold(reduce)
    if refine is not None or reduce is not None:
        own = spark is None
        if own:
            spark = spark_session(master, progress=progress)
        try:
            if refine is not None:
                charts = [refine_chart(c, refine, depth,
                                       evaluate=functools.partial(_points_job, spark, catalog,
                                                                  scratch, progress))
                          for c in contexts]
            else:
                charts = build_spark(specs, catalog, spark, progress=progress, scratch=scratch)
        finally:
            if own:
                spark.stop()
        if reduce is not None:
            charts = [reduce_chart(c, chart, reduce) for c, chart in zip(contexts, charts)]
        return charts
    own = spark is None
    if own:
        spark = spark_session(master, progress=progress)
    try:
        with spark_errors("the Spark job building the charts failed"):
            if not _is_local(spark.sparkContext.master):
                ship_packages(spark)
            start = time.perf_counter()
            plan, cost = _run_job(spark, contexts, catalog, scratch, progress)
            elapsed = time.perf_counter() - start
    finally:
        if own:
            spark.stop()
    work = np.array([spec.n_cells * len(c.plans) for spec, c in zip(specs, contexts)], float)
    share = work / work.sum()
    offsets = _offsets(specs)
    return [chart_from_cells(context, plan[lo:hi], cost[lo:hi], float(elapsed * part))
            for context, lo, hi, part in zip(contexts, offsets[:-1], offsets[1:], share)]


def _offsets(specs: list[ChartSpec]) -> np.ndarray:
    """Chart c's cells are the global ids offsets[c] .. offsets[c + 1] - 1."""
    return np.concatenate([[0], np.cumsum([s.n_cells for s in specs], dtype=np.int64)])


def _partitions(total: int, parallelism: int) -> int:
    return max(1, min(TASKS_PER_CORE * max(parallelism, 1),
                      math.ceil(total / MIN_PARTITION_CELLS)))


def _run_job(spark: SparkSession, contexts: list[ChartContext], catalog: Catalog,
             scratch: Path | None, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Run the job; the winning plan and cost of every global cell id, in id order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    specs = [c.spec for c in contexts]
    offsets = _offsets(specs)
    total = int(offsets[-1])
    n_partitions = _partitions(total, spark.sparkContext.defaultParallelism)
    payload = {
        "job": uuid.uuid4().hex,
        "offsets": offsets.tolist(),
        "specs": [spec.to_dict() for spec in specs],
        "catalog": catalog.to_dict(),
        "plan_ids": [[p.id for p in c.plans] for c in contexts],
    }
    if progress:
        print(f"  spark: {len(specs)} charts, {total} cells in {n_partitions} "
              f"partition{'s' * (n_partitions != 1)} on {spark.sparkContext.master}",
              file=sys.stderr, flush=True)
    with _scratch_dir(scratch) as out, _runtime_conf(spark, {ARROW_BATCH: str(CHUNK_CELLS)}):
        spark.sparkContext.setJobDescription(f"cqopt: {len(specs)} charts, {total} cells")
        try:
            (spark.range(0, total, 1, n_partitions)
             .mapInArrow(functools.partial(_cost_batches, payload), RESULT_DDL)
             .write.mode("overwrite").parquet(out.as_uri()))
        finally:
            spark.sparkContext.setJobDescription(None)
        try:
            table = pq.read_table(out, columns=["chart", "cell", "plan", "cost"])
        except (OSError, pa.ArrowInvalid) as err:
            raise SparkBuildError(f"cannot read the Spark job's result in {out}: {err}"
                                  f"{_SHARED_HINT}") from None
        return _place(table, specs, offsets)


_SHARED_HINT = ("; on a cluster, pass scratch= a directory the driver and every executor "
                "share at the same path")


def _place(table: pa.Table, specs: list[ChartSpec],
           offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Put every result row at its global cell id; every cell exactly once, or an error."""
    total = int(offsets[-1])
    chart = table.column("chart").to_numpy().astype(np.int64)
    cell = table.column("cell").to_numpy()
    bad = (chart < 0) | (chart >= len(specs))
    if not bad.any():
        sizes = np.diff(offsets)
        bad = (cell < 0) | (cell >= sizes[chart])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise SparkBuildError(f"the Spark job returned {int(bad.sum())} rows outside the "
                              f"charts, e.g. chart {chart[i]} cell {cell[i]}")
    ids = offsets[chart] + cell
    seen = np.zeros(total, dtype=bool)
    seen[ids] = True
    # total rows covering all total cells: then no cell can be there twice.
    if table.num_rows != total or not seen.all():
        counts = np.bincount(ids, minlength=total)
        wrong = np.flatnonzero(counts != 1)
        c = int(np.searchsorted(offsets, wrong[0], side="right") - 1)
        hint = _SHARED_HINT if (counts == 0).any() else ""
        raise SparkBuildError(
            f"the Spark job's result has {table.num_rows} rows for {total} cells: "
            f"{int((counts == 0).sum())} cells missing, {int((counts > 1).sum())} "
            f"duplicated, first in chart {specs[c].name!r} cell {int(wrong[0] - offsets[c])}"
            f"{hint}")
    plan = np.empty(total, dtype=np.uint16)
    cost = np.empty(total, dtype=np.float64)
    plan[ids] = table.column("plan").to_numpy()
    cost[ids] = table.column("cost").to_numpy()
    return plan, cost


@contextlib.contextmanager
def _scratch_dir(scratch: Path | None) -> Iterator[Path]:
    """A fresh directory for one job's Parquet (inside ``scratch``), removed afterwards."""
    parent = None if scratch is None else Path(scratch).resolve()
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="cqopt-spark-", dir=parent))
    try:
        yield folder / "cells.parquet"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _runtime_conf(spark: SparkSession, values: dict[str, str]) -> Iterator[None]:
    """Set SQL confs for one job and restore the caller's session afterwards."""
    saved = {k: spark.conf.get(k, None) for k in values}
    for key, value in values.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _points_job(spark: SparkSession, catalog: Catalog, scratch: Path | None, progress: bool,
                context: ChartContext, stats: dict[str, np.ndarray]) -> np.ndarray:
    """One round of a refinement as one job: every plan's utility at each new point.

    The points' statistics travel in the shipped payload (a round has at most
    a few hundred thousand); ``spark.range`` over their positions is the job's
    rows, and each Arrow batch is costed by the local kernel
    (:func:`cqopt.charts.kernel.point_utilities`). Rows come back as Parquet,
    like the grid job's.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(next(iter(stats.values())))
    payload = {"job": uuid.uuid4().hex, "spec": context.spec.to_dict(),
               "catalog": catalog.to_dict(), "plan_ids": [p.id for p in context.plans],
               "stats": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in stats.items()}}
    n_partitions = _partitions(n, spark.sparkContext.defaultParallelism)
    if progress:
        print(f"  spark: refine {context.spec.name}: {n} points in {n_partitions} "
              f"partition{'s' * (n_partitions != 1)}", file=sys.stderr, flush=True)
    ddl = "point long, " + ", ".join(f"u{i} double" for i in range(len(context.plans)))
    with spark_errors("the Spark job refining the charts failed"), _scratch_dir(scratch) as out:
        spark.sparkContext.setJobDescription(f"cqopt: refine {context.spec.name}, {n} points")
        try:
            (spark.range(0, n, 1, n_partitions)
             .mapInArrow(functools.partial(_cost_points, payload), ddl)
             .write.mode("overwrite").parquet(out.as_uri()))
        finally:
            spark.sparkContext.setJobDescription(None)
        try:
            table = pq.read_table(out)
        except (OSError, pa.ArrowInvalid) as err:
            raise SparkBuildError(f"cannot read the Spark job's result in {out}: {err}"
                                  f"{_SHARED_HINT}") from None
    point = table.column("point").to_numpy()
    if len(point) != n or not np.array_equal(np.sort(point), np.arange(n)):
        raise SparkBuildError(f"the Spark refinement job returned {len(point)} rows for {n} "
                              f"points{_SHARED_HINT}")
    utilities = np.empty((len(context.plans), n))
    for i in range(len(context.plans)):
        utilities[i, point] = table.column(f"u{i}").to_numpy()
    return utilities


def _cost_points(payload: dict[str, Any],
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function of a refinement round: every plan's utility per point."""
    import pyarrow as pa

    from cqopt.charts.kernel import point_utilities

    if _JOB["id"] != payload["job"]:
        _CONTEXTS.clear()
        _JOB.update(id=payload["job"], catalog=Catalog.from_dict(payload["catalog"]))
    context = _CONTEXTS.get(-1)
    if context is None:
        context = ChartContext(ChartSpec.from_dict(payload["spec"]), _JOB["catalog"])
        if [p.id for p in context.plans] != payload["plan_ids"]:
            raise SparkBuildError(f"chart {context.spec.name!r}: this executor's plans differ "
                                  "from the driver's; executors must run the driver's cqopt "
                                  "version")
        _CONTEXTS[-1] = context
    stats = {k: np.asarray(v) for k, v in payload["stats"].items()}
    for batch in batches:
        ids = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        u = point_utilities(context, {k: v[ids] for k, v in stats.items()})
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), *(pa.array(u[i]) for i in range(len(u)))],
            names=["point", *(f"u{i}" for i in range(len(u)))])


# -- the executors ---------------------------------------------------------------
# One job's contexts per Python worker, by chart index: Spark reuses a worker for
# many tasks, so each chart's plans are enumerated once per worker, not per batch.
_CONTEXTS: dict[int, ChartContext] = {}
_JOB: dict[str, Any] = {"id": None, "catalog": None}


def _context(payload: dict[str, Any], chart: int) -> ChartContext:
    if _JOB["id"] != payload["job"]:
        _CONTEXTS.clear()  # another job's charts: the indices name other specs now
        _JOB.update(id=payload["job"], catalog=Catalog.from_dict(payload["catalog"]))
    context = _CONTEXTS.get(chart)
    if context is None:
        spec = ChartSpec.from_dict(payload["specs"][chart])
        context = ChartContext(spec, _JOB["catalog"])
        ids = [p.id for p in context.plans]
        if ids != payload["plan_ids"][chart]:
            # The plan index means nothing if the executor's cqopt enumerates differently;
            # the driver reports this as the job's SparkBuildError.
            raise SparkBuildError(f"chart {spec.name!r}: this executor's plans {ids} differ "
                                  f"from the driver's {payload['plan_ids'][chart]}; executors "
                                  "must run the driver's cqopt version")
        _CONTEXTS[chart] = context
    return context


def _cost_batches(payload: dict[str, Any],
                  batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: the winning plan and cost of each cell id in each batch."""
    import pyarrow as pa

    offsets = np.asarray(payload["offsets"], dtype=np.int64)
    for batch in batches:
        ids = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        chart = np.searchsorted(offsets, ids, side="right") - 1
        cell = ids - offsets[chart]
        plan = np.empty(len(ids), dtype=np.int32)
        cost = np.empty(len(ids), dtype=np.float64)
        # Group rows by chart (ids arrive sorted, so this is cheap), one kernel call each.
        order = np.argsort(chart, kind="stable")
        for rows in np.split(order, np.flatnonzero(np.diff(chart[order])) + 1):
            if len(rows):
                c = int(chart[rows[0]])
                plan[rows], cost[rows] = evaluate_cells(_context(payload, c), cell[rows])
        yield pa.RecordBatch.from_arrays(
            [pa.array(chart.astype(np.int32)), pa.array(cell), pa.array(plan), pa.array(cost)],
            names=["chart", "cell", "plan", "cost"])
