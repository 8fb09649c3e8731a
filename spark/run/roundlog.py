"""A run's round log: one JSON record per round run, ``OUT/log/round-NNNNNN.json``.

A round is done when its record exists: its result is written before it,
and a replayed micro-batch skips the rounds its first attempt logged. A
record holds the statistics observed and estimated, the chart's cell, the
plan and whether it switched, rows in and out, the plan's wall time, what
the deadline shed (and the QoS level negotiated, with ``--negotiate``), the
window the memory budget left (``window``), the shadow plans' times and the
lag: the complete rounds
waiting behind the round when it ran, times ``W`` (0 when the run keeps up).
A lag that grew :data:`LAG_ROUNDS` rounds in a row is warned about.

>>> lag_growth([0.0, 1.0, 0.0, 1.0, 2.0, 3.0]), lag_growth([2.0, 1.0]), lag_growth([])
(3, 0, 0)
"""

from __future__ import annotations

import json
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from cqopt.optimizer.query.statistics import rate_name
from cqopt.spark.run.settings import RunContext, StreamingRunError
from cqopt.spark.run.sink import write_json

LAG_ROUNDS = 10  # a lag that grows this many rounds in a row is warned about
# The rounds held in memory: the lag warning's and a swapped chart's warm-up
# (cqopt.spark.run.rounds.WARM_ROUNDS) read no further back.
KEPT_ROUNDS = 64


def lag_growth(lags: list[float]) -> int:
    """How many rounds in a row, up to the last, the lag grew."""
    grew = 0
    for before, after in zip(lags[::-1][1:], lags[::-1]):
        if not after > before:
            break
        grew += 1
    return grew


def json_float(value: float | None) -> float | None:
    """A float as JSON holds it: None for a missing or infinite value."""
    return None if value is None or not math.isfinite(value) else float(value)


def read_round_log(out: str | Path) -> list[dict[str, Any]]:
    """The round records of a run folder, in round order (one per round)."""
    records = []
    for path in sorted((Path(out) / "log").glob("round-*.json")):
        records.append(json.loads(path.read_text(encoding="utf-8")))
    return sorted(records, key=lambda r: r["round"])


