"""Reading stream traces with Spark (formats: :mod:`cqopt.replay.trace_format`).

Every registered trace format is read by :func:`read_trace`: the built-in
ones (DEC-PKT text, CSV, Parquet) by the Spark readers this module registers
with the format registry for the engine ``"spark"``, any other format through
its pure-Python reader, the pandas frame handed to Spark (a trace that fits
in memory; register a Spark reader for a larger one).

What comes back is a Spark DataFrame with a ``ts`` column (double, seconds)
and the catalog stream's columns that the trace has, converted to the
catalog's types (int and long -> long, double -> double, bool -> boolean,
string -> string, timestamp -> double seconds),
together with a :class:`~cqopt.replay.trace_format.TraceInfo`: rows, time
span, and how far the trace is from time order in file order
(``out_of_order``: a timestamp below the previous row's; ``late``: below the
largest timestamp seen before). Out-of-order rows are kept: rounds are
assigned by timestamp, so each lands in its own round.
"""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.catalog import Stream
from cqopt.replay.trace_dec import DEC_COLUMNS
from cqopt.replay.trace_format import (
    TS_NAMES,
    TraceError,
    TraceInfo,
    check_trace_files,
    read_trace_frame,
    register_trace_reader,
    trace_format,
    trace_reader,
)
from cqopt.location import locate
from cqopt.spark.session import spark_errors

if TYPE_CHECKING:  # pyspark loads only when a trace is read
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

SPARK_TYPES = {"int": "long", "long": "long", "double": "double", "bool": "boolean",
               "string": "string", "timestamp": "double"}


# -- reading ---------------------------------------------------------------------
def read_trace(spark: SparkSession, path: str | Path, stream: Stream, *,
               fmt: str | None = None, ts_column: str | None = None,
               time_scale: float = 1.0) -> tuple[DataFrame, TraceInfo]:
    """Read one stream's trace with Spark: a DataFrame with ``ts`` and the stream's columns.

    The time column is ``ts_column`` if given, else the stream's first
    ``timestamp`` column, else one named ``ts``, ``timestamp`` or ``time``
    (case-insensitively). ``time_scale`` converts numeric times to seconds
    (``1e-3`` for milliseconds). The stream's first timestamp column, when the
    trace has no column of that name, is the time column itself. Reading runs
    one Spark job, for the :class:`TraceInfo`; the DataFrame stays lazy (cache
    it if it is used several times). Every problem is a :class:`TraceError`.
    """
    # A local path (or file: URI) made absolute: Spark's JVM resolves a relative one
    # against its own working directory, which is not this process's after an os.chdir.
    # Another file system's URI goes to Spark's readers as it is.
    where = locate(path)
    path = where.spark
    fmt = trace_format(path, fmt)
    if where.local is not None:
        _check_exists(path)
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise TraceError(path, f"time_scale must be a positive number, got {time_scale!r}")
    with spark_errors("Spark cannot read it", functools.partial(TraceError, path), _nanos_hint):
        scan, from_files = _scan(spark, path, fmt)
        plan = _TracePlan(path, fmt, scan, stream, ts_column, time_scale, from_files)
        info = plan.inspect()
        return plan.frame(), info


# -- where a replay's traces and report are ----------------------------------------
# Why each must be on this machine, and what to do instead.
LOCAL_REPORT = ("cqopt writes the report itself",
                "give a local folder (or a mount of that file system)")
LISTED_TRACES = ("cqopt lists the folder to find each stream's trace",
                 "name each trace with --trace STREAM=URI, which Spark reads where it is")


def report_locations(out: str | Path, traces: Mapping[str, Any] | None,
                     trace_dir: str | Path | None, name: Callable[[str, Any], str]
                     ) -> tuple[Path, dict[str, str] | None, Path | None]:
    """A replay's report folder and trace folder as local paths (a path or a ``file:``
    URI, :func:`cqopt.location.locate`; another file system's URI refused), and each
    trace as Spark reads it (a local one made an absolute path, any other URI as given).

    ``name(parameter, value)`` names a parameter in messages.

    >>> out, traces, _ = report_locations("file:///tmp/r", {"TCP": "hdfs://nn/TCP.parquet"},
    ...                                   None, lambda k, v: f"--{k} {v}")
    >>> out, traces
    (PosixPath('/tmp/r'), {'TCP': 'hdfs://nn/TCP.parquet'})
    """
    out = locate(out, name("out", out), needs_local=LOCAL_REPORT).local
    if trace_dir is not None:
        trace_dir = locate(trace_dir, name("traces", trace_dir), needs_local=LISTED_TRACES).local
    if traces is not None:
        traces = {stream: locate(path, name("trace", f"{stream}={path}")).spark
                  for stream, path in traces.items()}
    return out, traces, trace_dir


