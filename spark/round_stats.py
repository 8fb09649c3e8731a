"""Per-round statistics of a query over stream traces, computed on Spark.

The OM optimizer observes each statistic once per *round* (seed 001,
section 4.3) and estimates the next round's value from the last few. Given
one trace per stream of a query (DataFrames with a ``ts`` column in seconds,
as :func:`cqopt.spark.trace_read.read_trace` makes them), :func:`round_statistics`
cuts trace time into rounds of ``window_s`` seconds from ``start``: round
``r`` holds the tuples with ``start + r W <= ts < start + (r + 1) W``
(out-of-order tuples land in the round of their timestamp). By default only
the rounds the traces cover to their end are kept (see
:func:`round_statistics`). For each round:

- ``rate.S``: S's tuples in the round divided by ``W``;
- ``sel.S``: the fraction of them passing S's grouped selection (NaN when
  the round has none);
- ``jsel.A.B``: the round's join result count over ``|A| |B|``, where the
  join applies every predicate of the query whose statistic is ``jsel.A.B``
  (the equi-joins between A and B, implied ones included, and the theta
  predicates over exactly A and B); NaN when a side is empty. The join is
  over the round's tuples before any selection, the way the cost models
  treat ``sel`` and ``jsel`` as independent factors.

Everything is DataFrame aggregation and joins. Each stream is grouped once
by round and the columns its join predicates read (a count and a count of
selection passes per group); rates and selectivities sum those groups, and a
join pairs the groups and sums the products of their counts, so no join
pair is ever materialized, on the executors or the driver. One Spark job
computes every statistic; only the per-round table comes back.
:func:`workload_round_statistics` does this for a whole workload in one pass
over each trace: a stream is grouped once, by the round of every query that
reads it and the union of their join columns, with a count of selection
passes per query, and every query's statistics are sums over that table;
:func:`round_statistics` is its one-query case.

Predicates become Spark conditions straight from the logical query: a
grouped selection's whole condition (:attr:`Selection.predicate
<optimizer.group_selections.Selection.predicate>`, ``FALSE`` when it can pass
nothing) and each theta predicate are walked by
:func:`cqopt.optimizer.query.predicates.evaluate`, the walker the pandas executor uses, so
both engines read one predicate the same way (a NULL passes no comparison).
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from sqlglot import exp

from cqopt.optimizer.query import predicates
from cqopt.optimizer.query.join_closure import JoinPredicate, ThetaPredicate
from cqopt.optimizer.query.literals import literal_value
from cqopt.optimizer.query.statistics import split_name
from cqopt.replay.rounds import FORMAT_VERSION, RoundStatsError, complete_rounds
from cqopt.spark.session import spark_errors

if TYPE_CHECKING:  # pyspark loads only when statistics are computed
    from pyspark.sql import Column, DataFrame

    from cqopt.optimizer.query.logical import ContinuousQuery

    Resolver = Callable[[str, str], Column]  # (stream, column) -> a Spark column

_COUNT, _PASSED = "_n", "_passed"



# -- the statistics -------------------------------------------------------------
def round_statistics(query: ContinuousQuery, traces: dict[str, DataFrame], window_s: float,
                     *, start: float | None = None, rounds: int | None = None) -> pd.DataFrame:
    """Every statistic of ``query`` in every round: columns ``round``, ``start``, then
    ``query.statistics`` in order.

    ``traces`` maps stream names (any case) to DataFrames with a ``ts``
    column (seconds) and the columns the query's predicates read. ``start``
    defaults to the earliest timestamp of the query's traces. ``rounds``
    defaults to the *complete* rounds: those that end by the latest
    timestamp, ``floor((end - start) / W)`` of them. A trailing round the
    traces stop inside is dropped, because its rate would be its tuples over
    the whole ``W`` (reading low) and its selectivities would rest on a few
    tuples; only when no round is complete is that one partial round kept, so
    that a trace shorter than ``W`` still gives a row. Pass ``rounds`` to
    count every tuple. Every round is present, empty ones with rate 0 and
    NaN selectivities. The one-query case of :func:`workload_round_statistics`.
    """
    return workload_round_statistics([query], traces, [window_s], start=start,
                                     rounds=rounds)[0]


def workload_round_statistics(queries: Sequence[ContinuousQuery], traces: dict[str, DataFrame],
                              window_s: float | Sequence[float], *, start: float | None = None,
                              rounds: int | None = None) -> list[pd.DataFrame]:
    """:func:`round_statistics` of every query of a workload, in one pass over each trace.

    Each stream's trace is grouped once, by the round of every query that
    reads it and the union of the columns their joins read, with one count
    of selection passes per query; every query's statistics are sums over
    that grouped table, and one job collects them all.

    Parameters
    ----------
    queries : sequence of ContinuousQuery
    traces : dict of str to DataFrame
        Stream name (any case) to its trace, as for :func:`round_statistics`.
    window_s : float or sequence of float
        The round length in seconds, for all queries or one per query.
    start, rounds : optional
        As for :func:`round_statistics`, for every query; by default each
        query's own (the earliest timestamp of its traces, its complete rounds).

    Returns
    -------
    list of pandas.DataFrame
        One table per query, in order, each what :func:`round_statistics` returns.

    Raises
    ------
    RoundStatsError
        A bad round length, start or count; a trace missing or lacking a
        column a query reads; traces without a tuple; Spark failing.

    Examples
    --------
    >>> workload_round_statistics([], {}, 1.0)
    []
    """
    queries = list(queries)
    windows = ([window_s] * len(queries) if isinstance(window_s, numbers.Real)
               else list(window_s))
    if len(windows) != len(queries):
        raise RoundStatsError(f"window_s gives {len(windows)} round lengths for "
                              f"{len(queries)} queries; give one, or one per query")
    for w in windows:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) \
                or not (math.isfinite(w) and w > 0):
            raise RoundStatsError(f"the round length window_s must be a positive number of "
                                  f"seconds, got {w!r}")
    if rounds is not None and (not isinstance(rounds, (int, np.integer)) or rounds < 0):
        raise RoundStatsError(f"rounds must be a whole number >= 0, got {rounds!r}")
    if start is not None and not math.isfinite(start):
        raise RoundStatsError(f"start must be a finite time in seconds, got {start!r}")
    frames = [_query_frames(q, traces) for q in queries]
    if not queries:
        return []
    what = f"'{queries[0].sql}'" if len(queries) == 1 else f"{len(queries)} queries"
    with spark_errors(f"Spark failed computing the per-round statistics of {what}",
                      RoundStatsError):
        return _workload_statistics(queries, frames, [float(w) for w in windows], start,
                                    rounds)


def _workload_statistics(queries: list[ContinuousQuery], frames: list[dict[str, DataFrame]],
                         windows: list[float], start: float | None,
                         rounds: int | None) -> list[pd.DataFrame]:
    clocks: list[tuple[float, int]] = []  # per query: (start, rounds)
    spans = _time_spans(frames) if start is None or rounds is None else {}
    for query_frames, window_s in zip(frames, windows):
        q_start, q_rounds = start, rounds
        if start is None or rounds is None:
            lows = [spans[s.lower()][0] for s in query_frames if spans[s.lower()][0] is not None]
            highs = [spans[s.lower()][1] for s in query_frames
                     if spans[s.lower()][1] is not None]
            if not lows:
                raise RoundStatsError("the traces of " + ", ".join(query_frames) + " hold no "
                                      "tuple; pass start= and rounds= to get empty rounds")
            q_start = min(lows) if start is None else float(start)
            if rounds is None:
                q_rounds = complete_rounds(max(highs), q_start, window_s)
        clocks.append((float(q_start), int(q_rounds)))
    counts = _spark_counts(queries, frames, windows, clocks)
    tables = []
    for i, (query, window_s, (q_start, q_rounds)) in enumerate(zip(queries, windows, clocks)):
        table = pd.DataFrame({"round": np.arange(q_rounds, dtype=np.int64),
                              "start": q_start + np.arange(q_rounds) * window_s})
        for name in query.statistics:
            table[name] = (_statistic(name, counts[i], q_rounds, window_s) if q_rounds
                           else np.zeros(0))
        table.attrs = {"cqopt_round_statistics": FORMAT_VERSION, "window_s": window_s,
                       "start": q_start, "query": query.sql}
        tables.append(table)
    return tables


def _statistic(name: str, counts: dict[str, np.ndarray], rounds: int,
               window_s: float) -> np.ndarray:
    kind, streams = split_name(name)
    sizes = [counts[f"n.{s}"] for s in streams]
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "rate":
            return sizes[0] / window_s
        if kind == "sel":
            return np.where(sizes[0] > 0, counts[f"pass.{streams[0]}"] / sizes[0], np.nan)
        product = functools.reduce(np.multiply, sizes)
        return np.where(product > 0, counts[name] / product, np.nan)


def _query_frames(query: ContinuousQuery, traces: dict[str, DataFrame]) -> dict[str, DataFrame]:
    """The query's streams -> their traces, checked for ``ts`` and the predicates' columns."""
    by_lower = {name.lower(): df for name, df in traces.items()}
    missing = [s for s in query.stream_names if s.lower() not in by_lower]
    if missing:
        raise RoundStatsError(f"no trace for stream{'s' if len(missing) > 1 else ''} "
                              f"{', '.join(missing)} of the query; traces given: "
                              + (", ".join(traces) or "none"))
    frames = {s: by_lower[s.lower()] for s in query.stream_names}
    for stream, df in frames.items():
        have = {c.lower() for c in df.columns}
        needed = ["ts", *_selection_columns(query, stream), *_join_columns(query, stream)]
        absent = list(dict.fromkeys(c for c in needed if c.lower() not in have))
        if absent:
            raise RoundStatsError(
                f"the trace of {stream} has no column {', '.join(absent)}, which the query "
                f"reads; its columns are {', '.join(df.columns)} (a trace must have the "
                "stream's columns, named as in the catalog, and ts in seconds)")
    return frames


def _selection_columns(query: ContinuousQuery, stream: str) -> tuple[str, ...]:
    selection = query.selections.get(stream)
    return selection.columns_used if selection is not None else ()


def _join_columns(query: ContinuousQuery, stream: str) -> tuple[str, ...]:
    """Columns of ``stream`` that any join statistic's predicates read."""
    return tuple(dict.fromkeys(c for p in (*query.joins, *query.thetas)
                               for s, c in p.columns if s == stream))


