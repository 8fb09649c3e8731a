"""Calibrate OM's operator processing rates on Spark, as the OM paper did on its system.

The OM paper ran "the common query operators in isolation" and read off each
one's tuple processing rate (seed 001, section 5.1: selection-equality 400k,
selection-range 200k, projection 500k, equi-join 3k tuples/s).
:func:`calibrate` does the same on the engine that would run the plans:
for each rate class of :class:`~cqopt.catalog.catalog.OperatorRates` it
times one operator over generated data of the catalog's column types, at
several sizes, and fits

    seconds = fixed + rows / rate

by least squares over the (rows, seconds) points. The slope is the
per-tuple cost, so ``rate`` (tuples/s) is what the cost model wants; the
intercept ``fixed`` is Spark's per-job cost (scheduling a job, starting its
tasks), which the OM model has no term for. Where ``fixed`` is most of a
timing, the rate rests on little: the fit says so (``fixed_share``), and
larger sizes help.

The data: a stream of the catalog (the one with the most columns), each
column generated on the executors from ``spark.range`` (no driver transfer)
with its type, cached and counted before timing, so a timing is the
operator's own. A column ``key`` draws from ``rows`` values, so a join of two
frames emits about as many tuples as each reads.
Per kind, what is timed and what a "tuple" is:

- ``selection_equality``: ``where(key = v)``, tuples read;
- ``selection_range``: ``where(0 <= key < rows / 2)``, about half passing;
- ``projection``: ``select`` of half of the columns, tuples read;
- ``equi_join``: two such frames joined on ``key``; tuples read from both;
- ``aggregate``: GROUP BY ``key % 100`` with COUNT and SUM, tuples read.

Each query ends in Spark's ``noop`` sink, which runs it in full and keeps
nothing; each point is the median of ``repeats`` runs. The cache's per-batch
pruning is off while timing, so a selection reads every tuple.

>>> fit_rate([1e6, 2e6, 4e6], [0.15, 0.25, 0.45])  # 0.05 s per job, 10M tuples/s
(10000000.0, 0.05)
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import platform
import re
import socket
import statistics
import time
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.catalog.catalog import OperatorRates
from cqopt.errors import CqoptError
from cqopt.owned_file import check_owned_target, write_owned
from cqopt.spark.session import session_conf, spark_errors

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

KINDS = tuple(f.name for f in fields(OperatorRates))
# The first line of every catalog calibrate writes: the mark that lets it replace one.
MARK = "# Written by cqopt calibrate."
# A rate whose line misses the size left out by more than this (median) is refused.
MAX_HELD_OUT_ERROR = 0.30
# What a tuple costs each time a step reads it on 2 cores (generating and caching, warming
# up, timing): 19 minutes for the default 16M rows, 4 sizes, 3 runs. The first guess
# of a calibration's duration, revised once the smallest size is measured.
GUESS_S_PER_TUPLE = 1.7e-6
GUESS_S_PER_JOB = 0.3


class CalibrationError(CqoptError):
    """Calibration cannot run, its timings cannot be fitted, or its output not written."""


@dataclass(frozen=True)
class KindFit:
    """One rate class's timings and their least-squares fit."""

    kind: str
    rows: tuple[int, ...]  # tuples read per timing
    seconds: tuple[float, ...]  # median wall time per size
    rate: float  # tuples/s: 1 / slope
    fixed: float  # seconds: the intercept, Spark's per-job cost
    held_out_error: float = math.nan  # median relative miss of each size, fitted without it

    @property
    def fixed_share(self) -> float:
        """The share of the largest timing that is the fixed cost."""
        return max(0.0, self.fixed) / self.seconds[-1]


@dataclass(frozen=True)
class Calibration:
    fits: dict[str, KindFit]
    where: str  # Spark version, master, host, cores
    when: str  # UTC, ISO 8601

    @property
    def rates(self) -> OperatorRates:
        return OperatorRates(**{k: fit.rate for k, fit in self.fits.items()})