def check_trace_location(path: str, where: str) -> None:
    """A trace on this machine checked before Spark starts
    (:func:`~cqopt.replay.trace_format.check_trace_files`); one on another file system is
    said, in one line on stderr, to go to Spark unchecked."""
    if locate(path).local is None:
        print(f"{where}: not on this machine, so not checked before Spark starts; Spark "
              "reads it where it is", file=sys.stderr)
        return
    check_trace_files(path)


def _check_exists(path: str) -> None:
    """A local trace exists and, a file, is not empty."""
    if not os.path.exists(path):
        raise TraceError(path, "no such file")
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise TraceError(path, "the file is empty")


def _nanos_hint(text: str) -> str:
    if "TIMESTAMP(NANOS" in text:  # pandas writes nanoseconds by default
        return ("; Spark reads Parquet timestamps in micro- or milliseconds: write them "
                "with to_parquet(..., coerce_timestamps='us'), or as seconds")
    return ""


def _scan(spark: SparkSession, path: str, fmt: str) -> tuple[DataFrame, bool]:
    """The file as Spark reads it, and whether Spark read it from the file itself.

    The format's Spark reader if it has one, else its pure-Python reader's frame.
    """
    reader = trace_reader(fmt, "spark")
    if reader is not None:
        return reader(spark, path), True
    frame = read_trace_frame(path, fmt)
    if frame.empty:
        raise TraceError(path, "the trace has no data rows")
    return spark.createDataFrame(frame), False


def scan_parquet(spark: SparkSession, path: str) -> DataFrame:
    """A Parquet trace (a file or a directory of parts) as Spark reads it."""
    return spark.read.parquet(path)


def scan_csv(spark: SparkSession, path: str) -> DataFrame:
    """A CSV trace as Spark reads it: string columns, named by the header."""
    return spark.read.option("header", True).option("mode", "PERMISSIVE").csv(path)


def scan_dec(spark: SparkSession, path: str) -> DataFrame:
    """A DEC-PKT trace as Spark reads it: its six fields as strings, each line's field
    count (``_fields``) and the line itself (``_line``), for the malformed-line check."""
    from pyspark.sql import functions as F

    lines = spark.read.text(path)
    fields = F.split(F.trim(F.col("value")), r"\s+")
    return lines.select(*[F.try_element_at(fields, F.lit(i + 1)).alias(name)
                          for i, name in enumerate(DEC_COLUMNS)],
                        F.size(fields).alias("_fields"),
                        F.col("value").alias("_line"))


for _name, _reader in (("parquet", scan_parquet), ("csv", scan_csv), ("dec", scan_dec)):
    register_trace_reader(_name, "spark", _reader)


