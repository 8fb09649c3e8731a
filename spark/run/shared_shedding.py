"""Babcock, Datar and Motwani's load shedders on segments shared by a workload's aggregate
queries, placed live (seed 004, §3; ``cqopt run --deadline D --shed-shared``).

Per micro-batch, the rounds due of every query that is a COUNT or SUM over one
stream (no join, no grouping, no HAVING) whose tuples are on the driver are
gathered by the span they cover (round r of queries with one start and one
round length W); per span :func:`flow_tree` makes Babcock's data-flow diagram:

- per stream, one **selection operator per distinct selection** (queries with
  an equal selection over the same stream read one: that is the shared
  segment), its selectivity the round's observed ``sel.S``; a query without a
  selection reads the stream directly;
- below it, each **query's aggregate operator**, its answer.

The queries' error constants C_i come from their contributing tuples of the
round (:func:`contributing_constant`, :func:`~cqopt.runtime.overload.shedding.error_constant`
at δ = :data:`DELTA`, the paper's), the largest λ meeting the load equation
from :func:`~cqopt.runtime.overload.shedding.solve_load`, the shedders from
Algorithm 1 (:func:`~cqopt.runtime.overload.shedding.place_shedders`).

Readings:

- **t_i** is the engine model's, as the deadline's other shedders predict a
  round (:meth:`RoundRunner.round_model <cqopt.spark.run.rounds.RoundRunner.round_model>`,
  :func:`~cqopt.spark.run.overload.round_seconds`, nothing scanned of what the
  driver sheds): a query's chosen plan at the round's statistics, with its
  selectivity at 0 and at 1 (:func:`operator_seconds`). What it costs with
  ``sel`` 0, over the round's tuples, is its seconds per stream tuple up to its
  selection (the scan, the selection); what ``sel`` 1 adds, its seconds per
  tuple passing it (projection, aggregate). With a deadline every query's
  round runs as a Spark job of its own, so a segment's tuples, sampled once on
  the driver, are scanned and selected by each plan that reads them: a
  selection operator's t is the sum of its queries' (counted once per plan,
  as the engine spends it).
- **Capacity** is the deadline over the round length W (shedding.py's
  reading), less the plans' fixed seconds, which no shedder lowers (the
  engine model at no tuples, ``job``): ``(D − Σ_q fixed_q) / W``.
- ``--min-kept`` is refused with ``--shed-shared``: a query's rate follows
  from its error bound, and a least share is no term of Babcock's solution.

Applied on the driver before Spark is handed a round (:func:`shed_shared`):
a segment's tuples are sampled once with its shedder's rate, seeded by the
round and the stream (:func:`~cqopt.spark.run.driver_rows.sample_rows`), so
every query that shares it gets the same kept tuples; then each query's own
shedder (the one before its aggregate, or between its last operator and its
answer) samples what it is handed. The query's answers are scaled by
``1 / P_i`` (:func:`~cqopt.spark.plan_frame.scaled_answers`). Other queries,
and rounds whose tuples are only on Spark, are shed at their own inputs, as
without ``--shed-shared``: said once per query.

>>> members = [Member("q1", "S", "S.a = 1", 100.0, 0.5, 0.002, 0.02, 0.5),
...            Member("q2", "S", "S.a = 1", 100.0, 0.5, 0.002, 0.002, 0.8)]
>>> sorted(flow_tree(members).parent.items())
[('S: S.a = 1', 'S'), ('q1: aggregate', 'S: S.a = 1'), ('q2: aggregate', 'S: S.a = 1')]
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.charts.overload_settings import DELTA
from cqopt.optimizer.query.statistics import rate_name, sel_name
from cqopt.runtime.overload.shedding import (
    FlowTree,
    Shedding,
    error_constant,
    load,
    place_shedders,
    solve_load,
)
from cqopt.spark.run.driver_rows import sample_rows, window_rows

if TYPE_CHECKING:
    import pyarrow as pa

    from cqopt.optimizer.query.logical import ContinuousQuery
    from cqopt.spark.run.overload import Due
    from cqopt.spark.run.rounds import RoundRunner


@dataclass(frozen=True)
class Member:
    """One query's round as the data-flow diagram sees it.

    ``selection`` is its selection's text (None: it has none), ``rate`` the
    stream's tuples per second, ``selectivity`` its observed ``sel``,
    ``select_s`` and ``aggregate_s`` its plan's seconds per stream tuple up to
    the selection and per tuple passing it (:func:`operator_seconds`),
    ``constant`` its C_i.
    """

    query: str
    stream: str
    selection: str | None
    rate: float
    selectivity: float
    select_s: float
    aggregate_s: float
    constant: float


def segment_name(stream: str, selection: str | None) -> str | None:
    """The selection operator's name in the diagram (None: no selection)."""
    return None if selection is None else f"{stream}: {selection}"


