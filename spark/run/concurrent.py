"""Spark jobs started from several driver threads at once: a micro-batch's plans side by side.

Each plan of a micro-batch, where it is its own Spark action (a backlog's
plans, a workload's whose rounds are not on the driver), runs from one of
several driver threads: started one after another, each would wait for the
last. Measured on the ten-query workload of ``scripts/bench_workload.py`` on
``local[2]`` (AQE off): one micro-batch's ten plans, collected again (so their
analysis was cached, which favours the separate jobs), took 0.49 s one after
another, 0.36 s from four driver threads. Spark's scheduler runs jobs from
several threads side by side, and the driver's own share of a job (analysis,
planning, the py4j round trips) overlaps too. A union of the plans'
DataFrames cost more still (its rows carried every part's columns, and each
step was analysed); one Spark SQL query over typed slots
(:mod:`~cqopt.spark.run.joint_job`) pays less, and is what a workload runs
where its rounds are on the driver.

:func:`run_all` runs steps (each a Spark action and what follows it on the
driver) on :data:`JOB_THREADS` threads of one pool the process keeps. Each
step runs with the local properties of the thread that asked (as PySpark's
``InheritableThread`` does): a streaming query's job group among them, so
stopping the query cancels its plans' jobs too. Given ``pools``, each step's
jobs go to its Spark scheduler pool (a workload's query's name): cqopt's
sessions schedule pools fairly (``spark.scheduler.mode=FAIR``,
:func:`~cqopt.spark.session.spark_session`), so one query's large job does
not hold every other query's jobs behind it, as one FIFO queue would.

>>> run_all([lambda: 1, lambda: 1 / 0])[1].__class__.__name__
'ZeroDivisionError'
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

# Driver threads that start Spark jobs at once. Four gave the figure above on two cores;
# more threads only queue on the same cores and hold more results on the driver at once.
JOB_THREADS = 4

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _shared_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(JOB_THREADS, thread_name_prefix="cqopt-plan")
        return _pool


def _local_properties():
    """The asking thread's Spark local properties (None without a running Spark)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    return None if context is None else context._jsc.sc().getLocalProperties().clone()


# The local property that puts a thread's jobs in a scheduler pool (Spark's name).
POOL = "spark.scheduler.pool"


def _inheriting(step: Callable[[], object], properties,
                pool: str | None = None) -> Callable[[], object]:
    def run():
        if properties is not None:
            from pyspark import SparkContext

            mine = properties
            if pool is not None:  # on this thread's own copy: the asker's is every step's
                mine = properties.clone()
                mine.setProperty(POOL, pool)
            SparkContext._active_spark_context._jsc.sc().setLocalProperties(mine)
        return step()
    return run


def run_all(steps: Sequence[Callable[[], object]],
            pools: Sequence[str] | None = None) -> list[BaseException | None]:
    """Run every step, up to :data:`JOB_THREADS` at once; each one's error, or None.

    Parameters
    ----------
    steps : sequence of callables
        Each takes no argument; its value is not kept (a step writes what it makes).
    pools : sequence of str, optional
        Each step's Spark scheduler pool (its jobs' share of the cores is its pool's);
        by default the asking thread's.

    Returns
    -------
    list of (BaseException or None)
        In the order of ``steps``: the exception a step raised, or None. A step's
        failure never stops the others.

    Examples
    --------
    >>> seen = []
    >>> run_all([lambda: seen.append(1), lambda: seen.append(2)])
    [None, None]
    >>> sorted(seen)
    [1, 2]
    """
    if len(steps) <= 1:  # nothing to overlap: no thread (and no other pool to share with)
        errors: list[BaseException | None] = []
        for step in steps:
            try:
                step()
                errors.append(None)
            except Exception as err:  # noqa: BLE001 - handed back, as from a thread
                errors.append(err)
        return errors
    properties = _local_properties()
    pools = [None] * len(steps) if pools is None else list(pools)
    futures = [_shared_pool().submit(_inheriting(step, properties, pool))
               for step, pool in zip(steps, pools, strict=True)]
    return [future.exception() for future in futures]
