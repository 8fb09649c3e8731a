"""An adaptive continuous query on Spark Structured Streaming: OM's Algorithm 2, on an engine.

:class:`AdaptiveRun` reads each stream of a query as a Structured Streaming
source (a directory of Parquet or CSV files, or Spark's ``rate`` source),
cuts the tuples into **rounds** (tumbling windows of the query's window
``W`` in event time, seed 001 section 3.1) and, in ``foreachBatch``, runs
every round once it is complete:

1. the round's statistics are observed: for a micro-batch of at most
   :data:`LOCAL_TUPLES` tuples (a live round, a short backlog), on the
   driver from the batch collected in one Spark job
   (:func:`cqopt.costmodel.validation.window_statistics`, round by round);
   for a larger one with :func:`cqopt.spark.round_stats.round_statistics`,
   in one Spark job for every round the micro-batch completes;
2. an :class:`~cqopt.runtime.adaptive.AdaptiveQuery` estimates the round from
   the rounds before it (or, with ``estimator="sample"``, takes its own
   statistics) and looks the estimate up in the chart (Algorithm 2,
   section 4.5), counting moves and switches;
3. the chosen plan runs as a DataFrame (:func:`cqopt.spark.plan_frame.to_spark`)
   on the round's tuples, and its result is written to
   ``OUT/results/round-NNNNNN.parquet``, its rows counted on the way
   (``DataFrame.observe``): one Spark job per round. Rounds completed
   together without ``shadow`` (a backlog) are grouped by the plan chosen
   for each, and each plan runs once over its rounds, the round a key of
   every join and grouping: one job per plan, each round's rows what it
   gives alone;
4. one record goes to the round log ``OUT/log/round-NNNNNN.json`` (statistics
   observed and estimated, cell, plan, switch, rows in and out, the plan's
   wall time, the lag); with ``shadow`` every candidate plan also runs on the
   round (``write.format("noop")``: executed, then discarded) and its time is
   logged.

**Rounds and micro-batches.** A tuple's round is
:func:`~cqopt.spark.round_stats.assign_round` of its timestamp, from the
earliest timestamp of the first micro-batch (or ``start``). A file source
reads every file there is per micro-batch (``max_files_per_trigger`` can
limit that), so a backlog is one micro-batch, and Spark's order of files (by
modification time, which a plain ``cp`` scrambles) does not matter. A round
is complete when every stream of the query has shown a timestamp at or past
the round's end (the earliest of the streams' latest timestamps, as Spark's
default watermark policy takes the minimum). Per micro-batch of at most
:data:`LOCAL_TUPLES` tuples: one job collects it (time spans, dropped
tuples, statistics and staging are worked out on the driver), then one job
per plan run; a larger batch takes a job for the spans, one for the
statistics, one per plan run and one to stage. Tuples of rounds still open
are staged under ``OUT/pending/batch-B`` (Parquet, keyed by the batch id)
and read with the next batch's; a stage is removed once its rounds ran.
When a finite input ends (``once``, ``available-now``) the rounds still
open run too, the last one included. A tuple of a round that already ran is
late; one without a time (a file of another layout) is unusable: both are
counted per micro-batch in the report, not run.

**Lag.** Each round's record holds its lag: the complete rounds waiting
behind it when it ran, times ``W`` (0 when the run keeps up). A lag that grew
``LAG_ROUNDS`` rounds in a row is warned about, and counted in the report.

**Restart safety.** Spark's checkpoint (``OUT/checkpoint``) decides which
files each micro-batch holds, and a batch not committed runs again with the
same files. The sink is keyed by round: a round is done when its log record
exists, its result is written before its record, each atomically (a scratch
name, then a rename), and a replayed batch skips the rounds its first attempt
logged. Spark commits a batch once it is handed back, so only the tuples of
rounds still open need keeping, and only until those rounds run: that is
the staging above (a backlog run to its end stages just its last round). A
killed run therefore resumes at the next unfinished round and no round's
output is lost or written twice. On resumption the logged rounds'
observations are fed to a fresh :class:`AdaptiveQuery`, which therefore
continues where it stopped.

**The rate source** (a live demo): ``Source.rate("TCP", 200)`` is Spark's
``rate`` source at 200 rows/s; ``ts`` is its ``timestamp`` in seconds, and
each int column of the catalog stream is ``1 + pmod(xxhash64(value, i),
1000)`` (so equi-joins on them match about one pair in 1000, like the
example workload's λ-λ chart assumes), each double column ``value``, each
string column ``value`` as text and each bool column whether ``value`` is even.
It needs a processing-time trigger (``trigger="5"``).

>>> Source.rate("TCP", 200)
Source(stream='TCP', kind='rate', path=None, rows_per_second=200)
>>> parse_trigger("available-now"), parse_trigger("2.5")
('available-now', 2.5)
>>> measured_hit([0.50, 0.52, 0.90], chosen=1, tolerance=Tolerance())  # within 10%
True
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog
from cqopt.charts.lookup import QueryChart
from cqopt.errors import CqoptError
from cqopt.optimizer.query.statistics import rate_name
from cqopt.replay.rounds import round_array, round_of
from cqopt.replay.trace_format import TraceError, detect_trace_format, trace_formats
from cqopt.runtime.adaptive import AdaptiveQuery
from cqopt.spark.plan_frame import scaled_answers, to_spark
from cqopt.spark.session import spark_errors, spark_message
from cqopt.spark.trace_read import SPARK_TYPES
from cqopt.output import write_atomic

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from cqopt.optimizer.query.logical import ContinuousQuery

STATE_VERSION = 2
LAG_ROUNDS = 10  # a lag that grows this many rounds in a row is warned about
TRIGGERS = ("once", "available-now")
RATE_DOMAIN = 1000
_TIME_NAMES = ("ts", "timestamp", "time")
STREAMABLE = ("parquet", "csv")  # trace formats Spark's file stream sources read
# A micro-batch of at most this many tuples is collected to the driver (one Spark job) and
# its statistics and staging worked out there; a larger one stays on Spark throughout.
LOCAL_TUPLES = 500_000
# A plan's result of at most this many rows is written from the driver (Arrow); a larger
# one by Spark. Smaller than LOCAL_TUPLES: finding a result too large costs its plan twice.
LOCAL_RESULT_ROWS = 100_000
# Rounds of at most this many tuples run from the driver's copy (a DataFrame of local
# data, no re-read); larger ones from their staged Parquet, which Spark reads in parallel.
# Their statistics come from the driver's copy either way (0.15-0.35 s for 400,000 tuples
# against 4-7 s for the same statistics as a Spark job).
LOCAL_FRAME_TUPLES = 100_000


class StreamingRunError(CqoptError):
    """A streaming run cannot start or continue: bad sources, options or output folder."""


# -- sources -----------------------------------------------------------------------
@dataclass(frozen=True)
class Source:
    """One stream's input: a directory of Parquet or CSV files, or Spark's rate source."""

    stream: str
    kind: str  # parquet, csv or rate
    path: str | None = None
    rows_per_second: int | None = None

    @classmethod
    def files(cls, stream: str, path: str | Path) -> Source:
        """A directory of ``.parquet`` or ``.csv`` files (optionally gzipped CSV).

        Raises
        ------
        StreamingRunError
            The path does not exist, is not a directory, or holds no such file.
        """
        path = Path(path)
        where = f"--source {stream}={path}"
        if not path.exists():
            raise StreamingRunError(f"{where}: no such directory")
        if not path.is_dir():
            raise StreamingRunError(f"{where}: not a directory; a streaming source is a "
                                    "directory of .parquet or .csv files (cqopt generate "
                                    "--file-per-round writes one)")
        # The trace-format registry names the files (cqopt.replay.trace_format), as for
        # every other reader of traces; Structured Streaming reads two of its formats.
        try:
            kind = detect_trace_format(path).name
        except TraceError as err:
            raise StreamingRunError(f"{where}: {err.problem}; write one file per round "
                                    "with cqopt generate --file-per-round SECONDS") from None
        if kind not in STREAMABLE:
            raise StreamingRunError(f"{where}: holds {kind} traces, which Spark Structured "
                                    f"Streaming cannot read as they come; it reads "
                                    f"{' or '.join(STREAMABLE)}: convert them (cqopt generate "
                                    "--file-per-round writes Parquet)")
        # Absolute: Spark's JVM resolves a relative path against its own working directory,
        # which is not this process's after an os.chdir (a notebook, a test).
        return cls(stream, kind, str(path.absolute()))

    @classmethod
    def rate(cls, stream: str, rows_per_second: int) -> Source:
        """Spark's ``rate`` source at ``rows_per_second`` (see the module docstring)."""
        if not (isinstance(rows_per_second, int) and rows_per_second > 0):
            raise StreamingRunError(f"--source {stream}=rate:{rows_per_second}: the rate "
                                    "must be a whole number of rows per second >= 1")
        return cls(stream, "rate", None, rows_per_second)

    @classmethod
    def parse(cls, stream: str, text: str) -> Source:
        """``rate:N`` is the rate source at N rows/s; anything else a directory."""
        if text.startswith("rate:"):
            try:
                return cls.rate(stream, int(text[5:]))
            except ValueError:
                raise StreamingRunError(f"--source {stream}={text}: expected rate:ROWS_PER_"
                                        "SECOND, e.g. rate:200") from None
        return cls.files(stream, text)


