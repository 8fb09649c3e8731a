"""The files of a streaming run's file sources: whose they are, and whether each was read whole.

Spark's file stream source lists a directory, reads each new file once, at
the size it had when listed, and never looks at it again. A file that is
still being written when it is listed (a slow ``cp``, a writer that flushes
in pieces) is therefore read in part, and the rest of its tuples would be
lost without a word. The run keeps a :class:`FileLedger`: for each file,
the size Spark listed and the tuples it read (``_metadata.file_size`` and a
count per ``_metadata.file_path``). Before a micro-batch's rounds close,
:meth:`FileLedger.grown` compares every file's size on disk with what was
read; the complete lines a CSV file gained since are read by
:func:`csv_remainder` and run with the rounds they belong to, so a file is
read whole. What cannot be read whole (a Parquet or compressed file that
changed, lines of rounds that already ran) is counted and reported, never
half-counted in silence.

>>> ledger = FileLedger()
>>> ledger.record("TCP", "file:/x/part-0.csv", size=10, rows=2)
>>> ledger.files["/x/part-0.csv"].rows
2
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.spark.deferred import DeferredFrame
from cqopt.location import locate

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cqopt.spark.run.settings import RunContext
    from cqopt.spark.run.sources import Source
    from cqopt.spark.run.state import RunState

# A file that has kept its size for this long after its last change is settled: it is no
# longer looked at (a run of thousands of files does not stat them all every batch), and
# unless lines were recovered from it, it leaves the ledger: a live run of a file a second
# would otherwise write a state that grows by every file it ever read, on every batch.
SETTLE_SECONDS = 120.0


@dataclass
class FileRecord:
    """What the run has read of one source file.

    ``size`` is the size Spark listed (what it read up to); ``spark_rows``
    the tuples Spark read of it and ``recovered_rows`` those read since;
    ``read_bytes`` how far the recovered lines reach (``size`` until a
    remainder is read).
    """

    stream: str
    size: int
    spark_rows: int
    read_bytes: int
    recovered_rows: int = 0
    settled: bool = False

    @property
    def rows(self) -> int:
        return self.spark_rows + self.recovered_rows

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Growth:
    """A file that is larger on disk than what the run has read of it."""

    path: str
    stream: str
    rows_read: int
    read_bytes: int
    size_now: int


def local_path(uri: str) -> str:
    """A ``file:`` URI as Spark's ``_metadata.file_path`` gives it -> a local path.

    >>> local_path("file:/tmp/a%20b/part-0.csv")
    '/tmp/a b/part-0.csv'
    >>> local_path("/tmp/x.csv")
    '/tmp/x.csv'
    """
    local = locate(uri).local
    return uri if local is None else str(local)


class FileLedger:
    """Per source file: the size Spark listed and the tuples read (kept in the run's state).

    Parameters
    ----------
    files : mapping, optional
        The ledger as :meth:`to_json` wrote it (a resumed run).
    """

    def __init__(self, files: Mapping[str, Mapping[str, Any]] | None = None):
        self.files: dict[str, FileRecord] = {
            path: FileRecord(**{k: v for k, v in rec.items()
                                if k in FileRecord.__dataclass_fields__})
            for path, rec in (files or {}).items() if isinstance(rec, Mapping)}

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {path: rec.to_json() for path, rec in self.files.items()}

    def record(self, stream: str, uri: str, *, size: int, rows: int) -> None:
        """Spark read ``rows`` tuples of the file at ``uri``, listed at ``size`` bytes."""
        path = local_path(uri)
        known = self.files.get(path)
        if known is None:
            self.files[path] = FileRecord(stream, int(size), int(rows), int(size))
        else:  # Spark reads a file in one batch only: this is that batch again, replayed
            known.spark_rows = int(rows)

    def grown(self, now: float | None = None) -> list[Growth]:
        """The files now larger than what was read of them; settles files long unchanged
        (or moved away), and forgets a settled file no lines were recovered from: Spark
        reads a file once, and should it read it again (its micro-batch replayed after a
        kill), it is recorded anew, as it was.

        Parameters
        ----------
        now : float, optional
            The wall clock (``time.time()``), for settling; taken when not given.

        Returns
        -------
        list of Growth
            One per file whose size on disk exceeds what the run read of it.
        """
        import time

        now = time.time() if now is None else now
        found, settled = [], []
        for path, rec in self.files.items():
            if rec.settled:
                continue
            try:
                st = os.stat(path)
            except OSError:  # moved away after it was read: what was read stands
                settled.append(path)
                continue
            if st.st_size > rec.read_bytes:
                found.append(Growth(path, rec.stream, rec.rows, rec.read_bytes, st.st_size))
            elif now - st.st_mtime > SETTLE_SECONDS:
                settled.append(path)
        for path in settled:
            if self.files[path].recovered_rows:
                self.files[path].settled = True  # kept: a replay must not recover them twice
            else:
                del self.files[path]
        return found

    def recovered(self, growth: Growth, rows: int, read_bytes: int) -> None:
        """``rows`` more tuples of ``growth``'s file were read, up to ``read_bytes``."""
        rec = self.files[growth.path]
        rec.recovered_rows += rows
        rec.read_bytes = read_bytes


def csv_remainder(path: str | Path, rows_read: int, *, final: bool = False) -> tuple[list[str], int]:
    """The data lines of a CSV file past its first ``rows_read``, and the bytes they reach.

    Only complete lines are taken (ending in a newline), unless ``final``
    (the input has ended: a last line without a newline is whole too);
    blank lines are skipped, as Spark's CSV reader skips them.

    Parameters
    ----------
    path : str or Path
        A plain (uncompressed) CSV file with a header line.
    rows_read : int
        The data lines already read (Spark's count for the file).
    final : bool
        Take a last line that has no newline yet.

    Returns
    -------
    (lines, read_bytes)
        The lines (without their newline) and the byte offset after the last one taken.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "t.csv")
    >>> _ = open(p, "w").write("ts,a\\n1,2\\n2,3\\n3,")
    >>> csv_remainder(p, 1)
    (['2,3'], 13)
    >>> csv_remainder(p, 1, final=True)
    (['2,3', '3,'], 15)
    """
    with open(path, "rb") as fh:
        data = fh.read()
    end = len(data) if final else data.rfind(b"\n") + 1
    lines = data[:end].split(b"\n")
    body = [ln.rstrip(b"\r") for ln in lines[1:]]  # past the header
    body = [ln for ln in body if ln.strip()]
    return [ln.decode("utf-8", errors="replace") for ln in body[rows_read:]], end


class FileWatch:
    """The run's side of the ledger: per micro-batch, what each file gave, and its rest.

    Parameters
    ----------
    ctx : RunContext
        The run (its Spark session, catalog and progress line).
    state : RunState
        The run's state; the ledger is kept in it (``files``), so a resumed run
        knows what it read.
    sources : mapping
        The run's sources by stream; only file sources are watched.
    """

    def __init__(self, ctx: RunContext, state: RunState, sources: Mapping[str, Source]):
        self.ctx, self.state = ctx, state
        self.sources = {s: src for s, src in sources.items() if src.path is not None}
        self.ledger = FileLedger(state.data.get("files"))
        self._schemas: dict[str, Any] = {}
        self.recovered_batches = int(state.data.get("recovered_batches", 0))

    def take(self, batch: DataFrame, local):
        """Record what ``batch`` read of each file; add the lines grown files gained since.

        Returns
        -------
        (batch, local, changed)
            The batch (and its driver copy, re-collected when lines were added)
            without the file columns; ``changed`` whether lines were added.
        """
        if not self.sources:
            return batch, local, False
        for stream, uri, size, rows in _file_counts(batch, local):
            self.ledger.record(stream, uri, size=size, rows=rows)
        extra = self.remainders(final=False)
        if extra is not None:
            from cqopt.spark.run.staging import collect_batch

            batch = batch.unionByName(extra, allowMissingColumns=True)
            local = collect_batch(batch) if local is not None else None
        self.save()
        # Collected: the driver's copy is worked on, and Spark's frame only if needed.
        frame = (_without_files(batch) if local is None else
                 DeferredFrame(lambda: _without_files(batch)))
        return frame, _without_files(local), extra is not None

    def remainders(self, *, final: bool) -> DataFrame | None:
        """The lines the watched files gained since they were read, as one frame of the
        batch's layout (None: none gained). ``final``: the input has ended, so a last
        line without a newline counts too."""
        frames = []
        for growth in self.ledger.grown():
            source = self.sources.get(growth.stream)
            name = Path(growth.path).name
            if source is None or source.kind != "csv" or name.lower().endswith(".gz"):
                self._changed(growth, "it cannot be read from where Spark stopped")
                continue
            lines, end = csv_remainder(growth.path, growth.rows_read, final=final)
            if end <= growth.read_bytes and not lines:
                continue  # only a line still being written: taken once it is whole
            frames.append(self._frame(source, growth.path, lines))
            self.ledger.recovered(growth, len(lines), end)
            self.state.data["recovered_tuples"] = (
                int(self.state.data.get("recovered_tuples", 0)) + len(lines))
            self.ctx.say(f"{self.ctx.name}: {name} of {growth.stream} grew after Spark "
                              f"read {growth.rows_read} of its tuples; its {len(lines)} new "
                              "tuples are read and run with their rounds")
        if not frames:
            return None
        frame = frames[0]
        for other in frames[1:]:
            frame = frame.unionByName(other)
        return frame

    def finish(self) -> DataFrame | None:
        """At the input's end: the lines any file gained since it was read (see
        :meth:`remainders`), and the batch id to run them under."""
        extra = self.remainders(final=True)
        self.save()
        return extra

    def next_recovered_id(self) -> int:
        """A batch id for lines read at the input's end: negative, so it is never one of
        Spark's (which count up from 0) and a resumed run does not take it for one."""
        self.recovered_batches += 1
        self.state.data["recovered_batches"] = self.recovered_batches
        return -self.recovered_batches

    def save(self) -> None:
        self.state.data["files"] = self.ledger.to_json()

    def _changed(self, growth: Growth, why: str) -> None:
        rec = self.ledger.files[growth.path]
        rec.settled = True
        changed = self.state.data.setdefault("changed_files", [])
        if growth.path not in changed:
            changed.append(growth.path)
        self.ctx.say(f"{self.ctx.name}: warning: {growth.path} of {growth.stream} changed "
                          f"after Spark read {growth.rows_read} of its tuples ({growth.read_bytes}"
                          f" of its now {growth.size_now} bytes), and {why}: its other tuples "
                          "are not run (counted in the report); write a file whole before it "
                          "lands in the source directory (write elsewhere, then move it in)")

    def _frame(self, source: Source, path: str, lines: list[str]) -> DataFrame:
        """``lines`` of the CSV file ``path``, parsed as the stream's files are."""
        from cqopt.replay.trace_format import trace_formats
        from cqopt.spark.run.sources import batch_columns, file_schema

        if source.stream not in self._schemas:
            self._schemas[source.stream] = file_schema(self.ctx, source)
        schema, time_column = self._schemas[source.stream]
        spark = self.ctx.spark
        header = trace_formats()[source.kind].file_columns(Path(path))
        text = [",".join(header)] + lines
        raw = (spark.read.schema(schema).option("header", True).option("enforceSchema", False)
               .csv(spark.sparkContext.parallelize(text, 1)))
        return raw.select(*batch_columns(self.ctx.catalog.stream(source.stream), schema,
                                         time_column))


FILE_COLUMNS = ("_file", "_file_size")


def _file_counts(batch: DataFrame, local) -> list[tuple[str, str, int, int]]:
    """(stream, file, listed size, tuples) for each file the batch read."""
    if local is not None:
        if "_file" not in local.column_names:
            return []
        import pyarrow.compute as pc

        files = local.filter(pc.is_valid(local["_file"])).select(["_stream", *FILE_COLUMNS])
        grouped = files.group_by(["_stream", *FILE_COLUMNS]).aggregate([("_stream", "count")])
        return [(r["_stream"], r["_file"], int(r["_file_size"]), int(r["_stream_count"]))
                for r in grouped.to_pylist()]
    if "_file" not in batch.columns:
        return []
    from pyspark.sql import functions as F

    rows = (batch.where(F.col("_file").isNotNull()).groupBy("_stream", *FILE_COLUMNS)
            .count().collect())
    return [(r["_stream"], r["_file"], int(r["_file_size"]), int(r["count"])) for r in rows]


def _without_files(frame):
    """A batch (Spark or Arrow) without the file columns (None stays None)."""
    if frame is None:
        return None
    if hasattr(frame, "column_names"):  # an Arrow table
        keep = [c for c in frame.column_names if c not in FILE_COLUMNS]
        return frame.select(keep)
    return frame.drop(*FILE_COLUMNS)
