"""A deadline per round replayed over a fidelity replay: what shedding would have kept and cost.

``cqopt fidelity --deadline SECONDS`` asks, of every round a replay chose a
plan for: would that plan have finished by the deadline, and if not, how much
of the round's input would have had to be shed? The seconds come from the
engine cost model (:class:`cqopt.costmodel.engine.Engine`, with the catalog's
``[engine]`` constants: ``cqopt calibrate --from-run`` fits them to a run),
the shedding from :func:`cqopt.runtime.overload.simulate.simulate_rounds`:
each stream keeps the largest share ``p`` that fits, dropped at the inputs
(Babcock et al.'s placement for one query, seed 004 §3.2; RTStream's early
drop, seed 000 §4.4). For a COUNT the bound the shedding promises is
reported, ``ε = C / p`` at confidence ``1 − δ`` with ``C`` Babcock's error
constant over the tuples that reach the aggregate; other aggregates need the
spread of the summed column, which per-round statistics do not hold, and get
none (said). A query without aggregates is a join or a selection: a dropped
tuple is a lost result, counted as tuples dropped.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.workload import workload_from_dict
>>> from cqopt.examples import example
>>> from cqopt.replay.replay import local_chart, replay
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> (spec, _), = workload_specs(workload_from_dict({"query": [{"name": "C", "k": 4,
...     "sql": "SELECT COUNT(*) FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"}]}), cat)
>>> chart = local_chart(spec, cat)
>>> observed = pd.DataFrame({"round": [0, 1], "start": [0.0, 1.0],
...                          "rate.TCP": [500.0, 5e6], "sel.TCP": [0.1, 0.1]})
>>> r = replay("C", chart, cat, observed)  # round 1 is off the chart: costed at its point
>>> shed = deadline_replay(r, chart, cat, observed, deadline=0.5, delta=0.05)
>>> shed.rounds["kept"].round(4).tolist(), shed.summary["miss_share_with"]
([1.0, 0.0333], 0.0)
>>> round(shed.summary["max_epsilon"], 4)  # C over 500,000 counted tuples, over p
0.0576
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog
from cqopt.catalog.catalog import EngineConstants
from cqopt.charts.lookup import QueryChart
from cqopt.charts.overload_settings import DELTA
from cqopt.costmodel import make_model
from cqopt.optimizer.plans import nodes as kinds
from cqopt.replay.replay import Replay, actual_statistics, round_length
from cqopt.runtime.overload.simulate import scaled_rates, simulate_rounds

if TYPE_CHECKING:
    from cqopt.runtime.overload.window_adaptation import Adaptation


def _round_statistics(chart: QueryChart, observed: pd.DataFrame) -> dict[str, np.ndarray]:
    """The chart's statistics per round, a rate observed as it was: a round without tuples
    has rate 0 (nothing to run), not the last rate carried forward."""
    stats = actual_statistics(chart, observed)
    for name in stats:
        if name.startswith("rate.") and name in observed:
            stats[name] = np.nan_to_num(observed[name].to_numpy(dtype=np.float64))
    return stats


def _chosen(chart: QueryChart, replay: Replay, rounds: int | None = None) -> np.ndarray:
    """The index in ``chart.plans`` of the plan the replay chose, per round."""
    position = {p.id: i for i, p in enumerate(chart.plans)}
    return np.array([position[p] for p in replay.rounds["plan"][:rounds]], dtype=np.intp)


@dataclass(frozen=True)
class DeadlineReplay:
    """Per round (``rounds``) and in all (``summary``): predicted seconds, kept share,
    misses without and with shedding, tuples dropped, the promised error."""

    rounds: pd.DataFrame
    summary: dict[str, Any]


ALARM, WARNING = "ALARM", "Warning"


def shed_alarm(all_shed: int, rounds: int, who: str, deadline: float, need: float,
               advice: str) -> dict[str, str] | None:
    """An alarm when rounds' answers were shed whole: ``{severity, message}``, or None.

    ``all_shed`` of ``rounds`` rounds kept none of their input to fit ``deadline``
    seconds, where ``need`` seconds (the median round at full input) were predicted.
    Every round shed whole is an ALARM: the queries answered nothing, whatever else the
    report says; some rounds shed whole are a warning.

    >>> shed_alarm(59, 59, "Q1, Q2", 0.8, 1.02, "raise --deadline")["message"]
    'Q1, Q2 answered nothing: every tuple was shed in all 59 rounds to fit 0.8 s a round (1.02 s needed at full input, median): raise --deadline'
    >>> shed_alarm(3, 59, "Q1", 0.8, 0.5, "raise --deadline")["severity"]
    'Warning'
    >>> shed_alarm(0, 59, "Q1", 0.8, 0.5, "raise --deadline") is None
    True
    """
    if not all_shed:
        return None
    every = all_shed == rounds
    text = (f"{who} answered nothing: every tuple was shed in all {rounds} rounds"
            if every else f"{who} answered nothing in {all_shed} of {rounds} rounds: every "
            "tuple of those was shed")
    return {"severity": ALARM if every else WARNING,
            "message": f"{text} to fit {deadline:g} s a round ({need:.3g} s needed at full "
                       f"input, median): {advice}"}


def _fitted(catalog: Catalog) -> bool:
    """Whether the catalog sets any of the engine model's constants."""
    return any(getattr(catalog.engine, f.name) != f.default
               for f in dataclasses.fields(EngineConstants))