def parse_trigger(text: str) -> str | float:
    """``once``, ``available-now`` or a processing-time interval in seconds."""
    if text in TRIGGERS:
        return text
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise StreamingRunError(f"--trigger {text}: expected once, available-now or a "
                                "positive number of seconds")
    return seconds


@dataclass(frozen=True)
class Tolerance:
    """Measured times within ``relative`` of the fastest, or ``absolute_s`` of it, tie."""

    relative: float = 0.10
    absolute_s: float = 0.05

    def __str__(self) -> str:
        return f"{self.relative:.0%} or {self.absolute_s * 1000:.0f} ms"


def measured_hit(seconds: list[float], chosen: int, tolerance: Tolerance) -> bool:
    """Whether plan ``chosen`` was measured fastest, within ``tolerance`` of the fastest."""
    fastest = min(seconds)
    return (seconds[chosen] <= fastest * (1 + tolerance.relative)
            or seconds[chosen] - fastest <= tolerance.absolute_s)


# -- the run -------------------------------------------------------------------------
@dataclass
class RunResult:
    """What a run did: the round log (one row per round ever run in ``out``) and the report."""

    out: Path
    rounds: pd.DataFrame
    summary: dict[str, Any]
    stopped_by: str = "end of input"
    pending: list[int] = field(default_factory=list)