def aggregate_name(query: str) -> str:
    """A query's aggregate operator's name in the diagram."""
    return f"{query}: aggregate"


def flow_tree(members: Sequence[Member]) -> FlowTree:
    """Babcock's data-flow diagram of one span's queries: per stream one selection operator
    per distinct selection, its t the sum of its queries' (see the module docstring), and
    each query's aggregate below it.

    Parameters
    ----------
    members : sequence of Member
        The queries' rounds of one span.

    Returns
    -------
    FlowTree
    """
    parent: dict[str, str] = {}
    rate: dict[str, float] = {}
    selectivity: dict[str, float] = {}
    seconds: dict[str, float] = {}
    answer: dict[str, str] = {}
    for m in members:
        rate.setdefault(m.stream, m.rate)
        segment = segment_name(m.stream, m.selection)
        last = aggregate_name(m.query)
        if segment is not None:
            parent[segment] = m.stream
            selectivity.setdefault(segment, m.selectivity)
            seconds[segment] = seconds.get(segment, 0.0) + m.select_s
        parent[last] = segment or m.stream
        selectivity[last] = 0.0  # feeds nothing
        seconds[last] = m.aggregate_s + (m.select_s if segment is None else 0.0)
        answer[m.query] = last
    return FlowTree(parent, rate, selectivity, seconds, answer)


def shed_span(members: Sequence[Member], capacity: float) -> Shedding:
    """The shedders for one span's queries: :func:`solve_load` over their :func:`flow_tree`.

    Parameters
    ----------
    members : sequence of Member
    capacity : float
        Seconds of work per second of input the deadline leaves. At 0 or below
        (the plans' fixed seconds alone pass the deadline; no shedder lowers
        them) every query is shed whole, as a round that cannot fit at all is
        without ``--shed-shared``, and ``met`` is false.

    Returns
    -------
    Shedding

    Examples
    --------
    >>> m = Member("q", "S", None, 10.0, 1.0, 0.0, 0.2, 0.05)
    >>> shed_span([m], 1.0).placement.effective, shed_span([m], 0.0).placement.effective
    ({'q': 0.5}, {'q': 0.0})
    """
    tree = flow_tree(members)
    if capacity > 0:
        return solve_load(tree, {m.query: m.constant for m in members}, capacity)
    placement = place_shedders(tree, {m.query: 0.0 for m in members})
    return Shedding(0.0, {m.query: math.inf for m in members}, placement, load(tree),
                    load(tree, placement), met=False)


def query_rates(members: Sequence[Member], shedding: Shedding) -> dict[str, tuple[float, float]]:
    """Each query's two samples on the driver: its segment's shedder (shared; 1 where it
    has no selection) and its own, whose product is its P_i.

    Returns
    -------
    dict
        Query -> ``(segment rate, own rate)``.
    """
    placement = shedding.placement
    out = {}
    for m in members:
        segment, last = segment_name(m.stream, m.selection), aggregate_name(m.query)
        shared = 1.0 if segment is None else placement.before[segment]
        out[m.query] = (shared, placement.before[last] * placement.answers.get(m.query, 1.0))
    return out


def eligible(query: ContinuousQuery) -> str | None:
    """Why ``query`` cannot be shed on a shared segment (None: it can).

    >>> from types import SimpleNamespace as Q
    >>> eligible(Q(streams=("S", "T"), aggregates=(), group_by=(), having=None))
    'reads 2 streams'
    """
    functions = {a.function for a in query.aggregates}
    if len(query.streams) != 1:
        return f"reads {len(query.streams)} streams"
    if not functions or not functions <= {"COUNT", "SUM"}:
        return "is not a COUNT or SUM"
    if query.group_by or query.having is not None:
        return "groups its answer"
    return None


