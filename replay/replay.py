"""Fidelity: how often the chart's plan, chosen from estimated statistics, was optimal.

For each round of observed statistics (from :mod:`cqopt.spark.round_stats`):

- the **estimated** plan: an :class:`~cqopt.runtime.adaptive.AdaptiveQuery` estimates
  the round from the rounds before it and looks the estimate up in the chart;
- the **optimal** plan: every candidate costed exactly at the round's actual
  statistics (the chart's model and weights); a round is a **hit** when the
  chosen plan costs no more than the optimum (ties count as hits);
- **regret** (the headline) the total cost of the chosen plans over the total
  of the per-round optima, minus 1, at the actual statistics; the per-round
  mean of ``cost(chosen) / cost(optimal) − 1`` beside it as ``mean_regret``,
  and ``near_fidelity``, the share of rounds within 1% of the optimum
  (:func:`cqopt.replay.baselines.score`);
- **move** and **switch** as counted by the adaptive query;
- **off-chart** rounds: the chart did not cover the statistics the plan was
  chosen at (an axis out of its range, a fixed statistic more than 2x off),
  so every plan was costed there and the cheapest ran
  (:mod:`cqopt.runtime.offchart`); each round says so and why
  (``off_chart``, ``off_chart_reason``), and the summary counts them
  (``off_chart_rounds``). ``off_chart=False`` runs the chart's plan anyway.

Every cost is in the unit of the chart's model (``summary["unit"]``: the OM or
PIPES model's utility, or predicted seconds for a chart of the engine model),
with a note on whether that model was ever checked against the engine
(``summary["unit_note"]``, :func:`cqopt.replay.verdict.model_note`).

Baselines in the same run (:mod:`cqopt.replay.baselines`): **RAND** (a
seeded random plan per round), **RATE** (one plan, the optimum at the mean
statistics of the first d rounds that have an optimum, never switched),
**BEST-STATIC** (the one plan with the lowest total cost over the rounds, in
hindsight, which is the lowest headline regret of any fixed plan; its regret
is the query's **headroom** on the trace) and
**ORACLE-CHART** (the chart looked up at the actual statistics). Misses split
into *estimation* misses (the oracle chart hit, the estimate did not) and
*discretization* misses (even the oracle chart missed).

A round with no output is scored by memory (see :mod:`cqopt.costmodel.utility`);
a round in which every plan still costs infinitely much (an unbounded window)
has no optimal plan: it is counted as undefined and left out of fidelity and
regret. To cost the optimum,
statistics a round does not define (a selectivity in a round without tuples)
carry the last defined value forward; before the first, the chart's axis
middle or fixed value. Statistics the trace does not give (the chart's fixed
ones, e.g. join selectivities of a λ-λ chart that the trace lacks) keep the
chart's fixed value. The estimators see only what was observed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import math

import numpy as np
import pandas as pd

from cqopt.catalog import Catalog
from cqopt.charts.build import build_chart
from cqopt.charts.kernel import ChartContext
from cqopt.charts.lookup import Choices, QueryChart
from cqopt.charts.spec import Axis, ChartSpec
from cqopt.costmodel import plan_utilities
from cqopt.replay import baselines
from cqopt.replay.coverage import coverage_alarms
from cqopt.replay.sampling import parse_sample_ratio, sampled_statistics
from cqopt.replay.verdict import model_note
from cqopt.runtime.adaptive import AdaptiveQuery, Hysteresis
from cqopt.runtime.choice import PricedSwitch
from cqopt.runtime.estimators import DEFAULT_ESTIMATOR

BASELINES = ("rand", "rate", "best_static", "oracle_chart")


@dataclass
class Replay:
    name: str
    rounds: pd.DataFrame  # one row per round
    summary: dict[str, Any]
    plans: tuple[str, ...] = field(default=())


def actual_statistics(chart: QueryChart, observed: pd.DataFrame) -> dict[str, np.ndarray]:
    """Per statistic of the chart, one value per round (NaN carried forward)."""
    out = {}
    for name, first in chart.spec.centre().items():
        if name in observed:
            series = pd.Series(observed[name].to_numpy(dtype=np.float64))
            out[name] = series.ffill().fillna(first).to_numpy()
        else:
            out[name] = np.full(len(observed), first)
    return out


def round_length(observed: pd.DataFrame) -> float:
    """The rounds' length in seconds: as the round statistics recorded it, else from ``start``."""
    recorded = observed.attrs.get("window_s")
    if recorded:
        return float(recorded)
    if "start" in observed and len(observed) > 1:
        return float(np.median(np.diff(observed["start"].to_numpy(dtype=np.float64))))
    return 1.0


