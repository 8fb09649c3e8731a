"""A run's sources: each stream's input, checked against the catalog, read as a stream.

A :class:`Source` is a directory of trace files in a format Spark streams
(Parquet, CSV, or any registered format with a
:class:`~cqopt.replay.trace_format.StreamSource`: the trace-format registry
names and reads them, as for every reader of traces) or Spark's ``rate``
source. Before Spark reads a tuple, every file of a directory is checked:
readable, with a time column and no column the catalog's stream lacks.
:func:`read_stream` gives the stream as Structured Streaming reads it, one
row per tuple: ``_stream``, ``ts`` in seconds, then ``STREAM__COLUMN`` for each
column of the catalog's stream.

**The rate source** (a live demo): ``Source.rate("TCP", 200)`` is Spark's
``rate`` source at 200 rows/s; ``ts`` is its ``timestamp`` in seconds, and
each int column of the catalog stream is ``1 + pmod(xxhash64(value, i),
1000)`` (so equi-joins on them match about one pair in 1000, like the
example workload's λ-λ chart assumes), each double column ``value``, each
string column ``value`` as text and each bool column whether ``value`` is even.
It needs a processing-time trigger (``trigger="5"``).

>>> Source.rate("TCP", 200)
Source(stream='TCP', kind='rate', path=None, rows_per_second=200, options=None)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.errors import parse_number
from cqopt.replay.trace_format import (
    TraceError,
    TraceFormat,
    detect_trace_format,
    streamed_formats,
    trace_formats,
    trace_stem,
)
from cqopt.location import is_uri, locate
from cqopt.spark.run.settings import TRIGGERS, RunContext, StreamingRunError
from cqopt.spark.session import spark_errors
from cqopt.spark.trace_read import SPARK_TYPES

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import StructType

RATE_DOMAIN = 1000
# Why a directory source must be on this machine, and what to do instead.
LOCAL_SOURCE = ("cqopt run reads a directory source's files itself too (it checks each one "
                "before Spark starts and reads the rest of one still being written)",
                "copy the files to a local folder, or mount that file system here and give "
                "the mount's path")
_TIME_NAMES = ("ts", "timestamp", "time")


# Spark's own streaming sources (besides files and rate:N): the options each cannot do
# without, and those that must be whole numbers, so a wrong one is said before Spark starts.
SOURCE_OPTIONS = {
    "socket": {"required": ("host", "port"), "whole": ("port",)},
    "rate-micro-batch": {"required": ("rowsPerBatch",),
                         "whole": ("rowsPerBatch", "numPartitions", "startTimestamp",
                                   "advanceMillisPerBatch")},
    "kafka": {"required": ("kafka.bootstrap.servers",),
              "one_of": ("subscribe", "subscribePattern", "assign")},
}


def check_source_options(stream: str, name: str, options: Mapping[str, str]) -> None:
    """Refuse, in one line, options that Spark's own source ``name`` would refuse when it
    starts: a required one missing, a whole number that is not one (others: not known
    here, Spark's word when the run starts).

    >>> check_source_options("TCP", "socket", {"host": "localhost", "port": "99x"})
    Traceback (most recent call last):
    ...
    cqopt.spark.run.settings.StreamingRunError: --source TCP=socket:...: option port=99x must be a whole number
    >>> check_source_options("TCP", "socket", {"host": "localhost"})
    Traceback (most recent call last):
    ...
    cqopt.spark.run.settings.StreamingRunError: --source TCP=socket:...: Spark's socket source needs the option port; e.g. socket:host=localhost,port=9999
    """
    rules = SOURCE_OPTIONS.get(name)
    if rules is None:
        return
    where = f"--source {stream}={name}:..."
    given = {k.lower(): (k, v) for k, v in options.items()}
    for key in rules.get("required", ()):
        if key.lower() not in given:
            example = ("; e.g. socket:host=localhost,port=9999" if name == "socket" else "")
            raise StreamingRunError(f"{where}: Spark's {name} source needs the option "
                                    f"{key}{example}")
    one_of = rules.get("one_of", ())
    if one_of and not any(k.lower() in given for k in one_of):
        raise StreamingRunError(f"{where}: Spark's {name} source needs one of the options "
                                f"{', '.join(one_of)}")
    for key in rules.get("whole", ()):
        if key.lower() in given:
            original, value = given[key.lower()]
            if not value.strip().lstrip("-").isdigit():
                raise StreamingRunError(f"{where}: option {original}={value} must be a whole "
                                        "number")


@dataclass(frozen=True)
class Source:
    """One stream's input: a directory of Parquet or CSV files, Spark's rate source, or any
    Structured Streaming source by its format name and options (:meth:`stream_format`)."""

    stream: str
    kind: str  # a streamed trace format (parquet, csv, ...), rate, or a Structured
    # Streaming format by name (socket, kafka, ...)
    path: str | None = None
    rows_per_second: int | None = None
    options: dict[str, str] | None = None  # a format source's options, as Spark takes them

    def __post_init__(self) -> None:
        # A directory's path is local and absolute, however the Source was made: the run
        # checks, lists and watches its files itself (cqopt.location says why).
        if self.path is not None:
            where = locate(self.path, f"--source {self.stream}={self.path}",
                           needs_local=LOCAL_SOURCE, error=StreamingRunError)
            object.__setattr__(self, "path", str(where.local))

    def identity(self) -> dict[str, Any]:
        """The source as a run folder's state names it (options only where it has some)."""
        fields = asdict(self)
        if fields["options"] is None:
            del fields["options"]
        return fields

    @classmethod
    def stream_format(cls, stream: str, name: str, options: Mapping[str, str]) -> Source:
        """Structured Streaming's source ``name`` with ``options``
        (``spark.readStream.format(name).options(**options)``).

        Its rows become the stream's tuples by one rule: a source that gives a
        ``value`` column (text or bytes: ``socket``, ``kafka``) and none of the
        stream's columns holds one tuple per value, **the stream's catalog
        columns as a line of CSV text, in the catalog's order, without a
        header**, the time column in seconds (``12.5,3,2,...``); a source that
        gives the stream's columns by name is read as a file of them is (a time
        column among ``ts``, ``timestamp``, ``time``). Options Spark refuses are
        a :class:`StreamingRunError` of one line when the run starts.

        >>> Source.stream_format("TCP", "socket", {"host": "localhost", "port": "9999"}).kind
        'socket'
        """
        if name == "rate" or name in streamed_formats():
            raise StreamingRunError(f"--source {stream}={name}:...: give {name} sources as "
                                    + ("rate:N" if name == "rate" else "a directory"))
        check_source_options(stream, name, options)
        return cls(stream, name, None, None, dict(options))

    @classmethod
    def files(cls, stream: str, path: str | Path) -> Source:
        """A directory of trace files of one format Spark streams (``.parquet``, ``.csv``, ...).

        Raises
        ------
        StreamingRunError
            The path does not exist, is not a directory, or holds no such file; a URI of
            another file system (:data:`LOCAL_SOURCE` says why).
        """
        where = f"--source {stream}={path}"
        path = locate(path, where, needs_local=LOCAL_SOURCE,  # file:// URIs too
                      error=StreamingRunError).local
        if not path.exists():
            raise StreamingRunError(f"{where}: no such directory")
        if not path.is_dir():
            raise StreamingRunError(f"{where}: not a directory; a streaming source is a "
                                    "directory of .parquet or .csv files (cqopt generate "
                                    "--file-per-round writes one)")
        # The trace-format registry names the files (cqopt.replay.trace_format), as for
        # every other reader of traces; Structured Streaming reads those it can stream.
        try:
            kind = detect_trace_format(path).name
        except TraceError as err:
            raise StreamingRunError(f"{where}: {err.problem}; write one file per round "
                                    "with cqopt generate --file-per-round SECONDS") from None
        if kind not in streamed_formats():
            raise StreamingRunError(f"{where}: holds {kind} traces, which Spark Structured "
                                    f"Streaming cannot read as they come; it reads "
                                    f"{' or '.join(streamed_formats())}: convert them (cqopt "
                                    "generate --file-per-round writes Parquet)")
        # Absolute (locate makes it so): Spark's JVM resolves a relative path against its
        # own working directory, which is not this process's after an os.chdir.
        return cls(stream, kind, str(path))

    @classmethod
    def rate(cls, stream: str, rows_per_second: int) -> Source:
        """Spark's ``rate`` source at ``rows_per_second`` (see the module docstring)."""
        if not (isinstance(rows_per_second, int) and rows_per_second > 0):
            raise StreamingRunError(f"--source {stream}=rate:{rows_per_second}: the rate "
                                    "must be a whole number of rows per second >= 1")
        return cls(stream, "rate", None, rows_per_second)

    @classmethod
    def parse(cls, stream: str, text: str) -> Source:
        """``rate:N`` is the rate source at N rows/s; ``FORMAT:KEY=VALUE,...`` (a name of
        letters, digits, ``_`` and ``.``, then a colon, where no such directory exists) is
        Structured Streaming's source ``FORMAT`` with those options (a piece without ``=``
        continues the value before it: ``kafka:kafka.bootstrap.servers=a:9092,b:9092``);
        anything else a directory, by its path or ``file:`` URI (``file:///data/TCP``; a
        URI of another file system, ``hdfs://...``, is refused: see :data:`LOCAL_SOURCE`).

        >>> Source.parse("TCP", "socket:host=localhost,port=9999").options
        {'host': 'localhost', 'port': '9999'}
        >>> Source.parse("TCP", "rate:x")
        Traceback (most recent call last):
        ...
        cqopt.errors.CqoptError: --source TCP=rate: 'x': expected a whole number ...
        """
        if text.startswith("rate:"):  # rows/s as the command line reads numbers
            return cls.rate(stream, parse_number(text[5:], f"--source {stream}=rate:",
                                                 integer=True, low=1))
        named = re.fullmatch(r"([A-Za-z][A-Za-z0-9_.]*):(.*)", text, re.DOTALL)
        if named and not is_uri(text) and not Path(text).exists():
            return cls.stream_format(stream, named[1], parse_options(stream, text))
        return cls.files(stream, text)


def parse_options(stream: str, text: str) -> dict[str, str]:
    """The options of ``FORMAT:KEY=VALUE,...`` (see :meth:`Source.parse`).

    >>> parse_options("T", "kafka:kafka.bootstrap.servers=a:9092,b:9092,subscribe=t")
    {'kafka.bootstrap.servers': 'a:9092,b:9092', 'subscribe': 't'}
    >>> parse_options("T", "socket:9999")
    Traceback (most recent call last):
    ...
    cqopt.spark.run.settings.StreamingRunError: --source T=socket:9999: option '9999' is not KEY=VALUE; e.g. socket:host=localhost,port=9999
    """
    name, _, body = text.partition(":")
    options: dict[str, str] = {}
    last = None
    for piece in body.split(",") if body else []:
        key, eq, value = piece.partition("=")
        if eq and key.strip():
            last = key.strip()
            options[last] = value
        elif last is not None:  # a value holding a comma
            options[last] += "," + piece
        else:
            raise StreamingRunError(f"--source {stream}={text}: option {piece!r} is not "
                                    f"KEY=VALUE; e.g. {name}:host=localhost,port=9999")
    return options


def foreign_stream_files(directory: str | Path, stream: str,
                         streams: Iterable[str]) -> list[str]:
    """The files of a source directory named after another stream of the catalog.

    A trace set (``cqopt generate`` without ``--file-per-round``) holds one
    file per stream, ``TCP.parquet``, ``UDP.parquet``, ...; handed whole as
    one stream's source, every stream's tuples would run as that one's.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> for n in ("TCP.parquet", "UDP.parquet", "part-00000.parquet"):
    ...     _ = (d / n).write_bytes(b"")
    >>> foreign_stream_files(d, "TCP", ["TCP", "UDP", "SF"])
    ['UDP.parquet']
    """
    others = {s.lower() for s in streams if s.lower() != stream.lower()}
    found = []
    for path in sorted(Path(directory).iterdir()):
        stem = trace_stem(path.name)
        if stem is not None and stem.lower() in others:
            found.append(path.name)
    return found


def match_sources(sources: Mapping[str, Source | str], streams: tuple[str, ...], name: str,
                  trigger: str | float, catalog_streams: Iterable[str] = ()) -> dict[str, Source]:
    """One source per stream of query ``name``, keyed by the stream's own spelling.

    A source given as text is read by :meth:`Source.parse`, once its stream is
    known to be the query's. A directory holding files named after another
    stream (of the query, or of ``catalog_streams``), such as a trace set's
    ``UDP.parquet`` given as ``--source TCP=...``, is refused: Spark would run
    every stream's tuples as this one's.

    Raises
    ------
    StreamingRunError
        A source for a stream the query does not read, a stream without a
        source, a source that is none (:meth:`Source.parse`), or a rate source
        (which never ends) with a trigger that waits for the input's end.
    """
    by_lower = {s.lower(): s for s in streams}
    for key in sources:
        if key.lower() not in by_lower:
            raise StreamingRunError(f"--source {key}=...: query {name} reads no stream {key}; "
                                    f"its streams are {', '.join(streams)}")
    missing = [s for s in streams if s.lower() not in {k.lower() for k in sources}]
    if missing:
        raise StreamingRunError(f"no --source for stream{'s' if len(missing) > 1 else ''} "
                                f"{', '.join(missing)} of query {name}; pass --source "
                                f"{missing[0]}=DIR (or {missing[0]}=rate:N)")
    matched: dict[str, Source] = {}
    for key, source in sources.items():
        stream = by_lower[key.lower()]
        if isinstance(source, str):
            source = Source.parse(stream, source)
        matched[stream] = replace(source, stream=stream)
    everyone = set(streams) | set(catalog_streams)
    for source in matched.values():
        foreign = [] if source.path is None else foreign_stream_files(
            source.path, source.stream, everyone)
        if foreign:
            raise StreamingRunError(
                f"--source {source.stream}={source.path}: holds files of other streams "
                f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}), which "
                f"would all run as {source.stream}; give each stream a directory of its own "
                "files (cqopt generate --file-per-round SECONDS writes OUT/STREAM/)")
    rate = [s.stream for s in matched.values() if s.kind == "rate"]
    if rate and trigger in TRIGGERS:
        raise StreamingRunError(f"--source {rate[0]}=rate:...: Spark's rate source never "
                                f"ends, so it needs a processing-time trigger "
                                f"(--trigger SECONDS), not {trigger}")
    return matched


