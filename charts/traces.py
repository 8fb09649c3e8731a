"""Stream traces: read them with Spark, make synthetic ones with numpy.

A *trace* is the record of one stream's tuples, each with its arrival time.
Three file formats are read (:func:`read_trace`), chosen by ``fmt`` or by the
file's name:

- ``dec``: the Internet Traffic Archive's DEC-PKT text format, one packet per
  line, whitespace-separated ``ts src_host dest_host src_port dest_port
  bytes``, no header (``.dec``, ``.txt``, ``.tcp``, ``.udp``, ``.sf``,
  ``.dat``, optionally gzipped);
- ``csv``: CSV with a header line and a named timestamp column (``.csv``,
  ``.csv.gz``);
- ``parquet``: a Parquet file or a directory of them (``.parquet``).

What comes back is a Spark DataFrame with a ``ts`` column (double, seconds)
and the catalog stream's columns that the trace has, converted to the
catalog's types (int and long -> long, double -> double, bool -> boolean,
string -> string, timestamp -> double seconds), together with a
:class:`TraceInfo`: rows, time span, and how far the trace is from time
order in file order (``out_of_order``: a timestamp below the previous row's;
``late``: below the largest timestamp seen before). Out-of-order rows are
kept: rounds are assigned by timestamp, so each lands in its own round.

The generator (:func:`generate_trace`) makes traces whose statistics move
the way the OM paper's optimizer must follow: arrivals from a
Markov-modulated Poisson process with a chosen coefficient of variation of
the per-second rate (or the inter-arrival times of a real trace, replayed),
and attribute values whose Zipf skew and popularity ranking drift, so that a
selection's selectivity changes over time.

>>> import math
>>> from catalog import Catalog
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [100, 300],
...     "columns": {"ts": "timestamp", "a": "int", "tag": "string(8)"}}}})
>>> trace = generate_trace(cat.stream("S"), 60.0, seed=7)
>>> list(trace.columns), math.isclose(len(trace) / 60.0, 200, rel_tol=0.2)
(['ts', 'a', 'tag'], True)
>>> bool(trace.ts.is_monotonic_increasing), int(trace.a.min()) >= 1, int(trace.a.max()) <= 50
(True, True, True)
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from catalog import Stream
from catalog.errors import CqoptError
from charts.spark_build import spark_errors

if TYPE_CHECKING:  # pyspark loads only when a trace is read
    from pyspark.sql import Column as SparkColumn
    from pyspark.sql import DataFrame, SparkSession

FORMATS = ("dec", "csv", "parquet")
DEC_COLUMNS = ("ts", "src_host", "dest_host", "src_port", "dest_port", "bytes")
TS_NAMES = ("ts", "timestamp", "time")  # tried, in order, when nothing names the time column
SPARK_TYPES = {"int": "long", "long": "long", "double": "double", "bool": "boolean",
               "string": "string", "timestamp": "double"}
_DEC_SUFFIXES = (".dec", ".txt", ".tcp", ".udp", ".sf", ".dat")
_COMPRESSION = (".gz", ".bz2", ".deflate", ".zst", ".lz4", ".snappy")

# Generator constants. Eight modulating states give a near-continuous spread of
# rates; a state lasts 10 s on average, long against the 1-s buckets the rate CV
# is measured on and short against a 10-minute run.
MMPP_STATES = 8
MEAN_SOJOURN_S = 10.0
DRIFT_AMPLITUDE = 0.5  # the Zipf exponent swings by +-50% over a drift period
ZIPF_LEVELS = 33  # exponents the drift is discretized to (one CDF each); odd: zipf_a is one
VOCABULARY = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
_GOLDEN = (math.sqrt(5) - 1) / 2  # spreads the columns' drift phases evenly


class TraceError(CqoptError):
    """A trace file is missing, unreadable, or not what the stream needs.

    >>> str(TraceError("t.csv", "no such file"))
    't.csv: no such file'
    """

    def __init__(self, path: str, problem: str):
        self.path, self.problem = path, problem
        super().__init__(f"{path}: {problem}")


@dataclass(frozen=True)
class TraceInfo:
    """What reading a trace found; times in seconds."""

    path: str
    rows: int
    start: float  # the smallest timestamp
    end: float  # the largest timestamp
    out_of_order: int  # rows whose timestamp is below the previous row's, in file order
    late: int  # rows whose timestamp is below the largest one before them, in file order
    format: str | None = None  # dec, csv or parquet
    ts_column: str | None = None  # the trace's column the times came from
    columns: tuple[str, ...] = ()  # the stream's columns the trace has (catalog spelling)
    missing: tuple[str, ...] = ()  # the stream's columns the trace lacks
    unparsed: dict[str, int] = field(default_factory=dict)  # column -> values not convertible

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def mean_rate(self) -> float:
        """Tuples per second over the trace's span (NaN for a single instant)."""
        return self.rows / self.duration if self.duration > 0 else math.nan