def exact_utilities(chart: QueryChart, catalog: Catalog, observed: pd.DataFrame) -> np.ndarray:
    """Every candidate plan costed at each round's actual statistics: (plans, rounds)."""
    spec = chart.spec
    scores = plan_utilities(spec.cost_model(catalog), spec.utility, list(chart.plans),
                            actual_statistics(chart, observed))
    return np.broadcast_to(scores, (len(chart.plans), len(observed)))


def replay(name: str, chart: QueryChart, catalog: Catalog, observed: pd.DataFrame, *,
           estimator: str = DEFAULT_ESTIMATOR, d: int = 5, decay: float = 0.5, seed: int = 0,
           hysteresis: Hysteresis | PricedSwitch | None = None,
           utilities: np.ndarray | None = None, choice: str = "point",
           residuals: int = 20, fallback: int | None = None,
           off_chart: bool = True) -> Replay:
    """Replay observed rounds through the chart and every baseline.

    ``utilities`` (from :func:`exact_utilities`) spares recosting every plan when
    several charts of one query replay the same rounds. ``estimator="sample:RATIO"``
    (by default ``"sample"``, a ratio of 0.1:
    :data:`~cqopt.runtime.estimators.DEFAULT_ESTIMATOR`) chooses each round's plan at that round's own statistics as a sampler of
    ``RATIO`` of its tuples would measure them (:mod:`cqopt.replay.sampling`),
    not at a prediction from earlier rounds (``"decay"``, OM's, and the others). ``choice``,
    ``residuals``, ``fallback``, ``hysteresis`` and ``off_chart`` are
    :meth:`AdaptiveQuery.costed <cqopt.runtime.adaptive.AdaptiveQuery.costed>`'s options.
    """
    actual = actual_statistics(chart, observed)
    if utilities is None:
        utilities = exact_utilities(chart, catalog, observed)
    best, defined = baselines.optimal(utilities)
    steps = _step_through(chart, catalog, observed, actual, estimator=estimator, d=d,
                          decay=decay, seed=seed, hysteresis=hysteresis, choice=choice,
                          residuals=residuals, fallback=fallback, off_chart=off_chart)
    others = _Baselines.run(chart, catalog, actual, utilities, defined, d, seed)
    ids = np.array([p.id for p in chart.plans], dtype=object)
    rounds = _rounds_table(observed, actual, steps, others, utilities, best, ids)
    summary = _summary(chart, catalog, observed, steps, others, utilities, best, defined, ids)
    return Replay(name, rounds, summary, tuple(ids))


@dataclass
class _Steps:
    """What the chart's adaptive query did in each round of a replay."""

    chosen: np.ndarray  # the plan's index into the chart's plans
    moves: np.ndarray
    switches: np.ndarray
    off: np.ndarray
    reasons: np.ndarray
    estimates: dict[str, np.ndarray]
    fallbacks: int


def _step_through(chart: QueryChart, catalog: Catalog, observed: pd.DataFrame,
                  actual: dict[str, np.ndarray], *, estimator: str, d: int, decay: float,
                  seed: int, **options: Any) -> _Steps:
    """Step the chart's :class:`AdaptiveQuery` through the observed rounds, one by one."""
    n = len(observed)
    sampled = None
    if estimator.startswith("sample"):
        # The round's own statistics from a simulated sampler (replay/sampling.py); OM's
        # decay mean predicts what a round cannot measure (a stream without tuples).
        sampled = sampled_statistics(observed, list(actual), parse_sample_ratio(estimator),
                                     window_s=round_length(observed), seed=seed)
        estimator = "decay"
    adaptive = AdaptiveQuery.costed(chart, catalog, estimator=estimator, d=d, decay=decay,
                                    **options)
    position = {id(p): i for i, p in enumerate(chart.plans)}
    steps = _Steps(np.empty(n, dtype=np.intp), np.zeros(n, dtype=bool), np.zeros(n, dtype=bool),
                   np.zeros(n, dtype=bool), np.full(n, "", dtype=object),
                   {a.statistic: np.empty(n) for a in chart.spec.axes}, 0)
    # The estimators see what was observed (nothing where a round defines a statistic
    # not, NaN in the rounds table); the filled-in values serve only to cost the optimum.
    raw = {k: observed[k].to_numpy(dtype=np.float64) for k in actual if k in observed}
    for t in range(n):
        measured = None if sampled is None else {
            k: v[t] for k, v in sampled.items() if not math.isnan(v[t])}
        outcome = adaptive.step({k: v[t] for k, v in raw.items() if not math.isnan(v[t])},
                                measured=measured)
        steps.chosen[t] = position[id(outcome.plan)]
        steps.moves[t], steps.switches[t] = outcome.move, outcome.switch
        steps.off[t], steps.reasons[t] = outcome.off_chart, outcome.off_chart_reason
        for k in steps.estimates:
            steps.estimates[k][t] = outcome.estimate[k]
    steps.fallbacks = adaptive.fallback.fallbacks if adaptive.fallback else 0
    return steps