def check_source_files(sources: Iterable[Source], catalog) -> None:
    """Each directory source's files whole and of its stream's layout, before Spark starts
    (Spark would fail on an empty, truncated or foreign file only when it reads it).

    Raises
    ------
    StreamingRunError
        A file that is empty, truncated, not its format, or of another layout.
    """
    from cqopt.replay.trace_format import check_trace_files

    for source in sources:
        if source.path is None:  # rate, or a Structured Streaming source by name
            continue
        try:
            check_trace_files(source.path)
        except TraceError as err:
            raise StreamingRunError(f"--source {source.stream}={source.path}: {err}; move the "
                                    "file out of the directory (or repair it)") from None
        stream = catalog.stream(source.stream)
        times = [c.name for c in stream.columns if c.type == "timestamp"][:1]
        check_layouts(source, file_columns(source, trace_formats()[source.kind]),
                      [c.name for c in stream.columns],
                      [*times, *_TIME_NAMES])


def read_stream(ctx: RunContext, source: Source) -> DataFrame:
    """The source as a Structured Streaming frame: ``_stream``, ``ts`` (seconds), and
    ``STREAM__COLUMN`` for each column of the catalog's stream (null where a file lacks it).

    Raises
    ------
    StreamingRunError
        A file of a directory that does not fit the catalog (see :func:`file_schema`).
    """
    from pyspark.sql import functions as F

    stream = ctx.catalog.stream(source.stream)
    if source.kind == "rate":
        raw = (ctx.spark.readStream.format("rate")
               .option("rowsPerSecond", source.rows_per_second).load())
        seconds = F.unix_micros(F.col("timestamp")) / 1e6
        columns = [F.lit(stream.name).alias("_stream"), seconds.alias("ts")]
        for i, col in enumerate(c for c in stream.columns if c.name.lower() != "ts"):
            value = seconds if col.type == "timestamp" else _rate_column(col.type, i)
            columns.append(value.alias(f"{stream.name}__{col.name}"))
        return raw.select(*columns)
    if source.kind != "rate" and source.kind not in streamed_formats():
        return _format_stream(ctx, source, stream)
    schema, time_column = file_schema(ctx, source)
    spec = trace_formats()[source.kind].stream
    reader = ctx.spark.readStream.schema(schema).format(spec.source).options(**dict(spec.options))
    if ctx.settings.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", ctx.settings.max_files_per_trigger)
    raw = reader.load(source.path)
    # Which file each tuple came from, and the size Spark listed it at: a file still
    # being written when listed is read in part (cqopt.spark.run.files reads the rest).
    return raw.select(*batch_columns(stream, schema, time_column),
                      F.col("_metadata.file_path").alias("_file"),
                      F.col("_metadata.file_size").alias("_file_size"))


