"""Building charts on Spark: a job over blocks of cells, never a row per cell.

The job, and why it is shaped this way:

1. **Driver.** Each chart's :class:`~cqopt.charts.kernel.ChartContext` (plans,
   model, utility) is built first, so a bad query, model or weights fails
   here as in the local engine, not as an executor traceback. The charts'
   cells are then laid end to end: chart ``c`` owns the global cell ids
   ``offsets[c] <= id < offsets[c + 1]``, and its local flat (C-order) cell
   is ``id - offsets[c]``.
2. **Blocks.** The global ids are cut into equal blocks (:func:`_block_size`:
   two per core, none so small that a task's fixed cost outweighs its
   kernel time, none so large that its result is unwieldy). The job's rows
   are the block numbers, ``spark.range(n_blocks)`` in ``n_blocks``
   partitions: one row, one task, one block. Cells never travel as rows:
   Spark's own work is per block, not per cell.
3. **Kernel.** ``mapInArrow`` hands each task its block number;
   :func:`_cost_blocks` runs the same kernel as the local engine,
   :func:`cqopt.charts.kernel.evaluate_cells`, on the block's cells of each
   chart it spans. The task receives the candidate plans themselves
   (:meth:`~cqopt.charts.kernel.ChartContext.to_bytes`), never the SQL, so
   no executor parses or enumerates a query; each Python worker unpacks a
   chart's context once per job.
4. **Result.** One row per block: its plan indices as bytes in the narrowest
   unsigned type that holds every chart's plan count (one byte up to 256
   plans), and nothing else: the winning costs follow from the plan index
   (:func:`cqopt.charts.kernel.winning_costs`), so a cell costs the job one
   or two bytes, not ten. The rows are written as
   Parquet to a scratch directory and read back on the driver with pyarrow
   (nothing large goes through py4j or the driver's result-size limit), and
   every block must be there exactly once.

Both engines run the same elementwise numpy code on the same cell centroids,
so their charts are identical: the same plan ids and the same plan index (and
costs worked out from it equal the local build's bit for bit; a Spark-built
``Chart`` leaves ``cost`` None). A chart's ``seconds`` is the job's wall time (from
submitting the job to the checked result; not the session's start-up) split
in proportion to the chart's cell·plan evaluations.

On a multi-machine cluster the executors write the Parquet files, so
``scratch`` must be a directory mounted at the same path on the driver and
every executor (e.g. NFS); the default is a temporary directory on the
driver, which a cluster on the driver's machine (or ``local[*]``) can use.

>>> _block_size(10**8, parallelism=2), _block_size(1100, parallelism=2)
(4194304, 32768)
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
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.build import build_charts
from cqopt.charts.kernel import (
    Chart,
    ChartContext,
    chart_from_cells,
    evaluate_cells,
)
from cqopt.charts.settings import JudgedSettings
from cqopt.charts.spec import ChartSpec
from cqopt.charts.store import plan_dtype
from cqopt.spark.job_progress import spark_tasks
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
MIN_BLOCK_CELLS = 1 << 15  # below this a task's fixed cost outweighs its kernel time
MAX_BLOCK_CELLS = 1 << 22  # a block's result: at most 4 Mi cells, 8 MiB of plan indices
TASKS_PER_CORE = 2  # two tasks per core balance charts whose plans cost unequally; every
# task pays Spark's fixed cost of a task and of its Parquet file (tens of ms)
RESULT_DDL = "block long, plan binary"


# -- the driver ----------------------------------------------------------------
@dataclass
class SparkEngine:
    """A :class:`~cqopt.charts.build.BuildEngine` on Spark: one job per grid build (every
    chart's cells at once) and one per refinement round.

    ``spark`` is a running session, left running; without it a session on
    ``master`` is started for the build and stopped after it.
    """

    catalog: Catalog
    spark: SparkSession | None = None
    master: str = "local[*]"
    progress: bool = True
    scratch: Path | None = None

    @contextlib.contextmanager
    def running(self) -> Iterator[SparkSession]:
        own = self.spark is None
        if own:
            self.spark = spark_session(self.master, progress=self.progress)
        try:
            with spark_errors("the Spark job building the charts failed"):
                if not _is_local(self.spark.sparkContext.master):
                    ship_packages(self.spark)
            yield self.spark
        finally:
            if own:
                self.spark.stop()
                self.spark = None

    def cost_grids(self, contexts: list[ChartContext]) -> list[Chart]:
        specs = [c.spec for c in contexts]
        with spark_errors("the Spark job building the charts failed"):
            start = time.perf_counter()
            plan = _run_job(self.spark, contexts, self.catalog, self.scratch, self.progress)
            elapsed = time.perf_counter() - start
        work = np.array([spec.n_cells * len(c.plans) for spec, c in zip(specs, contexts)],
                        float)
        share = work / work.sum()
        offsets = _offsets(specs)
        # Plan indices only: a chart's costs follow from them (winning_costs), where asked.
        return [chart_from_cells(context, plan[lo:hi], None, float(elapsed * part))
                for context, lo, hi, part in zip(contexts, offsets[:-1], offsets[1:], share)]

    def cost_points(self, context: ChartContext, stats: dict[str, np.ndarray]) -> np.ndarray:
        return _points_job(self.spark, self.catalog, self.scratch, self.progress, context,
                           stats)


def build_spark(specs: list[ChartSpec], catalog: Catalog, spark: SparkSession | None = None,
                master: str = "local[*]", progress: bool = True,
                scratch: Path | None = None, *, refine: int | None = None,
                depth: int | None = None, reduce: float | None = None,
                settings: JudgedSettings | None = None) -> list[Chart]:
    """Build every chart on Spark: :func:`cqopt.charts.build.build_charts` on a
    :class:`SparkEngine`; the same charts as :func:`cqopt.charts.build.build_local`.

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
    settings : JudgedSettings, optional
        A build's options judged already, in place of ``refine``, ``depth`` and
        ``reduce`` (:func:`cqopt.charts.build.build_charts`).

    Returns
    -------
    list of Chart

    Raises
    ------
    SparkBuildError
        Spark cannot start, the job fails, or its result is not every cell once.
    CqoptError
        As :func:`cqopt.charts.build.build_charts`, on the driver before Spark starts.
    """
    engine = SparkEngine(catalog, spark, master, progress, scratch)
    return build_charts(specs, catalog, engine, refine=refine, depth=depth, reduce=reduce,
                        settings=settings)


def _offsets(specs: list[ChartSpec]) -> np.ndarray:
    """Chart c's cells are the global ids offsets[c] .. offsets[c + 1] - 1."""
    return np.concatenate([[0], np.cumsum([s.n_cells for s in specs], dtype=np.int64)])


def _block_size(total: int, parallelism: int) -> int:
    """Cells per block: TASKS_PER_CORE blocks per core, within [MIN_BLOCK_CELLS, MAX_BLOCK_CELLS]."""
    per_task = math.ceil(total / (TASKS_PER_CORE * max(parallelism, 1)))
    return min(MAX_BLOCK_CELLS, max(MIN_BLOCK_CELLS, per_task))


def _plan_dtype(contexts: list[ChartContext]) -> np.dtype:
    """The narrowest unsigned type that holds a plan index of every chart."""
    return plan_dtype(max(len(c.plans) for c in contexts))


def _run_job(spark: SparkSession, contexts: list[ChartContext], catalog: Catalog,
             scratch: Path | None, progress: bool) -> np.ndarray:
    """Run the job; the winning plan of every global cell id, in id order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    specs = [c.spec for c in contexts]
    offsets = _offsets(specs)
    total = int(offsets[-1])
    size = _block_size(total, spark.sparkContext.defaultParallelism)
    n_blocks = math.ceil(total / size)
    payload = {
        "job": uuid.uuid4().hex,
        "offsets": offsets.tolist(),
        "block": size,
        "plan_dtype": _plan_dtype(contexts).str,
        "contexts": [c.to_bytes() for c in contexts],
    }
    if progress:
        print(f"  spark: {len(specs)} charts, {total} cells in {n_blocks} "
              f"block{'s' * (n_blocks != 1)} of up to {size} cells on "
              f"{spark.sparkContext.master}", file=sys.stderr, flush=True)
    with _scratch_dir(scratch) as out:
        spark.sparkContext.setJobDescription(f"cqopt: {len(specs)} charts, {total} cells")
        try:
            with spark_tasks(spark, "costing the cells", enabled=progress):
                (spark.range(0, n_blocks, 1, n_blocks)
                 .mapInArrow(functools.partial(_cost_blocks, payload), RESULT_DDL)
                 .write.mode("overwrite").option("compression", "none").parquet(out.as_uri()))
        finally:
            spark.sparkContext.setJobDescription(None)
        try:
            table = pq.read_table(out, columns=["block", "plan"])
        except (OSError, pa.ArrowInvalid) as err:
            raise SparkBuildError(f"cannot read the Spark job's result in {out}: {err}"
                                  f"{_SHARED_HINT}") from None
        return _place(table, specs, total, size, np.dtype(payload["plan_dtype"]))


_SHARED_HINT = ("; on a cluster, pass scratch= a directory the driver and every executor "
                "share at the same path")


def _place(table: pa.Table, specs: list[ChartSpec], total: int, size: int,
           plan_dtype: np.dtype) -> np.ndarray:
    """Put every block's result at its cells; every block exactly once, whole, or an error."""
    n_blocks = math.ceil(total / size)
    block = table.column("block").to_numpy()
    if len(block) and (block.min() < 0 or block.max() >= n_blocks):
        bad = int(block[(block < 0) | (block >= n_blocks)][0])
        raise SparkBuildError(f"the Spark job returned block {bad}, outside the charts' "
                              f"{n_blocks} blocks")
    counts = np.bincount(block, minlength=n_blocks)
    if len(block) != n_blocks or (counts != 1).any():
        wrong = int(np.flatnonzero(counts != 1)[0])
        chart = int(np.searchsorted(_offsets(specs), wrong * size, side="right") - 1)
        hint = _SHARED_HINT if (counts == 0).any() else ""
        raise SparkBuildError(
            f"the Spark job's result has {len(block)} blocks for {n_blocks}: "
            f"{int((counts == 0).sum())} missing, {int((counts > 1).sum())} duplicated, "
            f"first block {wrong} (chart {specs[chart].name!r}){hint}")
    plan = np.empty(total, dtype=plan_dtype)
    for b, p in zip(block.tolist(), _binary_values(table.column("plan"))):
        lo, hi = b * size, min(total, (b + 1) * size)
        p = np.frombuffer(p, dtype=plan_dtype)
        if len(p) != hi - lo:
            raise SparkBuildError(f"the Spark job's block {b} holds {len(p)} plans for "
                                  f"{hi - lo} cells")
        plan[lo:hi] = p
    return plan


def _binary_values(column: pa.ChunkedArray) -> Iterator[memoryview]:
    """Each value of a binary column as a view of Arrow's buffer: no copy into bytes."""
    for chunk in column.chunks:
        offsets = np.frombuffer(chunk.buffers()[1], dtype=np.int32, count=len(chunk) + 1,
                                offset=chunk.offset * 4)
        data = memoryview(chunk.buffers()[2])
        for i in range(len(chunk)):
            yield data[offsets[i]:offsets[i + 1]]


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
    payload = {"job": uuid.uuid4().hex, "contexts": [context.to_bytes()],
               "stats": {k: np.asarray(v, dtype=np.float64).tolist() for k, v in stats.items()}}
    n_partitions = math.ceil(n / _block_size(n, spark.sparkContext.defaultParallelism))
    if progress:
        print(f"  spark: refine {context.spec.name}: {n} points in {n_partitions} "
              f"partition{'s' * (n_partitions != 1)}", file=sys.stderr, flush=True)
    ddl = "point long, " + ", ".join(f"u{i} double" for i in range(len(context.plans)))
    with spark_errors("the Spark job refining the charts failed"), _scratch_dir(scratch) as out:
        spark.sparkContext.setJobDescription(f"cqopt: refine {context.spec.name}, {n} points")
        try:
            with spark_tasks(spark, f"refining {context.spec.name}", enabled=progress):
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

    context = _context(payload, 0)
    stats = {k: np.asarray(v) for k, v in payload["stats"].items()}
    for batch in batches:
        ids = batch.column(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        u = point_utilities(context, {k: v[ids] for k, v in stats.items()})
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), *(pa.array(u[i]) for i in range(len(u)))],
            names=["point", *(f"u{i}" for i in range(len(u)))])