def _advice(catalog: Catalog, *tries: str) -> str:
    """What to try when a deadline sheds rounds whole, ``tries`` first."""
    if not _fitted(catalog):
        tries += ("fit the engine model's constants, now its defaults, to this engine "
                  "(cqopt calibrate --from-run RUN)",)
    return ", ".join(tries[:-1]) + f" or {tries[-1]}" if len(tries) > 1 else tries[0]


def deadline_replay(replay: Replay, chart: QueryChart, catalog: Catalog,
                    observed: pd.DataFrame, deadline: float, *, min_kept: float = 0.0,
                    delta: float = DELTA, error_bound: float | None = None,
                    quality: tuple[tuple[float, float], ...] | None = None) -> DeadlineReplay:
    """Shed each round of ``replay`` to fit ``deadline``, as a run would have.

    Parameters
    ----------
    replay : Replay
        The chart's replay: the plan it chose per round (``replay.rounds["plan"]``).
    chart : QueryChart
    catalog : Catalog
        Its ``[engine]`` constants predict the seconds.
    observed : DataFrame
        The per-round statistics the replay ran on.
    deadline : float
        Seconds a round may take, > 0.
    min_kept : float
        The least share of input a round may keep (its least QoS), in [0, 1].
    delta : float
        The confidence of a COUNT's promised error, in (0, 1).
    error_bound : float, optional
        The query's bound on its answer's relative error: the rounds whose promised
        error exceeds it are counted (``rounds_over_error_bound``).
    quality : tuple of (float, float), optional
        The query's input/quality table, rows ``(share dropped, quality)``: each
        round's quality at the share it dropped, as RTStream scores it (seed 000,
        §5.2.2; ``mean_quality``, ``least_quality``).

    Returns
    -------
    DeadlineReplay

    The deadline, ``min_kept``, ``delta``, ``error_bound`` and ``quality`` are
    taken as judged (:class:`~cqopt.charts.overload_settings.OverloadSettings`: the
    workload file and :class:`cqopt.api.FidelityOptions` judge them).
    """
    window_s = round_length(observed)
    stats = _round_statistics(chart, observed)
    engine = make_model("engine", catalog)
    plans = list(chart.plans)
    chosen = _chosen(chart, replay)
    rows = np.arange(len(chosen))

    def predict(at: dict[str, np.ndarray]) -> np.ndarray:
        seconds = np.stack([np.broadcast_to(np.asarray(engine.seconds(p, at), dtype=np.float64),
                                            (len(chosen),)) for p in plans])
        return seconds[chosen, rows]

    aggregate, note = _count_input(chart, catalog, stats, chosen, window_s)
    shed = simulate_rounds(stats, predict, deadline, window_s, aggregate=aggregate,
                           delta=delta, min_kept=min_kept)
    fitted = _fitted(catalog)
    busy = sum(stats[k] for k in stats if k.startswith("rate.")) > 0
    whole = int(np.sum((shed.kept <= 0) & busy))
    alarm = shed_alarm(whole, len(chosen), replay.name, deadline,
                       float(np.median(shed.predicted)) if len(chosen) else 0.0,
                       _advice(catalog, "raise the deadline", "keep a least share with "
                                        "--min-kept (rounds then run late)"))
    rounds = pd.DataFrame({"round": replay.rounds["round"].to_numpy(),
                           "plan": replay.rounds["plan"].to_numpy(),
                           "predicted_s": shed.predicted, "kept": shed.kept,
                           "predicted_after_s": shed.predicted_after,
                           "missed_without": shed.missed_without,
                           "missed_with": shed.missed_with, "dropped": shed.dropped,
                           "epsilon": shed.epsilon, "unreachable": shed.unreachable})
    if quality:
        from cqopt.runtime.overload.qos_negotiation import QualityTable

        table = QualityTable.from_rows(replay.name, [(q, d) for d, q in quality])
        rounds["quality"] = [table.quality_of([1.0 - k]) for k in shed.kept]
    summary = {**shed.summary(), "deadline_s": float(deadline), "min_kept": float(min_kept),
               "unreachable_rounds": int(shed.unreachable.sum()), "all_shed_rounds": whole,
               "alarms": [alarm] if alarm else [],
               "tuples": float(sum(stats[k] for k in stats if k.startswith("rate.")).sum()
                               * window_s),
               "engine_constants": "fitted" if fitted else "defaults",
               "error_bound_note": note, "error_bound": error_bound,
               "rounds_over_error_bound": int(np.sum(shed.epsilon > error_bound))
               if error_bound is not None else 0,
               **({"mean_quality": float(rounds["quality"].mean()),
                   "least_quality": float(rounds["quality"].min())} if quality else {})}
    return DeadlineReplay(rounds, summary)


