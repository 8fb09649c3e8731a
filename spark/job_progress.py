"""A Spark job's progress in the user's words: tasks done of the tasks started, while it runs.

Spark's own console bars speak of stages and are off (:mod:`cqopt.spark.session`);
:func:`spark_tasks` asks Spark's status tracker instead, twice a second, and
says it through :func:`cqopt.progress.heartbeat`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql import SparkSession

from cqopt.progress import heartbeat


def task_counts(spark: SparkSession) -> tuple[int, int]:
    """Tasks finished and tasks in all, over the stages running now."""
    tracker = spark.sparkContext.statusTracker()
    done = total = 0
    for stage in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total


@contextmanager
def spark_tasks(spark: SparkSession, label: str, *, enabled: bool = True) -> Iterator[None]:
    """Say the Spark work of the ``with`` block as it goes (``label``: what it does)."""
    with heartbeat(label, lambda: task_counts(spark), "Spark tasks", enabled=enabled):
        yield