def fit_rate(rows: Sequence[float], seconds: Sequence[float]) -> tuple[float, float]:
    """``(rate, fixed)`` of the least-squares line ``seconds = fixed + rows / rate``.

    Raises
    ------
    CalibrationError
        Fewer than two sizes, or time that does not grow with the rows (the
        fixed cost hides the operator: larger sizes are needed).
    """
    x, y = np.asarray(rows, dtype=float), np.asarray(seconds, dtype=float)
    if len(set(x.tolist())) < 2:
        raise CalibrationError("a fit needs timings at two sizes or more")
    slope, intercept = np.polyfit(x, y, 1)
    if not slope > 0:
        raise CalibrationError(
            f"the time does not grow with the rows ({', '.join(f'{r:g}' for r in x)} rows "
            f"took {', '.join(f'{s:.3g}' for s in y)} s): Spark's per-job cost hides the "
            "operator's; pass a larger --rows")
    if intercept < 0:
        raise CalibrationError(
            f"the fit gives Spark's fixed cost per job a negative value ({intercept:.3g} s; "
            f"{', '.join(f'{r:g}' for r in x)} rows took {', '.join(f'{s:.3g}' for s in y)} s): "
            "the timings are not a line; nothing written: run again with --repeats 5 on a "
            "quiet machine")
    return float(f"{1.0 / slope:.6g}"), float(f"{intercept:.6g}")


def held_out_error(rows: Sequence[float], seconds: Sequence[float]) -> float:
    """The median relative miss of each size's timing by the line fitted without it.

    >>> round(held_out_error([1e6, 2e6, 4e6, 8e6], [0.15, 0.25, 0.45, 0.85]), 6)
    0.0
    """
    x, y = np.asarray(rows, dtype=float), np.asarray(seconds, dtype=float)
    misses = []
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        slope, intercept = np.polyfit(x[keep], y[keep], 1)
        misses.append(abs(slope * x[i] + intercept - y[i]) / y[i])
    return float(np.median(misses))


def calibrate(spark: SparkSession, catalog: Catalog, max_rows: int = 1_000_000,
              sizes: int = 4, repeats: int = 3,
              progress: Callable[[str], None] | None = None) -> Calibration:
    """Time every rate class on ``spark`` and fit its rate (see the module docstring).

    Parameters
    ----------
    spark : SparkSession
        Where to measure.
    catalog : Catalog
        Its widest stream's column types shape the generated data.
    max_rows : int
        Rows of the largest size; the sizes are ``max_rows / 2**i``, ``i < sizes``.
    sizes, repeats : int
        How many sizes, and runs per size (their median is the point).
    progress : callable, optional
        Called with a sentence as each step starts.

    Returns
    -------
    Calibration

    Raises
    ------
    CalibrationError
        Bad sizes, a Spark failure, or timings that cannot be fitted.
    """
    if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1000:
        raise CalibrationError(f"--rows {max_rows!r}: needs a whole number >= 1000")
    if sizes < 3 or repeats < 1:
        raise CalibrationError(f"calibration needs 3 sizes or more (one to judge the fit on "
                               f"while fitted on the others; got {sizes}) and 1 run or more "
                               "per size: pass --sizes 3")
    say = progress or (lambda _: None)
    timings = measure(spark, catalog, max_rows, sizes, repeats, say)
    with spark_errors("Spark failed while calibrating", CalibrationError):
        where = describe_spark(spark)
    fits = {}
    for kind, points in timings.items():
        rows, seconds = zip(*points)
        try:
            rate, fixed = fit_rate(rows, seconds)
        except CalibrationError as err:
            raise CalibrationError(f"{kind}: {err}") from None
        error = held_out_error(rows, seconds)
        if not error <= MAX_HELD_OUT_ERROR:
            raise CalibrationError(
                f"{kind}: the fitted line misses each size, fitted without it, by {error:.0%} "
                f"(median; a fit must stay within {MAX_HELD_OUT_ERROR:.0%}): nothing written; "
                "run again with --repeats 5 on a quiet machine, or a larger --rows")
        fits[kind] = KindFit(kind, tuple(rows), tuple(seconds), rate, fixed, error)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Calibration(fits, where, when)