# -- reading ---------------------------------------------------------------------
def trace_format(path: str | Path, fmt: str | None = None) -> str:
    """``fmt`` checked, or the format the file's name implies.

    >>> trace_format("x/dec-pkt-1.tcp.gz"), trace_format("a.csv.gz"), trace_format("p.parquet")
    ('dec', 'csv', 'parquet')
    """
    if fmt is not None:
        low = fmt.lower()
        if low not in FORMATS:
            raise TraceError(str(path), f"unknown trace format {fmt!r}; use one of "
                             + ", ".join(FORMATS))
        return low
    name = Path(str(path).rstrip("/")).name.lower()
    for suffix in _COMPRESSION:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if name.endswith(".csv"):
        return "csv"
    if name.endswith((".parquet", ".pq")):
        return "parquet"
    if name.endswith(_DEC_SUFFIXES):
        return "dec"
    if os.path.isdir(path) and any(Path(path).glob("*.parquet")):
        return "parquet"
    raise TraceError(str(path), "cannot tell the trace format from the file name; pass "
                     "fmt='dec' (DEC-PKT text), 'csv' or 'parquet'")


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
    path = str(path)
    fmt = trace_format(path, fmt)
    _check_exists(path)
    if not (time_scale > 0 and math.isfinite(time_scale)):
        raise TraceError(path, f"time_scale must be a positive number, got {time_scale!r}")
    with spark_errors("Spark cannot read it", functools.partial(TraceError, path), _nanos_hint):
        scan = _scan(spark, path, fmt)
        plan = _TracePlan(path, fmt, scan, stream, ts_column, time_scale)
        info = plan.inspect()
        return plan.frame(), info


def _check_exists(path: str) -> None:
    scheme = path.split("://", 1)[0] if "://" in path else ""
    if scheme in ("", "file"):
        local = path[len("file://"):] if scheme else path
        if not os.path.exists(local):
            raise TraceError(path, "no such file")
        if os.path.isfile(local) and os.path.getsize(local) == 0:
            raise TraceError(path, "the file is empty")


def _nanos_hint(text: str) -> str:
    if "TIMESTAMP(NANOS" in text:  # pandas writes nanoseconds by default
        return ("; Spark reads Parquet timestamps in micro- or milliseconds: write them "
                "with to_parquet(..., coerce_timestamps='us'), or as seconds")
    return ""


def _first_line(err: BaseException, limit: int = 300) -> str:
    text = str(err).strip().splitlines()
    line = text[0] if text else type(err).__name__
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _scan(spark: SparkSession, path: str, fmt: str) -> DataFrame:
    """The file as Spark reads it: string columns for text and CSV."""
    from pyspark.sql import functions as F

    if fmt == "parquet":
        return spark.read.parquet(path)
    if fmt == "csv":
        return spark.read.option("header", True).option("mode", "PERMISSIVE").csv(path)
    lines = spark.read.text(path)
    fields = F.split(F.trim(F.col("value")), r"\s+")
    return lines.select(*[F.try_element_at(fields, F.lit(i + 1)).alias(name)
                          for i, name in enumerate(DEC_COLUMNS)],
                        F.size(fields).alias("_fields"),
                        F.col("value").alias("_line"))


