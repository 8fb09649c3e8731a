"""Benchmark: ``cqopt run`` per round against the minimal way, on Spark ``local[2]``.

The README's streams (``cqopt generate --catalog examples/dec-pkt.toml
--file-per-round 1 --steady TCP.src_host --steady UDP.dest_host --steady
SF.dest_host``), ``--rounds`` one-second rounds (default 24), and query Q2 of
``examples/workload.toml`` (a three-way join). Everything runs in one
process and one Spark session, one after the other:

- **baseline**, the minimal work: per round, read each stream's round file,
  run the plan the chart picks at the round's mean rates as a DataFrame
  (:func:`cqopt.spark.plan_frame.to_spark`), write the result as Parquet.
  Its per-round wall time is timed round by round.
- **cqopt run** (:class:`cqopt.spark.run.AdaptiveRun`, the code behind
  ``cqopt run``, no ``--shadow``) over the same files, twice: one file per
  stream per micro-batch (one round a batch, as a live run that keeps up sees
  it: the median gap between consecutive rounds' log times is its steady
  per-round cost), and ``--trigger available-now`` with every file in one
  micro-batch (the backlog, its rounds grouped by the plan chosen for each).
- with ``--backlog N``, the rate at which ``cqopt run --trigger available-now``
  replays a trace of N rounds, against Spark's own one-job answer of the same
  backlog (every file read at once, the round a key, one plan, one partitioned
  write), warm.
- with ``--live N``, a live run (``--trigger 1``) whose files arrive one
  round a second for N rounds: its highest and last lag (``--rate-scale F``
  multiplies the streams' rates, to find where it stops keeping up).
- with ``--stream-join``, what a user would write instead: Spark Structured
  Streaming running Q2 itself as a stream-stream join on event-time tumbling
  windows (the round as a join key, a watermark), one file per micro-batch.

A warm-up run of each kind on a copy of the first rounds comes first, so
no side pays the session's first-job costs. Prints per-round medians and the
ratio ``cqopt run / baseline`` (the target is at most 1.3).

    flock /tmp/cqopt-spark.lock python scripts/bench_run.py [--rounds 24] [--stream-join]
        [--backlog 600] [--live 120] [--rate-scale F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.spec import workload_specs
from cqopt.charts.store import write_chart_set
from cqopt.charts.workload import load_workload
from cqopt.cli.main import main as cqopt_main
from cqopt.output import atomic_file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
STREAMS = ("TCP", "UDP", "SF")


def generate(folder: Path, rounds: int, scale: float = 1.0) -> Path:
    """The README's streams, one Parquet file per stream per one-second round."""
    traces = folder / "traces"
    code = cqopt_main(["generate", "--catalog", str(EXAMPLES / "dec-pkt.toml"), "--out",
                       str(traces), "--duration", str(rounds), "--file-per-round", "1",
                       "--streams", ",".join(STREAMS), "--steady", "TCP.src_host",
                       "--steady", "UDP.dest_host", "--steady", "SF.dest_host"]
                      + [a for s in STREAMS for a in ("--rate-scale", f"{s}={scale}")])
    assert code == 0
    return traces


def baseline(spark, chart, query, traces: Path, out: Path, rounds: int) -> list[float]:
    """Per round: read each stream's file, run the chart's plan, write Parquet; seconds."""
    from cqopt.optimizer.query.statistics import rate_name
    from cqopt.spark.plan_frame import to_spark

    files = {s: sorted((traces / s).glob("part-*.parquet")) for s in STREAMS}
    rates = {rate_name(s): float(len(pd.read_parquet(files[s][0]))) for s in STREAMS}
    plan = chart.choose(rates).plan
    times = []
    for r in range(rounds):
        began = time.perf_counter()
        frames = {s: spark.read.parquet(str(files[s][r])) for s in STREAMS}
        to_spark(plan, frames, query=query).write.parquet(str(out / f"round-{r:06d}.parquet"))
        times.append(time.perf_counter() - began)
    return times


def one_job(spark, chart, query, traces: Path, out: Path) -> float:
    """Spark's own one-job answer of a backlog: every round of every stream read at once,
    the round a column, the chart's plan at the mean rates run with the round a key of
    its joins, written partitioned by round; seconds. No per-round choice, statistics,
    log or switch into place: the floor a backlog run is measured against."""
    from pyspark.sql import functions as F

    from cqopt.optimizer.query.statistics import rate_name
    from cqopt.spark.plan_frame import to_spark
    from cqopt.spark.round_stats import assign_round

    began = time.perf_counter()
    raw = {s: spark.read.parquet(str(traces / s)) for s in STREAMS}
    spans = {s: df.agg(F.min("ts"), F.count(F.lit(1))).first() for s, df in raw.items()}
    start = min(float(lo) for lo, _ in spans.values())
    rounds = len(list((traces / STREAMS[0]).glob("part-*.parquet")))
    plan = chart.choose({rate_name(s): n / rounds for s, (_, n) in spans.items()}).plan
    frames = {s: df.withColumn("_round", assign_round(F.col("ts"), start, 1.0))
              for s, df in raw.items()}
    to_spark(plan, frames, query=query, round_column="_round").write.partitionBy(
        "_round").parquet(str(out))
    return time.perf_counter() - began


