"""Rounds of trace time, and per-round statistics tables on disk.

The OM optimizer observes each statistic once per *round* (seed 001,
section 4.3). Round ``r`` holds the tuples with ``start + r W <= ts <
start + (r + 1) W``; :func:`round_of` is that rule for one timestamp (the
Spark job, :mod:`cqopt.spark.round_stats`, applies the same rule to
columns) and :func:`complete_rounds` counts the rounds a trace covers to
their end. A per-round statistics table (``round``, ``start``, then one
column per statistic) is written and read as Parquet here.

>>> round_of(0.3, 0.0, 0.1), complete_rounds(7.5, 0.0, 2.0)
(2, 3)
"""


from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from cqopt.errors import CqoptError
from cqopt.optimizer.query.statistics import rate_name
from cqopt.output import atomic_file

FORMAT_VERSION = 1


class RoundStatsError(CqoptError):
    """Traces that cannot give a query's per-round statistics, or a bad statistics file."""


def complete_rounds(end: float, start: float, window_s: float) -> int:
    """The rounds from ``start`` that end by ``end`` (the last timestamp), at least the one
    holding ``end``: ``floor((end - start) / W)``, by the rule of :func:`round_of`.

    >>> [complete_rounds(end, 0.0, 2.0) for end in (7.5, 8.0, 1.5)]
    [3, 4, 1]
    >>> complete_rounds(-1.0, 0.0, 2.0)  # the traces end before start: nothing to count
    0
    """
    last = round_of(end, start, window_s)  # the round holding end: it ends after end
    if last < 0:
        return 0
    return max(last, 1)  # no complete round: keep the partial one rather than nothing


def round_of(ts: float, start: float, window_s: float) -> int:
    """The round of one timestamp, by the rule :func:`assign_round` applies in Spark.

    >>> round_of(0.3, 0.0, 0.1), round_of(0.29, 0.0, 0.1), round_of(-0.01, 0.0, 0.1)
    (2, 2, -1)
    """
    guess = math.floor((ts - start) / window_s)
    if ts < start + guess * window_s:
        return guess - 1
    if ts >= start + (guess + 1) * window_s:
        return guess + 1
    return guess


def round_array(ts, start: float, window_s: float):
    """:func:`round_of` of every timestamp of an array (int64), by the same rule.

    >>> import numpy as np
    >>> round_array(np.array([0.3, 0.29, -0.01]), 0.0, 0.1).tolist()
    [2, 2, -1]
    """
    import numpy as np

    ts = np.asarray(ts, dtype=np.float64)
    guess = np.floor((ts - start) / window_s)
    guess = np.where(ts < start + guess * window_s, guess - 1,
                     np.where(ts >= start + (guess + 1) * window_s, guess + 1, guess))
    return guess.astype(np.int64)


# -- files ---------------------------------------------------------------------------
def write_round_statistics(df: pd.DataFrame, path: str | Path) -> Path:
    """Write a per-round statistics table as Parquet (atomically: a crash leaves no half file)."""
    path = Path(path)
    for column in ("round", "start"):
        if column not in df.columns:
            raise RoundStatsError(f"{path}: a round statistics table needs a {column!r} column")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_file(path) as scratch:
        df.to_parquet(scratch, index=False)
    return path


def read_round_statistics(path: str | Path) -> pd.DataFrame:
    """Read a table :func:`write_round_statistics` wrote (``attrs`` included)."""
    path = Path(path)
    if not path.exists():
        raise RoundStatsError(f"{path}: no such file")
    try:
        df = pd.read_parquet(path)
    except (OSError, ValueError) as err:
        raise RoundStatsError(f"{path}: not a Parquet file of round statistics: "
                              f"{str(err).strip().splitlines()[0]}") from None
    absent = [c for c in ("round", "start") if c not in df.columns]
    if absent:
        raise RoundStatsError(f"{path}: not a round statistics table (no column "
                              f"{', '.join(absent)}; its columns are {', '.join(df.columns)})")
    return df


def tuples_not_replayed(table: pd.DataFrame, rows: dict[str, int]) -> dict[str, int]:
    """The tuples of each stream outside a per-round statistics table's rounds: those after
    its last whole round (a trace's trailing partial round), which no replay sees.

    ``rows`` is each stream's tuple count in its trace; a round's tuples are its
    ``rate.S`` times the round length ``W`` (``table.attrs["window_s"]``).

    >>> table = pd.DataFrame({"round": [0, 1], "start": [0.0, 2.0], "rate.S": [3.0, 4.5]})
    >>> table.attrs["window_s"] = 2.0
    >>> tuples_not_replayed(table, {"S": 20})  # 6 + 9 in the two rounds
    {'S': 5}
    """
    window_s = float(table.attrs["window_s"])
    replayed = {stream: round(float(table[rate_name(stream)].sum()) * window_s)
                if rate_name(stream) in table else n for stream, n in rows.items()}
    return {stream: int(n - replayed[stream]) for stream, n in rows.items()
            if n > replayed[stream]}