class _TracePlan:
    """Which trace column becomes which output column, and the checks on them."""

    def __init__(self, path: str, fmt: str, scan: DataFrame, stream: Stream,
                 ts_column: str | None, time_scale: float):
        self.path, self.fmt, self.scan, self.stream = path, fmt, scan, stream
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
        path = F.col("_metadata.file_path")
        tagged = scan.select(
            "*", path.alias("_path"), F.xxhash64(path).alias("_file"),
            F.col("_metadata.file_block_start").alias("_block"),
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


# -- generating --------------------------------------------------------------------
def generate_trace(stream: Stream, duration_s: float, *, seed: int,
                   mean_rate: float | None = None, rate_cv: float = 0.25,
                   zipf_a: float = 1.5, domain: int = 50, drift_period_s: float = 300.0,
                   interarrivals: np.ndarray | None = None,
                   sojourn_s: float = MEAN_SOJOURN_S,
                   steady: dict[str, int] | None = None) -> pd.DataFrame:
    """A synthetic trace of ``stream`` over ``[0, duration_s)``: ``ts`` plus the stream's columns.

    Arrivals come from a Markov-modulated Poisson process: ``MMPP_STATES``
    rate levels (log-normal quantiles around ``mean_rate``, by default the
    middle of the stream's catalog range), a new level drawn uniformly every
    ``sojourn_s`` seconds on average, spread so that the per-second arrival
    count has coefficient of variation ``rate_cv``. A Poisson count alone has
    CV ``1/sqrt(rate)``: a smaller ``rate_cv`` is not reachable and gives plain
    Poisson arrivals. With ``interarrivals`` the real gaps are replayed from
    time 0 (cycled if the trace is longer than they last; rescaled to
    ``mean_rate`` only if that is given).

    Values, all drifting with period ``drift_period_s`` (``math.inf``: no
    drift): int and long columns are Zipf over ``1..domain`` with exponent
    ``zipf_a * (1 + 0.5 sin(2 pi t / period + phase))``, and the value ranked
    first moves up by one each period (the ranking rotates); strings take the
    same law over a vocabulary of 8 words; doubles are exponential with a mean
    of 100 that swings by 50%; bools are true with a probability swinging
    between 0.2 and 0.8; timestamp columns are the arrival time. Same seed,
    same frame.

    ``steady`` names integer columns (to their domain size) drawn uniformly
    from ``1..domain`` with no drift: keys such as host ids, whose equi-join
    selectivity then stays near ``1/domain`` as OM's λ-λ chart assumes.
    """
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f"duration_s must be a positive number, got {duration_s!r}")
    if domain < 1:
        raise ValueError(f"domain must be at least 1, got {domain}")
    if not zipf_a > 0:
        raise ValueError(f"zipf_a must be positive, got {zipf_a}")
    if not drift_period_s > 0:
        raise ValueError(f"drift_period_s must be positive (math.inf for no drift), "
                         f"got {drift_period_s}")
    rng = np.random.default_rng(seed)
    if interarrivals is None:
        rate = (sum(stream.rate) / 2) if mean_rate is None else float(mean_rate)
        if not rate > 0:
            raise ValueError(f"mean_rate must be positive, got {mean_rate}")
        ts = mmpp_arrivals(rng, duration_s, rate, rate_cv, sojourn_s)
    else:
        ts = replayed_arrivals(interarrivals, duration_s, mean_rate)
    columns: dict[str, np.ndarray] = {"ts": ts}
    drift = _Drift(ts, drift_period_s, zipf_a)
    steady = {name.lower(): size for name, size in (steady or {}).items()}
    unknown = set(steady) - {c.name.lower() for c in stream.columns
                             if c.type in ("int", "long")}
    if unknown:
        raise ValueError(f"steady columns must be int or long columns of {stream.name}: "
                         f"{', '.join(sorted(unknown))}")
    for index, col in enumerate(stream.columns):
        phase = 2 * math.pi * ((index * _GOLDEN) % 1.0)
        if col.type == "timestamp":
            values = ts.copy()
        elif col.name.lower() in steady:
            values = rng.integers(1, steady[col.name.lower()] + 1, len(ts))
        elif col.type in ("int", "long"):
            values = drift.ranked(rng, domain, phase) + 1
        elif col.type == "string":
            values = np.asarray(VOCABULARY, dtype=object)[drift.ranked(rng, len(VOCABULARY),
                                                                       phase)]
        elif col.type == "double":
            values = rng.exponential(1.0, len(ts)) * 100.0 * (1 + 0.5 * drift.wave(phase))
        elif col.type == "bool":
            values = rng.random(len(ts)) < 0.5 + 0.3 * drift.wave(phase)
        else:  # the catalog knows no other type
            raise ValueError(f"column {col.name}: cannot generate type {col.type}")
        if col.name.lower() == "ts":
            continue  # the arrival time already is ts
        columns[col.name] = values
    return pd.DataFrame(columns)