def contributing_constant(query: ContinuousQuery, rows: pa.Table, delta: float = DELTA
                          ) -> float:
    """C_i of a COUNT/SUM query over its contributing tuples: those of ``rows`` (one round
    of its stream, as the driver holds them) passing its selection; the largest over its
    aggregates (a COUNT: μ = 1, σ = 0).

    Parameters
    ----------
    query : ContinuousQuery
    rows : pyarrow.Table
        The round's tuples, columns ``STREAM__column``.
    delta : float
        The bound's confidence.

    Returns
    -------
    float
        Infinite where no bound exists (no tuple contributes, a zero mean).
    """
    from cqopt.costmodel.reference_executor import select_mask

    stream = query.stream_names[0]
    frame = rows.to_pandas()
    frame = frame.rename(columns=lambda c: "ts" if c == "ts" else c.replace("__", ".", 1))
    if "ts" in frame:
        frame[f"{stream}.ts"] = frame["ts"]
    selection = query.selections.get(stream)
    if selection is not None:
        frame = frame[select_mask(selection, frame).to_numpy()]
    constants = []
    for agg in query.aggregates:
        if agg.function == "SUM":
            values = frame[".".join(agg.argument)].dropna().to_numpy(dtype=np.float64)
            mean, std, count = ((values.mean(), values.std(), values.size) if values.size
                                else (0.0, 0.0, 0))
        else:
            mean, std, count = 1.0, 0.0, len(frame)
        constants.append(float(error_constant(mean, std, count, delta)))
    return max(constants)


def operator_seconds(stats: Mapping[str, np.ndarray], predict, stream: str,
                     window_s: float) -> tuple[float, float, float]:
    """A query's plan's seconds split as the diagram reads them: per stream tuple up to its
    selection, per tuple passing it, and fixed (the plan's at no tuples).

    Parameters
    ----------
    stats, predict :
        :func:`~cqopt.spark.run.overload.round_seconds`' pair for the round.
    stream : str
    window_s : float
        The round length W.

    Returns
    -------
    tuple of float
        ``(select_s, aggregate_s, fixed_s)``; the first two 0 for a round without tuples.
    """
    def at(changes: Mapping[str, float]) -> float:
        point = {**stats, **{k: np.array([v]) for k, v in changes.items()}}
        return float(np.asarray(predict(point))[0])

    rate, sel = rate_name(stream), sel_name(stream)
    fixed = at({rate: 0.0})
    n = float(stats[rate][0]) * window_s
    if n <= 0:
        return 0.0, 0.0, fixed
    if sel not in stats:
        return 0.0, (at({}) - fixed) / n, fixed
    none = at({sel: 0.0})
    return (none - fixed) / n, (at({sel: 1.0}) - none) / n, fixed


def shed_shared(runners: Mapping[str, RoundRunner], dues: Mapping[str, Due]) -> None:
    """Babcock's shedders over every span of the rounds ``dues`` (see the module docstring):
    each query's round shed on a shared segment gets its record in ``shares`` and the
    tuples Spark is to be handed in ``kept_rows``; the others are left as they are.

    Parameters
    ----------
    runners : Mapping[str, RoundRunner]
        Each query's round runner (one deadline for all).
    dues : Mapping[str, Due]
        Each query's rounds due, their windows already cut by a memory budget.
    """
    spans: dict[tuple[float, float], list[tuple]] = {}
    for name, due in dues.items():
        runner = runners[name]
        why = eligible(runner.ctx.query)
        if why is None and not due.local:
            why = "its rounds' tuples are only on Spark in this micro-batch"
        if why is not None:
            _say_once(runner, why, f"{name} {why}: shed at its own inputs, not on a shared "
                                   "segment (said once)")
            continue
        _say_once(runner, "shared", f"{name}: shed by Babcock's shedders on the segments it "
                                    "shares with the workload's other COUNT and SUM queries")
        window_s = runner.ctx.window_s
        for r in due.outcomes:
            made = _member(runner, due, name, r)
            if made is not None:  # else no tuples: nothing to shed
                span = (round(runner.state.start + r * window_s, 9), window_s)
                spans.setdefault(span, []).append((name, r, *made))
    for (_, window_s), entries in spans.items():
        _apply(runners, dues, entries, window_s)


