"""cqopt on Spark: plans as DataFrames, chart builds, per-round statistics, streaming runs.

The one room that imports pyspark (and only when something runs on Spark).
:func:`to_spark` is a plan's DataFrame pipeline over one window per stream
(:mod:`cqopt.spark.plan_frame`)::

    from cqopt.spark import to_spark
    to_spark(plan, {"TCP": tcp_window}, query=query).show()
"""

from cqopt.spark.plan_frame import to_spark

__all__ = ["to_spark"]