def mmpp_arrivals(rng: np.random.Generator, duration_s: float, mean_rate: float,
                  rate_cv: float, sojourn_s: float = MEAN_SOJOURN_S,
                  states: int = MMPP_STATES) -> np.ndarray:
    """Sorted arrival times in ``[0, duration_s)`` of a Markov-modulated Poisson process.

    The modulating chain jumps, at rate ``1/sojourn_s``, to a state drawn
    uniformly (possibly the same), so its rate has autocorrelation
    ``exp(-t/sojourn_s)``. The per-second count then has variance
    ``mean_rate + sigma^2 f`` with ``f`` the variance kept by averaging over
    one second; sigma is set so that this equals ``(rate_cv * mean_rate)^2``.
    """
    if rate_cv < 0:
        raise ValueError(f"rate_cv must be >= 0, got {rate_cv}")
    if not sojourn_s > 0:
        raise ValueError(f"sojourn_s must be positive, got {sojourn_s}")
    levels = mean_rate * _rate_levels(_rate_process_cv(mean_rate, rate_cv, sojourn_s), states)
    # The chain's path: sojourns until the run is covered.
    sojourns = rng.exponential(sojourn_s, int(duration_s / sojourn_s * 1.5) + 16)
    while sojourns.sum() < duration_s:
        sojourns = np.concatenate([sojourns, rng.exponential(sojourn_s, len(sojourns))])
    starts = np.concatenate([[0.0], np.cumsum(sojourns)[:-1]])
    keep = starts < duration_s
    starts = starts[keep]
    lengths = np.minimum(sojourns[keep], duration_s - starts)
    state = rng.integers(states, size=len(starts))
    counts = rng.poisson(levels[state] * lengths)
    # Given its count, a Poisson segment's arrivals are uniform over the segment.
    offsets = rng.random(int(counts.sum()))
    ts = np.repeat(starts, counts) + np.repeat(lengths, counts) * offsets
    ts.sort()  # segments are disjoint and in order, so this only sorts within each
    return ts[ts < duration_s]


def _rate_process_cv(mean_rate: float, rate_cv: float, sojourn_s: float) -> float:
    """The CV the modulating rate needs for per-second counts of CV ``rate_cv``."""
    a = 1.0 / sojourn_s  # the rate's autocorrelation decay, per second
    kept = 2 * (a - 1 + math.exp(-a)) / (a * a)  # Var(1-s mean of the rate) / Var(rate)
    excess = (rate_cv * mean_rate) ** 2 - mean_rate  # what Poisson noise leaves to the rate
    return math.sqrt(max(excess, 0.0) / kept) / mean_rate