def _format_stream(ctx: RunContext, source: Source, stream) -> DataFrame:
    """A Structured Streaming source by format name, its rows made tuples of ``stream`` by
    :meth:`Source.stream_format`'s rule.

    Raises
    ------
    StreamingRunError
        Spark refuses the format or its options, or its rows hold no time column.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StructField, StructType

    text = f"{source.kind}:" + ",".join(f"{k}={v}" for k, v in (source.options or {}).items())
    where = f"--source {source.stream}={text}"
    with spark_errors(f"{where}: Spark refuses it", StreamingRunError):
        raw = ctx.spark.readStream.format(source.kind).options(**(source.options or {})).load()
    have = {f.name.lower(): f for f in raw.schema.fields}
    mine = [c for c in stream.columns if c.name.lower() in have]
    if "value" in have and not mine and have["value"].dataType.typeName() in ("string",
                                                                              "binary"):
        # One line of CSV text per tuple: the catalog's columns in order, time in seconds.
        schema = StructType([StructField(c.name, DoubleType() if c.type == "timestamp" else
                                         spark_type(SPARK_TYPES[c.type]))
                             for c in stream.columns])
        ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
        raw = raw.select(F.from_csv(F.col("value").cast("string"), ddl).alias("_tuple")
                         ).select("_tuple.*")
    else:
        schema = raw.schema
    by_lower = {f.name.lower(): f for f in schema.fields}
    time_names = [c.name for c in stream.columns if c.type == "timestamp"][:1] + list(
        _TIME_NAMES)
    time_column = next((by_lower[n.lower()] for n in time_names if n.lower() in by_lower),
                       None)
    if time_column is None:
        raise StreamingRunError(f"{where}: its rows have no time column (one of "
                                f"{', '.join(time_names)}) among "
                                f"{', '.join(f.name for f in schema.fields)}; a text source "
                                "gives the stream's columns as CSV lines")
    return raw.select(*batch_columns(stream, schema, time_column))


def batch_columns(stream, schema: StructType, time_column) -> list:
    """The columns of a file source's rows in the batch's layout: ``_stream``, ``ts``
    (seconds) and ``STREAM__COLUMN`` for each column of the catalog's ``stream``."""
    from pyspark.sql import functions as F

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
    return columns