@dataclass
class _Baselines:
    """The plans each baseline runs in each round, and the one plan of the fixed ones."""

    runs: dict[str, np.ndarray]  # baseline -> plan index per round
    rate_plan: int
    static_plan: int
    oracle: Choices  # the chart's lookups at the actual statistics

    @classmethod
    def run(cls, chart: QueryChart, catalog: Catalog, actual: dict[str, np.ndarray],
            utilities: np.ndarray, defined: np.ndarray, d: int, seed: int) -> _Baselines:
        spec, plans, n = chart.spec, list(chart.plans), utilities.shape[1]
        oracle = chart.choose_many({a.statistic: actual[a.statistic] for a in spec.axes})
        rand = baselines.rand(len(plans), n, seed)
        # RATE decides once, from the first d rounds that have an optimum at all.
        early = np.flatnonzero(defined)[:d] if defined.any() else np.arange(min(d, n))
        first = {k: np.array([np.mean(v[early])]) if len(early) else np.array([np.nan])
                 for k, v in actual.items()}
        rate_plan = baselines.rate(plan_utilities(spec.cost_model(catalog), spec.utility,
                                                  plans, first)[:, 0])
        static_plan = baselines.best_static(utilities, defined)
        runs = {"rand": rand, "rate": np.full(n, rate_plan),
                "best_static": np.full(n, static_plan), "oracle_chart": oracle.plan_index}
        return cls(runs, rate_plan, static_plan, oracle)

    def hits(self, utilities: np.ndarray, best: np.ndarray) -> dict[str, np.ndarray]:
        return {name: baselines.outcome(utilities, index, best)[0]
                for name, index in self.runs.items()}


def _rounds_table(observed: pd.DataFrame, actual: dict[str, np.ndarray], steps: _Steps,
                  others: _Baselines, utilities: np.ndarray, best: np.ndarray,
                  ids: np.ndarray) -> pd.DataFrame:
    """One row per round: the statistics, the chart's plan and every baseline's hit."""
    n = len(observed)
    hit, regret = baselines.outcome(utilities, steps.chosen, best)
    hits = others.hits(utilities, best)
    return pd.DataFrame({
        "round": observed["round"].to_numpy() if "round" in observed else np.arange(n),
        "start": observed["start"].to_numpy() if "start" in observed else np.arange(n, float),
        **{f"actual:{k}": v for k, v in actual.items()},
        **{f"estimate:{k}": v for k, v in steps.estimates.items()},
        "plan": ids[steps.chosen], "optimal": ids[best], "hit": hit, "regret": regret,
        "move": steps.moves, "switch": steps.switches, "off_chart": steps.off,
        "off_chart_reason": steps.reasons,
        "oracle_plan": ids[others.oracle.plan_index], "oracle_hit": hits["oracle_chart"],
        "rand_hit": hits["rand"], "rate_hit": hits["rate"],
        "best_static_hit": hits["best_static"],
    })