def _rate_levels(cv: float, states: int) -> np.ndarray:
    """``states`` positive levels of mean 1 and coefficient of variation ``cv``.

    Log-normal quantiles: always positive, symmetric for a small CV and
    skewed (rare high bursts) for a large one.
    """
    if cv == 0:
        return np.ones(states)
    from scipy.optimize import brentq
    from scipy.stats import norm

    z = norm.ppf((np.arange(states) + 0.5) / states)

    def levels(s: float) -> np.ndarray:
        w = np.exp(s * (z - z.max()))  # shifted so large s cannot overflow
        return w / w.mean()

    top = math.sqrt(states - 1)  # the CV as one level takes everything
    if cv >= top * 0.999:
        raise ValueError(f"a rate CV of {cv:.3g} is beyond what {states} modulating states "
                         f"give (< {top:.3g}); ask for a smaller rate_cv")
    s = brentq(lambda s: levels(s).std() - cv, 0.0, 50.0)
    return levels(s)


def replayed_arrivals(interarrivals: np.ndarray, duration_s: float,
                      mean_rate: float | None = None) -> np.ndarray:
    """Arrival times ``0, g0, g0+g1, ...`` below ``duration_s``, cycling the gaps ``g``."""
    gaps = np.asarray(interarrivals, dtype=float)
    gaps = gaps[~np.isnan(gaps)]
    if gaps.size == 0 or (gaps < 0).any() or not np.isfinite(gaps).all() or gaps.sum() <= 0:
        raise ValueError("interarrivals must be finite, non-negative and not all zero")
    if mean_rate is not None:
        gaps = gaps * (1.0 / mean_rate) / gaps.mean()
    cycles = int(duration_s // gaps.sum()) + 1
    ts = np.concatenate([[0.0], np.cumsum(np.tile(gaps, cycles))])
    return ts[ts < duration_s]


class _Drift:
    """The generator's slowly moving value laws, evaluated at the arrival times."""

    def __init__(self, ts: np.ndarray, period: float, zipf_a: float):
        self.ts, self.period, self.zipf_a = ts, period, zipf_a
        # Rank 1 is value ``period number`` (mod the domain): the ranking rotates.
        self.shift = np.floor(ts / period).astype(np.int64) if math.isfinite(period) \
            else np.zeros(len(ts), dtype=np.int64)

    def wave(self, phase: float) -> np.ndarray:
        if not math.isfinite(self.period):
            return np.zeros(len(self.ts))  # no drift: every law at its middle
        return np.sin(2 * math.pi * self.ts / self.period + phase)

    def ranked(self, rng: np.random.Generator, domain: int, phase: float) -> np.ndarray:
        """0-based values: Zipf ranks under the drifting exponent, rotated by the shift."""
        exponent = self.zipf_a * (1 + DRIFT_AMPLITUDE * self.wave(phase))
        lo, hi = self.zipf_a * (1 - DRIFT_AMPLITUDE), self.zipf_a * (1 + DRIFT_AMPLITUDE)
        grid = np.linspace(lo, hi, ZIPF_LEVELS)
        level = np.clip(np.rint((exponent - lo) / (hi - lo) * (ZIPF_LEVELS - 1)), 0,
                        ZIPF_LEVELS - 1).astype(np.int64)
        u = rng.random(len(self.ts))
        ranks = np.empty(len(self.ts), dtype=np.int64)
        weights = np.arange(1, domain + 1, dtype=float)
        for i in np.unique(level):  # one CDF per exponent level, not per tuple
            cdf = np.cumsum(weights ** -grid[i])
            rows = level == i
            ranks[rows] = np.searchsorted(cdf / cdf[-1], u[rows], side="right")
        ranks = np.minimum(ranks, domain - 1)  # u within rounding of 1
        return (ranks + self.shift) % domain


def zipf_share(a: float, domain: int) -> float:
    """The share of the most frequent value of a Zipf law with exponent ``a`` over ``domain``.

    >>> round(zipf_share(1.5, 50), 3)
    0.429
    """
    return 1.0 / float(np.sum(np.arange(1, domain + 1, dtype=float) ** -a))


# -- writing, and real inter-arrival times ---------------------------------------------
def write_trace(df: pd.DataFrame, path: str | Path, fmt: str | None = None) -> Path:
    """Write a trace as Parquet, CSV (gzipped for ``.csv.gz``) or DEC-PKT text, by extension.

    DEC-PKT text needs the columns ``ts src_host dest_host src_port dest_port
    bytes``; times are written to the microsecond, as the DEC traces have them.
    """
    path = Path(path)
    fmt = trace_format(path, fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "parquet":
        df.to_parquet(path, index=False)
    elif fmt == "csv":
        df.to_csv(path, index=False)
    else:
        by_lower = {c.lower(): c for c in df.columns}
        absent = [c for c in DEC_COLUMNS if c not in by_lower]
        if absent:
            raise TraceError(str(path), f"the DEC-PKT format needs columns "
                             f"{' '.join(DEC_COLUMNS)}; the frame lacks {', '.join(absent)}")
        out = df[[by_lower[c] for c in DEC_COLUMNS]]
        out.to_csv(path, sep=" ", header=False, index=False, float_format="%.6f")
    return path


def load_interarrivals(path: str | Path, *, interarrival_column: str | None = None,
                       ts_column: str | None = None) -> np.ndarray:
    """Inter-arrival times (seconds) from a CSV with a gap column or a timestamp column.

    Without a named column, the first column whose name contains
    ``interarrival`` (or is ``gap``, ``iat``) is taken as the gaps, else the
    first of ``ts_seconds, ts, timestamp, time`` as arrival times, whose
    differences (in file order) are the gaps. Empty cells are skipped: the
    DEC-PKT-1 file leaves the first row's gap empty.
    """
    path = str(path)
    if not os.path.exists(path):
        raise TraceError(path, "no such file")
    try:
        header = list(pd.read_csv(path, nrows=0).columns)
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise TraceError(path, f"not a readable CSV file: {_first_line(err)}") from None
    by_lower = {c.lower().strip(): c for c in header}

    def named(name: str) -> str:
        if name.lower() not in by_lower:
            raise TraceError(path, f"no column {name!r}; the columns are {', '.join(header)}")
        return by_lower[name.lower()]

    gap_col = time_col = None
    if interarrival_column is not None:
        gap_col = named(interarrival_column)
    elif ts_column is not None:
        time_col = named(ts_column)
    else:
        gap_col = next((c for low, c in by_lower.items()
                        if "interarrival" in low.replace("_", "").replace("-", "")
                        or low in ("gap", "iat")), None)
        if gap_col is None:
            time_col = next((by_lower[n] for n in ("ts_seconds", *TS_NAMES) if n in by_lower),
                            None)
        if gap_col is None and time_col is None:
            raise TraceError(path, "no inter-arrival column (a name containing "
                             "'interarrival') and no time column (ts_seconds, ts, timestamp, "
                             f"time); the columns are {', '.join(header)}; pass "
                             "interarrival_column= or ts_column=")
    column = gap_col or time_col
    raw = pd.read_csv(path, usecols=[column])[column].dropna()
    values = raw if pd.api.types.is_numeric_dtype(raw) else \
        pd.to_numeric(raw.astype(str).str.strip().replace("", np.nan).dropna(), errors="coerce")
    bad = int(values.isna().sum())
    if bad:
        raise TraceError(path, f"column {column} has {bad} non-numeric values")
    values = values.dropna().to_numpy(dtype=float)
    gaps = values if gap_col else np.diff(values)
    if gaps.size == 0:
        raise TraceError(path, f"column {column} yields no inter-arrival time")
    if (gaps < 0).any() or not np.isfinite(gaps).all():
        what = "negative gaps" if gap_col else "times that go backwards"
        raise TraceError(path, f"column {column} has {what}; inter-arrival times must be >= 0")
    return gaps