def _time_spans(frames: list[dict[str, DataFrame]]) -> dict[str, tuple[float | None,
                                                                         float | None]]:
    """Each stream's (lower-case name) earliest and latest timestamp (one small job)."""
    from pyspark.sql import functions as F

    streams = {s.lower(): df for query_frames in frames for s, df in query_frames.items()}
    spans = [df.agg(F.min("ts").alias("lo"), F.max("ts").alias("hi"))
             .select(F.lit(s).alias("stream"), "lo", "hi") for s, df in streams.items()]
    rows = functools.reduce(lambda a, b: a.unionByName(b), spans).collect()
    return {r["stream"]: (r["lo"], r["hi"]) for r in rows}


def assign_round(ts: Column, start: float, window_s: float) -> Column:
    """The round of each timestamp: ``r`` with ``start + r W <= ts < start + (r + 1) W``.

    ``floor((ts - start) / W)`` can be off by one next to a boundary in
    floating point; the result is corrected against the bounds as computed,
    so a tuple at exactly ``start + r W`` is always in round ``r``.
    """
    from pyspark.sql import functions as F

    guess = F.floor((ts - F.lit(start)) / F.lit(window_s))
    lower = F.lit(start) + guess * F.lit(window_s)
    upper = F.lit(start) + (guess + 1) * F.lit(window_s)
    return (F.when(ts < lower, guess - 1).when(ts >= upper, guess + 1).otherwise(guess)
            .cast("long"))