# -- the executors ---------------------------------------------------------------
# One job's contexts per Python worker, by chart index: Spark reuses a worker for
# many tasks, so each chart's plans are unpacked once per worker and job.
_CONTEXTS: dict[int, ChartContext] = {}
_JOB: dict[str, Any] = {"id": None}


def _context(payload: dict[str, Any], chart: int) -> ChartContext:
    if _JOB["id"] != payload["job"]:
        _CONTEXTS.clear()  # another job's charts: the indices name other specs now
        _JOB["id"] = payload["job"]
    context = _CONTEXTS.get(chart)
    if context is None:
        context = _CONTEXTS[chart] = ChartContext.from_bytes(payload["contexts"][chart])
    return context


def _cost_blocks(payload: dict[str, Any],
                 batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow's function: each block's winning plans, as one byte string."""
    import pyarrow as pa

    offsets = np.asarray(payload["offsets"], dtype=np.int64)
    size, total = int(payload["block"]), int(offsets[-1])
    plan_dtype = np.dtype(payload["plan_dtype"])
    for batch in batches:
        for block in batch.column(0).to_numpy(zero_copy_only=False).tolist():
            lo, hi = block * size, min(total, (block + 1) * size)
            plan = np.empty(hi - lo, dtype=plan_dtype)
            chart = int(np.searchsorted(offsets, lo, side="right") - 1)
            while lo < hi:  # the block's cells of each chart it spans, one kernel call each
                end = min(hi, int(offsets[chart + 1]))
                at = slice(lo - block * size, end - block * size)
                plan[at], _ = evaluate_cells(  # the costs stay here: they follow from the plans
                    _context(payload, chart),
                    np.arange(lo - offsets[chart], end - offsets[chart]))
                lo, chart = end, chart + 1
            yield pa.RecordBatch.from_arrays(
                [pa.array([block], pa.int64()), pa.array([plan.tobytes()], pa.binary())],
                names=["block", "plan"])
