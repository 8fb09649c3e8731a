"""A run's micro-batches: their time spans, and the tuples of rounds still open, staged.

A micro-batch of at most :data:`LOCAL_TUPLES` tuples (a live round, a short
backlog) is collected to the driver in one Spark job, as Arrow
(:func:`collect_batch`); its time spans, its dropped tuples, the rounds'
statistics and the staging of open rounds are then worked out there. A larger
batch stays on Spark: one job for its spans (:func:`batch_spans`), one to stage.

Tuples of rounds still open are staged under ``OUT/pending/batch-B``
(Parquet, keyed by the batch id: one file written from the driver, or the
folder a Spark job wrote) and read with the next batch's
(:class:`Staging`); a stage is removed once its rounds ran. Spark commits a
batch once it is handed back, so these tuples exist nowhere else Spark would
read again.

>>> import pyarrow as pa
>>> batch = pa.table({"_stream": ["TCP", "TCP", "UDP"], "ts": [0.5, 2.5, None]})
>>> batch_spans(None, batch, start=0.0, window_s=1.0, cut=1)["TCP"]
{'lo': 0.5, 'hi': 2.5, 'untimed': 0, 'late': 1}
>>> with_rounds(batch, 0.0, 1.0)["_round"].to_pylist()
[0, 2]
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cqopt.output import atomic_file
from cqopt.replay.rounds import round_array
from cqopt.spark.deferred import DeferredFrame
from cqopt.spark.run.settings import RunContext, StreamingRunError
from cqopt.spark.run.sink import adopt, collect, remove
from cqopt.spark.run.sources import spark_type
from cqopt.spark.run.state import RunState
from cqopt.spark.session import driver_frame
from cqopt.spark.trace_read import SPARK_TYPES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

    from cqopt.spark.shared_work import SharedWork

# A micro-batch of at most this many tuples is collected to the driver (one Spark job) and
# its statistics and staging worked out there; a larger one stays on Spark throughout.
LOCAL_TUPLES = 500_000
# Rounds of at most this many tuples run from the driver's copy (a DataFrame of local
# data, no re-read); larger ones from their staged Parquet, which Spark reads in parallel.
# Their statistics come from the driver's copy either way (0.15-0.35 s for 400,000 tuples
# against 4-7 s for the same statistics as a Spark job).
LOCAL_FRAME_TUPLES = 100_000


def collect_batch(batch: DataFrame):
    """The micro-batch as an Arrow table on the driver if it holds at most
    :data:`LOCAL_TUPLES` tuples, else None."""
    return collect(batch, LOCAL_TUPLES)


def hold_batch(batch: DataFrame, may_be_large: bool) -> tuple[Any, Any]:
    """A micro-batch held for its rounds: ``(frame, local)``.

    ``local`` is the batch on the driver (:func:`collect_batch`), or None when it
    holds more than :data:`LOCAL_TUPLES` tuples; then ``frame`` is the batch
    persisted, since every later job reads it. A batch ``may_be_large`` (a run's
    first, which may be its whole backlog, or the one after a batch too large) is
    persisted and counted first, so that a batch too large is not collected in part
    for nothing and is read once. Any other batch is collected as it comes and
    persisted only if Spark is handed it again (rounds too large for a driver frame,
    a grown file), which most batches never are: building the cache cost a live
    round 10-60 ms. Release the frame with :func:`release_batch`.
    """
    from pyspark import StorageLevel

    level = StorageLevel.MEMORY_AND_DISK
    if may_be_large:
        batch = batch.persist(level)
        try:
            return batch, collect_batch(batch) if batch.count() <= LOCAL_TUPLES else None
        except BaseException:  # the caller has no frame to release
            batch.unpersist()
            raise
    local = collect_batch(batch)
    if local is None:
        return batch.persist(level), None
    return DeferredFrame(lambda: batch.persist(level)), local


def release_batch(frame) -> None:
    """Unpersist a batch :func:`hold_batch` held, if it was persisted (None: none held)."""
    held = frame.if_built() if isinstance(frame, DeferredFrame) else frame
    if held is not None:
        held.unpersist()


class BatchHolder:
    """A run's side of :func:`hold_batch`: each micro-batch held, its first (which may be
    the whole backlog) and the one after a batch too large counted before collecting."""

    def __init__(self):
        self.may_be_large = True

    def hold(self, batch: DataFrame) -> tuple[Any, Any]:
        """:func:`hold_batch` of ``batch``: ``(frame, local)``."""
        frame, local = hold_batch(batch, self.may_be_large)
        self.may_be_large = local is None
        return frame, local


def batch_spans(batch: DataFrame | None, local, start: float | None, window_s: float,
                cut: int) -> dict[str, dict[str, Any]]:
    """Per stream of the batch: its earliest and latest time (``lo``, ``hi``), its tuples
    without a time (``untimed``) and its tuples of rounds before ``cut`` (``late``).

    From the collected batch (``local``, an Arrow table) when there is one, else one
    Spark job over ``batch``.
    """
    if local is not None:
        return _local_spans(local, start, window_s, cut)
    from pyspark.sql import functions as F

    from cqopt.spark.round_stats import assign_round

    late = (F.lit(0) if start is None else
            F.when(assign_round(F.col("ts"), start, window_s) < cut, 1).otherwise(0))
    return {row["_stream"]: row.asDict() for row in batch.groupBy("_stream").agg(
        F.min("ts").alias("lo"), F.max("ts").alias("hi"),
        F.sum(F.when(F.col("ts").isNull(), 1).otherwise(0)).alias("untimed"),
        F.sum(late).alias("late")).collect()}


def _local_spans(table, start: float | None, window_s: float, cut: int) -> dict[str, dict]:
    # By codes of the stream column, not a pandas group-by: a third of the time, paid by
    # every query of a workload on every micro-batch.
    ts = table["ts"].to_numpy(zero_copy_only=False).astype(np.float64)
    codes, streams = pd.factorize(table["_stream"].to_numpy(zero_copy_only=False))
    timed = ~np.isnan(ts)
    spans = {}
    for k, stream in enumerate(streams):
        mine = codes == k
        own = ts[mine & timed]
        late = 0 if start is None or not len(own) else int(
            (round_array(own, start, window_s) < cut).sum())
        spans[stream] = {"lo": float(own.min()) if len(own) else None,
                         "hi": float(own.max()) if len(own) else None,
                         "untimed": int(mine.sum() - len(own)), "late": late}
    return spans


def with_rounds(table, start: float, window_s: float):
    """A collected batch's timed tuples, each with its round (``_round``), as the staged
    tuples Spark writes hold it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    timed = table.filter(pc.is_valid(table["ts"]))
    rounds = round_array(timed["ts"].to_numpy(zero_copy_only=False), start, window_s)
    return timed.append_column("_round", pa.array(rounds, type=pa.int64()))