def cqopt_run(spark, chart, query, catalog, traces: Path, out: Path,
              max_rounds: int | None = None, max_files: int | None = None,
              trigger: str | float = "available-now") -> tuple[float, list[float], int]:
    """``cqopt run`` over the traces: (wall seconds, gaps between rounds' log times, rounds).

    ``max_files=1``: one file per stream per micro-batch, so one round a batch, as
    a live run that keeps up sees its input; default, the whole backlog in one batch.
    """
    from cqopt.spark.run import AdaptiveRun, RunSettings, Source

    sources = {s: Source.files(s, traces / s) for s in STREAMS}
    began = time.perf_counter()
    run = AdaptiveRun(spark, "Q2", query, chart, catalog, sources, out,
                      RunSettings(window_s=1.0, trigger=trigger, max_rounds=max_rounds,
                                  max_files_per_trigger=max_files),
                      progress=lambda _: None)
    result = run.run()
    wall = time.perf_counter() - began
    ends = [json.loads(p.read_text())["finished_at"]
            for p in sorted((out / "log").glob("round-*.json"))]
    gaps = [b - a for a, b in zip(ends, ends[1:])]
    return wall, gaps, len(result.rounds)


def live(spark, chart, query, catalog, traces: Path, folder: Path, rounds: int) -> list[float]:
    """A live run: each round's files appear one second after the last, ``--trigger 1``.

    Returns each round's lag (seconds behind the newest complete round when it ran).
    """
    import threading

    sources = folder / "arriving"
    files = {s: sorted((traces / s).glob("part-*.parquet")) for s in STREAMS}
    for s in STREAMS:
        (sources / s).mkdir(parents=True)
        shutil.copy(files[s][0], sources / s / files[s][0].name)

    def feed() -> None:
        for r in range(1, rounds + 1):
            time.sleep(1.0)
            for s in STREAMS:  # written under a hidden name, then renamed: whole files only
                with atomic_file(sources / s / files[s][r].name) as scratch:
                    shutil.copy(files[s][r], scratch)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    cqopt_run(spark, chart, query, catalog, sources, folder / "live-run", max_rounds=rounds,
              trigger=1.0)
    feeder.join()
    return [json.loads(p.read_text())["lag_s"]
            for p in sorted((folder / "live-run" / "log").glob("round-*.json"))]