def _count_input(chart: QueryChart, catalog: Catalog, stats: dict[str, np.ndarray],
                 chosen: np.ndarray, window_s: float) -> tuple[dict | None, str]:
    """A COUNT's contributing tuples per round (Babcock's N; μ = 1, σ = 0), and a note."""
    plans = list(chart.plans)
    aggregate = next((plans[0].node(k) for k in plans[0].operators()
                      if isinstance(plans[0].node(k), kinds.AggregateNode)), None)
    if aggregate is None:
        return None, "none: the query has no aggregate (a dropped tuple is a lost result)"
    functions = {a.function for a in aggregate.aggregates}
    if len(plans[0].join_order) > 1:
        return None, ("none: a COUNT over a join of sampled streams is unbiased (scaled by "
                      "1/p^m) but Babcock's bound is for one stream's tuples")
    if functions != {"COUNT"} or aggregate.group_by:
        return None, (f"none: {', '.join(sorted(functions))}"
                      f"{' per group' if aggregate.group_by else ''} needs the spread of its "
                      "column per group, which per-round statistics do not hold")
    # The engine model's rates: every tuple counted (OM's are throttled by its capacity).
    model = make_model("engine", catalog)
    counts = np.empty(len(chosen))
    for i, plan in enumerate(plans):
        mine = chosen == i
        if not mine.any():
            continue
        key = next(k for k in plan.operators() if isinstance(plan.node(k), kinds.AggregateNode))
        below = plan.node(key).inputs[0]
        rate = np.broadcast_to(np.asarray(model.cost(plan, stats).operators[below].rate,
                                          dtype=np.float64), counts.shape)
        counts[mine] = rate[mine] * window_s
    return ({"count": counts, "mean": np.ones_like(counts), "std": np.zeros_like(counts)},
            "COUNT: epsilon = C / p at confidence 1 - delta, C over the tuples counted")


def chosen_memory(chart: QueryChart, catalog: Catalog, stats: dict[str, np.ndarray],
                  chosen: np.ndarray) -> np.ndarray:
    """Per round, the memory the chart's model predicts for the plan chosen in it.

    Parameters
    ----------
    chart : QueryChart
    catalog : Catalog
    stats : dict of numpy.ndarray
        Every statistic of the chart, one value per round
        (:func:`~cqopt.replay.replay.actual_statistics`).
    chosen : numpy.ndarray
        Per round, the index in ``chart.plans`` of the plan chosen.

    Returns
    -------
    numpy.ndarray
        Bytes (the model's memory unit) per round; a round the model cannot
        price (NaN: no tuples) holds nothing, an infinite one the largest float.
    """
    model = chart.spec.cost_model(catalog)
    memory = np.zeros(len(chosen))
    for i, plan in enumerate(chart.plans):
        mine = chosen == i
        if mine.any():
            memory[mine] = np.broadcast_to(np.asarray(model.cost(plan, stats).memory,
                                                      dtype=np.float64), memory.shape)[mine]
    return np.nan_to_num(memory, nan=0.0, posinf=np.finfo(np.float64).max)