class _TracePlan:
    """Which trace column becomes which output column, and the checks on them."""

    def __init__(self, path: str, fmt: str, scan: DataFrame, stream: Stream,
                 ts_column: str | None, time_scale: float, from_files: bool = True):
        self.path, self.fmt, self.scan, self.stream = path, fmt, scan, stream
        self.from_files = from_files
        self.time_scale = time_scale
        self.is_dec = fmt == "dec"
        names = [c for c in scan.columns if not (self.is_dec and c in ("_fields", "_line"))]
        self.trace_columns = names
        self.by_lower = {c.lower(): c for c in names}
        self.types = dict(scan.dtypes)
        self.ts_source = self.find_ts(ts_column)
        stream_ts = next((c for c in stream.columns if c.type == "timestamp"), None)
        # column name (catalog spelling) -> trace column it comes from
        self.sources: dict[str, str] = {}
        self.missing: list[str] = []
        for col in stream.columns:
            source = self.by_lower.get(col.name.lower())
            if col.name.lower() == "ts":
                if col.type != "timestamp":
                    raise TraceError(path, f"stream {stream.name}'s column {col.name} is "
                                     f"{col.type}, but 'ts' is the name of the trace's time "
                                     "column; rename the catalog column")
                continue  # the output's ts is this column
            if source is None and col is stream_ts:
                source = self.ts_source  # the stream's time is the trace's time
            if source is None:
                self.missing.append(col.name)
            else:
                self.sources[col.name] = source

    def find_ts(self, ts_column: str | None) -> str:
        have = ", ".join(self.trace_columns) or "none"
        if ts_column is not None:
            source = self.by_lower.get(ts_column.lower())
            if source is None:
                raise TraceError(self.path, f"no column {ts_column!r} to take times from; the "
                                 f"trace's columns are {have}")
            return source
        stream_ts = [c.name for c in self.stream.columns if c.type == "timestamp"]
        for name in (*stream_ts[:1], *TS_NAMES):
            if name.lower() in self.by_lower:
                return self.by_lower[name.lower()]
        declared = (f"declares timestamp column {stream_ts[0]}" if stream_ts
                    else "declares no timestamp column")
        raise TraceError(self.path, f"no timestamp column: stream {self.stream.name} "
                         f"{declared}, and the trace has no column named "
                         f"{', '.join(TS_NAMES)}; its columns are {have}; pass "
                         "ts_column='NAME' naming the column of arrival times in seconds")

    # -- conversions --------------------------------------------------------------
    def seconds(self, source: str) -> SparkColumn:
        from pyspark.sql import functions as F

        col, dtype = F.col(f"`{source}`"), self.types[source]
        if dtype.startswith("timestamp"):
            return F.unix_micros(col.cast("timestamp")) / 1e6
        if dtype == "string":
            col = F.trim(col).try_cast("double")
        elif _is_numeric(dtype):
            col = col.cast("double")
        else:
            raise TraceError(self.path, f"column {source} is {dtype}, but times must be "
                             "numbers of seconds or timestamps (for the arrival time, pass "
                             "ts_column= naming another column)")
        return col * F.lit(self.time_scale) if self.time_scale != 1.0 else col

    def converted(self, name: str) -> SparkColumn:
        from pyspark.sql import functions as F

        column = self.stream.column(name)
        source = self.sources[name]
        if column.type == "timestamp":
            return self.seconds(source)
        col, dtype = F.col(f"`{source}`"), self.types[source]
        target = SPARK_TYPES[column.type]
        if dtype == "string" and target != "string":
            col = F.trim(col)
        if target == "long" and not dtype.startswith(("int", "bigint", "smallint", "tinyint")):
            # "12.0" (a CSV written from floats) is the integer 12; "12.5" is not.
            as_double = col.try_cast("double")
            as_long = as_double.try_cast("long")
            return F.coalesce(col.try_cast("long"),
                              F.when(as_long.cast("double") == as_double, as_long))
        return col.try_cast(target)

    def frame(self) -> DataFrame:
        from pyspark.sql import functions as F

        scan = self.scan
        if self.is_dec:
            scan = scan.where(F.trim(F.col("_line")) != "")
        columns = [self.seconds(self.ts_source).alias("ts")]
        columns += [self.converted(name).alias(name) for name in self.sources]
        return scan.select(*columns)

    # -- the one job: counts, span, order, and the checks ----------------------------
    def inspect(self) -> TraceInfo:
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        scan = self.scan
        if self.is_dec:
            scan = scan.where(F.trim(F.col("_line")) != "")
        # File order: a row's split (file, byte offset) then its position in the split.
        # Spark may list a file's splits out of order, but never reorders a split's rows.
        # A frame read through pandas is one split, in the file's order.
        path = F.col("_metadata.file_path") if self.from_files else F.lit(self.path)
        block = F.col("_metadata.file_block_start") if self.from_files else F.lit(0)
        tagged = scan.select(
            "*", path.alias("_path"), F.xxhash64(path).alias("_file"), block.alias("_block"),
            F.monotonically_increasing_id().alias("_row"))
        ts = self.seconds(self.ts_source)
        self.bad_ts = ts.isNull() | F.isnan(ts) | (F.abs(ts) == float("inf"))
        flags = {"_bad_ts": self.bad_ts}
        if self.is_dec:
            flags["_malformed"] = F.col("_fields") != len(DEC_COLUMNS)
        for name, source in self.sources.items():
            if self.may_fail(name):
                flags[f"_unparsed_{name}"] = (F.col(f"`{source}`").isNotNull()
                                              & self.converted(name).isNull())
        rows = tagged.select(
            ts.alias("ts"), "_path", "_file", "_block", "_row",
            *[F.when(flag, 1).otherwise(0).cast("int").alias(key) for key, flag in flags.items()])
        if self.fmt == "parquet":
            return self.info(_order_counts(rows, list(flags)))
        # Text is parsed once, not once per branch of the job: the narrow rows are kept.
        rows = rows.persist(StorageLevel.MEMORY_AND_DISK)
        try:
            return self.info(_order_counts(rows, list(flags)))
        finally:
            rows.unpersist()

    def may_fail(self, name: str) -> bool:
        """Whether converting column ``name`` can turn a value into NULL (a parse failure)."""
        dtype = self.types[self.sources[name]]
        target = SPARK_TYPES[self.stream.column(name).type]
        if target == "string":
            return False
        if target == "long":
            return not dtype.startswith(("int", "bigint", "smallint", "tinyint"))
        if target == "double":
            return not (_is_numeric(dtype) or dtype.startswith("timestamp"))
        return dtype != "boolean"

    def info(self, counts: dict[str, Any]) -> TraceInfo:
        """The TraceInfo the job's counts give, or the TraceError they show."""
        from pyspark.sql import functions as F

        n = counts["rows"] or 0
        if n == 0:
            raise TraceError(self.path, "the trace has no data rows")
        if counts.get("_malformed"):
            example = self.example(F.col("_fields") != len(DEC_COLUMNS), "_line")
            raise TraceError(self.path, f"{counts['_malformed']} of {n} lines are not DEC-PKT "
                             f"lines of {len(DEC_COLUMNS)} fields ({' '.join(DEC_COLUMNS)}), "
                             f"e.g. {example!r}; if it is CSV, pass fmt='csv'")
        if counts["_bad_ts"]:
            example = self.example(self.bad_ts, self.ts_source)
            raise TraceError(self.path, f"{counts['_bad_ts']} of {n} rows have no numeric "
                             f"timestamp in column {self.ts_source} (e.g. {example!r}); times "
                             "must be numbers of seconds (or pass ts_column= naming another "
                             "column)")
        unparsed = {name: int(counts[f"_unparsed_{name}"]) for name in self.sources
                    if counts.get(f"_unparsed_{name}")}
        return TraceInfo(
            path=self.path, rows=int(n), start=float(counts["start"]),
            end=float(counts["end"]), out_of_order=int(counts["out_of_order"]),
            late=int(counts["late"]), format=self.fmt, ts_column=self.ts_source,
            columns=tuple(c.name for c in self.stream.columns
                          if c.name in self.sources or c.name.lower() == "ts"),
            missing=tuple(self.missing), unparsed=unparsed)

    def example(self, condition: SparkColumn, column: str) -> Any:
        """One offending value, for the error message (a second, tiny job)."""
        from pyspark.sql import functions as F

        scan = self.scan
        if self.is_dec:
            scan = scan.where(F.trim(F.col("_line")) != "")
        row = scan.where(condition).select(F.col(f"`{column}`")).limit(1).collect()
        return row[0][0] if row else None