def measure(spark: SparkSession, catalog: Catalog, max_rows: int, sizes: int, repeats: int,
            say: Callable[[str], None]) -> dict[str, list[tuple[int, float]]]:
    """Per rate class, ``(tuples read, median seconds)`` at each size, smallest first.

    Every query runs once untimed at each size first: a first run pays for
    code generation, class loading and JIT compilation that later runs do not.
    The expected duration is said before the first size and revised after it,
    and Spark's tasks every few seconds while a step runs.
    """
    from cqopt.spark.job_progress import spark_tasks

    stream = max(catalog.streams.values(), key=lambda s: len(s.columns))
    row_counts = sorted({max(1, max_rows >> i) for i in range(sizes)})
    timings: dict[str, list[tuple[int, float]]] = {k: [] for k in KINDS}
    say(f"expected duration: about {_minutes(expected_seconds(row_counts, repeats, spark))} "
        f"({len(row_counts)} sizes up to {max_rows:,} rows, {repeats} run"
        f"{'s' if repeats > 1 else ''} of {len(KINDS)} queries each; a guess, revised after "
        "the smallest size)")
    began = time.perf_counter()
    with spark_errors("Spark failed while calibrating", CalibrationError), \
            _no_batch_pruning(spark), spark_tasks(spark, "calibrate"):
        for i, n in enumerate(row_counts):
            _measure_size(spark, stream, n, repeats, say, timings)
            if i == 0 and len(row_counts) > 1:
                spent = time.perf_counter() - began
                left = spent * sum(row_counts[1:]) / row_counts[0]
                say(f"the smallest size took {spent:.0f} s; about {_minutes(left)} left")
    return timings


def _measure_size(spark: SparkSession, stream: Any, n: int, repeats: int,
                  say: Callable[[str], None], timings: dict[str, list[tuple[int, float]]]
                  ) -> None:
    say(f"generating {n:,} rows like stream {stream.name} ({len(stream.columns)} "
        "columns), twice, and caching them")
    left, right = generated(spark, stream, n, 1), generated(spark, stream, n, 2)
    try:
        queries = operator_queries(left, right, n)
        say("warming up: every query once, untimed")
        for query, _ in queries.values():
            _timed(query)
        for kind, (query, read) in queries.items():
            say(f"timing {kind.replace('_', ' ')} over {n:,} rows, {repeats} "
                f"run{'s' if repeats > 1 else ''}")
            runs = [_timed(query) for _ in range(repeats)]
            timings[kind].append((read, statistics.median(runs)))
    finally:
        left.unpersist()
        right.unpersist()


def expected_seconds(row_counts: Sequence[int], repeats: int, spark: Any = None) -> float:
    """A first guess of a calibration's seconds, from :data:`GUESS_S_PER_TUPLE` on 2 cores.

    >>> round(expected_seconds([2_000_000, 4_000_000, 8_000_000, 16_000_000], 3) / 60)
    19
    """
    cores = 2
    if spark is not None:
        with contextlib.suppress(Exception):
            cores = max(1, int(spark.sparkContext.defaultParallelism))
    visits = 2 + len(KINDS) * (repeats + 1)  # generated twice; a warm-up and the runs
    jobs = len(row_counts) * visits
    return (jobs * GUESS_S_PER_JOB
            + sum(row_counts) * visits * GUESS_S_PER_TUPLE * 2 / cores)


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


@contextlib.contextmanager
def _no_batch_pruning(spark: SparkSession) -> Iterator[None]:
    """Without it, a cached frame's per-batch min/max lets Spark skip most batches of
    ``key = 7`` unread, and the timing is not a selection's reading every tuple."""
    with session_conf(spark, {"spark.sql.inMemoryColumnarStorage.partitionPruning": "false"}):
        yield


def generated(spark: SparkSession, stream: Any, n: int, seed: int) -> DataFrame:
    """``n`` rows with ``stream``'s columns, and ``key``, made on the executors; cached."""
    from pyspark.sql import functions as F

    idx = F.col("id")
    columns = [(F.abs(F.hash(idx, F.lit(seed))) % n).cast("long").alias("key")]
    for i, col in enumerate(stream.columns):
        mixed = F.abs(F.hash(idx, F.lit(seed * 100 + i)))
        if col.type == "string":
            value = F.substring(F.concat(F.lit("v"), mixed.cast("string")), 1, col.width)
        elif col.type == "double":
            value = F.rand(seed * 100 + i)
        elif col.type == "bool":
            value = (mixed % 2) == 0
        elif col.type == "int":
            value = (mixed % 1000).cast("int")
        else:  # long, timestamp
            value = mixed.cast("long")
        columns.append(value.alias(f"c{i}_{col.name}"))
    frame = spark.range(n).select(*columns).cache()
    frame.count()  # materialise the cache: timings read it, not the generator
    return frame


