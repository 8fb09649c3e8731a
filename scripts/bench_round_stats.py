"""Benchmark: per-round statistics of generated traces on Spark ``local[2]``, against pandas.

Two queries over the OM paper's DEC-PKT catalog (``examples/dec-pkt.toml``),
each on generated traces of ``--tuples`` tuples in all (default 2 million):

- Q1, one stream: ``SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE
  TCP.dest_host = 2 WINDOW [1]`` (statistics rate.TCP, sel.TCP);
- Q2, a 2-stream join: ``... FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host
  AND TCP.dest_host = 2 WINDOW [1]`` (rate.TCP, rate.UDP, sel.TCP,
  jsel.TCP.UDP), the tuples split between the streams by their mean rates.

The traces are written as Parquet first. A Spark run is
:func:`cqopt.spark.round_stats.round_statistics` on the DataFrames of
:func:`cqopt.spark.trace_read.read_trace` (lazy, so the run includes the Parquet scan);
a pandas run reads the same Parquet files with ``pd.read_parquet`` and
computes the same statistics with numpy bincounts and a pandas merge of the
per-(round, key) counts, the same algorithm. The two tables must agree.
Reported apart: the session's start-up, a warm-up on a tiny trace (the
session's first jobs load classes and compile code), each query's first
Spark run, and ``read_trace``'s own job (row counts, time span, order
checks). Times are medians of ``--repeat`` runs.

    python scripts/bench_round_stats.py [--tuples 2000000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.catalog import load_catalog
from cqopt.optimizer.intervals import IntervalSet
from cqopt.optimizer.logical import ContinuousQuery, parse_query
from cqopt.replay.rounds import complete_rounds
from cqopt.replay.trace_generate import generate_trace
from cqopt.replay.trace_write import write_trace
from cqopt.spark.round_stats import round_statistics
from cqopt.spark.session import spark_session
from cqopt.spark.trace_read import read_trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
Q2 = ("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host AND TCP.dest_host = 2 "
      "WINDOW [1]")


# -- the pandas baseline ---------------------------------------------------------------
def pandas_round_statistics(query: ContinuousQuery, frames: dict[str, pd.DataFrame],
                            window_s: float) -> pd.DataFrame:
    """The statistics of ``query`` (interval selections and equi-joins) with pandas, in the
    complete rounds :func:`round_statistics` keeps by default."""
    start = min(float(f.ts.min()) for f in frames.values())
    n = complete_rounds(max(float(f.ts.max()) for f in frames.values()), start, window_s)
    rounds, kept = {}, {}
    for name, frame in frames.items():
        r = _rounds(frame.ts.to_numpy(), start, window_s)
        kept[name], rounds[name] = frame[r < n], r[r < n]  # a partial last round: not counted
    frames = kept
    counts, out = {}, {"round": np.arange(n), "start": start + np.arange(n) * window_s}
    for name, frame in frames.items():
        counts[name] = np.bincount(rounds[name], minlength=n)
        out[f"rate.{name}"] = counts[name] / window_s
        selection = query.selections.get(name)
        if selection is not None:
            passes = np.ones(len(frame), dtype=bool)
            for column, values in selection.columns.items():
                passes &= _in_interval_set(frame[column].to_numpy(), values)
            with np.errstate(invalid="ignore", divide="ignore"):
                out[f"sel.{name}"] = np.bincount(rounds[name], weights=passes,
                                                 minlength=n) / counts[name]
    for join in query.joins:
        (a, col_a), (b, col_b) = join.left, join.right
        left = pd.DataFrame({"round": rounds[a], "key": frames[a][col_a].to_numpy()})
        right = pd.DataFrame({"round": rounds[b], "key": frames[b][col_b].to_numpy()})
        left = left.groupby(["round", "key"]).size().rename("n_a").reset_index()
        right = right.groupby(["round", "key"]).size().rename("n_b").reset_index()
        both = left.merge(right, on=["round", "key"])
        matches = np.bincount(both["round"], weights=both.n_a * both.n_b, minlength=n)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[join.statistic] = matches / (counts[a] * counts[b])
    return pd.DataFrame(out)[["round", "start", *query.statistics]]


def _rounds(ts: np.ndarray, start: float, window_s: float) -> np.ndarray:
    guess = np.floor((ts - start) / window_s).astype(np.int64)
    guess -= ts < start + guess * window_s  # the floating-point boundary rule of round_of
    guess += ts >= start + (guess + 1) * window_s
    return guess


def _in_interval_set(values: np.ndarray, intervals: IntervalSet) -> np.ndarray:
    mask = np.zeros(len(values), dtype=bool)
    for iv in intervals.intervals:
        inside = np.ones(len(values), dtype=bool)
        if iv.lo is not None:
            inside &= values >= iv.lo if iv.lo_closed else values > iv.lo
        if iv.hi is not None:
            inside &= values <= iv.hi if iv.hi_closed else values < iv.hi
        mask |= inside
    return mask


# -- the runs ------------------------------------------------------------------------------
def _median_time(run, repeat: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeat):
        begin = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - begin)
    return statistics.median(times), min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tuples", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    queries = {"Q1 (1 stream, selection)": parse_query(Q1, catalog),
               "Q2 (2-stream equi-join)": parse_query(Q2, catalog)}
    rates = {name: sum(catalog.stream(name).rate) / 2 for name in ("TCP", "UDP")}
    folder = Path(tempfile.mkdtemp(prefix="cqopt-bench-rounds-"))
    paths: dict[str, dict[str, Path]] = {}
    begin = time.perf_counter()
    for label, query in queries.items():
        streams = query.stream_names
        duration = args.tuples / sum(rates[s] for s in streams)
        paths[label] = {}
        for i, name in enumerate(streams):
            frame = generate_trace(catalog.stream(name), duration, seed=i)
            paths[label][name] = write_trace(frame, folder / label[:2] / f"{name}.parquet")
    print(f"generated and wrote the traces in {time.perf_counter() - begin:.1f} s ({folder})")

    begin = time.perf_counter()
    spark = spark_session(args.master, progress=False,
                          conf={"spark.sql.shuffle.partitions": "4"})
    spark.range(1).count()
    print(f"Spark session start-up ({args.master}): {time.perf_counter() - begin:.1f} s")
    # The session's first real jobs load classes and compile code: timed apart.
    begin = time.perf_counter()
    tiny = generate_trace(catalog.stream("TCP"), 5.0, seed=99)
    tiny_path = write_trace(tiny, folder / "warm-up.parquet")
    frame, _ = read_trace(spark, tiny_path, catalog.stream("TCP"))
    round_statistics(queries["Q1 (1 stream, selection)"], {"TCP": frame}, 1.0)
    print(f"warm-up (read_trace and round_statistics of {len(tiny):,} tuples): "
          f"{time.perf_counter() - begin:.1f} s")

    rows = []
    try:
        for label, query in queries.items():
            def read_all():
                return {name: read_trace(spark, path, catalog.stream(name))
                        for name, path in paths[label].items()}

            read_s, read_min, read = _median_time(read_all, args.repeat)
            frames = {name: frame for name, (frame, _) in read.items()}
            tuples = sum(info.rows for _, info in read.values())
            begin = time.perf_counter()
            round_statistics(query, frames, 1.0)  # warm-up: JIT, Python workers
            first_s = time.perf_counter() - begin
            spark_s, spark_min, spark_table = _median_time(
                lambda: round_statistics(query, frames, 1.0), args.repeat)

            def pandas_run():
                loaded = {name: pd.read_parquet(path) for name, path in paths[label].items()}
                return pandas_round_statistics(query, loaded, 1.0)

            pandas_s, pandas_min, pandas_table = _median_time(pandas_run, args.repeat)
            pd.testing.assert_frame_equal(spark_table, pandas_table, check_dtype=False,
                                          rtol=1e-9)
            rounds = len(spark_table)
            rows.append((label, "Spark " + args.master, tuples, rounds, spark_s, spark_min))
            rows.append((label, "pandas", tuples, rounds, pandas_s, pandas_min))
            rows.append((label, "  read_trace job", tuples, rounds, read_s, read_min))
            rows.append((label, "  Spark first run", tuples, rounds, first_s, first_s))
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)

    print(f"\nper-round statistics, window 1 s, median of {args.repeat} runs (the first "
          "Spark run of each query: once, before them)")
    header = (f"{'query':<26} {'engine':<18} {'tuples':>9} {'rounds':>6} {'median s':>9} "
              f"{'min s':>7} {'tuples/s':>11}")
    print(header)
    print("-" * len(header))
    for label, engine, tuples, rounds, median, fastest in rows:
        print(f"{label:<26} {engine:<18} {tuples:>9,} {rounds:>6} {median:>9.3f} "
              f"{fastest:>7.3f} {tuples / median:>11,.0f}")


if __name__ == "__main__":
    main()