def _spark_counts(queries: list[ContinuousQuery], frames: list[dict[str, DataFrame]],
                 windows: list[float], clocks: list[tuple[float, int]]
                 ) -> list[dict[str, np.ndarray]]:
    """Per query and round: ``n.S`` (tuples), ``pass.S`` (selection passes), and each join
    statistic's result count. Each trace is grouped once for all the queries reading it;
    one Spark job, one small table collected."""
    shared = _SharedGroups(queries, frames, clocks)
    for stream, users in shared.readers.items():
        shared.group(stream, users, windows, clocks)
    parts = [part for i in range(len(frames)) if clocks[i][1]
             for part in shared.count_parts(i, clocks[i][1])]
    long = None
    try:
        if parts:
            long = functools.reduce(lambda a, b: a.unionByName(b), parts).toPandas()
    finally:
        for frame in shared.kept:
            frame.unpersist()
    return [_counts_of(queries[i], i, query_frames, long, clocks[i][1])
            for i, query_frames in enumerate(frames)]


class _SharedGroups:
    """Each trace grouped once, by the round of every query that reads it and the union
    of their join columns, with a count of selection passes per query."""

    def __init__(self, queries: list[ContinuousQuery], frames: list[dict[str, DataFrame]],
                 clocks: list[tuple[float, int]]):
        self.queries, self.frames = queries, frames
        # stream (lower) -> (query, its spelling); a query of no rounds reads nothing
        self.readers: dict[str, list[tuple[int, str]]] = {}
        for i, query_frames in enumerate(frames):
            if clocks[i][1]:
                for stream in query_frames:
                    self.readers.setdefault(stream.lower(), []).append((i, stream))
        self.tables: dict[str, DataFrame] = {}
        self.round_of: dict[tuple[int, str], str] = {}  # (query, stream) -> its round column
        self.passed_of: dict[tuple[int, str], str | None] = {}  # ... -> its pass column
        self.key_of: dict[str, dict[str, str]] = {}  # stream -> column (lower) -> grouped name
        self.kept: list[DataFrame] = []

    def group(self, stream: str, users: list[tuple[int, str]], windows: list[float],
              clocks: list[tuple[float, int]]) -> None:
        """Group ``stream``'s trace once for all its ``users`` (query, spelling)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        df = self.frames[users[0][0]][users[0][1]]
        column = _resolver(df)
        clock_columns: dict[tuple[float, float, int], str] = {}
        rounds_of, in_range = [], []
        for i, spelling in users:
            (start, n), window_s = clocks[i], windows[i]
            if (start, window_s, n) not in clock_columns:
                name = clock_columns[start, window_s, n] = f"_round{len(clock_columns)}"
                rounds_of.append(assign_round(F.col("ts"), start, window_s).alias(name))
                in_range.append((F.col(name) >= 0) & (F.col(name) < n))
            self.round_of[i, stream] = clock_columns[start, window_s, n]
        # Prefixed names keep the streams' columns apart once groups are joined.
        keys = self.key_of[stream] = {c.lower(): f"{stream}__{c.lower()}"
                                      for i, spelling in users
                                      for c in _join_columns(self.queries[i], spelling)}
        passes = []
        for i, spelling in users:
            selection = self.queries[i].selections.get(spelling)
            self.passed_of[i, spelling] = (f"{_PASSED}{len(passes)}" if selection is not None
                                           else None)
            if selection is not None:
                condition = spark_condition(selection.predicate,
                                            lambda s, c, column=column: column(c))
                passes.append(F.when(condition, 1).otherwise(0)
                              .alias(self.passed_of[i, spelling]))
        tagged = df.select(*rounds_of, *[column(c).alias(k) for c, k in keys.items()], *passes)
        tagged = tagged.where(functools.reduce(lambda a, b: a | b, in_range))
        table = tagged.groupBy(*clock_columns.values(), *keys.values()).agg(
            F.count(F.lit(1)).alias(_COUNT),
            *[F.sum(name).alias(name) for name in (self.passed_of[i, sp] for i, sp in users)
              if name is not None])
        if keys or len(users) > 1:
            # Read by the rates and by every join, of every query: grouped (one small table)
            # and kept, so that the trace is scanned once, not once per statistic.
            table = table.persist(StorageLevel.MEMORY_AND_DISK)
            self.kept.append(table)
        self.tables[stream] = table

    def count_parts(self, i: int, n: int) -> list[DataFrame]:
        """Query ``i``'s counts per round (``key``, ``round``, ``a``, ``b``): each stream's
        tuples and passes, and each join statistic's result count."""
        from pyspark.sql import functions as F

        parts = []
        groups: dict[str, DataFrame] = {}
        keys: dict[str, dict[tuple[str, str], str]] = {}
        for spelling in self.frames[i]:
            stream = spelling.lower()
            mine = {c.lower() for c in _join_columns(self.queries[i], spelling)}
            keys[spelling] = {(spelling, c): self.key_of[stream][c] for c in mine}
            name, passed = self.round_of[i, stream], self.passed_of[i, spelling]
            table = self.tables[stream].where((F.col(name) >= 0) & (F.col(name) < n))
            if len(self.readers[stream]) == 1:  # the grouped table is this query's own
                groups[spelling] = table.select(
                    F.col(name).alias("round"), *keys[spelling].values(), _COUNT,
                    F.col(passed or _COUNT).alias(_PASSED))
            else:
                groups[spelling] = table.groupBy(F.col(name).alias("round"),
                                                 *keys[spelling].values()).agg(
                    F.sum(_COUNT).alias(_COUNT), F.sum(passed or _COUNT).alias(_PASSED))
            per_round = groups[spelling].groupBy("round").agg(
                F.sum(_COUNT).alias("a"), F.sum(_PASSED).alias("b"))
            parts.append(per_round.select(F.lit(f"{i}:{spelling}").alias("key"), "round",
                                          "a", "b"))
        for name in self.queries[i].statistics:
            kind, streams = split_name(name)
            if kind == "jsel":
                matches = _join_matches(self.queries[i], name, streams, groups, keys)
                parts.append(matches.select(F.lit(f"{i}:{name}").alias("key"), "round", "a",
                                            F.lit(None).cast("long").alias("b")))
        return parts


