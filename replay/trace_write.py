"""Writing a trace to disk, in the format its file name implies (:mod:`~cqopt.replay.trace_format`).

>>> import pandas as pd, tempfile, pathlib
>>> out = pathlib.Path(tempfile.mkdtemp()) / "S.csv"
>>> write_trace(pd.DataFrame({"ts": [0.5, 1.0], "a": [1, 2]}), out).read_text().splitlines()
['ts,a', '0.5,1', '1.0,2']

One file per round, for a streaming source that replays a round per micro-batch:

>>> parts = write_trace_per_round(pd.DataFrame({"ts": [0.5, 2.5], "a": [1, 2]}),
...                               out.parent / "S", 1.0, start=0.0)
>>> [(p.name, len(pd.read_parquet(p))) for p in parts]
[('part-00000.parquet', 1), ('part-00001.parquet', 0), ('part-00002.parquet', 1)]
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.replay.rounds import round_of
from cqopt.replay.trace_format import (
    TraceError,
    detect_trace_format,
    get_trace_format,
    streamed_formats,
)


def write_trace(df: pd.DataFrame, path: str | Path, fmt: str | None = None) -> Path:
    """Write a trace in the format ``fmt``, or the one its file name implies.

    Parquet, CSV (gzipped for ``.csv.gz``), DEC-PKT text (which needs the
    columns ``ts src_host dest_host src_port dest_port bytes``; times to the
    microsecond, as the DEC traces have them), or any registered format.
    """
    path = Path(path)
    found = get_trace_format(fmt, path) if fmt is not None else detect_trace_format(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    found.write(df, path)
    return path


def write_trace_per_round(df: pd.DataFrame, folder: str | Path, round_s: float, *,
                          start: float | None = None, rounds: int | None = None,
                          fmt: str = "parquet") -> list[Path]:
    """Write a trace as one file per round: ``folder/part-00000.parquet``, ``part-00001``, ...

    Round ``r`` holds the rows with ``start + r * round_s <= ts < start + (r + 1) *
    round_s`` (:func:`cqopt.replay.rounds.round_of`, the rule every round of cqopt
    follows); ``start`` defaults to the trace's earliest time. Every round up to the
    last (or ``rounds``) gets a file, an empty one if no row fell in it, so that the
    traces of several streams written from one ``start`` line up file for file. Each
    file's modification time is one second after the previous one's, because Spark's
    file source takes new files in modification-time order: a streaming run with one
    file per trigger then reads the rounds in order.

    Parameters
    ----------
    df : DataFrame
        The trace, with ``ts`` in seconds.
    folder : path
        Created if missing.
    round_s : float
        The round length in seconds.
    start, rounds : optional
        Round 0's start and the number of rounds to write.
    fmt : str
        A format Spark streams (:func:`~cqopt.replay.trace_format.streamed_formats`):
        ``parquet``, ``csv``, ...

    Returns
    -------
    list of Path
        The files, in round order.
    """
    if not (round_s > 0 and np.isfinite(round_s)):
        raise TraceError(str(folder), f"the round length must be a positive number of "
                         f"seconds, got {round_s!r}")
    found = get_trace_format(fmt, folder)
    if found.stream is None:
        raise TraceError(str(folder), f"one file per round is written in a format cqopt run "
                         f"streams ({', '.join(streamed_formats())}), not {fmt}")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    ts = df["ts"].to_numpy(dtype=np.float64)
    if start is None:
        start = float(ts.min()) if len(ts) else 0.0
    which = np.array([round_of(t, start, round_s) for t in ts], dtype=np.int64)
    if rounds is None:
        rounds = int(which.max()) + 1 if len(which) else 0
    # Each round's rows, in trace order, by one stable sort: a mask per round would read
    # every row once per file.
    order = np.argsort(which, kind="stable")
    starts = np.searchsorted(which[order], np.arange(rounds + 1))
    paths = []
    base = 1_600_000_000  # a fixed past time: the files' order is what matters
    for r in range(rounds):
        rows = df.iloc[order[starts[r]:starts[r + 1]]]
        path = write_trace(rows, folder / f"part-{r:05d}{found.suffixes[0]}", fmt)
        os.utime(path, (base + r, base + r))
        paths.append(path)
    return paths