def stream_join(spark, traces: Path, out: Path, rounds: int) -> tuple[float, int]:
    """Q2 as Spark's own stream-stream join on event-time rounds: (wall seconds, batches)."""
    from pyspark.sql import functions as F

    start = min(float(pd.read_parquet(sorted((traces / s).glob("*.parquet"))[0]).ts.min())
                for s in STREAMS)
    frames = {}
    for s in STREAMS:
        schema = spark.read.parquet(str(traces / s)).schema
        raw = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(
            str(traces / s))
        event = F.timestamp_seconds(F.col("ts"))
        frames[s] = (raw.select(*[F.col(c).alias(f"{s}_{c}") for c in raw.columns],
                                event.alias(f"{s}_t"),
                                F.floor(F.col("ts") - F.lit(start)).alias(f"{s}_round"))
                     .withWatermark(f"{s}_t", "1 second"))
    # Event-time bounds on each join let Spark drop state once a round has passed.
    tcp, udp, sf = frames["TCP"], frames["UDP"], frames["SF"]
    joined = tcp.join(udp, F.expr(
        "TCP_src_host = UDP_dest_host AND TCP_round = UDP_round AND "
        "UDP_t BETWEEN TCP_t - INTERVAL 1 SECOND AND TCP_t + INTERVAL 1 SECOND"))
    # One event-time column per side of a join: the pair keeps TCP's (same round as UDP's).
    joined = joined.drop("UDP_t").join(sf, F.expr(
        "UDP_dest_host = SF_dest_host AND UDP_round = SF_round AND "
        "SF_t BETWEEN TCP_t - INTERVAL 1 SECOND AND TCP_t + INTERVAL 1 SECOND"))
    began = time.perf_counter()
    query = (joined.writeStream.format("parquet").option("path", str(out / "rows"))
             .option("checkpointLocation", str(out / "checkpoint"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return time.perf_counter() - began, len(query.recentProgress)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=24)
    parser.add_argument("--stream-join", action="store_true",
                        help="also time Spark's own stream-stream join of Q2")
    parser.add_argument("--backlog", type=int, default=0, metavar="ROUNDS",
                        help="also replay a trace of ROUNDS rounds with available-now (one "
                             "micro-batch, its rounds grouped by plan) and print its rounds/s")
    parser.add_argument("--live", type=int, default=0, metavar="ROUNDS",
                        help="also run live for ROUNDS one-second rounds, files arriving one "
                             "round a second, and print the lag")
    parser.add_argument("--rate-scale", type=float, default=1.0, metavar="F",
                        help="multiply every stream's rate (cqopt generate --rate-scale)")
    args = parser.parse_args()
    from cqopt.spark.session import spark_session

    catalog = load_catalog(EXAMPLES / "dec-pkt.toml")
    specs = workload_specs(load_workload(EXAMPLES / "workload.toml"), catalog)
    q2_spec, query = dict((s.name, (s, q)) for s, q in specs)["Q2"]
    with tempfile.TemporaryDirectory(prefix="bench-run-") as tmp:
        folder = Path(tmp)
        write_chart_set(folder / "charts", build_local([q2_spec], catalog, progress=False),
                        catalog)
        import cqopt.charts as charts

        chart = charts.load(folder / "charts")["Q2"]
        traces = generate(folder, args.rounds, args.rate_scale)
        warm = generate(folder / "warm", 4, args.rate_scale)
        began = time.perf_counter()
        spark = spark_session("local[2]", progress=False)
        print(f"session start {time.perf_counter() - began:.2f} s; rate scale "
              f"{args.rate_scale:g}")
        spark.sparkContext.setLogLevel("ERROR")
        baseline(spark, chart, query, warm, folder / "warm-base", 3)
        cqopt_run(spark, chart, query, catalog, warm, folder / "warm-run", max_files=1)
        cqopt_run(spark, chart, query, catalog, warm, folder / "warm-run-2")

        base = baseline(spark, chart, query, traces, folder / "base", args.rounds)
        base_median = statistics.median(base)
        print(f"baseline (read, plan, write)  median {base_median:.3f} s/round over "
              f"{len(base)} rounds, total {sum(base):.2f} s")
        wall, gaps, ran = cqopt_run(spark, chart, query, catalog, traces, folder / "one",
                                    max_files=1)
        print(f"cqopt run, one round a batch  {wall / ran:.3f} s/round (wall {wall:.2f} s / "
              f"{ran}), median gap between rounds {statistics.median(gaps):.3f} s")
        print(f"ratio to baseline             {statistics.median(gaps) / base_median:.2f}x "
              f"(median gap; whole run {wall / ran / base_median:.2f}x; target <= 1.3x)")
        wall, gaps, ran = cqopt_run(spark, chart, query, catalog, traces, folder / "run")
        print(f"cqopt run, backlog in 1 batch {wall / ran:.3f} s/round (wall {wall:.2f} s / "
              f"{ran}): {ran / wall:.1f} rounds/s; ratio to baseline "
              f"{wall / ran / base_median:.2f}x")
        if args.backlog:
            long = generate(folder / "backlog", args.backlog, args.rate_scale)
            one_job(spark, chart, query, long, folder / "one-job-warm")
            floor = one_job(spark, chart, query, long, folder / "one-job")
            wall, gaps, ran = cqopt_run(spark, chart, query, catalog, long,
                                        folder / "backlog-run")
            print(f"backlog of {ran} rounds        {ran / wall:.1f} rounds/s overall "
                  f"(wall {wall:.2f} s; target >= 300); baseline at its median "
                  f"{1 / base_median:.1f} rounds/s")
            print(f"Spark's one-job answer        {ran / floor:.1f} rounds/s (wall "
                  f"{floor:.2f} s, warm); cqopt run at {floor / wall:.2f} of it "
                  "(target: at least half)")
        if args.live:
            lags = live(spark, chart, query, catalog, generate(folder / "live", args.live + 1,
                                                               args.rate_scale),
                        folder / "live", args.live)
            print(f"live, {len(lags)} rounds          lag: highest {max(lags):.1f} s, "
                  f"last {lags[-1]:.1f} s, rounds with lag > 0: {sum(x > 0 for x in lags)} "
                  "(target: under 2 s)")
        if args.stream_join:
            shutil.rmtree(folder / "warm-sj", ignore_errors=True)
            stream_join(spark, warm, folder / "warm-sj", 4)
            seconds, batches = stream_join(spark, traces, folder / "sj", args.rounds)
            print(f"Spark stream-stream join      {seconds / args.rounds:.3f} s/round "
                  f"({seconds:.2f} s, {batches} micro-batches, fixed plan)")
        spark.stop()


if __name__ == "__main__":
    main()
