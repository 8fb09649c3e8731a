"""One round of a query's traces, read in this process: the windows a plan runs on.

``cqopt explain --analyze`` runs every candidate plan of a query on one
round of real tuples (the reference executor) and prints the rows each
operator emitted beside the model's estimate, as PostgreSQL's ``EXPLAIN
ANALYZE`` does. Rounds are cut as everywhere else (:func:`round_array`):
round ``r`` holds the tuples with ``start + r W <= ts < start + (r + 1) W``,
``start`` the earliest time of the query's traces.

>>> import pandas as pd
>>> frame = pd.DataFrame({"ts": [0.2, 0.7, 1.1, 2.5], "k": [1, 2, 3, 4]})
>>> round_rows(frame, 1, start=0.0, window_s=1.0)["k"].tolist()
[3]
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from cqopt.errors import CqoptError
from cqopt.replay.rounds import complete_rounds, round_array
from cqopt.replay.trace_format import TS_NAMES, read_trace_frame


def seconds(column: pd.Series) -> np.ndarray:
    """A trace's time column in seconds: numbers as they are, timestamps since the epoch."""
    if pd.api.types.is_numeric_dtype(column):
        return column.to_numpy(dtype=np.float64)
    stamps = pd.to_datetime(column, errors="coerce", utc=True)
    return (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)


def round_rows(frame: pd.DataFrame, r: int, *, start: float, window_s: float) -> pd.DataFrame:
    """The rows of ``frame`` (its ``ts`` in seconds) in round ``r``."""
    rounds = round_array(frame["ts"].to_numpy(dtype=np.float64), start, window_s)
    return frame[rounds == r].reset_index(drop=True)


def round_windows(query, paths: Mapping[str, str], r: int, window_s: float
                  ) -> dict[str, pd.DataFrame]:
    """Each stream's tuples in round ``r`` of its trace, with the catalog's columns.

    Parameters
    ----------
    query : ContinuousQuery
    paths : mapping of str to str
        Stream name to its trace (any format :mod:`cqopt.replay.trace_format` reads).
    r : int
        The round, from 0.
    window_s : float
        The round's length in seconds.

    Returns
    -------
    dict of str to DataFrame
        One frame per stream of ``query``: ``ts`` in seconds and the stream's columns.

    Raises
    ------
    CqoptError
        A stream without a trace, a trace without a time or a column the
        catalog names, or a round past the traces' end.
    """
    frames = {}
    for stream in query.stream_names:
        if stream not in paths:
            raise CqoptError(f"no trace of {stream} (the query reads {', '.join(query.stream_names)})")
        frame = read_trace_frame(paths[stream])
        ts = next((c for c in frame.columns if str(c).lower() in TS_NAMES), None)
        columns = [c.name for c in query.stream(stream).columns if c.name.lower() not in TS_NAMES]
        lacking = [c for c in columns if c not in frame.columns]
        if ts is None or lacking:
            missing = (["a time column (ts)"] if ts is None else []) + lacking
            raise CqoptError(f"{paths[stream]}: the trace of {stream} lacks "
                             f"{', '.join(missing)}; it has {', '.join(map(str, frame.columns))}")
        frames[stream] = pd.DataFrame({"ts": seconds(frame[ts]),
                                       **{c: frame[c].to_numpy() for c in columns}})
    times = np.concatenate([f["ts"].to_numpy() for f in frames.values()])
    times = times[np.isfinite(times)]
    if not len(times):
        raise CqoptError("the traces hold no tuple with a time")
    start = float(times.min())
    held = max(1, complete_rounds(float(times.max()), start, window_s))
    if not 0 <= r < held:
        raise CqoptError(f"--round {r}: the traces hold rounds 0 to {held - 1} of {window_s:g} s")
    return {s: round_rows(f, r, start=start, window_s=window_s) for s, f in frames.items()}