def shrink_windows(memory: Mapping[str, float], windows: Mapping[str, float], budget: float,
                   window_min: float) -> Adaptation:
    """PIPES' resource manager (seed 002, §4.3) for one moment: the queries hold ``memory``
    bytes each at their windows ``windows`` (seconds), a query's memory in proportion to
    its window; each window may shrink within ``[window_min · W, W]``, all to the same
    fraction f of their ranges, the largest whose memory fits ``budget``
    (:func:`~cqopt.runtime.overload.window_adaptation.adapt`).

    >>> a = shrink_windows({"A": 600.0, "B": 600.0}, {"A": 1.0, "B": 2.0}, 900.0, 0.25)
    >>> round(a.window_fraction, 3), round(a.windows["B"], 3), a.memory <= 900.0, a.met
    (0.667, 1.5, True, True)
    >>> shrink_windows({"A": 600.0}, {"A": 1.0}, 900.0, 0.25).changed
    False
    """
    from cqopt.runtime.overload.window_adaptation import QosRange, adapt

    names = list(memory)
    held = np.array([memory[n] for n in names], dtype=np.float64)
    full = np.array([windows[n] for n in names], dtype=np.float64)
    ranges = {n: QosRange(window=(window_min * w, w)) for n, w in zip(names, full)}
    return adapt(ranges, lambda w, g: (0.0, float((held * w / full).sum())), memory_bound=budget)


@dataclass(frozen=True)
class MemoryReplay:
    """Per round: the workload's memory at the queries' full windows and after PIPES'
    adaptation, the common window fraction and whether the budget was met."""

    rounds: pd.DataFrame
    summary: dict[str, Any]


def memory_replay(replays: dict[str, Replay], charts: dict[str, QueryChart],
                  catalog: Catalog, observed: dict[str, pd.DataFrame], budget: float, *,
                  window_min: float = 0.25) -> MemoryReplay:
    """PIPES' resource manager (seed 002, §4.3) over the replayed rounds of every query.

    Each round, every query's chosen plan holds the memory its chart's model
    predicts at the round's statistics (bytes, in the model's memory unit) with
    its window W; a query's window may shrink within its QoS range
    ``[window_min · W, W]``, its memory in proportion (the tuples a window holds
    grow with it). When the workload's memory would exceed ``budget``, every
    window is set to the same fraction f of its range, the largest that fits
    (:func:`cqopt.runtime.overload.window_adaptation.adapt`, by bisection).
    Readings: the decision of a round is made at its own statistics, and a
    window change takes effect within the round (PIPES' delay, §4.2, is at most
    the larger window, here at most W, one round); queries share one budget,
    so they are replayed on the rounds all of them have.

    The budget and ``window_min`` are taken as judged
    (:class:`~cqopt.charts.overload_settings.OverloadSettings`).

    Returns
    -------
    MemoryReplay
    """
    names = list(replays)
    rounds = min(len(replays[n].rounds) for n in names)
    full = np.zeros((len(names), rounds))
    window = np.array([round_length(observed[n]) for n in names])
    for q, name in enumerate(names):
        chart = charts[name]
        stats = {k: v[:rounds] for k, v in actual_statistics(chart, observed[name]).items()}
        full[q] = chosen_memory(chart, catalog, stats, _chosen(chart, replays[name], rounds))
    fraction, after, met = np.ones(rounds), full.sum(axis=0), np.ones(rounds, dtype=bool)
    for t in np.flatnonzero(full.sum(axis=0) > budget):
        result = shrink_windows(dict(zip(names, full[:, t])), dict(zip(names, window)),
                                budget, window_min)
        fraction[t], after[t], met[t] = result.window_fraction, result.memory, result.met
    table = pd.DataFrame({"round": np.arange(rounds), "memory_full": full.sum(axis=0),
                          "window_fraction": fraction, "memory_after": after, "met": met})
    summary = {"budget": float(budget), "window_min": float(window_min), "rounds": int(rounds),
               "queries": names, "over_budget_full": int((full.sum(axis=0) > budget).sum()),
               "over_budget_after": int((~met).sum()),
               "adapted_rounds": int((fraction < 1).sum()),
               "lowest_window_fraction": float(fraction.min()) if rounds else 1.0,
               "peak_memory_full": float(full.sum(axis=0).max()) if rounds else 0.0,
               "peak_memory_after": float(after.max()) if rounds else 0.0}
    return MemoryReplay(table, summary)


