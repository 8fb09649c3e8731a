"""Benchmark: a micro-batch's plans over tuples on the driver, as separate jobs or one union.

A workload run (:mod:`cqopt.spark.run.workload`) whose rounds are on the driver
runs every query's chosen plan of a micro-batch as one Spark SQL query
(:mod:`cqopt.spark.run.joint_job`; ``scripts/bench_workload.py`` times it);
otherwise each plan is its own Spark job, from several driver threads at once
(:mod:`cqopt.spark.run.concurrent`). This script times the ways to run the
plans built as DataFrames, ``--plans`` small plans (half selections, half aggregates) over
one stream's ``--tuples`` tuples held on the driver, each of one partition
under :data:`~cqopt.spark.session.DRIVER_DATA_CONF`, in interleaved order:

- ``build``: the plans' DataFrames only (Spark analyses each step eagerly);
- ``one after another``: each plan collected (``toArrow``) in turn;
- ``threads``: each collected from :func:`~cqopt.spark.run.concurrent.run_all`
  (what the workload run does);
- ``union, narrow``: one job, every plan's columns put in typed slots
  (a plan's k-th column of a type in that type's k-th slot), tagged by plan;
- ``union, json``: one job, each row one JSON text (not exact for every
  type: for comparison only).

Every way builds its plans anew (as each micro-batch does). Printed: the
median milliseconds per way, and the ratio of each to ``threads``.

    python scripts/bench_joint_job.py [--plans 10] [--tuples 500] [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import time
from functools import reduce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plans", type=int, default=10, help="plans per micro-batch")
    parser.add_argument("--tuples", type=int, default=500, help="tuples on the driver")
    parser.add_argument("--repeat", type=int, default=15, help="timed rounds of every way")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    args = parser.parse_args()

    import numpy as np
    import pyarrow as pa
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from cqopt.spark.run.concurrent import run_all
    from cqopt.spark.run.sink import LOCAL_RESULT_ROWS, collect as collect_small
    from cqopt.spark.session import driver_data_conf, driver_frame, session_conf, spark_session

    n = args.tuples
    table = pa.table({"ts": np.arange(n, dtype=float), "_round": np.zeros(n, dtype=np.int64),
                      "src_host": np.arange(n) % 50, "bytes": np.arange(n) * 3})
    spark = spark_session(args.master, progress=False)

    def plans() -> list[DataFrame]:
        frame = driver_frame(spark, table)
        out = []
        for i in range(args.plans):
            kept = frame.where(F.col("bytes") > 100 * i)
            out.append(kept.select("_round", "src_host", "ts") if i % 2 else
                       kept.groupBy("_round", "src_host").agg(F.sum("bytes").alias("s")))
        return out

    def collect(frame: DataFrame):
        return collect_small(frame, LOCAL_RESULT_ROWS)  # as the run collects a result

    def one_after_another() -> None:
        for frame in plans():
            collect(frame)

    def threads() -> None:
        for error in run_all([lambda f=f: collect(f) for f in plans()]):
            if error is not None:
                raise error

    def union_narrow() -> None:
        frames = plans()
        slots: list[tuple[str, object]] = []
        layouts = []
        for frame in frames:
            layout: list[str] = []
            fields = frame.schema.fields[1:]  # one round trip to the JVM
            keys = [field.dataType.simpleString() for field in fields]
            for field, key in zip(fields, keys):
                k = keys[:len(layout)].count(key)  # this plan's k-th column of its type
                of_type = [s for s, t in slots if t.simpleString() == key]
                if k >= len(of_type):
                    of_type.append(f"_s{len(slots)}")
                    slots.append((of_type[-1], field.dataType))
                layout.append(of_type[k])
            layouts.append(layout)
        parts = []
        for i, (frame, layout) in enumerate(zip(frames, layouts)):
            named = frame.toDF("_round", *[f"_c{j}" for j in range(len(layout))])
            mine = {slot: f"_c{j}" for j, slot in enumerate(layout)}
            parts.append(named.select(F.lit(i).alias("_part"), "_round", *[
                F.col(mine[s]).alias(s) if s in mine else F.lit(None).cast(t).alias(s)
                for s, t in slots]))
        # a limit over many partitions scans them one job at a time unless told otherwise
        with session_conf(spark, {"spark.sql.limit.initialNumPartitions": str(len(parts))}):
            collect(reduce(DataFrame.unionAll, parts))

    def union_json() -> None:
        parts = [frame.select(F.lit(i).alias("_part"), "_round", F.to_json(F.struct(
            *[c for c in frame.columns if c != "_round"])).alias("_row"))
            for i, frame in enumerate(plans())]
        with session_conf(spark, {"spark.sql.limit.initialNumPartitions": str(len(parts))}):
            collect(reduce(DataFrame.unionAll, parts))

    ways = {"build": plans, "one after another": one_after_another, "threads": threads,
            "union, narrow": union_narrow, "union, json": union_json}
    times: dict[str, list[float]] = {name: [] for name in ways}
    try:
        with driver_data_conf(spark, True):
            for way in ways.values():  # warm: codegen and the first jobs
                way()
            for _ in range(args.repeat):
                for name, way in ways.items():  # interleaved
                    began = time.perf_counter()
                    way()
                    times[name].append(time.perf_counter() - began)
    finally:
        spark.stop()
    base = statistics.median(times["threads"])
    print(f"{args.plans} plans over {n} tuples on the driver, {args.repeat} repeats, "
          f"{args.master}; medians:")
    print("| way | ms | / threads |\n|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1000:.1f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()