def _order_counts(rows: DataFrame, flags: list[str]) -> dict[str, Any]:
    """Rows, time span, out-of-order and late counts, and each flag's sum, in one job.

    ``rows`` has ``ts``, the split (``_path`` and its hash ``_file``,
    ``_block``) and the position in it (``_row``). Within a split a window
    gives each row's predecessor and the largest time before it; a row first
    in its split takes them from the splits before (a join of the few split
    summaries with each other). The window shuffles the hash, not the path.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_split = Window.partitionBy("_file", "_block").orderBy("_row")
    ordered = rows.drop("_path").select(
        "*", F.lag("ts").over(in_split).alias("_prev"),
        F.max("ts").over(in_split.rowsBetween(Window.unboundedPreceding, -1))
        .alias("_max_before"))
    splits = rows.groupBy("_file", "_block").agg(
        F.first("_path").alias("_path"), F.max_by("ts", "_row").alias("_last"),
        F.max("ts").alias("_top"))
    # Each split with those before it in file order: a few rows, no one-task window.
    here, before = splits.alias("here"), splits.alias("before")
    earlier = (F.col("before._path") < F.col("here._path")) | (
        (F.col("before._path") == F.col("here._path"))
        & (F.col("before._block") < F.col("here._block")))
    splits = here.join(F.broadcast(before), earlier, "left").groupBy(
        F.col("here._file").alias("_file"), F.col("here._block").alias("_block")).agg(
        F.max_by(F.col("before._last"), F.struct(F.col("before._path"), F.col("before._block")))
        .alias("_split_prev"),
        F.max(F.col("before._top")).alias("_split_max_before"))
    ordered = ordered.join(F.broadcast(splits), ["_file", "_block"])
    prev = F.coalesce(F.col("_prev"), F.col("_split_prev"))
    max_before = F.greatest(F.col("_max_before"), F.col("_split_max_before"))
    return ordered.agg(
        F.count(F.lit(1)).alias("rows"),
        F.min("ts").alias("start"), F.max("ts").alias("end"),
        F.sum(F.when(F.col("ts") < prev, 1).otherwise(0)).alias("out_of_order"),
        F.sum(F.when(F.col("ts") < max_before, 1).otherwise(0)).alias("late"),
        *[F.sum(key).alias(key) for key in flags]).collect()[0].asDict()


def _is_numeric(dtype: str) -> bool:
    return dtype.startswith(("int", "bigint", "smallint", "tinyint", "double", "float",
                             "decimal"))