def _counts_of(query: ContinuousQuery, i: int, query_frames: dict[str, DataFrame],
               long: pd.DataFrame | None, rounds: int) -> dict[str, np.ndarray]:
    """Query ``i``'s dense per-round counts, from the collected table of every query's."""
    mine: dict[str, np.ndarray] = {}
    if rounds:
        for stream in query_frames:
            rows = long[long.key == f"{i}:{stream}"]
            mine[f"n.{stream}"] = _dense(rows["round"], rows["a"], rounds)
            mine[f"pass.{stream}"] = _dense(rows["round"], rows["b"], rounds)
        for name in query.statistics:
            if name.startswith("jsel."):
                rows = long[long.key == f"{i}:{name}"]
                mine[name] = _dense(rows["round"], rows["a"], rounds)
    return mine


def _dense(rounds: pd.Series, values: pd.Series, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=float)
    out[rounds.to_numpy(dtype=np.int64)] = values.to_numpy(dtype=float)
    return out


def _join_matches(query: ContinuousQuery, name: str, streams: tuple[str, ...],
                  groups: dict[str, DataFrame],
                  keys: dict[str, dict[tuple[str, str], str]]) -> DataFrame:
    """Per round, the number of join results of statistic ``name``: the groups of its
    streams joined on the round and its predicates, summing the counts' products."""
    from pyspark.sql import functions as F

    predicates = [p for p in (*query.joins, *query.thetas) if p.statistic == name]

    def resolve(stream: str, column: str) -> Column:
        return F.col(keys[stream][(stream, column.lower())])

    sides = []
    for i, stream in enumerate(streams):
        read = {keys[stream][(s, c.lower())] for p in predicates for s, c in p.columns
                if s == stream}
        side = groups[stream]
        if set(keys[stream].values()) != read:  # this join reads fewer of the stream's keys
            side = side.groupBy("round", *sorted(read)).agg(F.sum(_COUNT).alias(_COUNT))
        sides.append(side.select(F.col("round").alias(f"_round{i}"), *sorted(read),
                                 F.col(_COUNT).alias(f"_n{i}")))
    joined = sides[0]
    for i in range(1, len(streams)):
        condition = F.col("_round0") == F.col(f"_round{i}")
        if i == len(streams) - 1:  # every predicate reads all the statistic's streams
            condition = functools.reduce(
                lambda a, b: a & b, [predicate_condition(p, resolve) for p in predicates],
                condition)
        joined = joined.join(sides[i], condition)
    product = functools.reduce(lambda a, b: a * b, [F.col(f"_n{i}") for i in range(len(streams))])
    return joined.groupBy(F.col("_round0").alias("round")).agg(F.sum(product).alias("a"))


