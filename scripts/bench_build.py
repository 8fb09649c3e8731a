"""Benchmark: the local engine against Spark ``local[2]`` on a generated workload.

A generated catalog (8 streams) and workload (200 queries: 40% single-stream
sel-λ charts, 20% each of 2-, 3- and 4-stream join λ-λ charts, OM and PIPES
mixed) are built at k = 10, 20 and 40 by :func:`cqopt.charts.build.build_local` and
by :func:`cqopt.spark.chart_build.build_spark` on one ``local[2]`` session, and the
charts are checked to be identical. A 4-axis chart at k = 40 has 2.56 million
cells, so every chart is capped at ``--cap`` cells (default 160,000 = 20^4):
a chart whose k^axes exceeds it gets the largest k that fits (at k = 40 the
4-stream joins are built at k = 20, everything else at 40).

Spark's fixed costs are measured separately: the session's start-up (JVM,
context, a trivial job), the first job of the session (Python workers and
JVM classes warm up) and the median job time on a tiny workload (the OM
paper's two queries at k = 10, 1,100 cells): the per-job cost that does not
grow with the cells. The ratio compares Spark's job time minus that per-job
cost with the local time. Times are medians of ``--repeat`` runs.

The kernel's allocator effect is measured first, each variant in a fresh
process: the time per cell of one CHUNK_CELLS call on the OM paper's Q2
right after start-up ("first") and after the process has freed a 16 MiB
array ("steady", which raises glibc's mmap threshold), with minor page faults
per call, for the kernel as it was (the whole chunk costed at once, kept here
as the baseline) and for :func:`cqopt.charts.kernel.evaluate_cells`.

Then the Spark path on its own (``--spark-path``, on by default): for the OM
paper's Q2 (3 plans, 3 axes) and a 6-stream chain join (6 axes), each at
growing k, the in-process build against the Spark job on one ``local[2]``
session, with the ratio and the crossover (the smallest size at which Spark
is faster); and the Spark path's own cost per cell, from the same job run
with a kernel that does nothing (it only fills the block's result). From
the per-task overhead (a job of many empty blocks against one of a single
block) and the kernel's time per cell·plan, the build of the largest chart
is projected to 16 and 64 cores.

    python scripts/bench_build.py [--queries 200] [--k 10,20,40] [--repeat 3] [--kernel-only]
                                  [--q2-k LIST] [--chain6-k LIST] [--no-workload]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import random
import statistics
import time
from pathlib import Path

import numpy as np

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.kernel import CHUNK_CELLS, ChartContext, evaluate_cells
from cqopt.charts.spec import Axis, ChartSpec
from cqopt.costmodel import plan_utilities
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload, workload_from_dict
from cqopt.spark import chart_build
from cqopt.spark.chart_build import build_spark
from cqopt.spark.session import spark_session

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def generated_catalog(n_streams: int = 8, seed: int = 7) -> Catalog:
    rng = random.Random(seed)
    streams = {}
    for i in range(n_streams):
        lo = rng.choice([10, 50, 100, 200, 500])
        streams[f"S{i}"] = {"rate": [lo, lo * rng.choice([4, 10, 20])], "granularity": 1e-6,
                            "columns": {"ts": "timestamp", "a": "int", "b": "int", "c": "long",
                                        "d": "double", "tag": "string(24)"}}
    return Catalog.from_dict({"streams": streams}, "<generated>")


def generated_queries(n: int, n_streams: int = 8, seed: int = 7) -> list[dict]:
    """sel-λ selections and 2-4 stream joins, with assorted windows and both models."""
    rng = random.Random(seed)
    windows = ["", " [RANGE 10 SECONDS]", " [ROWS 100]", " [RANGE 500 MILLISECONDS]"]
    out = []
    for i in range(n):
        width = rng.choices([1, 2, 3, 4], weights=[2, 1, 1, 1])[0]
        names = rng.sample([f"S{j}" for j in range(n_streams)], width)
        window = rng.choice(windows)
        tail = "" if window else " WINDOW [1]"
        sources = ", ".join(s + window for s in names)
        s = names[0]
        if width == 1:
            where = rng.choice([f"{s}.c = {rng.randint(1, 9)}",
                                f"{s}.d > {rng.randint(1, 9)} AND {s}.b <= 5"])
            sql = f"SELECT {s}.a, {s}.tag FROM {sources} WHERE {where}"
        else:
            preds = [f"{a}.a = {b}.b" for a, b in zip(names, names[1:])]
            if width == 4 and rng.random() < 0.5:
                preds.append(f"{names[-1]}.a = {s}.c")  # a cycle: more join orders
            if rng.random() < 0.5:
                preds.append(f"{s}.c = 3")
            sql = f"SELECT {', '.join(f'{n}.a' for n in names)} FROM {sources} " \
                  f"WHERE {' AND '.join(preds)}"
        out.append({"name": f"q{i:03d}", "sql": sql + tail,
                    "model": "pipes" if rng.random() < 0.3 else "om"})
    return out


def capped_k(k: int, axes: int, cap: int) -> int:
    """The largest k' <= k with k'^axes <= cap."""
    while k > 1 and k ** axes > cap:
        k -= 1
    return k


def workload_at(queries: list[dict], catalog: Catalog, k: int, cap: int):
    specs = [s for s, _ in workload_specs(workload_from_dict({"query": queries}), catalog,
                                          {"k": k})]
    capped = [{**q, "k": capped_k(k, len(s.axes), cap)} for q, s in zip(queries, specs)]
    return [s for s, _ in workload_specs(workload_from_dict({"query": capped}), catalog)]


Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")


def whole_chunk_kernel(context: ChartContext, flat_cells: np.ndarray):
    """The kernel before blocking: every temporary is one float64 per cell of the chunk."""
    stats = context.spec.centroid_stats(flat_cells)
    scores = plan_utilities(context.model, context.utility, context.plans, stats)
    scores = np.broadcast_to(scores, (len(context.plans), len(flat_cells)))
    best = np.argmin(np.where(np.isnan(scores), np.inf, scores), axis=0)
    return best.astype(np.uint16), scores[best, np.arange(len(flat_cells))]


def kernel_run(variant: str, model: str, repeat: int) -> tuple[float, float, float, float]:
    """In a fresh process: µs per cell and page faults, first call and steady state."""
    axes = tuple(Axis(f"rate.{s}", 100, 1000, 64) for s in ("TCP", "UDP", "SF"))
    spec = ChartSpec("q2", Q2, axes, fixed={"jsel.TCP.UDP": 0.01, "jsel.SF.UDP": 0.01,
                                            "jsel.SF.TCP": 0.01}, model=model)
    context = ChartContext(spec, load_catalog(EXAMPLES / "dec-pkt.toml"))
    kernel = whole_chunk_kernel if variant == "whole chunk" else evaluate_cells
    kernel(context, np.arange(16))  # lazy set-up (plans, model), no large array
    cells = np.arange(CHUNK_CELLS)

    def call() -> tuple[float, float]:
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        kernel(context, cells)
        return ((time.perf_counter() - start) / len(cells) * 1e6,
                resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)

    first = [call() for _ in range(repeat)]
    big = np.ones(1 << 21)  # 16 MiB: its free raises the mmap threshold to 16 MiB
    del big
    steady = [call() for _ in range(repeat)]
    return (statistics.median(t for t, _ in first), statistics.median(f for _, f in first),
            statistics.median(t for t, _ in steady), statistics.median(f for _, f in steady))


def allocator_effect(repeat: int) -> None:
    """Print the kernel's first-call and steady-state time per cell, before and after."""
    print(f"kernel on Q2, {CHUNK_CELLS} cells per call, medians of {repeat} calls, "
          f"each variant in a fresh process")
    header = (f"{'model':6} {'kernel':12} {'first µs/cell':>13} {'faults':>7} "
              f"{'steady µs/cell':>14} {'faults':>7} {'first/steady':>12}")
    print(header)
    print("-" * len(header))
    spawn = multiprocessing.get_context("spawn")
    for model in ("om", "pipes"):
        firsts = {}
        for variant in ("whole chunk", "blocked"):
            with spawn.Pool(1) as pool:
                first, f_faults, steady, s_faults = pool.apply(kernel_run,
                                                               (variant, model, repeat))
            firsts[variant] = first
            print(f"{model:6} {variant:12} {first:13.4f} {f_faults:7.0f} {steady:14.4f} "
                  f"{s_faults:7.0f} {first / steady:12.2f}", flush=True)
        print(f"{model:6} first call, whole chunk / blocked: "
              f"{firsts['whole chunk'] / firsts['blocked']:.2f}x", flush=True)