class Staging:
    """The stages of a run folder, and the tuples of the rounds about to run."""

    def __init__(self, ctx: RunContext, state: RunState):
        self.ctx, self.state = ctx, state
        self.folder = ctx.out / "pending"
        # A workload's memo of one micro-batch (cqopt.spark.shared_work): equal tuples
        # of a stream that several queries read are handed to Spark once. None alone.
        self.shared: SharedWork | None = None
        # Each stage this run wrote from the driver, by path: read back from here, not from
        # its file, while the run lives (a resumed run reads the files).
        self._written: dict[str, Any] = {}

    def _path(self, batch_id: int | str):
        return self.folder / f"batch-{int(batch_id):06d}"

    def stage(self, tagged: DataFrame, batch_id: int, first: int, top: int,
              local=None) -> None:
        """Keep the batch's tuples of rounds ``first..top`` (not yet run), as Parquet keyed
        by batch id. A batch collected to the driver (``local``, an Arrow table) is
        written from there, without a Spark job, as one file."""
        from pyspark.sql import functions as F

        final = self._path(batch_id)
        scratch = self.folder / f".tmp-batch-{batch_id:06d}"
        remove(scratch)
        keep = None
        if local is not None:
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            keep = local.filter(pc.greater_equal(local["_round"], first))
        if keep is not None and not os.path.isdir(final):
            # Paid by every query of a workload on every micro-batch: one file renamed into
            # place, not a folder switched in with its markers (2.3 ms against 5.4). A
            # killed write leaves a scratch name (clear_scratch); a file already there is
            # this batch's stage from an attempt killed before the state recorded it.
            self.folder.mkdir(parents=True, exist_ok=True)
            with atomic_file(final, replace=os.path.isfile(final)
                             and not os.path.islink(final)) as file:
                pq.write_table(keep, file)
        else:  # Spark's folder, or a replayed batch's earlier one: replaced as cqopt's own
            if keep is not None:
                scratch.mkdir(parents=True)
                pq.write_table(keep, scratch / "part-00000.parquet")
            else:
                tagged.where(F.col("_round") >= first).write.parquet(str(scratch))
            adopt(scratch, final, kind="pending tuples")
        self._written.pop(str(final), None)
        if keep is not None:  # read back from here while this run lives, not from the file
            self._written[str(final)] = keep
        self.state.pending[str(batch_id)] = [first, top]

    def staged(self, first: int, stop: int) -> list[str]:
        """The stages holding tuples of rounds ``first <= r < stop``."""
        paths = []
        for batch_id, (lo, hi) in sorted(self.state.pending.items()):
            if lo < stop and hi >= first:
                path = self._path(batch_id)
                if not path.exists():
                    raise StreamingRunError(
                        f"--out {self.ctx.out}: the pending tuples of rounds {lo}..{hi} "
                        f"({path.name}) were deleted; they cannot be run again: use a new "
                        "--out")
                paths.append(str(path))
        return paths

    def drop_finished(self, next_round: int) -> None:
        """Remove the stages whose rounds all ran."""
        for batch_id, (_, hi) in list(self.state.pending.items()):
            if hi < next_round:
                remove(self._path(batch_id))
                self._written.pop(str(self._path(batch_id)), None)
                del self.state.pending[batch_id]

    def round_frames(self, tagged: DataFrame | None, local, first: int, stop: int,
                     frames: bool = True):
        """The tuples of rounds ``first <= r < stop``: on the driver (an Arrow table, or
        None when too many or not collected) and as each stream's DataFrame (columns
        ``ts``, ``_round`` and the stream's catalog columns), from the driver's copy
        when at most :data:`LOCAL_FRAME_TUPLES` (None for them without ``frames``: the
        caller hands Spark what it keeps of them, :meth:`frames_from`), else from the
        batch and the stages."""
        rows = self._local_rounds(local, first, stop, finishing=tagged is None)
        if rows is not None and rows.num_rows <= LOCAL_FRAME_TUPLES:
            return rows, self.frames_from(rows) if frames else None
        return rows, self._round_tuples(tagged, first, stop)

    def _round_tuples(self, tagged: DataFrame | None, first: int,
                      stop: int) -> dict[str, DataFrame]:
        from pyspark.sql import functions as F

        parts = [] if tagged is None else [tagged]
        staged = self.staged(first, stop)
        spark = self.ctx.spark
        if staged:
            # The stages hold the batch's layout: given it, Spark infers no schema (a job).
            reader = spark.read if tagged is None else spark.read.schema(tagged.schema)
            parts.append(reader.parquet(*staged))
        frames = {}
        for stream_name in self.ctx.streams:
            columns = [c for c in self.ctx.catalog.stream(stream_name).columns
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
                frame = spark.createDataFrame([], self._stream_schema(stream_name))
            frames[stream_name] = frame
        return frames

    def frames_from(self, rows) -> dict[str, DataFrame]:
        """Each stream's tuples, as :meth:`_round_tuples` gives them, from the rounds' tuples
        on the driver (an Arrow table): handed to Spark whole, with no file to list or read,
        each one partition (:func:`~cqopt.spark.session.driver_frame`), for jobs run under
        :data:`~cqopt.spark.session.DRIVER_DATA_CONF`."""
        return {stream: (driver_frame(self.ctx.spark, table) if self.shared is None
                         else self.shared.table_frame(self.ctx.spark, stream, table))
                for stream, table in self.tables_from(rows).items()}

    def tables_from(self, rows) -> dict[str, Any]:
        """Each stream's tuples of the rounds' tuples on the driver (an Arrow table), as an
        Arrow table of its own: ``ts``, ``_round`` and the stream's catalog columns."""
        import pyarrow as pa
        import pyarrow.compute as pc

        tables = {}
        for stream_name in self.ctx.streams:
            mine = rows.filter(pc.equal(rows["_stream"], stream_name))
            columns = {"ts": mine["ts"], "_round": mine["_round"]}
            columns.update((c.name, mine[f"{stream_name}__{c.name}"])
                           for c in self.ctx.catalog.stream(stream_name).columns
                           if c.name.lower() != "ts")
            tables[stream_name] = pa.table(columns)
        return tables

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
        staged = self.staged(first, stop)
        mine = None if local is None else local.filter(inside(local["_round"]))
        held = (0 if mine is None else mine.num_rows) + sum(
            pc.sum(inside(self._stage_rounds(p))).as_py() or 0 for p in staged)
        if held > LOCAL_TUPLES:
            return None
        parts = ([] if mine is None else [mine]) + [
            (t := self._written[p] if p in self._written else pq.read_table(p)).filter(
                inside(t["_round"])) for p in staged]
        if not parts:
            return None
        return (pa.concat_tables(parts, promote_options="permissive") if len(parts) > 1
                else parts[0])

    def _stage_rounds(self, path: str):
        """A stage's tuples' rounds: from the table this run wrote there, else its file."""
        import pyarrow.parquet as pq

        if path in self._written:
            return self._written[path]["_round"]
        return pq.read_table(path, columns=["_round"])["_round"]

    def _stream_schema(self, stream_name: str) -> StructType:
        from pyspark.sql.types import DoubleType, LongType, StructField, StructType

        stream = self.ctx.catalog.stream(stream_name)
        return StructType([StructField("ts", DoubleType()), StructField("_round", LongType())]
                          + [StructField(c.name, spark_type(SPARK_TYPES[c.type]))
                             for c in stream.columns if c.name.lower() != "ts"])