def _summary(chart: QueryChart, catalog: Catalog, observed: pd.DataFrame, steps: _Steps,
             others: _Baselines, utilities: np.ndarray, best: np.ndarray,
             defined: np.ndarray, ids: np.ndarray) -> dict[str, Any]:
    """The replay's totals: the chart's score, its moves and misses, every baseline's."""
    spec, n = chart.spec, len(observed)
    hit = baselines.outcome(utilities, steps.chosen, best)[0]
    oracle_hit = others.hits(utilities, best)["oracle_chart"]
    scored = {name: baselines.score(utilities, index, best, defined)
              for name, index in others.runs.items()}
    scored["rate"]["plan"] = str(ids[others.rate_plan])
    scored["best_static"]["plan"] = str(ids[others.static_plan])
    scored["oracle_chart"]["moves"] = baselines.changes(
        np.ravel_multi_index(others.oracle.cells.T, spec.shape))
    chart_score = baselines.score(utilities, steps.chosen, best, defined)
    note = model_note(spec, catalog)
    return {
        "rounds": n,
        # What every total is in (the chart's model's utility, or predicted seconds), and
        # whether that model was ever checked against the engine.
        "unit": note["unit"], "unit_checked": note["checked"], "unit_note": note["text"],
        "undefined_rounds": int(n - defined.sum()),
        **chart_score,
        "moves": int(steps.moves.sum()),
        "switches": int(steps.switches.sum()),
        "off_chart_rounds": int(steps.off.sum()),
        "off_chart_example": str(steps.reasons[np.argmax(steps.off)]) if steps.off.any() else "",
        "headroom": scored["best_static"]["regret"],
        "no_headroom": bool(scored["best_static"]["regret"] < baselines.NO_HEADROOM),
        "plans_used": int(len(np.unique(steps.chosen))),
        "fallbacks": steps.fallbacks,
        "misses": {"estimation": int(np.sum((oracle_hit == 1) & (hit == 0))),
                   "discretization": int(np.sum((oracle_hit == 0) & (hit == 0)))},
        "baselines": scored,
        # Statistics the chart does not cover in more than 10% of the rounds.
        "alarms": [a.to_dict() for a in coverage_alarms(spec, observed)],
    }


def off_chart_line(summary: dict[str, Any]) -> str:
    """One sentence on the rounds the chart did not cover, from a replay's summary.

    >>> off_chart_line({"rounds": 120, "off_chart_rounds": 30,
    ...                 "off_chart_example": "jsel.S.T = 0.2 is 200x the 0.001 the chart fixes"})
    '30 of 120 rounds were off the chart and ran the plan costed cheapest at their statistics (first: jsel.S.T = 0.2 is 200x the 0.001 the chart fixes).'
    """
    n = summary.get("off_chart_rounds", 0)
    if not n:
        return f"All {summary['rounds']} rounds were inside the chart."
    example = summary.get("off_chart_example")
    return (f"{n} of {summary['rounds']} rounds were off the chart and ran the plan costed "
            f"cheapest at their statistics{f' (first: {example})' if example else ''}.")


def local_chart(spec: ChartSpec, catalog: Catalog) -> QueryChart:
    """Build ``spec``'s chart in this process, ready for lookups."""
    context = ChartContext(spec, catalog)
    built = build_chart(context, progress=False)
    return QueryChart(spec, context.plans, built.plan_index, built.cost)


def with_k(spec: ChartSpec, k: int) -> ChartSpec:
    return replace(spec, axes=tuple(Axis(a.statistic, a.lo, a.hi, k) for a in spec.axes))


def k_sweep(name: str, spec: ChartSpec, catalog: Catalog, observed: pd.DataFrame,
            ks: list[int], **kwargs) -> pd.DataFrame:
    """Fidelity, regret, moves, switches and plans stored, for charts of each k."""
    rows, utilities, ids = [], None, None
    for k in ks:
        chart = local_chart(with_k(spec, k), catalog)
        if chart.plan_ids != ids:  # k changes the regions, not the plans: cost them once
            utilities, ids = exact_utilities(chart, catalog, observed), chart.plan_ids
        result = replay(name, chart, catalog, observed, utilities=utilities, **kwargs).summary
        rows.append({"k": k, "cells": chart.spec.n_cells,
                     "plans_used": len(np.unique(chart.plan_index)),
                     "fidelity": result["fidelity"], "near_fidelity": result["near_fidelity"],
                     "regret": result["regret"], "mean_regret": result["mean_regret"],
                     "moves": result["moves"], "switches": result["switches"],
                     "oracle_fidelity": result["baselines"]["oracle_chart"]["fidelity"]})
    return pd.DataFrame(rows)


def fidelity_over_time(rounds: pd.DataFrame, bucket_s: float = 100.0) -> pd.DataFrame:
    """Fidelity of the chart and every baseline per ``bucket_s`` of trace time."""
    start = rounds["start"] - rounds["start"].min()
    bucket = (start // bucket_s * bucket_s).rename("from")
    cols = {"chart": "hit", "oracle_chart": "oracle_hit", "rand": "rand_hit", "rate": "rate_hit",
            "best_static": "best_static_hit"}
    return rounds[list(cols.values())].groupby(bucket).mean().rename(
        columns={v: k for k, v in cols.items()}).reset_index()