def file_schema(ctx: RunContext, source: Source) -> tuple[StructType, Any]:
    """The directory's schema, checked against the catalog; and its time column.

    Raises
    ------
    StreamingRunError
        A file that is unreadable or of another layout (:func:`check_layouts`),
        no time column, a column the catalog's stream lacks, or none of a column
        the query reads.
    """
    from pyspark.sql.types import DoubleType, StructField, StructType

    stream = ctx.catalog.stream(source.stream)
    where = f"--source {source.stream}={source.path}"
    time_names = [c.name for c in stream.columns if c.type == "timestamp"][:1]
    time_names += list(_TIME_NAMES)
    fmt = trace_formats()[source.kind]
    # Every file readable and of the stream's layout, before Spark reads one.
    layouts = file_columns(source, fmt)
    if not layouts:
        raise StreamingRunError(f"{where}: holds no {fmt.name} file any more; put the "
                                "stream's files back, or give another --source")
    check_layouts(source, layouts, [c.name for c in stream.columns], time_names)
    if fmt.stream.typed:  # the files say their columns' types
        schema = (ctx.spark.read.format(fmt.stream.source).options(**dict(fmt.stream.options))
                  .load(source.path).schema)
    else:  # the catalog types each column; the first file names them
        fields = []
        for name in layouts[min(layouts)]:
            col = stream.column(name)
            fields.append(StructField(name, DoubleType() if col is None or
                                      col.type == "timestamp" else
                                      spark_type(SPARK_TYPES[col.type])))
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
    needed = [c for c in ctx.query.required_columns(stream.name)
              if c.lower() not in by_lower
              and not (c.lower() == "ts" or (stream.column(c) is not None
                                             and stream.column(c).type == "timestamp"))]
    if needed:
        raise StreamingRunError(f"{where}: has no column {', '.join(needed)}, which query "
                                f"{ctx.name} reads; its columns are {', '.join(names)}")
    return schema, time_column


