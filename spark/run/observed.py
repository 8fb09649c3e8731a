"""A run's rounds observed: each round's statistics measured from its tuples.

Where the rounds' tuples are on the driver (a live round, a short backlog),
:func:`local_statistics` works them out there, every round at once, by the
offline definitions (:func:`cqopt.costmodel.validation.round_statistics`).
Where they are too many, the few columns the statistics read are collected
(:func:`statistic_rows`) and worked out there, or, past
:data:`STATISTIC_TUPLES`, measured by one Spark job
(:func:`cqopt.spark.round_stats.round_statistics`). Both give a rate of tuples
over ``W`` and a selectivity over no tuple NaN.

>>> _held("TCP", "bytes"), _held("TCP", "ts")
('TCP__bytes', 'ts')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cqopt.optimizer.query.logical import ContinuousQuery

# Rounds of more tuples than the driver holds whole (staging.LOCAL_TUPLES) have their
# statistics worked out on the driver from the few columns they read, up to this many
# tuples (0.5-1 s for 600 rounds of the README's streams against 4 s as a Spark job).
STATISTIC_TUPLES = 2_000_000


def observed_rounds(query: ContinuousQuery, rows, tuples: dict[str, DataFrame] | None,
                    streams: tuple[str, ...], first: int, stop: int, window_s: float,
                    start: float | None) -> dict[int, dict[str, float]]:
    """Each round's observed statistics, rounds ``first <= r < stop``.

    Parameters
    ----------
    query : ContinuousQuery
    rows : pyarrow.Table or None
        The rounds' tuples on the driver in the batch's layout (``_stream``,
        ``_round``, ``ts``, ``STREAM__column``), or None when not held there.
    tuples : dict of DataFrame, optional
        Each stream's tuples on Spark, read when ``rows`` is None.
    streams : tuple of str
    first, stop : int
    window_s : float
        The window ``W``, seconds.
    start : float or None
        Round 0's start (for the Spark job).

    Returns
    -------
    dict
        round -> statistic name -> value.
    """
    # From rows on the driver if there, else from the columns the statistics read of
    # tuples, collected where they fit, else one Spark job.
    if rows is None:
        rows = statistic_rows(query, tuples, streams)
    if rows is not None:
        return local_statistics(query, rows, streams, first, stop, window_s)
    from cqopt.spark.round_stats import round_statistics

    table = round_statistics(query, tuples, window_s, start=start, rounds=stop)
    return {r: {name: float(table[name].iloc[r]) for name in query.statistics}
            for r in range(first, stop)}


def _statistic_columns(query: ContinuousQuery, stream: str) -> list[str]:
    """The columns of ``stream`` its statistics read (a round's others cost a copy each)."""
    from cqopt.spark.round_stats import _join_columns, _selection_columns

    read = (*_selection_columns(query, stream), *_join_columns(query, stream))
    return [c.name for c in query.stream(stream).columns if c.name in read]


def _held(stream: str, column: str) -> str:
    """A stream's column in the batch's layout: ``STREAM__column``; its one time, ``ts``."""
    return "ts" if column.lower() == "ts" else f"{stream}__{column}"


def statistic_rows(query: ContinuousQuery, tuples: dict[str, DataFrame],
                   streams: tuple[str, ...]):
    """The columns the rounds' statistics read of each stream's ``tuples`` (``_round``
    and the selections' and joins' columns), on the driver in the batch's layout for
    :func:`local_statistics`: one Spark job, a few narrow columns instead of every one.
    None when they are more than :data:`STATISTIC_TUPLES` tuples."""
    from pyspark.sql import functions as F

    from cqopt.spark.run.sink import collect

    parts = [tuples[s].select(F.lit(s).alias("_stream"), "_round", *(
        F.col(c).alias(_held(s, c)) for c in _statistic_columns(query, s))) for s in streams]
    frame = parts[0]
    for other in parts[1:]:
        frame = frame.unionByName(other, allowMissingColumns=True)
    return collect(frame, STATISTIC_TUPLES)


def local_statistics(query: ContinuousQuery, table, streams: tuple[str, ...], first: int,
                     stop: int, window_s: float) -> dict[int, dict[str, float]]:
    """Each round's statistics from its tuples on the driver: the measured statistics of
    a window (:func:`cqopt.costmodel.validation.round_statistics`, every round at once),
    by the definitions the Spark job (:func:`cqopt.spark.round_stats.round_statistics`)
    computes: a rate of tuples over ``W``, a selectivity over no tuple NaN."""
    import pyarrow.compute as pc

    from cqopt.costmodel.validation import round_statistics

    columns = {s: _statistic_columns(query, s) for s in streams}
    inside = pc.and_(pc.greater_equal(table["_round"], first), pc.less(table["_round"], stop))
    table = table.filter(inside)
    windows, rounds = {}, {}
    for stream in streams:
        mine = table.filter(pc.equal(table["_stream"], stream))
        windows[stream] = mine.select([_held(stream, c) for c in columns[stream]]) \
            .rename_columns(columns[stream]).to_pandas()
        rounds[stream] = mine["_round"].to_numpy() - first
    stats = round_statistics(query, windows, rounds, stop - first, window_s)
    return {first + i: {name: float(stats[name][i]) for name in query.statistics}
            for i in range(stop - first)}
