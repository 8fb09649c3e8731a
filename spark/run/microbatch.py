"""What Spark says of each micro-batch: its ``StreamingQueryProgress``, as one console line.

Spark fills a streaming query's ``lastProgress`` once a micro-batch is
committed (after ``foreachBatch`` returns), so the line of a micro-batch
follows the lines of the rounds it ran: its input rows, the rows per second
it read in (``inputRowsPerSecond``: rows over the time since the previous
batch began, left out where there is none) and processed (``processedRowsPerSecond``: rows over this
batch's own time), and the split of its time (``durationMs``: ``addBatch``
is cqopt's ``foreachBatch``, the rounds' work; the rest is Spark's own
bookkeeping), longest first.

>>> progress_line({"batchId": 3, "numInputRows": 1200, "inputRowsPerSecond": 600.0,
...                "processedRowsPerSecond": 800.0,
...                "durationMs": {"triggerExecution": 1500, "addBatch": 1300,
...                               "getBatch": 10, "walCommit": 60}})
'micro-batch 3: 1,200 input rows, 600.0 rows/s in, 800.0 rows/s processed; 1.500 s: addBatch 1.300 s, walCommit 0.060 s, getBatch 0.010 s'

A first micro-batch (a backlog read at once) has no arrival rate to give:

>>> progress_line({"batchId": 0, "numInputRows": 5000, "inputRowsPerSecond": 0.0,
...                "processedRowsPerSecond": 2500.0, "durationMs": {"triggerExecution": 2000}})
'micro-batch 0: 5,000 input rows, 2,500.0 rows/s processed; 2.000 s'
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any


def _field(progress: Any, key: str) -> Any:
    """A field of a progress (a dict, or PySpark's StreamingQueryProgress)."""
    if isinstance(progress, dict):
        return progress.get(key)
    try:
        return getattr(progress, key)
    except AttributeError:
        return None


def _rate(value: Any) -> str:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return "?"
    return f"{value:,.1f}" if math.isfinite(value) else "?"


def progress_line(progress: Any) -> str:
    """One line of a micro-batch's ``StreamingQueryProgress`` (see the module docstring)."""
    durations = dict(_field(progress, "durationMs") or {})
    total = durations.pop("triggerExecution", None)
    split = ", ".join(f"{k} {v / 1000:.3f} s" for k, v in
                      sorted(durations.items(), key=lambda kv: -kv[1]) if v)
    took = "" if total is None else f"; {total / 1000:.3f} s" + (f": {split}" if split else "")
    rows = int(_field(progress, "numInputRows") or 0)
    rate_in = _field(progress, "inputRowsPerSecond")
    # A first micro-batch has no earlier one to measure arrivals against: Spark gives 0.
    arriving = ("" if rows and _rate(rate_in) in ("0.0", "?") else
                f"{_rate(rate_in)} rows/s in, ")
    return (f"micro-batch {_field(progress, 'batchId')}: {rows:,} input rows, {arriving}"
            f"{_rate(_field(progress, 'processedRowsPerSecond'))} rows/s processed{took}")


class BatchProgress:
    """Says each micro-batch's progress line once Spark has it (:meth:`update` polls)."""

    def __init__(self, say: Callable[[str], None], name: str):
        self.say, self.name = say, name
        self.last: Any = None

    def update(self, handle) -> None:
        """Say the line of the newest micro-batch ``handle`` (a StreamingQuery) reported."""
        try:
            progress = handle.lastProgress
        except Exception:  # noqa: BLE001 - a query that has just stopped: nothing to say
            return
        if progress is None:
            return
        batch = _field(progress, "batchId")
        if batch is None or batch == self.last:
            return
        self.last = batch
        self.say(f"{self.name}: {progress_line(progress)}")