def timed(fn, repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def identical(a, b) -> bool:
    """The same plans and plan index (a Spark build returns no costs: they follow from these)."""
    return all(x.plan_ids == y.plan_ids and np.array_equal(x.plan_index, y.plan_index)
               for x, y in zip(a, b, strict=True))


CHAIN6 = ("SELECT * FROM S0, S1, S2, S3, S4, S5 WHERE S0.a = S1.b AND S1.a = S2.b "
          "AND S2.a = S3.b AND S3.a = S4.b AND S4.a = S5.b WINDOW [1]")


def null_blocks(payload, batches):
    """A task that costs nothing: it only fills its block's result (Spark's own work)."""
    import pyarrow as pa

    total, size = int(payload["offsets"][-1]), int(payload["block"])
    width = np.dtype(payload["plan_dtype"]).itemsize
    for batch in batches:
        for block in batch.column(0).to_numpy(zero_copy_only=False).tolist():
            n = min(total, (block + 1) * size) - block * size
            yield pa.RecordBatch.from_arrays(
                [pa.array([block], pa.int64()), pa.array([bytes(n * width)], pa.binary())],
                names=["block", "plan"])


def null_job(spark, specs, catalog) -> float:
    """Seconds of the Spark build job with the null kernel."""
    contexts = [ChartContext(s, catalog) for s in specs]
    real = chart_build._cost_blocks
    chart_build._cost_blocks = null_blocks
    try:
        start = time.perf_counter()
        chart_build._run_job(spark, contexts, catalog, None, False)
        return time.perf_counter() - start
    finally:
        chart_build._cost_blocks = real


def chart_spec(name: str, sql: str, k: int, catalog: Catalog) -> ChartSpec:
    """The query's default chart (a rate axis per stream) at k regions per axis."""
    return [s for s, _ in workload_specs(workload_from_dict(
        {"query": [{"name": name, "sql": sql, "k": k}]}), catalog)][0]


def spark_path(spark, repeat: int, master: str, q2_ks: list[int], chain_ks: list[int]) -> None:
    """Local against Spark by chart size; the Spark path's own cost; a projection."""
    dec = load_catalog(EXAMPLES / "dec-pkt.toml")
    gen = generated_catalog()
    cases = [("Q2", Q2, dec, q2_ks), ("chain6", CHAIN6, gen, chain_ks)]
    tiny = chart_spec("Q2", Q2, 2, dec)
    fixed_s, _ = timed(lambda: build_spark([tiny], dec, spark=spark, progress=False),
                       max(repeat, 5))
    null_fixed_s = statistics.median(null_job(spark, [tiny], dec) for _ in range(max(repeat, 5)))
    print(f"\nSpark path on {master}: per-job fixed cost (an 8-cell chart) {fixed_s:.3f} s, "
          f"with the null kernel {null_fixed_s:.3f} s; medians of {repeat} runs", flush=True)
    header = (f"{'query':7} {'k':>4} {'cells':>10} {'plans':>5} {'cell·plan':>11} {'local s':>8} "
              f"{'spark s':>8} {'spark/local':>11} {'null s':>7} {'path µs/cell':>12} "
              f"{'same':>5}")
    print(header)
    print("-" * len(header))
    largest = None
    for name, sql, catalog, ks in cases:
        crossover = None
        for k in ks:
            spec = chart_spec(name, sql, k, catalog)
            plans = len(ChartContext(spec, catalog).plans)
            local_s, local = timed(lambda: build_local([spec], catalog, progress=False), repeat)
            spark_s, remote = timed(lambda: build_spark([spec], catalog, spark=spark,
                                                        progress=False), repeat)
            null_s = statistics.median(null_job(spark, [spec], catalog) for _ in range(repeat))
            path = max(null_s - null_fixed_s, 0.0) / spec.n_cells * 1e6
            if crossover is None and spark_s < local_s:
                crossover = spec.n_cells * plans
            print(f"{name:7} {k:4d} {spec.n_cells:10d} {plans:5d} {spec.n_cells * plans:11.3e} "
                  f"{local_s:8.3f} {spark_s:8.3f} {spark_s / local_s:11.2f} {null_s:7.3f} "
                  f"{path:12.4f} {'yes' if identical(local, remote) else 'NO':>5}", flush=True)
            largest = (name, spec, plans, local_s, catalog)
        print(f"{name}: Spark faster than in-process from "
              f"{'no size tried' if crossover is None else f'{crossover:.2e} cell·plans'}",
              flush=True)
    # Per-task overhead: many empty-ish blocks against one, with the null kernel.
    name, spec, plans, local_s, catalog = largest
    one = statistics.median(null_job(spark, [tiny], dec) for _ in range(repeat))
    saved = chart_build.MIN_BLOCK_CELLS, chart_build.MAX_BLOCK_CELLS
    chart_build.MIN_BLOCK_CELLS = chart_build.MAX_BLOCK_CELLS = 1
    try:
        many_spec = chart_spec("Q2", Q2, 4, dec)  # 64 cells: 64 one-cell blocks
        many = statistics.median(null_job(spark, [many_spec], dec) for _ in range(repeat))
    finally:
        chart_build.MIN_BLOCK_CELLS, chart_build.MAX_BLOCK_CELLS = saved
    cores = spark.sparkContext.defaultParallelism
    per_task = max(many - one, 0.0) / 64 * cores  # 64 tasks ran `cores` at a time
    kernel_s = local_s  # one core's time for the whole chart
    print(f"per-task overhead {per_task * 1e3:.1f} ms (64 one-cell blocks against one block "
          f"on {cores} cores); the {name} chart of {spec.n_cells} cells takes {kernel_s:.2f} s "
          "on one core in-process", flush=True)
    for target in (16, 64):
        tasks = chart_build.TASKS_PER_CORE * target
        projected = fixed_s + kernel_s / target + per_task * tasks / target
        print(f"projected on {target} cores ({tasks} blocks): {projected:.2f} s "
              f"({kernel_s / projected:.1f}x one core)", flush=True)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200, help="generated queries")
    parser.add_argument("--k", default="10,20,40", help="comma-separated k values")
    parser.add_argument("--cap", type=int, default=160_000, help="max cells per chart")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per case")
    parser.add_argument("--master", default="local[2]", help="Spark master")
    parser.add_argument("--q2-k", default="20,50,100,200,320",
                        help="k of Q2's chart in the Spark-path table (k^3 cells)")
    parser.add_argument("--chain6-k", default="4,6,8,10,12,14",
                        help="k of the 6-stream join's chart in the Spark-path table (k^6 cells)")
    parser.add_argument("--no-workload", action="store_true",
                        help="skip the 200-query workload table (the Spark path only)")
    parser.add_argument("--kernel-only", action="store_true",
                        help="measure the kernel's allocator effect only, without Spark")
    args = parser.parse_args()
    allocator_effect(max(args.repeat, 5))
    if args.kernel_only:
        return

    catalog = generated_catalog()
    queries = generated_queries(args.queries)
    dec = load_catalog(EXAMPLES / "dec-pkt.toml")
    tiny = [s for s, _ in workload_specs(load_workload(EXAMPLES / "workload.toml"), dec)]

    load = os.getloadavg()[0]  # the machine's other work skews both engines' times
    start = time.perf_counter()
    spark = spark_session(args.master, progress=False)
    spark.range(1).count()
    session_s = time.perf_counter() - start
    try:
        start = time.perf_counter()
        build_spark(tiny, dec, spark=spark, progress=False)
        first_s = time.perf_counter() - start
        fixed_s, _ = timed(lambda: build_spark(tiny, dec, spark=spark, progress=False),
                           max(args.repeat, 3))
        print(f"Spark {args.master}: session start-up + trivial job {session_s:.2f} s; "
              f"first job {first_s:.2f} s; per-job fixed cost (tiny workload, "
              f"{sum(s.n_cells for s in tiny)} cells) {fixed_s:.2f} s", flush=True)
        spark_path(spark, args.repeat, args.master, ints(args.q2_k), ints(args.chain6_k))
        if args.no_workload:
            return
        print(f"{args.queries} queries, medians of {args.repeat} runs, charts capped at "
              f"{args.cap} cells", flush=True)
        header = (f"{'k':>3} {'charts k':>10} {'cells':>10} {'cell·plan':>11} {'local s':>8} "
                  f"{'local c·p/s':>12} {'spark s':>8} {'spark-fixed':>11} "
                  f"{'spark c·p/s':>12} {'ratio':>6} {'same':>5}")
        print(header)
        print("-" * len(header))
        for k in (int(x) for x in args.k.split(",")):
            specs = workload_at(queries, catalog, k, args.cap)
            cells = sum(s.n_cells for s in specs)
            evals = sum(s.n_cells * len(ChartContext(s, catalog).plans) for s in specs)
            ks = sorted({a.k for s in specs for a in s.axes})
            local_s, local = timed(lambda: build_local(specs, catalog, progress=False),
                                   args.repeat)
            spark_s, remote = timed(lambda: build_spark(specs, catalog, spark=spark,
                                                        progress=False), args.repeat)
            net = max(spark_s - fixed_s, 1e-9)
            print(f"{k:3d} {','.join(map(str, ks)):>10} {cells:10d} {evals:11d} "
                  f"{local_s:8.2f} {evals / local_s:12.3e} {spark_s:8.2f} {net:11.2f} "
                  f"{evals / net:12.3e} {net / local_s:6.2f} "
                  f"{'yes' if identical(local, remote) else 'NO':>5}", flush=True)
    finally:
        spark.stop()
    print(f"ratio = (spark s - per-job fixed cost) / local s; 'same' = identical charts "
          f"(plan ids, plan index, bitwise costs); 1-min load average {load:.2f} before, "
          f"{os.getloadavg()[0]:.2f} after, on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