class AdaptiveRun:
    """One query running adaptively on Spark Structured Streaming; see the module docstring."""

    def __init__(self, spark: SparkSession, name: str, query: ContinuousQuery,
                 chart: QueryChart, catalog: Catalog, sources: Mapping[str, Source],
                 out: str | Path, *, window_s: float, trigger: str | float = "available-now",
                 shadow: bool = False, max_rounds: int | None = None,
                 max_files_per_trigger: int | None = None, estimator: str = "sample", d: int = 5,
                 decay: float = 0.5, policy: Mapping[str, Any] | None = None,
                 start: float | None = None, tolerance: Tolerance = Tolerance(),
                 deadline: float | None = None, min_kept: float = 0.0,
                 progress: Callable[[str], None] | None = None):
        """Check everything that can be checked before Spark reads a tuple.

        Parameters
        ----------
        spark : SparkSession
        name : str
            The query's name (the chart's).
        query : ContinuousQuery
            The parsed query; ``chart`` must be its chart.
        chart : QueryChart
            The query's chart (``charts.load(DIR)[name]``).
        catalog : Catalog
            The catalog the chart was built with: its streams' columns type the
            sources, its costs give the model's fidelity in the report.
        sources : Mapping[str, Source]
            One source per stream of the query.
        out : path
            The run's folder: new, empty, or one this query ran in before
            (then the run resumes).
        window_s : float
            The round length W in seconds.
        trigger : {"once", "available-now"} or float
            Spark's trigger; a number is a processing-time interval in seconds.
        shadow : bool
            Also run every other candidate plan on each round and time it.
        max_rounds : int, optional
            Stop once this many rounds have run in ``out`` (earlier runs count).
        max_files_per_trigger : int, optional
            Files per micro-batch of each file source; default every file
            there is (a backlog is one micro-batch, whatever order the files'
            modification times give them).
        estimator, d, decay :
            As :class:`~cqopt.runtime.adaptive.AdaptiveQuery`; the default
            ``"sample"`` chooses each round at its own statistics, measured
            before it runs (the estimators predict only what a round cannot
            measure), an earlier estimator at a prediction from the rounds before.
        policy : Mapping, optional
            More of its options: ``choice``, ``residuals``, ``fallback``,
            ``hysteresis`` (costed with the chart's model on ``catalog``).
        start : float, optional
            The time of round 0's start; default the first micro-batch's
            earliest timestamp.
        tolerance : Tolerance
            When a measured time counts as tied with the fastest.
        deadline : float, optional
            Seconds a round may take. Before each round its plan's seconds are
            predicted by the engine model at the round's statistics (the catalog's
            ``[engine]`` constants); a round predicted to overrun keeps the largest
            share ``p`` of each stream's tuples that fits, sampled at the inputs
            (Babcock et al.'s shedder, RTStream's early drop), and a COUNT's or
            SUM's answer is scaled by ``1/p``. Each round's log says what was shed.
        min_kept : float
            With ``deadline``: the least share of a round's input kept (its least
            QoS); a round that cannot fit even then runs at it, a miss counted.

        Raises
        ------
        StreamingRunError
            A source for a stream not in the query, a stream without a source,
            an option out of range, or an ``out`` cqopt did not write.
        """
        self.spark, self.name, self.query, self.chart = spark, name, query, chart
        self.catalog = catalog
        self.window_s = float(window_s)
        self.trigger, self.shadow = trigger, shadow
        self.max_rounds, self.max_files = max_rounds, max_files_per_trigger
        self.tolerance = tolerance
        say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.said_at = time.monotonic()

        def progress_line(line: str) -> None:  # when the run last said something
            self.said_at = time.monotonic()
            say(line)
        self.progress = progress_line
        # sample[:RATIO]: choose each round at its own statistics (RTStream's sampler plan).
        # The run reads every tuple of the round before it runs it anyway, so the round is
        # measured whole: a sample would save nothing here. The estimators still predict
        # what a round cannot measure.
        self.own_statistics = estimator.startswith("sample")
        if self.own_statistics:
            from cqopt.replay.sampling import parse_sample_ratio

            if parse_sample_ratio(estimator) < 1.0 and ":" in estimator:
                self.progress(f"note: --estimator {estimator}: cqopt run measures each round's "
                              "statistics on all of its tuples (it reads them anyway); the "
                              "ratio is not used")
            estimator = "sample:1"
        self.options = {"estimator": estimator, "d": d, "decay": decay, **(policy or {})}
        if deadline is not None and not (isinstance(deadline, (int, float))
                                         and math.isfinite(deadline) and deadline > 0):
            raise StreamingRunError(f"--deadline {deadline}: needs a number of seconds > 0")
        if not (isinstance(min_kept, (int, float)) and 0 <= min_kept <= 1):
            raise StreamingRunError(f"--min-kept {min_kept}: needs a share in [0, 1]")
        self.deadline, self.min_kept = deadline, float(min_kept)
        if deadline is not None:  # the model that predicts each round's seconds
            from cqopt.costmodel.engine import Engine

            self.engine = Engine(catalog)
        self.in_batch: int | None = None  # the micro-batch being worked on, if one is
        self.unreachable_said = False
        self.streams = tuple(query.stream_names)
        self.sources = _match_sources(sources, self.streams, name)
        if max_rounds is not None and not (isinstance(max_rounds, int) and max_rounds >= 1):
            raise StreamingRunError(f"--max-rounds {max_rounds}: needs a whole number >= 1")
        if max_files_per_trigger is not None and not (
                isinstance(max_files_per_trigger, int) and max_files_per_trigger >= 1):
            raise StreamingRunError(f"max_files_per_trigger {max_files_per_trigger}: needs a "
                                    "whole number >= 1")
        if not (math.isfinite(self.window_s) and self.window_s > 0):
            raise StreamingRunError(f"the round length must be a positive number of seconds, "
                                    f"got {window_s!r}")
        rate = [s.stream for s in self.sources.values() if s.kind == "rate"]
        if rate and trigger in TRIGGERS:
            raise StreamingRunError(f"--source {rate[0]}=rate:...: Spark's rate source never "
                                    f"ends, so it needs a processing-time trigger "
                                    f"(--trigger SECONDS), not {trigger}")
        self.out = Path(out).absolute()  # Spark writes into it: see Source.files
        self.state = self._open_state(start)
        self.adaptive = AdaptiveQuery.costed(
            chart, catalog, **{**self.options,
                               "estimator": "decay" if self.own_statistics else estimator})
        self.records = self._resume()
        self.error: BaseException | None = None
        self.stop_requested = threading.Event()
        self.stopped_by = "end of input"

    # -- the folder and its state ---------------------------------------------------
    def _open_state(self, start: float | None) -> dict[str, Any]:
        state_file = self.out / "state.json"
        identity = {"version": STATE_VERSION, "query": self.name, "sql": self.query.sql,
                    "window_s": self.window_s,
                    "sources": {s: asdict(src) for s, src in self.sources.items()}}
        if self.out.exists() and not self.out.is_dir():
            raise StreamingRunError(f"--out {self.out}: is a file, not a directory")
        if state_file.exists():
            try:
                state = json.loads(state_file.read_text(encoding="utf-8"))
            except (OSError, ValueError) as err:
                raise StreamingRunError(f"--out {self.out}: state.json is unreadable ({err}); "
                                        "use a new --out") from None
            for key, value in identity.items():
                if state.get(key) != value:
                    raise StreamingRunError(
                        f"--out {self.out}: holds a run with another {key} ({state.get(key)!r}, "
                        f"now {value!r}); resume with the same query and sources, or use a "
                        "new --out")
            return state
        if self.out.exists() and any(self.out.iterdir()):
            raise StreamingRunError(f"--out {self.out}: exists and is not a cqopt run folder "
                                    "(no state.json); cqopt leaves it alone: pick a new --out")
        self.out.mkdir(parents=True, exist_ok=True)
        state = {**identity, "start": start, "seen": {}, "late": {}, "untimed": {},
                 "pending": {}, "empty_batches": []}
        _write_json(state_file, state)
        return state

    def _save_state(self) -> None:
        _write_json(self.out / "state.json", self.state)

    def _resume(self) -> list[dict[str, Any]]:
        """The logged rounds, in order; the adaptive query is brought to their end."""
        for folder in ("pending", "results", "log"):
            for scratch in (self.out / folder).glob(".tmp-*"):
                _remove(scratch)  # a killed run's half-written scratch
        records = read_round_log(self.out)
        for i, record in enumerate(records):
            if record["round"] != i:
                raise StreamingRunError(f"--out {self.out}: the round log lacks round {i}; "
                                        "the folder was edited: use a new --out")
            seen = _observed(record, self.adaptive.statistics)
            self.adaptive.step(seen, measured=seen if self.own_statistics else None)
        if records:
            self.progress(f"{self.name}: resuming after round {len(records) - 1}")
        return records

    @property
    def next_round(self) -> int:
        return len(self.records)

    # -- the streaming query ----------------------------------------------------------
    def run(self) -> RunResult:
        """Run until the input ends (``once``/``available-now``), ``max_rounds``, or Ctrl-C.

        Returns
        -------
        RunResult
            Every round logged in ``out`` (earlier runs' too), and the report's
            summary (``report.md`` and ``report.json`` are written).

        Raises
        ------
        StreamingRunError
            A source that does not fit the catalog, or a Spark failure (one line).
        """
        if self.max_rounds is not None and self.next_round >= self.max_rounds:
            self.stopped_by = f"max rounds ({self.max_rounds}) reached before"
            return self.report()
        with spark_errors(f"Spark cannot start the streaming query of {self.name}",
                          StreamingRunError):
            frames = [self._read_stream(src) for src in self.sources.values()]
            stream = frames[0]
            for other in frames[1:]:
                stream = stream.unionByName(other, allowMissingColumns=True)
            writer = (stream.writeStream.foreachBatch(self._batch)
                      .option("checkpointLocation", str(self.out / "checkpoint"))
                      .queryName(f"cqopt-{self.name}-{os.getpid()}"))
            if self.trigger == "once":
                writer = writer.trigger(once=True)
            elif self.trigger == "available-now":
                writer = writer.trigger(availableNow=True)
            else:
                writer = writer.trigger(processingTime=f"{self.trigger} seconds")
            handle = writer.start()
        began = time.monotonic()
        try:
            while handle.isActive:
                if self.stop_requested.is_set():
                    handle.stop()
                    break
                handle.awaitTermination(0.5)
                self._say_waiting(began)
        except KeyboardInterrupt:
            self.stopped_by = "interrupted (Ctrl-C)"
            self.stop_requested.set()
            self.progress(f"{self.name}: interrupted; stopping, every finished round is kept")
            handle.stop()
        except Exception as err:  # StreamingQueryException: the batch's own error first
            if self.error is not None:
                raise self.error from None
            raise StreamingRunError(f"the streaming query of {self.name} failed: "
                                    f"{spark_message(err)}") from None
        if self.error is not None:
            raise self.error
        if self.trigger in TRIGGERS and not self.stop_requested.is_set():
            self._finish_input()
        return self.report()

    def _say_waiting(self, began: float) -> None:
        """Never silent for long: a line after 2 s without one before the first round (the
        streaming query starts, reads its first files), then after 30 s without one."""
        quiet = time.monotonic() - self.said_at
        first = not self.records
        if quiet < (5.0 if first and time.monotonic() - began > 3.0 else
                    2.0 if first else 30.0):
            return
        waited = time.monotonic() - began
        if self.in_batch is not None:
            self.progress(f"{self.name}: working on micro-batch {self.in_batch}: "
                          f"{len(self.records)} rounds run so far, the last {quiet:.0f} s ago")
        else:
            self.progress(f"{self.name}: starting the streaming query and reading its first "
                          f"input, {waited:.0f} s" if first else
                          f"{self.name}: waiting for input: {len(self.records)} rounds run, "
                          f"the last {quiet:.0f} s ago")

    def _read_stream(self, source: Source) -> DataFrame:
        from pyspark.sql import functions as F

        stream = self.catalog.stream(source.stream)
        if source.kind == "rate":
            raw = (self.spark.readStream.format("rate")
                   .option("rowsPerSecond", source.rows_per_second).load())
            seconds = F.unix_micros(F.col("timestamp")) / 1e6
            columns = [F.lit(stream.name).alias("_stream"), seconds.alias("ts")]
            for i, col in enumerate(c for c in stream.columns if c.name.lower() != "ts"):
                value = seconds if col.type == "timestamp" else _rate_column(col.type, i)
                columns.append(value.alias(f"{stream.name}__{col.name}"))
            return raw.select(*columns)
        schema, time_column = self._file_schema(source)
        reader = self.spark.readStream.schema(schema)
        if self.max_files is not None:
            reader = reader.option("maxFilesPerTrigger", self.max_files)
        if source.kind == "csv":
            raw = reader.option("header", True).option("enforceSchema", False).csv(source.path)
        else:
            raw = reader.parquet(source.path)
        have = {f.name.lower(): f for f in schema.fields}
        ts = F.col(f"`{time_column.name}`")
        ts = (F.unix_micros(ts.cast("timestamp")) / 1e6 if "timestamp" in
              time_column.dataType.simpleString() else ts.cast("double"))
        columns = [F.lit(stream.name).alias("_stream"), ts.alias("ts")]
        for col in stream.columns:
            if col.name.lower() == "ts":
                continue
            target = SPARK_TYPES[col.type]
            field_ = have.get(col.name.lower())
            if field_ is None and col.type == "timestamp":
                field_ = time_column
            value = (F.lit(None).cast(target) if field_ is None else
                     F.unix_micros(F.col(f"`{field_.name}`").cast("timestamp")) / 1e6
                     if "timestamp" in field_.dataType.simpleString()
                     else F.col(f"`{field_.name}`").cast(target))
            columns.append(value.alias(f"{stream.name}__{col.name}"))
        return raw.select(*columns)

    def _file_schema(self, source: Source) -> tuple[StructType, Any]:
        """The directory's schema, checked against the catalog; and its time column."""
        from pyspark.sql.types import DoubleType, StructField, StructType

        stream = self.catalog.stream(source.stream)
        where = f"--source {source.stream}={source.path}"
        time_names = [c.name for c in stream.columns if c.type == "timestamp"][:1]
        time_names += list(_TIME_NAMES)
        # Every file readable and of the stream's layout, before Spark reads one.
        _check_layouts(source, _file_columns(source), [c.name for c in stream.columns],
                       time_names)
        if source.kind == "parquet":
            schema = self.spark.read.parquet(source.path).schema
        else:
            first = min(p for p in Path(source.path).iterdir()
                        if p.name.lower().endswith((".csv", ".csv.gz")))
            header = _csv_header(first)
            fields = []
            for name in header:
                col = stream.column(name)
                fields.append(StructField(name, DoubleType() if col is None or
                                          col.type == "timestamp" else
                                          _spark_type(SPARK_TYPES[col.type])))
            schema = StructType(fields)
        names = [f.name for f in schema.fields]
        by_lower = {f.name.lower(): f for f in schema.fields}
        time_column = next((by_lower[n.lower()] for n in time_names if n.lower() in by_lower),
                           None)
        if time_column is None:
            raise StreamingRunError(f"{where}: no time column (one of {', '.join(time_names)}) "
                                    f"among its columns {', '.join(names)}")
        unknown = [n for n in names if stream.column(n) is None and n != time_column.name]
        if unknown:
            raise StreamingRunError(
                f"{where}: column {unknown[0]} is not a column of stream {stream.name} in the "
                f"catalog (it has {', '.join(c.name for c in stream.columns)}); fix the "
                "catalog or the files")
        needed = [c for c in self.query.required_columns(stream.name)
                  if c.lower() not in by_lower
                  and not (c.lower() == "ts" or (stream.column(c) is not None
                                                 and stream.column(c).type == "timestamp"))]
        if needed:
            raise StreamingRunError(f"{where}: has no column {', '.join(needed)}, which query "
                                    f"{self.name} reads; its columns are {', '.join(names)}")
        return schema, time_column

    # -- one micro-batch ----------------------------------------------------------------
    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        stopping = self.stop_requested.is_set()
        self.in_batch = batch_id
        try:
            # Taken even when stopping: Spark commits the batch when this returns, so
            # its tuples of rounds not yet run must be kept for a later run.
            with spark_errors(f"Spark failed on micro-batch {batch_id} of {self.name}",
                              StreamingRunError, hint=_file_hint):
                self._take(batch, batch_id)
        except BaseException as err:
            # A batch begun after the stop was asked for is interrupted by the stop itself;
            # it is not committed, so a later run reads it again: no error of the run's.
            if not stopping:
                self.error = self.error or err
            self.stop_requested.set()
            raise
        finally:
            self.in_batch = None

    def _take(self, batch: DataFrame, batch_id: int) -> None:
        """Run the rounds the batch completes; stage its tuples of rounds still open.

        A batch of at most :data:`LOCAL_TUPLES` tuples (a live round, a short
        backlog) is collected to the driver in one Spark job, as Arrow: its
        time spans, dropped tuples, the rounds' statistics and the staging of
        open rounds are then worked out here, without another job, and each
        plan is one job. A larger batch takes one job for the spans, one for
        the statistics, one per plan and one to stage.
        """
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from cqopt.spark.round_stats import assign_round

        batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            start = self.state["start"]
            # Rounds this batch already ran before a kill: its replay skips them quietly;
            # tuples of rounds run by earlier batches are late.
            replayed = [r["round"] for r in self.records if r.get("batch") == batch_id]
            cut = min(replayed) if replayed else self.next_round
            local = _collect(batch, LOCAL_TUPLES)
            if local is not None:
                spans = _local_spans(local, start, self.window_s, cut)
            else:
                late = (F.lit(0) if start is None else
                        F.when(assign_round(F.col("ts"), start, self.window_s) < cut, 1)
                        .otherwise(0))
                spans = {row["_stream"]: row.asDict() for row in batch.groupBy("_stream").agg(
                    F.min("ts").alias("lo"), F.max("ts").alias("hi"),
                    F.sum(F.when(F.col("ts").isNull(), 1).otherwise(0)).alias("untimed"),
                    F.sum(late).alias("late")).collect()}
            if not spans:
                self.progress(f"{self.name}: micro-batch {batch_id} holds no tuple")
                if batch_id not in self.state["empty_batches"]:
                    self.state["empty_batches"].append(batch_id)
                    self._save_state()
                return
            self._count_dropped(batch_id, spans)
            timed = {s: row for s, row in spans.items() if row["hi"] is not None}
            if not timed:
                return
            if start is None:  # the first tuples fix round 0
                start = self.state["start"] = float(min(r["lo"] for r in timed.values()))
            for stream, row in timed.items():
                seen = self.state["seen"].get(stream)
                self.state["seen"][stream] = max(float(row["hi"]), -math.inf if seen is None
                                                 else seen)
            self._save_state()  # before any round runs: a resumed run needs round 0's start
            tagged = batch.where(F.col("ts").isNotNull()).withColumn(
                "_round", assign_round(F.col("ts"), start, self.window_s))
            if local is not None:
                local = _with_rounds(local, start, self.window_s)
            self._run_rounds(tagged, batch_id, self._complete_round(), local)
            top = max(round_of(float(r["hi"]), start, self.window_s) for r in timed.values())
            if top >= self.next_round:
                self._stage(tagged, batch_id, top, local)
            self._drop_finished_stages()
            self._save_state()
            if self._reached_max():
                # Asked only now: a stop during the batch would interrupt its staging.
                self.stop_requested.set()
        finally:
            batch.unpersist()

    def _count_dropped(self, batch_id: int, spans: Mapping[str, Any]) -> None:
        """Late tuples (of rounds already run) and tuples without a time: counted per batch."""
        late = int(sum(int(r["late"] or 0) for r in spans.values()))
        untimed = {s: int(r["untimed"] or 0) for s, r in spans.items() if r["untimed"]}
        key = str(batch_id)
        if late:
            self.state["late"][key] = late
            self.progress(f"{self.name}: micro-batch {batch_id}: {late} tuples of rounds that "
                          "already ran arrived late; not run (counted in the report)")
        if untimed:
            self.state["untimed"][key] = sum(untimed.values())
            for stream, n in untimed.items():
                self.progress(f"{self.name}: micro-batch {batch_id}: {n} tuples of {stream} "
                              "have no time (a file of another schema?); not run (counted in "
                              "the report)")

    def _complete_round(self) -> int:
        """The first round not known complete: every stream has shown a later time."""
        seen = self.state["seen"]
        if any(s not in seen for s in self.streams):
            return self.next_round  # a stream has shown no tuple yet
        watermark = min(seen[s] for s in self.streams)
        return round_of(watermark, self.state["start"], self.window_s)

    def _reached_max(self) -> bool:
        """Whether ``max_rounds`` have run (the stop is asked for once the batch is kept)."""
        if self.max_rounds is not None and self.next_round >= self.max_rounds:
            self.stopped_by = f"max rounds ({self.max_rounds})"
            return True
        return False

    # -- pending tuples ---------------------------------------------------------------
    def _stage(self, tagged: DataFrame, batch_id: int, top: int, local=None) -> None:
        """Keep the batch's tuples of rounds not yet run, as Parquet keyed by batch id.

        Spark commits the batch once it is handed back, so these tuples exist
        nowhere else Spark would read again; a stage is removed once every
        round it holds has run. A batch collected to the driver (``local``, an
        Arrow table) is written from there, without a Spark job.
        """
        from pyspark.sql import functions as F

        scratch = self.out / "pending" / f".tmp-batch-{batch_id:06d}"
        final = self.out / "pending" / f"batch-{batch_id:06d}"
        _remove(scratch)
        if local is not None:
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            scratch.mkdir(parents=True)
            keep = local.filter(pc.greater_equal(local["_round"], self.next_round))
            pq.write_table(keep, scratch / "part-00000.parquet")
        else:
            tagged.where(F.col("_round") >= self.next_round).write.parquet(str(scratch))
        _replace(scratch, final)
        self.state["pending"][str(batch_id)] = [self.next_round, top]

    def _staged(self, first: int, stop: int) -> list[str]:
        """The stages holding tuples of rounds ``first <= r < stop``."""
        paths = []
        for batch_id, (lo, hi) in sorted(self.state["pending"].items()):
            if lo < stop and hi >= first:
                path = self.out / "pending" / f"batch-{int(batch_id):06d}"
                if not path.exists():
                    raise StreamingRunError(
                        f"--out {self.out}: the pending tuples of rounds {lo}..{hi} "
                        f"({path.name}) were deleted; they cannot be run again: use a new "
                        "--out")
                paths.append(str(path))
        return paths

    def _drop_finished_stages(self) -> None:
        for batch_id, (_, hi) in list(self.state["pending"].items()):
            if hi < self.next_round:
                _remove(self.out / "pending" / f"batch-{int(batch_id):06d}")
                del self.state["pending"][batch_id]

    def _finish_input(self) -> None:
        """The input has ended: every round up to the last tuple's runs, the last one too."""
        seen = self.state["seen"]
        if self.state["start"] is None or not seen:
            return
        top = max(round_of(t, self.state["start"], self.window_s) for t in seen.values())
        if top < self.next_round:
            return
        with spark_errors(f"Spark failed on the last rounds of {self.name}",
                          StreamingRunError, hint=_file_hint):
            self._run_rounds(None, None, top + 1)
            self._drop_finished_stages()
            self._save_state()
        self._reached_max()

    # -- rounds -------------------------------------------------------------------------
    def _round_tuples(self, tagged: DataFrame | None, first: int,
                      stop: int) -> dict[str, DataFrame]:
        """Each stream's tuples of rounds ``first <= r < stop``: the batch's and the stages'.

        Columns ``ts``, ``_round`` and the stream's catalog columns.
        """
        from pyspark.sql import functions as F

        parts = [] if tagged is None else [tagged]
        staged = self._staged(first, stop)
        if staged:
            # The stages hold the batch's layout: given it, Spark infers no schema (a job).
            reader = self.spark.read if tagged is None else self.spark.read.schema(tagged.schema)
            parts.append(reader.parquet(*staged))
        frames = {}
        for stream_name in self.streams:
            columns = [c for c in self.catalog.stream(stream_name).columns
                       if c.name.lower() != "ts"]
            selected = [part.where((F.col("_stream") == stream_name)
                                   & F.col("_round").between(first, stop - 1))
                        .select("ts", "_round", *[F.col(f"`{stream_name}__{c.name}`")
                                                  .alias(c.name) for c in columns])
                        for part in parts]
            if selected:
                frame = selected[0]
                for other in selected[1:]:
                    frame = frame.unionByName(other)
            else:
                frame = self.spark.createDataFrame([], self._stream_schema(stream_name))
            frames[stream_name] = frame
        return frames

    def _frames_from(self, rows) -> dict[str, DataFrame]:
        """Each stream's tuples, as :meth:`_round_tuples` gives them, from the rounds' tuples
        on the driver (an Arrow table): handed to Spark whole, with no file to list or read."""
        import pyarrow as pa
        import pyarrow.compute as pc

        frames = {}
        for stream_name in self.streams:
            mine = rows.filter(pc.equal(rows["_stream"], stream_name))
            columns = {"ts": mine["ts"], "_round": mine["_round"]}
            columns.update((c.name, mine[f"{stream_name}__{c.name}"])
                           for c in self.catalog.stream(stream_name).columns
                           if c.name.lower() != "ts")
            frames[stream_name] = self.spark.createDataFrame(pa.table(columns))
        return frames

    def _local_rounds(self, local, first: int, stop: int, finishing: bool):
        """The tuples of rounds ``first <= r < stop`` as one Arrow table on the driver: the
        batch's collected tuples (``local``) and the stages'. None when they are more than
        :data:`LOCAL_TUPLES`, or a batch was too large to collect (``local`` None unless
        the input is ``finishing``, when every tuple left is staged)."""
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        if local is None and not finishing:
            return None

        def inside(rounds):
            return pc.and_(pc.greater_equal(rounds, first), pc.less(rounds, stop))

        # Only these rounds' tuples count against the limit: a batch mostly holds the next
        # round (a round completes when a later tuple arrives), which waits for later.
        staged = self._staged(first, stop)
        mine = None if local is None else local.filter(inside(local["_round"]))
        held = (0 if mine is None else mine.num_rows) + sum(
            pc.sum(inside(pq.read_table(p, columns=["_round"])["_round"])).as_py() or 0
            for p in staged)
        if held > LOCAL_TUPLES:
            return None
        parts = ([] if mine is None else [mine]) + [
            (t := pq.read_table(p)).filter(inside(t["_round"])) for p in staged]
        if not parts:
            return None
        return (pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1
                else parts[0])

    def _stream_schema(self, stream_name: str) -> StructType:
        from pyspark.sql.types import DoubleType, LongType, StructField, StructType

        stream = self.catalog.stream(stream_name)
        return StructType([StructField("ts", DoubleType()), StructField("_round", LongType())]
                          + [StructField(c.name, _spark_type(SPARK_TYPES[c.type]))
                             for c in stream.columns if c.name.lower() != "ts"])

    def _run_rounds(self, tagged: DataFrame | None, batch_id: int | None, stop: int,
                    local=None) -> None:
        """Run rounds ``next_round <= r < stop`` (up to ``max_rounds``).

        Their statistics come from their tuples on the driver when at most
        :data:`LOCAL_TUPLES` (else from one Spark job over all of them), and the
        chart chooses each round's plan in round order (Algorithm 2). One
        round is one job: its plan's result written, its row count counted on
        the way (no re-read). Several rounds at once (a backlog, the end of
        a finite input) without ``shadow`` are grouped by the plan chosen for
        each, and each plan runs once over its rounds, the round a key of
        every join and grouping (:func:`to_spark`'s ``round_column``): one job
        per plan instead of one per round, each round's rows the same.
        """
        from pyspark.sql import functions as F

        from cqopt.spark.round_stats import round_statistics

        newest = stop - 1  # the newest complete round, which the lag is measured against
        if self.max_rounds is not None:
            stop = min(stop, self.max_rounds)
        first = self.next_round
        if stop <= first:
            return
        rows = self._local_rounds(local, first, stop, finishing=tagged is None)
        tuples = (self._frames_from(rows) if rows is not None
                  and rows.num_rows <= LOCAL_FRAME_TUPLES
                  else self._round_tuples(tagged, first, stop))
        # What measuring the rounds' statistics costs (RTStream's sampler cost), per round.
        began = time.perf_counter()
        if rows is not None:  # few tuples: their statistics worked out here, no Spark job
            observed = _local_statistics(self.query, rows, self.streams, first, stop,
                                         self.window_s)
        else:
            table = round_statistics(self.query, tuples, self.window_s,
                                     start=self.state["start"], rounds=stop)
            observed = {r: {name: float(table[name].iloc[r])
                            for name in self.query.statistics} for r in range(first, stop)}
        statistics_s = (time.perf_counter() - began) / (stop - first)
        if self.shadow or self.deadline is not None or stop - first == 1:
            for r in range(first, stop):
                self._run_round(r, tuples, observed[r], batch_id,
                                lag_s=(newest - r) * self.window_s, statistics_s=statistics_s)
            return
        outcomes = {r: self._choose(observed[r]) for r in range(first, stop)}
        groups: dict[str, list[int]] = {}
        for r, outcome in outcomes.items():
            groups.setdefault(outcome.plan_id, []).append(r)
        written: dict[int, tuple[Path | None, float, int]] = {}  # part, seconds, group
        schemas = {}
        for index, rounds in enumerate(groups.values()):
            plan = outcomes[rounds[0]].plan
            frames = {s: df.where(F.col("_round").isin(rounds)) for s, df in tuples.items()}
            frame = to_spark(plan, frames, query=self.query, round_column="_round")
            scratch = self.out / "results" / f".tmp-group-{first:06d}-{index}"
            began = time.perf_counter()
            _remove(scratch)
            _write_by_round(frame, scratch)
            share = (time.perf_counter() - began) / len(rounds)
            schemas[index] = frame.drop("_round").schema
            for r in rounds:
                part = scratch / f"_round={r}"
                written[r] = (part if part.exists() else None, share, index)
        # Results moved and rounds logged in round order: a kill leaves a whole prefix.
        for r in range(first, stop):
            part, seconds, index = written[r]
            final = self.out / "results" / f"round-{r:06d}.parquet"
            rows_out = _adopt_round(part, final, schemas[index])
            self._log_round(r, outcomes[r], observed[r], rows_out, seconds, {}, batch_id,
                            lag_s=(newest - r) * self.window_s,
                            grouped=len(groups[outcomes[r].plan_id]),
                            statistics_s=statistics_s)
        for index in range(len(groups)):
            _remove(self.out / "results" / f".tmp-group-{first:06d}-{index}")

    def _choose(self, observed: dict[str, float]):
        """Algorithm 2's step for a round observed as ``observed``: its outcome.

        With ``sample`` (the round's own statistics), the plan is chosen at
        them; otherwise at the estimate from earlier rounds. A round without
        tuples defines no selectivity: the estimators see what was observed
        (as in :func:`cqopt.replay.replay.replay`).
        """
        seen = _observed({"observed": observed}, self.adaptive.statistics)
        return self.adaptive.step(seen, measured=seen if self.own_statistics else None)

    def _run_round(self, r: int, tuples: dict[str, DataFrame], observed: dict[str, float],
                   batch_id: int | None, lag_s: float, statistics_s: float = 0.0) -> None:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        outcome = self._choose(observed)
        frames = {s: df.where(F.col("_round") == r).drop("_round") for s, df in tuples.items()}
        shed = self._shed(r, outcome.plan, observed)
        if shed["kept"] < 1.0:  # random shedders at the inputs, as early as possible
            frames = {s: df.sample(withReplacement=False, fraction=shed["kept"], seed=r)
                      for s, df in frames.items()}
        if self.shadow:  # every candidate reads the round: read it once
            frames = {s: df.persist(StorageLevel.MEMORY_AND_DISK) for s, df in frames.items()}
        try:
            began = time.perf_counter()
            result = to_spark(outcome.plan, frames, query=self.query)
            if 0.0 < shed["kept"] < 1.0:  # kept 0: the whole round shed, nothing to scale
                result = scaled_answers(result, outcome.plan, self.query, shed["kept"])
            rows_out = _write_result(result, self.out / "results" / f"round-{r:06d}.parquet")
            seconds = time.perf_counter() - began
            shadow = self._shadow(frames, r) if self.shadow else {}
        finally:
            if self.shadow:
                for frame in frames.values():
                    frame.unpersist()
        self._log_round(r, outcome, observed, rows_out, seconds, shadow, batch_id, lag_s,
                        statistics_s=statistics_s, shed=shed)

    def _shed(self, r: int, plan, observed: dict[str, float]) -> dict[str, Any]:
        """What the deadline asks of round ``r``: its predicted seconds at full input, the
        share kept (1: nothing shed) and the tuples that drops (see ``deadline``)."""
        if self.deadline is None:
            return {"kept": 1.0}
        from cqopt.runtime.overload.simulate import simulate_rounds

        engine = self.engine
        stats = {k: np.array([v]) for k, v in observed.items()}
        if any(not math.isfinite(observed.get(k, math.nan)) for k in engine.statistics(plan)):
            return {"kept": 1.0, "predicted_s": None}  # a stream without tuples: nothing to shed
        rates = [rate_name(s) for s in plan.join_order]
        scan = self.catalog.engine.scan

        def predict(at: Mapping[str, np.ndarray]) -> np.ndarray:
            # Spark samples a round after reading it: the tuples shed are still scanned.
            unread = sum(stats[k] - at[k] for k in rates) * self.window_s
            return np.asarray(engine.seconds(plan, at)) + scan * unread

        run = simulate_rounds(stats, predict, self.deadline, self.window_s,
                              min_kept=self.min_kept)
        if run.unreachable[0] and not self.unreachable_said:
            self.unreachable_said = True
            least = (f"{self.min_kept:.0%} of their input" if self.min_kept > 0 else
                     "none of their input (whole rounds shed: --min-kept sets the least "
                     "share a round keeps)")
            self.progress(f"{self.name}: round {r}: even keeping {self.min_kept:.0%} of its "
                          f"input, {plan.id} is predicted at {run.predicted_after[0]:.3f} s, "
                          f"over the {self.deadline:g} s deadline; such rounds run at the "
                          f"least share allowed, {least}, and count as misses (said once)")
        return {"kept": float(run.kept[0]), "predicted_s": float(run.predicted[0]),
                "predicted_after_s": float(run.predicted_after[0]),
                "dropped": float(run.dropped[0]), "unreachable": bool(run.unreachable[0])}

    def _log_round(self, r: int, outcome, observed: dict[str, float], rows_out: int,
                   seconds: float, shadow: dict[str, float], batch_id: int | None,
                   lag_s: float, grouped: int = 1, statistics_s: float = 0.0,
                   shed: dict[str, Any] | None = None) -> None:
        """Log a round whose result is written: from here on it counts as run."""
        round_start = self.state["start"] + r * self.window_s
        # The round's tuples per stream: its observed rate times W.
        rows_in = {s: int(round(observed[rate_name(s)] * self.window_s)) for s in self.streams}
        record = {
            "round": r, "start": round_start, "end": round_start + self.window_s,
            "rows_in": rows_in, "empty": not any(rows_in.values()),
            "observed": {k: _json_float(v) for k, v in observed.items()},
            "estimate": {k: _json_float(v) for k, v in outcome.estimate.items()},
            "cell": list(outcome.cell), "plan": outcome.plan_id,
            "chart_plan": outcome.chart_plan_id, "move": outcome.move,
            "switch": outcome.switch, "rows_out": rows_out, "plan_seconds": seconds,
            "statistics_seconds": statistics_s,
            "deadline": None if self.deadline is None else {
                "seconds": self.deadline, **(shed or {"kept": 1.0}),
                "missed": seconds > self.deadline},
            "grouped_rounds": grouped, "shadow_seconds": shadow, "batch": batch_id,
            "lag_s": lag_s, "finished_at": time.time(),
        }
        _write_json(self.out / "log" / f"round-{r:06d}.json", record)
        self.records.append(record)
        growth = lag_growth([rec.get("lag_s", 0.0) for rec in self.records[-LAG_ROUNDS - 1:]])
        if growth >= LAG_ROUNDS:
            self.progress(f"{self.name}: warning: the lag grew {growth} rounds in a row, to "
                          f"{lag_s:.1f} s behind the newest complete round: the run does not "
                          "keep up with its input")
        note = " (no tuples)" if record["empty"] else ""
        fastest = f", fastest {min(shadow, key=shadow.get)}" if shadow else ""
        group = f" (one job for {grouped} rounds of this plan)" if grouped > 1 else ""
        if shed and shed["kept"] < 1.0:
            group += (f", {shed['kept']:.1%} of its input kept for the {self.deadline:g} s "
                      f"deadline ({shed['dropped']:,.0f} tuples shed)")
        self.progress(f"{self.name}: round {r}{note}: {outcome.plan_id}"
                      f"{' (switch)' if outcome.switch else ''}, {rows_out} rows out in "
                      f"{seconds:.3f} s{group}{fastest}")

    def _shadow(self, frames: dict[str, DataFrame], r: int) -> dict[str, float]:
        """Every candidate's wall time on the round, results discarded (Spark's noop sink).

        The order rotates by round, so no plan always runs first (cold) or last.
        """
        plans = list(self.chart.plans)
        shift = r % len(plans)
        times = {}
        for plan in plans[shift:] + plans[:shift]:
            began = time.perf_counter()
            to_spark(plan, frames, query=self.query).write.format("noop").mode(
                "overwrite").save()
            times[plan.id] = time.perf_counter() - began
        return {p.id: times[p.id] for p in plans}

    # -- the report ---------------------------------------------------------------------
    def report(self) -> RunResult:
        """Write ``rounds.csv``, ``report.json`` and ``report.md`` for every logged round."""
        rounds = rounds_table(self.records)
        summary = summarize(self.name, self.chart, self.catalog, self.records,
                            tolerance=self.tolerance, **self.options)
        seen = self.state["seen"]
        pending = []
        if self.state["start"] is not None and seen:
            top = round_of(max(seen.values()), self.state["start"], self.window_s)
            pending = list(range(self.next_round, top + 1))
        summary.update({"stopped_by": self.stopped_by, "pending_rounds": pending,
                        "late_tuples": int(sum(self.state["late"].values())),
                        "untimed_tuples": int(sum(self.state["untimed"].values())),
                        "empty_micro_batches": len(self.state["empty_batches"]),
                        "window_s": self.window_s, "start": self.state["start"]})
        for alarm in summary.get("alarms", []):
            self.progress(f"{self.name}: warning: {alarm['message']}")
        _write_text(self.out / "rounds.csv", rounds.to_csv(index=False))
        _write_json(self.out / "report.json", summary)
        _write_text(self.out / "report.md", report_markdown(summary))
        return RunResult(self.out, rounds, summary, self.stopped_by, pending)


