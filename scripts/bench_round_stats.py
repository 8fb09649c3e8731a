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

With ``--large N`` (e.g. 40000000), Q2 also runs on traces of N tuples,
written in parts of a million, where memory decides: pandas holds a trace
whole, Spark streams it through groups per (round, key). Each pandas run is a
child process whose peak resident memory is read back; measured at 1/4 and
1/2 of N, it gives pandas' bytes per tuple, hence the largest trace pandas
can take on this machine, and pandas runs on N tuples only if that is
predicted to fit in 70% of the memory available. The Spark side reports
its time and the JVM's peak resident memory.

    python scripts/bench_round_stats.py [--tuples 2000000] [--repeat 5] [--large 0]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.catalog import load_catalog
from cqopt.optimizer.query.intervals import IntervalSet
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
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


# -- traces larger than pandas' memory -------------------------------------------------------
PART_TUPLES = 1_000_000


def _write_part(args: tuple[str, str, float, float, int, str]) -> int:
    """One part of a large trace: ``duration`` seconds from ``start``, with its own seed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    catalog_path, stream, start, duration, seed, path = args
    frame = generate_trace(load_catalog(catalog_path).stream(stream), duration, seed=seed)
    frame["ts"] += start
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), path)
    return len(frame)


def write_large_traces(catalog, streams: tuple[str, ...], tuples: int, folder: Path
                       ) -> dict[str, Path]:
    """Traces of ``tuples`` tuples in all, one folder of Parquet parts per stream."""
    rates = {name: sum(catalog.stream(name).rate) / 2 for name in streams}
    duration = tuples / sum(rates.values())
    jobs, paths = [], {}
    for i, name in enumerate(streams):
        paths[name] = folder / f"{name}.parquet"
        paths[name].mkdir(parents=True)
        part_s = PART_TUPLES / rates[name]
        for j, begin in enumerate(np.arange(0.0, duration, part_s)):
            jobs.append((str(EXAMPLES / "dec-pkt.toml"), name, float(begin),
                         float(min(part_s, duration - begin)), 1000 * i + j,
                         str(paths[name] / f"part-{j:05d}.parquet")))
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        list(pool.map(_write_part, jobs))
    return paths


def pandas_child(paths: dict[str, Path]) -> dict[str, float]:
    """Run the pandas baseline in a child process: its seconds and peak resident bytes."""
    code = ("import json, resource, sys, time, pandas as pd\n"
            f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "import bench_round_stats as b\n"
            "from cqopt.catalog import load_catalog\n"
            "from cqopt.optimizer.query.logical import parse_query\n"
            f"query = parse_query(b.Q2, load_catalog(b.EXAMPLES / 'dec-pkt.toml'))\n"
            "begin = time.perf_counter()\n"
            f"frames = {{n: pd.read_parquet(p) for n, p in {dict((n, str(p)) for n, p in paths.items())!r}.items()}}\n"
            "table = b.pandas_round_statistics(query, frames, 1.0)\n"
            "seconds = time.perf_counter() - begin\n"
            "print(json.dumps({'seconds': seconds, 'rounds': len(table), 'peak': "
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["killed"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def _available_bytes() -> int:
    with open("/proc/meminfo") as info:
        for line in info:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _jvm_peak_bytes(spark) -> int | None:
    """The JVM's peak resident memory (VmHWM), the driver and executors of local mode."""
    try:
        pid = spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except Exception:  # not on Linux, or the gateway hides the JVM: say nothing
        return None
    return None