def operator_queries(left: DataFrame, right: DataFrame, n: int
                     ) -> dict[str, tuple[DataFrame, int]]:
    """Per rate class: the query to time and the tuples it reads."""
    from pyspark.sql import functions as F

    key = F.col("key")
    half = [c for c in left.columns[: max(1, len(left.columns) // 2)]]
    return {
        "selection_equality": (left.where(key == F.lit(7)), n),
        "selection_range": (left.where((key >= F.lit(0)) & (key < F.lit(n // 2))), n),
        "projection": (left.select(*half), n),
        "equi_join": (left.select("key", left.columns[1]).join(
            right.select("key", right.columns[2]), "key"), 2 * n),
        "aggregate": (left.groupBy((key % 100).alias("g")).agg(
            F.count(F.lit(1)), F.sum(left.columns[1])), n),
    }


def _timed(query: DataFrame) -> float:
    start = time.perf_counter()
    query.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - start


def describe_spark(spark: SparkSession) -> str:
    """Where a measurement ran: Spark's version, the master, the host and its cores."""
    sc = spark.sparkContext
    return (f"Spark {spark.version}, master {sc.master}, host {socket.gethostname()} "
            f"({platform.machine()}, {os.cpu_count()} cores, default parallelism "
            f"{sc.defaultParallelism})")


# -- the calibrated catalog ------------------------------------------------------------
def check_out(out: Path, catalog: str | os.PathLike | None = None) -> None:
    """Refuse, before any work, to write ``out`` unless it is new or a file cqopt wrote
    and nobody edited since (:func:`cqopt.owned_file.check_owned_target`), and never
    over the ``catalog`` read."""
    check_owned_target(out, reads=() if catalog is None else (catalog,))


def write_catalog(catalog: Catalog, calibration: Calibration, out: Path,
                  paper: OperatorRates | None = None) -> Catalog:
    """Write ``catalog`` with the measured rates as TOML to ``out``; return it as read back."""
    paper = paper or catalog.operators
    header = [f"# From {catalog.source}, with [operators] measured on {calibration.where},",
              f"# at {calibration.when} (tuples/s; least squares over sizes "
              f"{', '.join(f'{r:,}' for r in next(iter(calibration.fits.values())).rows)} "
              "tuples read; fixed = seconds per Spark job, the fit's intercept)."]
    notes = {kind: f"was {getattr(paper, kind):g}; fixed {fit.fixed:.3g} s, "
                   f"{fit.fixed_share:.0%} of the largest timing"
             for kind, fit in calibration.fits.items()}
    return write_catalog_text(replace(catalog, operators=calibration.rates), out, header,
                              {"operators": notes})


def write_catalog_text(calibrated: Catalog, out: Path, header: Sequence[str],
                       notes: dict[str, dict[str, str]]) -> Catalog:
    """Write ``calibrated`` as TOML to ``out`` (marked as cqopt's, atomically), with
    ``header`` comment lines and a comment per constant (``notes[section][name]``);
    return it as read back, which must equal it.
    """
    out = Path(out)
    source = calibrated.source if calibrated.source and Path(calibrated.source).exists() else None
    check_out(out, source)
    calibrated = replace(calibrated, source=str(out))
    data = calibrated.to_dict()
    lines = [MARK, *header, f"time_unit = {_toml(data['time_unit'])}"]
    for section in ("operators", "pipes", "engine"):
        lines += ["", f"[{section}]"]
        for key, value in data[section].items():
            note = notes.get(section, {}).get(key)
            lines.append(f"{key} = {_toml(value)}" + (f"  # {note}" if note else ""))
    for name, spec in data["streams"].items():
        lines += ["", f"[streams.{_key(name)}]"]
        lines += [f"{_key(k)} = {_toml(v)}" for k, v in spec.items()]
    text = "\n".join(lines) + "\n"
    back = Catalog.from_dict(tomllib.loads(text), str(out))
    if back.fingerprint() != calibrated.fingerprint():  # the writer must round-trip
        raise CalibrationError(f"internal error: the catalog written for {out} does not read "
                               "back equal")
    write_owned(out, text.encode("utf-8"), reads=() if source is None else (source,))
    return back


def _key(name: str) -> str:
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else json.dumps(name)


def _toml(value: Any) -> str:
    """A TOML value: strings, numbers, booleans, arrays and inline tables."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {value!r}")