# -- the round log and its summary -------------------------------------------------------
def lag_growth(lags: list[float]) -> int:
    """How many rounds in a row, up to the last, the lag grew.

    >>> lag_growth([0.0, 1.0, 0.0, 1.0, 2.0, 3.0]), lag_growth([2.0, 1.0]), lag_growth([])
    (3, 0, 0)
    """
    grew = 0
    for before, after in zip(lags[::-1][1:], lags[::-1]):
        if not after > before:
            break
        grew += 1
    return grew



def read_round_log(out: str | Path) -> list[dict[str, Any]]:
    """The round records of a run folder, in round order (one per round)."""
    records = []
    for path in sorted((Path(out) / "log").glob("round-*.json")):
        records.append(json.loads(path.read_text(encoding="utf-8")))
    return sorted(records, key=lambda r: r["round"])


def rounds_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per round: flat columns (``observed:rate.S``, ``shadow:PLAN``, ...)."""
    rows = []
    for rec in records:
        row = {k: v for k, v in rec.items() if not isinstance(v, (dict, list))}
        row["cell"] = ",".join(map(str, rec["cell"]))
        for group in ("rows_in", "observed", "estimate", "shadow_seconds", "deadline"):
            prefix = {"shadow_seconds": "shadow", "rows_in": "rows_in"}.get(group, group)
            row.update({f"{prefix}:{k}": v for k, v in (rec.get(group) or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def summarize(name: str, chart: QueryChart, catalog: Catalog, records: list[dict[str, Any]],
              *, tolerance: Tolerance = Tolerance(), **policy: Any) -> dict[str, Any]:
    """Plans run, switches, times; measured fidelity and regret; the model's fidelity.

    The model's fidelity replays the same rounds' observed statistics through
    :func:`cqopt.replay.replay.replay` (the chart's model costs every plan at
    each round's actual statistics), with the run's estimator and ``policy``
    (:func:`~cqopt.replay.replay.replay`'s options), so it judges the same
    choices the run made.
    """
    from cqopt.replay.replay import replay

    out: dict[str, Any] = {"query": name, "rounds": len(records),
                           "empty_rounds": sum(r["empty"] for r in records),
                           "tolerance": str(tolerance),
                           "plans_run": {}, "switches": sum(r["switch"] for r in records),
                           "moves": sum(r["move"] for r in records),
                           "plan_seconds_total": float(sum(r["plan_seconds"] for r in records)),
                           # older logs lack it: their statistics' cost is unknown, not 0
                           "statistics_seconds_total": float(sum(
                               r.get("statistics_seconds", math.nan) for r in records)),
                           "rows_out_total": int(sum(r["rows_out"] for r in records))}
    out["policy"] = {k: ("none" if v is None else str(v)) for k, v in policy.items()}
    lags = [float(r.get("lag_s") or 0.0) for r in records]
    out["lag_s"] = {"last": lags[-1] if lags else 0.0, "highest": max(lags, default=0.0)}
    out["lag_warnings"] = sum(lag_growth(lags[max(0, i - LAG_ROUNDS):i + 1]) >= LAG_ROUNDS
                              for i in range(len(lags)))
    for rec in records:
        out["plans_run"][rec["plan"]] = out["plans_run"].get(rec["plan"], 0) + 1
    bounded = [r["deadline"] for r in records if r.get("deadline")]
    if bounded:  # what the deadline cost: rounds late (measured), rounds and tuples shed
        tuples = sum(sum(r["rows_in"].values()) for r in records if r.get("deadline"))
        out["deadline"] = {
            "seconds": bounded[-1]["seconds"], "rounds": len(bounded),
            "missed": sum(d["missed"] for d in bounded),
            "shed_rounds": sum(d["kept"] < 1.0 for d in bounded),
            "unreachable_rounds": sum(bool(d.get("unreachable")) for d in bounded),
            "tuples_dropped": float(sum(d.get("dropped", 0.0) for d in bounded)),
            "tuples": int(tuples)}
    if not records:
        return out
    observed = pd.DataFrame([{"round": r["round"], "start": r["start"],
                              **{k: (math.nan if v is None else v)
                                 for k, v in r["observed"].items()}} for r in records])
    model = replay(name, chart, catalog, observed, **policy)
    # Statistics the chart does not cover in more than 10% of the rounds (fidelity's alarms).
    out["alarms"] = model.summary.get("alarms", [])
    out["model"] = {"fidelity": model.summary["fidelity"], "regret": model.summary["regret"],
                    "undefined_rounds": model.summary["undefined_rounds"],
                    "optimal": model.rounds["optimal"].tolist()}
    shadowed = [r for r in records if r["shadow_seconds"]]
    if not shadowed:
        return out
    plans = list(shadowed[0]["shadow_seconds"])
    times = np.array([[r["shadow_seconds"][p] for p in plans] for r in shadowed])
    chosen = np.array([plans.index(r["plan"]) for r in shadowed])
    rows = np.arange(len(shadowed))
    fastest = times.min(axis=1)
    hits = [measured_hit(list(t), c, tolerance) for t, c in zip(times, chosen)]
    per_plan = times.sum(axis=0)
    model_hit = dict(zip(model.rounds["round"], model.rounds["hit"]))
    model_hits = np.array([model_hit.get(r["round"], np.nan) for r in shadowed], dtype=float)
    out["measured"] = {
        "rounds": len(shadowed),
        "fidelity": float(np.mean(hits)),
        "regret": float(np.mean(times[rows, chosen] / fastest - 1)),
        "seconds_lost": float(np.sum(times[rows, chosen] - fastest)),
        "model_fidelity_same_rounds": (float(np.nanmean(model_hits))
                                       if np.isfinite(model_hits).any() else math.nan),
        "fastest": [plans[i] for i in times.argmin(axis=1)],
        "total_seconds": {
            "adaptive": float(times[rows, chosen].sum()),
            "oracle": float(fastest.sum()),
            "best_static": float(per_plan.min()), "best_static_plan": plans[per_plan.argmin()],
            "worst_static": float(per_plan.max()),
            "worst_static_plan": plans[per_plan.argmax()],
            "per_plan": dict(zip(plans, map(float, per_plan)))},
    }
    return out


def report_markdown(summary: dict[str, Any]) -> str:
    """The run report as Markdown."""
    s = summary
    estimator = s.get("policy", {}).get("estimator", "?")
    lines = [f"# cqopt run report: {s['query']}", "",
             f"- rounds run: {s['rounds']} ({s['empty_rounds']} without tuples); stopped by "
             f"{s.get('stopped_by', '?')}; rounds pending (incomplete): "
             f"{len(s.get('pending_rounds', []))}; late tuples: {s.get('late_tuples', 0)}; "
             f"tuples without a time: {s.get('untimed_tuples', 0)}",
             *[f"- **the chart does not cover the data**: {a['message']}"
               for a in s.get("alarms", [])],
             "- policy: " + ", ".join(f"{k} {v}" for k, v in s.get("policy", {}).items()),
             "- plans run: " + ", ".join(f"{p} x{n}" for p, n in s["plans_run"].items()),
             f"- lag behind the newest complete round: last {s['lag_s']['last']:.1f} s, "
             f"highest {s['lag_s']['highest']:.1f} s; rounds where it had grown "
             f"{LAG_ROUNDS} rounds in a row: {s['lag_warnings']}",
             f"- moves: {s['moves']}, switches: {s['switches']}",
             f"- chosen plans' wall time (result written to Parquet): "
             f"{s['plan_seconds_total']:.3f} s; rows out: {s['rows_out_total']}",
             f"- measuring each round's statistics (the estimator {estimator}): "
             f"{s['statistics_seconds_total']:.3f} s in all, "
             f"{_share(s['statistics_seconds_total'], s['plan_seconds_total'])} of the "
             "chosen plans' time"]
    if "deadline" in s:
        d = s["deadline"]
        lines.append(f"- deadline {d['seconds']:g} s per round: {d['missed']} of {d['rounds']} "
                     f"rounds took longer (measured); {d['shed_rounds']} rounds shed "
                     f"{d['tuples_dropped']:,.0f} of {d['tuples']:,} tuples at their inputs "
                     f"(COUNT and SUM answers scaled by 1/kept); "
                     f"{d['unreachable_rounds']} rounds could not fit even at the least "
                     "share kept")
    if "model" in s:
        lines.append(f"- model fidelity (the chart's model at the observed statistics): "
                     f"{s['model']['fidelity']:.3f}, regret {s['model']['regret']:.3f}")
    m = s.get("measured")
    if m:
        t = m["total_seconds"]
        lines += [f"- measured fidelity (chosen plan measured fastest within {s['tolerance']}): "
                  f"{m['fidelity']:.3f} over {m['rounds']} shadowed rounds; model fidelity on "
                  f"the same rounds {m['model_fidelity_same_rounds']:.3f}",
                  f"- measured regret (mean time over the fastest): {m['regret']:.3f}; "
                  f"{m['seconds_lost']:.3f} s lost",
                  "", "| total time (noop sink) | seconds |", "|---|---|",
                  f"| adaptive chart | {t['adaptive']:.3f} |",
                  f"| fastest per round (oracle) | {t['oracle']:.3f} |",
                  f"| best static plan ({t['best_static_plan']}) | {t['best_static']:.3f} |",
                  f"| worst static plan ({t['worst_static_plan']}) | {t['worst_static']:.3f} |"]
    return "\n".join(lines) + "\n"


# -- helpers -----------------------------------------------------------------------------
def _match_sources(sources: Mapping[str, Source], streams: tuple[str, ...],
                   name: str) -> dict[str, Source]:
    by_lower = {s.lower(): s for s in streams}
    matched: dict[str, Source] = {}
    for key, source in sources.items():
        stream = by_lower.get(key.lower())
        if stream is None:
            raise StreamingRunError(f"--source {key}=...: query {name} reads no stream {key}; "
                                    f"its streams are {', '.join(streams)}")
        matched[stream] = Source(stream, source.kind, source.path, source.rows_per_second)
    missing = [s for s in streams if s not in matched]
    if missing:
        raise StreamingRunError(f"no --source for stream{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)} of query {name}; pass --source "
                                f"{missing[0]}=DIR")
    return matched


def _observed(record: dict[str, Any], names: tuple[str, ...]) -> dict[str, float]:
    return {k: float(v) for k, v in record["observed"].items()
            if k in names and v is not None and not math.isnan(v)}


def _rate_column(kind: str, i: int):
    from pyspark.sql import functions as F

    value = F.col("value")
    if kind in ("int", "long"):
        return F.pmod(F.xxhash64(value, F.lit(i)), F.lit(RATE_DOMAIN)) + 1
    if kind == "double":
        return value.cast("double")
    if kind == "bool":
        return value % 2 == 0
    return value.cast("string")


def _spark_type(name: str):
    from pyspark.sql import types as T

    return {"long": T.LongType(), "double": T.DoubleType(), "boolean": T.BooleanType(),
            "string": T.StringType()}[name]


def _file_columns(source: Source) -> dict[str, list[str]]:
    """Each file of a source directory -> its columns (a Parquet footer, a CSV header).

    Raises
    ------
    StreamingRunError
        A file that is not readable Parquet (corrupt, truncated): Spark would
        fail on it only when its micro-batch runs.
    """
    import pyarrow.parquet as pq

    layouts = {}
    for path in sorted(Path(source.path).iterdir()):
        name = path.name.lower()
        if name.startswith((".", "_")):
            continue
        if not trace_formats()[source.kind].matches(path):
            continue
        if source.kind == "parquet":
            try:
                layouts[path.name] = pq.read_schema(path).names
            except (OSError, ValueError) as err:
                raise StreamingRunError(
                    f"--source {source.stream}={source.path}: file {path.name} is not a "
                    f"readable Parquet file ({str(err).splitlines()[0][:120]}); move it out of "
                    "the directory (or repair it) and rerun with the same --out") from None
        else:
            layouts[path.name] = _csv_header(path)
    return layouts


def _check_layouts(source: Source, layouts: Mapping[str, list[str]], columns: list[str],
                   time_names: list[str]) -> None:
    """Every file has a time column (one of ``time_names``) and no column the stream lacks.

    Spark would read a file of another layout as tuples without a time;
    files arriving once the run is going are counted as such instead.
    """
    times = {c.lower() for c in time_names}
    known = {c.lower() for c in columns} | times
    for name, have in layouts.items():
        lower = [c.lower() for c in have]
        unknown = [c for c, low in zip(have, lower) if low not in known]
        timed = bool(times.intersection(lower))
        if timed and not unknown:
            continue
        what = (f"has no time column (one of {', '.join(time_names)})" if not timed
                else f"column {unknown[0]} is not a column of stream {source.stream} in the "
                     "catalog")
        raise StreamingRunError(f"--source {source.stream}={source.path}: file {name}: {what} "
                                f"(its columns: {', '.join(have)}); fix the catalog, or move "
                                "the file out of the directory and rerun with the same --out")


def _csv_header(path: Path) -> list[str]:
    import gzip

    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        line = fh.readline().strip()
    if not line:
        raise StreamingRunError(f"{path}: no header line (a CSV source needs one)")
    return [c.strip() for c in line.split(",")]


def _share(part: float, whole: float) -> str:
    return f"{part / whole:.1%}" if whole > 0 and math.isfinite(part) else "an unknown share"


def _json_float(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


def _write_text(path: Path, text: str) -> None:
    write_atomic(path, text)  # the one write-then-rename (cqopt.output)


def _write_json(path: Path, value: Any) -> None:
    _write_text(path, json.dumps(value, indent=1, allow_nan=True))


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def _write_result(frame: DataFrame, final: Path) -> int:
    """Write a round's result as Parquet at ``final``, atomically; its row count.

    One Spark job: a result of at most :data:`LOCAL_RESULT_ROWS` rows comes to the
    driver as Arrow and is written from there (no job of Spark's file commit
    protocol); a larger one is written by Spark, its rows counted on the way
    (``DataFrame.observe``), not read back. A scratch name, then a rename, so
    ``final`` is whole or absent and a rerun replaces it.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    scratch = final.with_name(f".tmp-{final.name}")
    _remove(scratch)
    table = _collect(frame, LOCAL_RESULT_ROWS)
    if table is not None:
        import pyarrow.parquet as pq

        scratch.mkdir(parents=True)
        pq.write_table(table, scratch / "part-00000.parquet")
        _replace(scratch, final)
        return table.num_rows
    rows = Observation(f"rows-{final.stem}")
    frame.observe(rows, F.count(F.lit(1)).alias("rows")).write.parquet(str(scratch))
    _replace(scratch, final)
    return int(rows.get.get("rows", 0))


def _write_by_round(frame: DataFrame, scratch: Path) -> None:
    """Write a result of many rounds (its first column ``_round``) as ``scratch/_round=R``
    folders of Parquet, one per round with rows, as ``partitionBy("_round")`` does.

    At most :data:`LOCAL_RESULT_ROWS` rows are split on the driver (one Spark job, no
    file per round and task); more are written by Spark.
    """
    table = _collect(frame, LOCAL_RESULT_ROWS)
    if table is None:
        frame.write.partitionBy("_round").parquet(str(scratch))
        return
    import pyarrow.parquet as pq

    rounds = table["_round"].to_numpy()
    order = np.argsort(rounds, kind="stable")
    table, rounds = table.take(order).drop_columns(["_round"]), rounds[order]
    values, starts, counts = np.unique(rounds, return_index=True, return_counts=True)
    for value, offset, length in zip(values, starts, counts):
        folder = scratch / f"_round={int(value)}"
        folder.mkdir(parents=True)
        pq.write_table(table.slice(int(offset), int(length)), folder / "part-00000.parquet")


def _collect(batch: DataFrame, limit: int):
    """The batch as an Arrow table on the driver if it holds at most ``limit`` tuples
    (one Spark job, reading at most ``limit + 1``), else None."""
    table = batch.limit(limit + 1).toArrow()
    return table if table.num_rows <= limit else None


def _local_spans(table, start: float | None, window_s: float, cut: int) -> dict[str, dict]:
    """What the Spark spans job gives, from a collected batch: per stream, its earliest and
    latest time, its tuples without a time, and its tuples of rounds before ``cut``."""
    frame = table.select(["_stream", "ts"]).to_pandas()
    spans = {}
    for stream, rows in frame.groupby("_stream", sort=False):
        ts = rows["ts"].to_numpy(dtype=np.float64)
        timed = ts[~np.isnan(ts)]
        late = 0 if start is None or not len(timed) else int(
            (round_array(timed, start, window_s) < cut).sum())
        spans[stream] = {"lo": float(timed.min()) if len(timed) else None,
                         "hi": float(timed.max()) if len(timed) else None,
                         "untimed": int(len(ts) - len(timed)), "late": late}
    return spans


def _with_rounds(table, start: float, window_s: float):
    """A collected batch's timed tuples, each with its round (``_round``), as the staged
    tuples Spark writes hold it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    timed = table.filter(pc.is_valid(table["ts"]))
    rounds = round_array(timed["ts"].to_numpy(zero_copy_only=False), start, window_s)
    return timed.append_column("_round", pa.array(rounds, type=pa.int64()))


def _local_statistics(query: ContinuousQuery, table, streams: tuple[str, ...], first: int,
                      stop: int, window_s: float) -> dict[int, dict[str, float]]:
    """Each round's statistics from its tuples on the driver: the measured statistics of
    a window (:func:`cqopt.costmodel.validation.window_statistics`), round by round, by
    the definitions the Spark job (:func:`cqopt.spark.round_stats.round_statistics`)
    computes: a rate of tuples over ``W``, a selectivity over no tuple NaN."""
    from cqopt.costmodel.validation import window_statistics
    from cqopt.spark.round_stats import _join_columns, _selection_columns

    # Only the columns a statistic reads: a round's other columns cost a copy each.
    columns = {s: [c.name for c in query.stream(s).columns
                   if c.name in (*_selection_columns(query, s), *_join_columns(query, s))]
               for s in streams}

    def held(stream: str, column: str) -> str:  # the batch's one time column is "ts"
        return "ts" if column.lower() == "ts" else f"{stream}__{column}"

    frame = table.select(["_round", "_stream", *dict.fromkeys(
        held(s, c) for s in streams for c in columns[s])]).to_pandas()
    by_round = {r: rows for r, rows in frame.groupby("_round", sort=False)}
    empty = frame.iloc[0:0]
    observed = {}
    for r in range(first, stop):
        rows = by_round.get(r, empty)
        windows = {}
        for stream in streams:
            mine = rows[rows["_stream"] == stream]
            windows[stream] = pd.DataFrame({c: mine[held(stream, c)]
                                            for c in columns[stream]}, index=mine.index)
        stats = window_statistics(query, windows, window_s)
        observed[r] = {name: float(stats[name]) for name in query.statistics}
    return observed


def _adopt_round(part: Path | None, final: Path, schema: StructType) -> int:
    """Move one round's partition of a grouped write to ``final``; its row count.

    The count is read from the Parquet footers (no Spark job). A round the
    plan gave no row has no partition: it gets one empty Parquet file of the
    result's schema, as a round run alone does.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql.pandas.types import to_arrow_schema

    scratch = final.with_name(f".tmp-{final.name}")
    _remove(scratch)
    if part is None:
        scratch.mkdir(parents=True)
        pq.write_table(pa.Table.from_batches([], schema=to_arrow_schema(schema)),
                       scratch / "part-00000-empty.parquet")
        rows = 0
    else:
        os.replace(part, scratch)
        rows = sum(pq.read_metadata(f).num_rows for f in scratch.glob("*.parquet"))
    _replace(scratch, final)
    return int(rows)


def _file_hint(text: str) -> str:
    """What to do when Spark cannot read a source file (corrupt, deleted, another schema)."""
    if "FileNotFound" in text or "does not exist" in text:
        return ("; a source file was deleted before Spark read it: put it back, or start "
                "again with a new --out")
    if "FAILED_READ_FILE" in text or "not a Parquet file" in text or "CANNOT_READ" in text:
        return ("; move the file out of the source directory (or repair it) and rerun with "
                "the same --out")
    return ""


def _replace(scratch: Path, final: Path) -> None:
    """Move a finished scratch directory to its final name (replacing an older copy)."""
    if final.exists():
        _remove(final)
    os.replace(scratch, final)