def rounds_table(records: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per round: flat columns (``observed:rate.S``, ``shadow:PLAN``, ...)."""
    rows = []
    for rec in records:
        row = {k: v for k, v in rec.items() if not isinstance(v, (dict, list))}
        row["cell"] = ",".join(map(str, rec["cell"]))
        for group in ("rows_in", "observed", "estimate", "shadow_seconds", "deadline",
                      "window"):
            prefix = {"shadow_seconds": "shadow", "rows_in": "rows_in"}.get(group, group)
            row.update({f"{prefix}:{k}": v for k, v in (rec.get(group) or {}).items()})
        rows.append(row)
    return pd.DataFrame(rows)


def observed_statistics(observed: Mapping[str, float | None],
                        names: tuple[str, ...]) -> dict[str, float]:
    """The statistics among ``names`` that a round defines (a round without tuples defines
    no selectivity: None in its record, NaN as measured).

    >>> observed_statistics({"rate.S": 4.0, "sel.S": None, "sel.T": float("nan")},
    ...                     ("rate.S", "sel.S", "sel.T"))
    {'rate.S': 4.0}
    """
    return {k: float(v) for k, v in observed.items()
            if k in names and v is not None and not math.isnan(v)}


class RoundLog:
    """The round log of a run folder: :meth:`append` logs a round; :attr:`records` reads
    every round logged. Only the last :data:`KEPT_ROUNDS` are held in memory (a record is
    about 3 KB: a day of one-second rounds would hold a quarter of a gigabyte a query)."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.folder = ctx.out / "log"
        records = read_round_log(ctx.out)
        for i, record in enumerate(records):
            if record["round"] != i:
                raise StreamingRunError(f"--out {ctx.out}: the round log lacks round {i}; "
                                        "the folder was edited: use a new --out")
        self.next_round = len(records)
        self._recent: deque[dict[str, Any]] = deque(records[-KEPT_ROUNDS:],
                                                    maxlen=KEPT_ROUNDS)
        # The last micro-batch and the rounds it ran: the one Spark may run again.
        self._last_batch: tuple[int | None, list[int]] = (None, [])
        for record in records:
            self._note_batch(record)

    @property
    def records(self) -> list[dict[str, Any]]:
        """Every round logged, in order (earlier runs' too), read from the log folder."""
        return read_round_log(self.ctx.out)

    def recent(self, n: int) -> list[dict[str, Any]]:
        """The last ``n`` rounds logged (``n`` at most :data:`KEPT_ROUNDS`)."""
        if n > KEPT_ROUNDS:
            raise ValueError(f"only the last {KEPT_ROUNDS} rounds are kept, not {n}")
        return list(self._recent)[-n:] if n else []

    def replayed(self, batch_id: int) -> list[int]:
        """The rounds a micro-batch ran before a kill (its replay skips them): Spark runs
        again only its last micro-batch, whose rounds are the log's last."""
        batch, rounds = self._last_batch
        return list(rounds) if batch == batch_id else []

    def _note_batch(self, record: Mapping[str, Any]) -> None:
        batch, rounds = self._last_batch
        if record.get("batch") != batch or batch is None:
            self._last_batch = (record.get("batch"), [])
        self._last_batch[1].append(record["round"])

    def record(self, r: int, start: float, outcome, observed: Mapping[str, float], *,
               rows_out: int, seconds: float, batch_id: int | None, lag_s: float,
               statistics_s: float = 0.0, grouped: int = 1, joint: int = 1,
               shadow: Mapping[str, float] | None = None,
               shed: Mapping[str, Any] | None = None,
               window: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Round ``r``'s record, its result written (``start``: round 0's)."""
        window_s, deadline = self.ctx.window_s, self.ctx.settings.deadline
        round_start = start + r * window_s
        # The round's tuples per stream: its observed rate times W.
        rows_in = {s: int(round(observed[rate_name(s)] * window_s)) for s in self.ctx.streams}
        return {
            "round": r, "start": round_start, "end": round_start + window_s,
            "rows_in": rows_in, "empty": not any(rows_in.values()),
            "observed": {k: json_float(v) for k, v in observed.items()},
            "estimate": {k: json_float(v) for k, v in outcome.estimate.items()},
            "cell": list(outcome.cell), "plan": outcome.plan_id,
            "chart_plan": outcome.chart_plan_id, "move": outcome.move,
            "switch": outcome.switch, "rows_out": rows_out, "plan_seconds": seconds,
            # the chart did not cover the round: its plans were costed at the round's point
            "off_chart": bool(getattr(outcome, "off_chart", False)),
            "off_chart_reason": getattr(outcome, "off_chart_reason", ""),
            "statistics_seconds": statistics_s,
            "deadline": None if deadline is None else {
                "seconds": deadline, **(shed or {"kept": 1.0}), "missed": seconds > deadline},
            # the memory budget: the window's fraction, its memory before and after
            "window": None if window is None else dict(window),
            # the plans of the job that ran the round (a workload's joint job: > 1)
            "grouped_rounds": grouped, "joint_plans": joint,
            "shadow_seconds": dict(shadow or {}), "batch": batch_id,
            "lag_s": lag_s, "finished_at": time.time(),
        }

    def append(self, record: dict[str, Any]) -> None:
        """Log a round whose result is written: from here on it counts as run."""
        write_json(self.folder / f"round-{record['round']:06d}.json", record)
        self.next_round += 1
        self._recent.append(record)
        self._note_batch(record)
        say: Callable[[str], None] = self.ctx.say
        name = self.ctx.name
        growth = lag_growth([rec.get("lag_s", 0.0) for rec in self.recent(LAG_ROUNDS + 1)])
        if growth >= LAG_ROUNDS:
            say(f"{name}: warning: the lag grew {growth} rounds in a row, to "
                f"{record['lag_s']:.1f} s behind the newest complete round: the run does not "
                "keep up with its input")
        say(f"{name}: {_round_line(record)}")


def _round_line(record: Mapping[str, Any]) -> str:
    """What a round did, in one line: its plan, rows out, seconds, and what was shed.

    >>> _round_line({"round": 3, "empty": False, "plan": "A", "switch": True, "rows_out": 7,
    ...              "plan_seconds": 0.25, "grouped_rounds": 1, "deadline": None,
    ...              "shadow_seconds": {"A": 0.2, "B": 0.1}})
    'round 3: A (switch), 7 rows out in 0.250 s, fastest B'
    >>> _round_line({"round": 4, "empty": False, "plan": "A", "switch": False, "rows_out": 7,
    ...              "plan_seconds": 0.1, "grouped_rounds": 5, "joint_plans": 3,
    ...              "deadline": None, "shadow_seconds": {}})
    'round 4: A, 7 rows out in 0.100 s (one job for 5 rounds of this plan, with 2 other plans of the workload)'
    """
    shadow, grouped, shed = record["shadow_seconds"], record["grouped_rounds"], \
        record["deadline"]
    note = " (no tuples)" if record["empty"] else ""
    fastest = f", fastest {min(shadow, key=shadow.get)}" if shadow else ""
    joint = record.get("joint_plans", 1)
    others = f"{joint - 1} other plan{'s' if joint > 2 else ''} of the workload"
    group = (f" (one job for {grouped} rounds of this plan, with {others})"
             if grouped > 1 and joint > 1 else
             f" (one job for {grouped} rounds of this plan)" if grouped > 1 else
             f" (one job for {joint} plans of the workload)" if joint > 1 else "")
    if shed and shed["kept"] < 1.0:
        level = (f" at the negotiated QoS level {shed['level']:.2f}"
                 if shed.get("level") is not None else "")
        if shed.get("shared"):
            level += _shared_words(shed["shared"])
        group += (f", {shed['kept']:.1%} of its input kept for the {shed['seconds']:g} s "
                  f"deadline{level} ({shed['dropped']:,.0f} tuples shed)")
    window = record.get("window")
    if window and window["fraction"] < 1.0:
        group += (f", its window cut to its last {window['window_s']:.3g} s for the "
                  f"{window['budget']:,.0f} B memory budget")
    return (f"round {record['round']}{note}: {record['plan']}"
            f"{' (switch)' if record['switch'] else ''}, "
            f"{record['rows_out']} rows out in {record['plan_seconds']:.3f} s{group}{fastest}")


def _shared_words(shared: Mapping[str, Any]) -> str:
    """Where Babcock's shedders sampled a round, in words.

    >>> _shared_words({"segment": "S: S.a = 1", "segment_rate": 0.8, "own_rate": 0.5,
    ...                "epsilon": 0.1})
    ' (sampled at 0.800 on its shared segment S: S.a = 1, then 0.500; error bound 0.100)'
    """
    where = ("" if shared["segment"] is None else
             f" at {shared['segment_rate']:.3f} on its shared segment {shared['segment']},"
             " then")
    bound = "none" if shared["epsilon"] is None else f"{shared['epsilon']:.3f}"
    return f" (sampled{where} {shared['own_rate']:.3f}; error bound {bound})"