@dataclass(frozen=True)
class NegotiationReplay:
    """Per round: the queries' total seconds at full QoS, the common QoS level RTStream's
    negotiation chose, whether every query met the shared deadline, the average quality."""

    rounds: pd.DataFrame
    summary: dict[str, Any]


def negotiated_replay(replays: dict[str, Replay], charts: dict[str, QueryChart],
                      catalog: Catalog, observed: dict[str, pd.DataFrame], deadline: float,
                      quality: dict[str, tuple[tuple[float, float], ...] | None] | None = None,
                      *, step: float = 0.01) -> NegotiationReplay:
    """RTStream's inter-query negotiation (seed 000, §4.3) over the replayed rounds.

    Each round, every query's instance must finish within ``deadline`` seconds of the
    round's start, the queries running one after another on one engine (earliest
    deadline first; all share the round's). An instance's seconds at a share kept are
    the engine model's for its chosen plan at its rates times that share. The common QoS
    level falls in ``step`` steps until every instance fits; each query's drops come from
    its input/quality table (``quality``; without one, quality is the share kept).
    Misses count quality 0 (RTStream's equation 3).

    The deadline is taken as judged
    (:class:`~cqopt.charts.overload_settings.OverloadSettings`).

    Returns
    -------
    NegotiationReplay
    """
    from cqopt.runtime.overload.qos_negotiation import (
        QualityTable,
        QueryInstance,
        at_level,
        negotiate,
    )

    names = list(replays)
    rounds = min(len(replays[n].rounds) for n in names)
    engine = make_model("engine", catalog)
    tables, seconds = {}, {}
    for name in names:
        rows = (quality or {}).get(name) or ((0.0, 1.0), (1.0, 0.0))
        tables[name] = QualityTable.from_rows(name, [(q, d) for d, q in rows])
        chart = charts[name]
        seconds[name] = (_round_statistics(chart, observed[name]),
                         _chosen(chart, replays[name], rounds), chart)
    levels, met, mean_quality, total_full, full_quality, whole = [], [], [], [], [], []
    for t in range(rounds):
        instances = []
        full = 0.0
        for name in names:
            stats, chosen, chart = seconds[name]
            plan = chart.plans[chosen[t]]
            at = {k: np.asarray(v)[t] for k, v in stats.items()}

            def predict(kept: np.ndarray, at=at, plan=plan) -> float:
                return float(engine.seconds(plan, scaled_rates(at, float(kept[0]))))
            full += predict(np.ones(1))
            instances.append(QueryInstance(tables[name], deadline, predict))
        outcome = negotiate(instances, now=0.0, step=step)
        # Without negotiation every query keeps its whole input; a miss counts quality 0.
        full_quality.append(at_level(instances, 1.0).average_quality)
        whole.append(all(np.all(d >= 1.0) for d in outcome.drops.values()))
        levels.append(outcome.level)
        met.append(outcome.met)
        mean_quality.append(outcome.average_quality)
        total_full.append(full)
    table = pd.DataFrame({"round": np.arange(rounds), "seconds_full": total_full,
                          "level": levels, "met": met, "average_quality": mean_quality,
                          "full_quality": full_quality, "all_shed": whole})
    over = table["seconds_full"] > deadline
    alarm = shed_alarm(int(np.sum(whole)), rounds, ", ".join(names), deadline,
                       float(table["seconds_full"].median()) if rounds else 0.0,
                       _advice(catalog, "raise --deadline", "negotiate fewer queries",
                               "give each a least QoS in its input/quality table (rounds then "
                               "run late)"))
    summary = {"deadline_s": float(deadline), "queries": names, "rounds": int(rounds),
               "miss_share_without": float(over.mean()) if rounds else 0.0,
               "miss_share_with": float((~table["met"]).mean()) if rounds else 0.0,
               "negotiated_rounds": int((table["level"] < 1).sum()),
               "lowest_level": float(table["level"].min()) if rounds else 1.0,
               "average_quality": float(table["average_quality"].mean()) if rounds else 1.0,
               "full_quality": float(table["full_quality"].mean()) if rounds else 1.0,
               "all_shed_rounds": int(np.sum(whole)), "alarms": [alarm] if alarm else []}
    return NegotiationReplay(table, summary)
