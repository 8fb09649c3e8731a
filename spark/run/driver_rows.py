"""A round's tuples on the driver (an Arrow table): sampled by a seeded Bernoulli shedder,
or cut to the last part of their window; what the overload bounds do before Spark is handed
a round (:mod:`cqopt.spark.run.overload`, :mod:`cqopt.spark.run.shared_shedding`).

>>> import pyarrow as pa
>>> rows = pa.table({"ts": [0.1, 0.6, 0.9, 1.2, 1.8], "_round": [0, 0, 0, 1, 1]})
>>> window_rows(rows, start=0.0, window_s=1.0, kept_s=0.5)["ts"].to_pylist()
[0.6, 0.9, 1.8]
>>> sample_rows(rows, 1.0, seed=3).num_rows, sample_rows(rows, 0.0, seed=3).num_rows
(5, 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa


def sample_rows(rows: pa.Table, kept: float, seed: int | Sequence[int]) -> pa.Table:
    """Each tuple of ``rows`` kept with probability ``kept``, independently (as Spark's
    ``sample(fraction=kept)``), by a generator seeded with ``seed``.

    Parameters
    ----------
    rows : pyarrow.Table
        A round's tuples on the driver.
    kept : float
        The share to keep, in [0, 1].
    seed : int or sequence of int
        The generator's seed (a run seeds with the round: a rerun keeps the same tuples;
        shared segments with the round and the stream).

    Returns
    -------
    pyarrow.Table
        The tuples kept (``rows`` itself when ``kept`` is 1).
    """
    import pyarrow as pa

    if kept >= 1.0:
        return rows
    keep = np.random.default_rng(seed).random(rows.num_rows) < kept
    return rows.filter(pa.array(keep))


def window_rows(rows: pa.Table, start: float, window_s: float, kept_s: float) -> pa.Table:
    """The tuples of ``rows`` in the last ``kept_s`` seconds of their round's window.

    Parameters
    ----------
    rows : pyarrow.Table
        Tuples with their time ``ts`` and round ``_round``.
    start, window_s : float
        Round 0's start and the round length W.
    kept_s : float
        The window the memory budget leaves, seconds (``rows`` whole when ``>= W``).

    Returns
    -------
    pyarrow.Table
    """
    import pyarrow as pa

    if kept_s >= window_s:
        return rows
    ts = rows["ts"].to_numpy(zero_copy_only=False)
    ends = start + (rows["_round"].to_numpy(zero_copy_only=False) + 1) * window_s
    return rows.filter(pa.array(ts >= ends - kept_s))
