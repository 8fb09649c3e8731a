"""An adaptive continuous query on Spark Structured Streaming: OM's Algorithm 2, on an engine.

:class:`AdaptiveRun` reads each stream of a query as a Structured Streaming
source (:mod:`~cqopt.spark.run.sources`: a directory of Parquet or CSV
files, or Spark's ``rate`` source), cuts the tuples into **rounds** (tumbling
windows of the query's window ``W`` in event time, seed 001 section 3.1) and,
in ``foreachBatch``, runs every round once it is complete
(:mod:`~cqopt.spark.run.rounds`: statistics, choice, shedding, the plan's
job, shadow timing), writes its result (:mod:`~cqopt.spark.run.sink`) and
logs it (:mod:`~cqopt.spark.run.roundlog`); at the end it writes the report
(:mod:`~cqopt.spark.run.report`). This module is the loop that ties them.

**Rounds and micro-batches.** A tuple's round is
:func:`~cqopt.spark.round_stats.assign_round` of its timestamp, from the
earliest timestamp of the first micro-batch (or ``start``). A file source
reads every file there is per micro-batch (``max_files_per_trigger`` can
limit that), so a backlog is one micro-batch, and Spark's order of files (by
modification time, which a plain ``cp`` scrambles) does not matter. A round
is complete when every stream of the query has shown a timestamp at or past
the round's end (the earliest of the streams' latest timestamps, as Spark's
default watermark policy takes the minimum). Per micro-batch of at most
:data:`~cqopt.spark.run.staging.LOCAL_TUPLES` tuples: one job collects it
(time spans, dropped tuples, statistics and staging are worked out on the
driver), then one job per plan run; a larger batch takes a job for the spans,
one for the statistics, one per plan run and one to stage. Tuples of rounds
still open are staged (:mod:`~cqopt.spark.run.staging`) and read with the
next batch's. When a finite input ends (``once``, ``available-now``) the
rounds still open run too, the last one included. A tuple of a round that
already ran is late; one without a time (a file of another layout) is
unusable: both are counted per micro-batch in the report, not run.

**Restart safety.** Spark's checkpoint (``OUT/checkpoint``) decides which
files each micro-batch holds, and a batch not committed runs again with the
same files. The sink is keyed by round: a round is done when its log record
exists, its result is written before its record, each atomically (through
:mod:`cqopt.output`), and a replayed batch skips the rounds its first attempt
logged. Spark commits a batch once it is handed back, so only the tuples of
rounds still open need keeping, and only until those rounds run: that is
the staging above (a backlog run to its end stages just its last round). A
killed run therefore resumes at the next unfinished round and no round's
output is lost or written twice (:mod:`~cqopt.spark.run.state`). On
resumption the logged rounds' observations are fed to a fresh
:class:`~cqopt.runtime.adaptive.AdaptiveQuery`, which therefore continues
where it stopped.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.replay.rounds import round_of
from cqopt.spark.deferred import DeferredFrame
from cqopt.spark.run.files import FileWatch
from cqopt.spark.run.microbatch import BatchProgress
from cqopt.spark.run.report import RunResult, write_report
from cqopt.spark.run.roundlog import RoundLog
from cqopt.spark.run.rounds import RoundRunner
from cqopt.spark.run.settings import TRIGGERS, RunContext, RunSettings, StreamingRunError
from cqopt.spark.run.sink import clear_scratch
from cqopt.spark.run.sources import Source, file_hint, match_sources, read_stream
from cqopt.spark.run.staging import (
    BatchHolder,
    Staging,
    batch_spans,
    release_batch,
    with_rounds,
)
from cqopt.spark.run.state import STATE_VERSION, RunState, run_folder
from cqopt.spark.session import spark_errors, spark_message

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cqopt.catalog import Catalog
    from cqopt.charts.lookup import QueryChart
    from cqopt.optimizer.query.logical import ContinuousQuery


def start_stream(frames: list[DataFrame], on_batch, out: Path, name: str,
                 trigger: str | float):
    """Start one streaming query over ``frames`` unioned, each micro-batch handed to
    ``on_batch``, its checkpoint ``out/checkpoint``; its StreamingQuery."""
    stream = frames[0]
    for other in frames[1:]:
        stream = stream.unionByName(other, allowMissingColumns=True)
    writer = (stream.writeStream.foreachBatch(on_batch)
              .option("checkpointLocation", str(out / "checkpoint"))
              .queryName(f"cqopt-{name}-{os.getpid()}"))
    if trigger == "once":
        writer = writer.trigger(once=True)
    elif trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger} seconds")
    return writer.start()


def await_stream(handle, run, name: str) -> None:
    """Wait for a run's streaming query ``handle`` to end, or stop it when ``run`` asks.

    ``run`` (an :class:`AdaptiveRun` or a :class:`~cqopt.spark.run.workload.WorkloadRun`)
    gives ``stop_requested``, ``progress``, ``error`` (its batch's own error, which
    wins over Spark's wrapping of it), ``stopped_by`` and ``_say_waiting``. Each
    micro-batch's progress as Spark reports it is said
    (:class:`~cqopt.spark.run.microbatch.BatchProgress`).
    """
    began = time.monotonic()
    batches = BatchProgress(run.progress, name)
    try:
        while handle.isActive:
            if run.stop_requested.is_set():
                handle.stop()
                break
            handle.awaitTermination(0.5)
            batches.update(handle)
            run._say_waiting(began)
        batches.update(handle)
    except KeyboardInterrupt:
        run.stopped_by = "interrupted (Ctrl-C)"
        run.stop_requested.set()
        run.progress(f"{name}: interrupted; stopping, every finished round is kept")
        handle.stop()
    except Exception as err:  # StreamingQueryException: the batch's own error first
        if run.error is not None:
            raise run.error from None
        raise StreamingRunError(f"the streaming query of {name} failed: "
                                f"{spark_message(err)}") from None


@dataclass
class OpenBatch:
    """A micro-batch taken by :meth:`AdaptiveRun.open_batch`, its complete rounds not yet run:
    its timed tuples with their rounds (``tagged``, and ``local`` on the driver or None),
    the first round not complete, the round of its latest tuple, and frames it cached."""

    batch_id: int
    tagged: DataFrame | None = None
    local: Any = None
    complete: int = 0
    top: int = -1
    cached: list = field(default_factory=list)

    def release(self) -> None:
        for frame in self.cached:
            frame.unpersist()
        self.cached.clear()


class AdaptiveRun:
    """One query running adaptively on Spark Structured Streaming; see the module docstring.

    Everything that can be checked is checked when it is made, before Spark reads a tuple.

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
        The run's folder: new, empty, or one this query ran in before (then the run resumes).
    settings : RunSettings
        How it runs (the trigger, shadow timing, the policy, a deadline, ...).
    progress : callable, optional
        Where a line of progress goes; default stderr.

    Raises
    ------
    StreamingRunError
        A source for a stream not in the query, a stream without a source,
        or an ``out`` cqopt did not write.
    """

    def __init__(self, spark: SparkSession, name: str, query: ContinuousQuery,
                 chart: QueryChart, catalog: Catalog, sources: Mapping[str, Source],
                 out: str | Path, settings: RunSettings = RunSettings(),
                 progress: Callable[[str], None] | None = None):
        say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.said_at = time.monotonic()

        def progress_line(line: str) -> None:  # when the run last said something
            self.said_at = time.monotonic()
            say(line)
        self.progress = progress_line
        window_s = settings.window_s if settings.window_s is not None else query.round_seconds()
        # Absolute: Spark's JVM resolves a relative path against its own working directory.
        self.ctx = ctx = RunContext(spark, name, query, chart, catalog, settings, window_s,
                                    run_folder(out), progress_line)
        for note in settings.notes():
            self.progress(note)
        self.sources = match_sources(sources, ctx.streams, name, settings.trigger,
                                     list(catalog.streams))
        self.state = RunState.open(ctx.out, {
            "version": STATE_VERSION, "query": name, "sql": query.sql, "window_s": window_s,
            "sources": {s: src.identity() for s, src in self.sources.items()}}, settings.start)
        clear_scratch(ctx.out)  # a killed run's half-written scratch
        self.log = RoundLog(ctx)
        self.staging = Staging(ctx, self.state)
        self.rounds = RoundRunner(ctx, self.state, self.staging, self.log)
        self.files = FileWatch(ctx, self.state, self.sources)
        if self.log.next_round:
            self.progress(f"{name}: resuming after round {self.log.next_round - 1}")
        self.in_batch: int | None = None  # the micro-batch being worked on, if one is
        self.error: BaseException | None = None
        self.stop_requested = threading.Event()
        self.stopped_by = "end of input"
        self.holder = BatchHolder()

    @property
    def out(self) -> Path:
        return self.ctx.out

    @property
    def records(self) -> list[dict]:
        """Every round logged in ``out``, in order (earlier runs' too)."""
        return self.log.records

    @property
    def next_round(self) -> int:
        return self.log.next_round

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
        settings, name = self.ctx.settings, self.ctx.name
        if settings.max_rounds is not None and self.next_round >= settings.max_rounds:
            self.stopped_by = f"max rounds ({settings.max_rounds}) reached before"
            return self.report()
        with spark_errors(f"Spark cannot start the streaming query of {name}",
                          StreamingRunError):
            handle = self._start()
        await_stream(handle, self, name)
        if self.error is not None:
            raise self.error
        if settings.trigger in TRIGGERS and not self.stop_requested.is_set():
            self._finish_input()
        return self.report()

    def _start(self):
        """Start the streaming query: every source read, unioned, handed to ``_batch``."""
        frames = [read_stream(self.ctx, src) for src in self.sources.values()]
        return start_stream(frames, self._batch, self.out, self.ctx.name,
                            self.ctx.settings.trigger)

    def _say_waiting(self, began: float) -> None:
        """Never silent for long: a line after 2 s without one before the first round (the
        streaming query starts, reads its first files), then after 30 s without one."""
        quiet = time.monotonic() - self.said_at
        first = not self.next_round
        if quiet < (5.0 if first and time.monotonic() - began > 3.0 else
                    2.0 if first else 30.0):
            return
        waited = time.monotonic() - began
        name, done = self.ctx.name, self.next_round
        if self.in_batch is not None:
            self.progress(f"{name}: working on micro-batch {self.in_batch}: "
                          f"{done} rounds run so far, the last {quiet:.0f} s ago")
        else:
            self.progress(f"{name}: starting the streaming query and reading its first "
                          f"input, {waited:.0f} s" if first else
                          f"{name}: waiting for input: {done} rounds run, "
                          f"the last {quiet:.0f} s ago")

    # -- one micro-batch ----------------------------------------------------------------
    def _batch(self, batch: DataFrame, batch_id: int) -> None:
        stopping = self.stop_requested.is_set()
        self.in_batch = batch_id
        try:
            # Taken even when stopping: Spark commits the batch when this returns, so
            # its tuples of rounds not yet run must be kept for a later run.
            with spark_errors(f"Spark failed on micro-batch {batch_id} of {self.ctx.name}",
                              StreamingRunError, hint=file_hint):
                self._take(batch, batch_id)
            if self._reached_max():
                # Asked only once the batch is done with Spark: the stop interrupts a batch
                # still at work (its staging, or the release of its cached tuples).
                self.stop_requested.set()
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

        A batch of at most :data:`~cqopt.spark.run.staging.LOCAL_TUPLES` tuples
        (a live round, a short backlog) is collected to the driver in one Spark
        job, as Arrow, and not cached on Spark: its time spans, dropped tuples,
        the rounds' statistics and the staging of open rounds are then worked out
        here, without another job, and each plan is one job. A larger batch is
        persisted and takes one job for the spans, one for the statistics, one per
        plan and one to stage (:func:`~cqopt.spark.run.staging.hold_batch`).
        """
        batch, local = self.holder.hold(batch)
        try:
            opened = self.open_batch(batch, local, batch_id)
            if opened is not None:
                try:
                    self.rounds.run(opened.tagged, batch_id, opened.complete, opened.local)
                except BaseException:  # not committed: Spark hands the batch again
                    opened.release()
                    raise
                self.close_batch(opened)
        finally:
            release_batch(batch)

    def open_batch(self, batch: DataFrame, local, batch_id: int) -> OpenBatch | None:
        """Take a micro-batch of this query's streams (``local``: its copy on the driver, or
        None): what it read of each file, its time spans and dropped tuples, the state
        brought up to it; its tuples tagged with their rounds. None when it holds no timed
        tuple; else :meth:`close_batch` must follow, once its complete rounds ran."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from cqopt.spark.round_stats import assign_round

        window_s = self.ctx.window_s
        if self.state.staged(batch_id):
            # Spark runs again a batch whose first attempt finished (it ran its complete
            # rounds and staged the rest, but was stopped before Spark committed it): its
            # tuples are all in its stage, and a file deleted since is no loss.
            self.progress(f"{self.ctx.name}: micro-batch {batch_id} ran before it was "
                          "stopped; its tuples of rounds not yet run are kept, nothing more "
                          "to do")
            return None
        # Rounds this batch already ran before a kill: its replay skips them quietly;
        # tuples of rounds run by earlier batches are late.
        replayed = self.log.replayed(batch_id)
        cut = min(replayed) if replayed else self.next_round
        # Every file read whole: what each gave, and the lines grown ones gained since.
        batch, local, grew = self.files.take(batch, local)
        opened = OpenBatch(batch_id)
        if grew:
            batch = batch.persist(StorageLevel.MEMORY_AND_DISK)
            opened.cached.append(batch)
        try:
            spans = batch_spans(batch, local, self.state.start, window_s, cut)
            if not spans:
                self.progress(f"{self.ctx.name}: micro-batch {batch_id} holds no tuple")
                self.state.empty(batch_id)
                opened.release()
                return None
            self._count_dropped(batch_id, spans)
            timed = {s: row for s, row in spans.items() if row["hi"] is not None}
            if not timed:
                opened.release()
                return None
        except BaseException:
            opened.release()
            raise
        fixed = self.state.start is None
        if fixed:  # the first tuples fix round 0
            self.state.start = float(min(r["lo"] for r in timed.values()))
        start = self.state.start
        self.state.see({s: row["hi"] for s, row in timed.items()})
        if fixed:  # before any round runs: a resumed run needs round 0's start. The rest
            # is saved by close_batch: a batch killed before it is Spark's to run again.
            self.state.save()
        opened.tagged = DeferredFrame(lambda: batch.where(F.col("ts").isNotNull()).withColumn(
            "_round", assign_round(F.col("ts"), start, window_s)))
        if local is not None:
            opened.local = with_rounds(local, start, window_s)
        opened.complete = self.state.complete_round(self.ctx.streams, window_s,
                                                    self.next_round)
        opened.top = max(round_of(float(r["hi"]), start, window_s) for r in timed.values())
        return opened

    def close_batch(self, opened: OpenBatch) -> None:
        """After the batch's complete rounds ran (or failed): its tuples of rounds still
        open staged, spent stages removed, the state saved, its cached frames released."""
        try:
            if opened.top >= self.next_round:
                self.staging.stage(opened.tagged, opened.batch_id, self.next_round,
                                   opened.top, opened.local)
            self.staging.drop_finished(self.next_round)
            self.state.save()
        finally:
            opened.release()

    def _count_dropped(self, batch_id: int, spans: Mapping[str, Mapping]) -> None:
        """Late tuples (of rounds already run) and tuples without a time: counted per batch."""
        late = int(sum(int(r["late"] or 0) for r in spans.values()))
        untimed = {s: int(r["untimed"] or 0) for s, r in spans.items() if r["untimed"]}
        self.state.drop(batch_id, late, sum(untimed.values()))
        name = self.ctx.name
        if late:
            self.progress(f"{name}: micro-batch {batch_id}: {late} tuples of rounds that "
                          "already ran arrived late; not run (counted in the report)")
        for stream, n in untimed.items():
            self.progress(f"{name}: micro-batch {batch_id}: {n} tuples of {stream} "
                          "have no time (a file of another schema?); not run (counted in "
                          "the report)")

    def _finish_input(self) -> None:
        """The input has ended: every round up to the last tuple's runs, the last one too
        (with the lines files gained after Spark read them, run as one more batch)."""
        stop = self.input_ended()
        if stop is None:
            return
        with spark_errors(f"Spark failed on the last rounds of {self.ctx.name}",
                          StreamingRunError, hint=file_hint):
            self.rounds.run(None, None, stop)
            self.finished()

    def input_ended(self) -> int | None:
        """The input has ended: the lines files gained after Spark read them run as one
        more batch; then the round after the last tuple's, up to which every round is to
        run (None: none is left)."""
        extra = self.files.finish()
        if extra is not None:
            with spark_errors(f"Spark failed on the tuples files of {self.ctx.name} gained "
                              "after they were read", StreamingRunError, hint=file_hint):
                self._take(extra, self.files.next_recovered_id())
        top = self.state.last_round(self.ctx.window_s)
        return None if top is None or top < self.next_round else top + 1

    def finished(self) -> None:
        """After the last rounds ran: spent stages removed, the state saved."""
        self.staging.drop_finished(self.next_round)
        self.state.save()
        self._reached_max()

    def _reached_max(self) -> bool:
        """Whether ``max_rounds`` have run (the stop is asked for once the batch is kept)."""
        most = self.ctx.settings.max_rounds
        if most is not None and self.next_round >= most:
            self.stopped_by = f"max rounds ({most})"
            return True
        return False

    def report(self) -> RunResult:
        """Write ``rounds.csv``, ``report.json`` and ``report.md`` for every logged round."""
        return write_report(self.ctx, self.state, self.records, self.stopped_by)