def _resolver(df: DataFrame) -> Callable[[str], Column]:
    """Column by name, case-insensitively (catalog spelling vs. the trace's)."""
    from pyspark.sql import functions as F

    by_lower = {c.lower(): c for c in df.columns}
    return lambda name: F.col(f"`{by_lower[name.lower()]}`")


# -- predicates as Spark conditions ----------------------------------------------
def spark_condition(node: exp.Expression, resolve: Resolver) -> Column:
    """A predicate of the logical query (qualified columns, constants, comparisons,
    BETWEEN, IN, AND/OR/NOT, TRUE/FALSE) as a Spark condition; columns via ``resolve``."""
    from pyspark.sql import functions as F

    def operand(leaf: exp.Expression) -> Column:
        if isinstance(leaf, exp.Column):
            return resolve(leaf.table, leaf.name)
        # A constant, or the Boolean a selection is when it can pass nothing (FALSE).
        return F.lit(literal_value(leaf))

    return predicates.evaluate(node, operand)


def predicate_condition(predicate: JoinPredicate | ThetaPredicate, resolve: Resolver) -> Column:
    """A join or theta predicate as a Spark condition."""
    if isinstance(predicate, JoinPredicate):
        return resolve(*predicate.left) == resolve(*predicate.right)
    return spark_condition(predicate.expression, resolve)