def large_trace(spark, catalog, tuples: int, folder: Path) -> None:
    """Q2 on traces of ``tuples`` tuples: where Spark is ahead of pandas (memory)."""
    query = parse_query(Q2, catalog)
    sizes = [tuples // 4, tuples // 2, tuples]
    print(f"\nQ2 on large traces (parts of {PART_TUPLES:,} tuples); pandas in a child process",
          flush=True)
    header = (f"{'tuples':>12} {'engine':<8} {'seconds':>8} {'tuples/s':>11} "
              f"{'peak resident':>14}")
    print(header)
    print("-" * len(header))
    measured: list[tuple[int, int]] = []  # (tuples, pandas' peak resident bytes)

    def predicted(n: int) -> float | None:
        """pandas' peak at n tuples, along the line through its last two runs."""
        if len(measured) < 2:
            return None
        (n0, p0), (n1, p1) = measured[-2:]
        return p1 + (p1 - p0) / (n1 - n0) * (n - n1)

    for n in sizes:
        begin = time.perf_counter()
        paths = write_large_traces(catalog, query.stream_names, n, folder / f"large-{n}")
        written = time.perf_counter() - begin
        frames = {name: read_trace(spark, path, catalog.stream(name))[0]
                  for name, path in paths.items()}
        begin = time.perf_counter()
        spark_table = round_statistics(query, frames, 1.0)
        spark_s = time.perf_counter() - begin
        jvm = _jvm_peak_bytes(spark)
        print(f"{n:>12,} {'Spark':<8} {spark_s:>8.2f} {n / spark_s:>11,.0f} "
              f"{'?' if jvm is None else f'{jvm / 2**30:.2f} GiB':>14}"
              f"  (the JVM's peak so far; traces written in {written:.0f} s)", flush=True)
        available, guess = _available_bytes(), predicted(n)
        if guess is not None and guess > 0.7 * available:
            print(f"{n:>12,} {'pandas':<8} {'-':>8} {'-':>11} {guess / 2**30:>10.1f} GiB"
                  f"  (predicted; more than 70% of the {available / 2**30:.1f} GiB "
                  "available: not run)", flush=True)
        else:
            result = pandas_child(paths)
            if "error" in result:
                print(f"{n:>12,} {'pandas':<8} failed: {result['error']}", flush=True)
            else:
                assert result["rounds"] == len(spark_table)
                measured.append((n, result["peak"]))
                print(f"{n:>12,} {'pandas':<8} {result['seconds']:>8.2f} "
                      f"{n / result['seconds']:>11,.0f} {result['peak'] / 2**30:>10.2f} GiB",
                      flush=True)
        shutil.rmtree(folder / f"large-{n}", ignore_errors=True)
    if len(measured) >= 2:
        (n0, p0), (n1, p1) = measured[-2:]
        slope, room = (p1 - p0) / (n1 - n0), 0.7 * _available_bytes()
        print(f"pandas grows by {slope:.0f} bytes a tuple at its peak: with "
              f"{_available_bytes() / 2**30:.1f} GiB available it takes traces up to about "
              f"{(n1 + (room - p1) / slope) / 1e6:,.0f} million tuples (70% of it); Spark's "
              "memory does not grow with the trace (one small table per round and key).")


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
    parser.add_argument("--large", type=int, default=0,
                        help="also run Q2 on traces of this many tuples (e.g. 40000000)")
    args = parser.parse_args()

    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    queries = {"Q1 (1 stream, selection)": parse_query(Q1, catalog),
               "Q2 (2-stream equi-join)": parse_query(Q2, catalog)}
    folder = Path(tempfile.mkdtemp(prefix="cqopt-bench-rounds-"))
    paths = _write_traces(catalog, queries, args.tuples, folder)
    spark = _warm_session(args.master, catalog, queries["Q1 (1 stream, selection)"], folder)
    rows = []
    try:
        for label, query in queries.items():
            rows += _time_query(spark, catalog, label, query, paths[label], args.repeat,
                                args.master)
        if args.large:
            large_trace(spark, catalog, args.large, folder)
    finally:
        spark.stop()
        shutil.rmtree(folder, ignore_errors=True)
    _print_table(rows, args.repeat)


def _write_traces(catalog, queries: dict[str, ContinuousQuery], tuples: int,
                  folder: Path) -> dict[str, dict[str, Path]]:
    """Each query's traces, of ``tuples`` tuples over its streams: label -> stream -> path."""
    rates = {name: sum(catalog.stream(name).rate) / 2 for name in ("TCP", "UDP")}
    paths: dict[str, dict[str, Path]] = {}
    begin = time.perf_counter()
    for label, query in queries.items():
        streams = query.stream_names
        duration = tuples / sum(rates[s] for s in streams)
        paths[label] = {}
        for i, name in enumerate(streams):
            frame = generate_trace(catalog.stream(name), duration, seed=i)
            paths[label][name] = write_trace(frame, folder / label[:2] / f"{name}.parquet")
    print(f"generated and wrote the traces in {time.perf_counter() - begin:.1f} s ({folder})")
    return paths


def _warm_session(master: str, catalog, q1: ContinuousQuery, folder: Path):
    """A started session whose first real jobs (class loading, code generation) ran."""
    begin = time.perf_counter()
    spark = spark_session(master, progress=False, conf={"spark.sql.shuffle.partitions": "4"})
    spark.range(1).count()
    print(f"Spark session start-up ({master}): {time.perf_counter() - begin:.1f} s")
    # The session's first real jobs load classes and compile code: timed apart.
    begin = time.perf_counter()
    tiny = generate_trace(catalog.stream("TCP"), 5.0, seed=99)
    tiny_path = write_trace(tiny, folder / "warm-up.parquet")
    frame, _ = read_trace(spark, tiny_path, catalog.stream("TCP"))
    round_statistics(q1, {"TCP": frame}, 1.0)
    print(f"warm-up (read_trace and round_statistics of {len(tiny):,} tuples): "
          f"{time.perf_counter() - begin:.1f} s")
    return spark


def _time_query(spark, catalog, label: str, query: ContinuousQuery, paths: dict[str, Path],
                repeat: int, master: str) -> list[tuple]:
    """The query's round statistics on Spark and in pandas (the same table, checked), and
    the read: rows of (label, engine, tuples, rounds, median s, min s)."""
    def read_all():
        return {name: read_trace(spark, path, catalog.stream(name))
                for name, path in paths.items()}

    read_s, read_min, read = _median_time(read_all, repeat)
    frames = {name: frame for name, (frame, _) in read.items()}
    tuples = sum(info.rows for _, info in read.values())
    begin = time.perf_counter()
    round_statistics(query, frames, 1.0)  # warm-up: JIT, Python workers
    first_s = time.perf_counter() - begin
    spark_s, spark_min, spark_table = _median_time(
        lambda: round_statistics(query, frames, 1.0), repeat)

    def pandas_run():
        loaded = {name: pd.read_parquet(path) for name, path in paths.items()}
        return pandas_round_statistics(query, loaded, 1.0)

    pandas_s, pandas_min, pandas_table = _median_time(pandas_run, repeat)
    pd.testing.assert_frame_equal(spark_table, pandas_table, check_dtype=False, rtol=1e-9)
    rounds = len(spark_table)
    return [(label, "Spark " + master, tuples, rounds, spark_s, spark_min),
            (label, "pandas", tuples, rounds, pandas_s, pandas_min),
            (label, "  read_trace job", tuples, rounds, read_s, read_min),
            (label, "  Spark first run", tuples, rounds, first_s, first_s)]


def _print_table(rows: list[tuple], repeat: int) -> None:
    print(f"\nper-round statistics, window 1 s, median of {repeat} runs (the first "
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