def _say_once(runner: RoundRunner, what: str, line: str) -> None:
    """``line``, the first time ``what`` is true of the query."""
    if what not in runner.shared_said:
        runner.shared_said.add(what)
        runner.ctx.say(line)


def round_rows(due: Due, r: int, start: float, window_s: float) -> pa.Table:
    """Round ``r``'s tuples on the driver, its window cut by a memory budget."""
    import pyarrow.compute as pc

    rows = due.rows.filter(pc.equal(due.rows["_round"], r))
    if due.window is not None:
        rows = window_rows(rows, start, window_s, due.window["window_s"])
    return rows


def _member(runner: RoundRunner, due: Due, name: str, r: int) -> tuple | None:
    """Query ``name``'s round ``r`` as the diagram sees it, its tuples, its plan's fixed
    seconds and its model (None: the model cannot price it, a round without tuples)."""
    query, window_s = runner.ctx.query, runner.ctx.window_s
    share = 1.0 if due.window is None else due.window["window_s"] / window_s
    model = runner.round_model(due.outcomes[r].plan, due.observed[r], True, share)
    if model is None:
        return None
    stats, predict = model
    stream = query.stream_names[0]
    select_s, aggregate_s, fixed = operator_seconds(stats, predict, stream, window_s)
    rows = round_rows(due, r, runner.state.start, window_s)
    selection = query.selections.get(stream)
    text = None if selection is None else selection.predicate_sql
    sel = 1.0 if text is None else float(stats[sel_name(stream)][0])
    member = Member(name, stream, text, float(stats[rate_name(stream)][0]), sel, select_s,
                    aggregate_s, contributing_constant(query, rows))
    return member, rows, fixed, model


def _apply(runners: Mapping[str, RoundRunner], dues: Mapping[str, Due], entries: list[tuple],
           window_s: float) -> None:
    """One span's shedders solved, its records written and its tuples sampled: each
    segment once, seeded by the round and the stream, then each query's own shedder."""
    from cqopt.runtime.overload.simulate import scaled_rates

    deadline = runners[entries[0][0]].ctx.settings.deadline
    members = [entry[2] for entry in entries]
    capacity = (deadline - sum(entry[4] for entry in entries)) / window_s
    shedding = shed_span(members, capacity)
    rates = query_rates(members, shedding)
    shared_record = _span_record(shedding, capacity, len(members))
    segments: dict[str, Any] = {}
    for name, r, member, rows, _, (stats, predict) in entries:
        shared, own = rates[name]
        effective = shedding.placement.effective[name]
        seed = [r, zlib.crc32(member.stream.encode())]
        segment = segment_name(member.stream, member.selection)
        if segment is not None:
            if segment not in segments:  # the shared segment's sample, drawn once
                segments[segment] = sample_rows(rows, shared, seed)
            rows = segments[segment]
        dues[name].kept_rows[r] = sample_rows(rows, own, [*seed, zlib.crc32(name.encode())])
        tuples = float(stats[rate_name(member.stream)][0]) * window_s
        dues[name].shares[r] = {
            "kept": effective, "predicted_s": float(np.asarray(predict(stats))[0]),
            "predicted_after_s": float(np.asarray(predict(scaled_rates(stats, effective)))[0]),
            "dropped": tuples * (1.0 - effective), "unreachable": not shedding.met,
            "shared": {**shared_record, "segment": segment, "segment_rate": shared,
                       "own_rate": own, "effective": effective,
                       "epsilon": _finite(shedding.epsilon[name]),
                       "constant": _finite(member.constant)}}


def _finite(value: float) -> float | None:
    """JSON's reading of a bound: None where infinite (no bound can be given)."""
    return None if not np.isfinite(value) else float(value)


def _span_record(shedding: Shedding, capacity: float, queries: int) -> dict[str, Any]:
    """What one span's solution placed, as every round of it logs it."""
    placement = shedding.placement
    return {"shedders": placement.shedders(), "answers": dict(placement.answers),
            "epsilon_max": _finite(1.0 / shedding.multiplier) if shedding.multiplier > 0
            else None, "load_before": shedding.load_before, "load_after": shedding.load_after,
            "capacity": capacity, "met": bool(shedding.met), "queries": queries,
            "delta": DELTA}