def file_columns(source: Source, fmt: TraceFormat) -> dict[str, list[str]]:
    """Each file of a source directory -> its columns (a Parquet footer, a CSV header:
    :meth:`TraceFormat.file_columns <cqopt.replay.trace_format.TraceFormat.file_columns>`).

    Raises
    ------
    StreamingRunError
        A file that does not read as its format (corrupt, truncated): Spark would
        fail on it only when its micro-batch runs.
    """
    layouts = {}
    for path in sorted(Path(source.path).iterdir()):
        if path.name.startswith((".", "_")) or not fmt.matches(path):
            continue
        try:
            layouts[path.name] = fmt.file_columns(path)
        except TraceError as err:
            raise StreamingRunError(
                f"--source {source.stream}={source.path}: file {path.name}: "
                f"{err.problem[:160]}; move it out of the directory (or repair it) and rerun "
                "with the same --out") from None
    return layouts


def check_layouts(source: Source, layouts: Mapping[str, list[str]], columns: list[str],
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


def spark_type(name: str):
    """The Spark SQL type of a :data:`~cqopt.spark.trace_read.SPARK_TYPES` name."""
    from pyspark.sql import types as T

    return {"long": T.LongType(), "double": T.DoubleType(), "boolean": T.BooleanType(),
            "string": T.StringType()}[name]


def file_hint(text: str) -> str:
    """What to do when Spark cannot read a source file (corrupt, deleted, another schema)."""
    if "FileNotFound" in text or "does not exist" in text:
        return ("; a source file was deleted before Spark read it: put it back, or start "
                "again with a new --out")
    if "FAILED_READ_FILE" in text or "not a Parquet file" in text or "CANNOT_READ" in text:
        return ("; move the file out of the source directory (or repair it) and rerun with "
                "the same --out")
    return ""


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
