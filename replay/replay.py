"""Fidelity: how often the chart's plan, chosen from estimated statistics, was optimal.

For each round of observed statistics (from :mod:`cqopt.spark.round_stats`):

- the **estimated** plan: an :class:`~cqopt.runtime.adaptive.AdaptiveQuery` estimates
  the round from the rounds before it and looks the estimate up in the chart;
- the **optimal** plan: every candidate costed exactly at the round's actual
  statistics (the chart's model and weights); a round is a **hit** when the
  chosen plan costs no more than the optimum (ties count as hits);
- **regret** ``cost(chosen) / cost(optimal) − 1`` at the actual statistics;
- **move** and **switch** as counted by the adaptive query.

Baselines in the same run: **RAND** (a seeded random plan per round),
**RATE** (one plan, the optimum at the mean statistics of the first d rounds
that have an optimum, never switched) and **ORACLE-CHART** (the chart looked up at the actual
statistics). Misses split into *estimation* misses (the oracle chart hit, the
estimate did not) and *discretization* misses (even the oracle chart missed).

A round in which every plan costs infinitely much (no tuples arrived, or a
selectivity of 0 leaves no output) has no optimal plan: it is counted as
undefined and left out of fidelity and regret. To cost the optimum,
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
from cqopt.charts.lookup import QueryChart
from cqopt.charts.spec import Axis, ChartSpec
from cqopt.costmodel import Utility, make_model, plan_utilities
from cqopt.runtime.adaptive import AdaptiveQuery, Hysteresis

BASELINES = ("rand", "rate", "oracle_chart")


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


def _outcome(utilities: np.ndarray, chosen: np.ndarray, best: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """Hit and regret of the chosen plan index per round (NaN where undefined)."""
    t = np.arange(utilities.shape[1])
    cost, optimum = utilities[chosen, t], utilities[best, t]
    hit = cost <= optimum * (1 + 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        regret = np.where(hit, 0.0, cost / optimum - 1.0)
    undefined = ~np.isfinite(optimum)  # every plan costs infinitely much: no right answer
    return np.where(undefined, np.nan, hit), np.where(undefined, np.nan, regret)


def _changes(index: np.ndarray) -> int:
    return int(np.count_nonzero(index[1:] != index[:-1]))


def exact_utilities(chart: QueryChart, catalog: Catalog, observed: pd.DataFrame) -> np.ndarray:
    """Every candidate plan costed at each round's actual statistics: (plans, rounds)."""
    spec = chart.spec
    model = make_model(spec.model, catalog, spec.memory_unit)
    utility = Utility.from_weights(spec.weights)
    scores = plan_utilities(model, utility, list(chart.plans),
                            actual_statistics(chart, observed))
    return np.broadcast_to(scores, (len(chart.plans), len(observed)))


def replay(name: str, chart: QueryChart, catalog: Catalog, observed: pd.DataFrame, *,
           estimator: str = "decay", d: int = 5, decay: float = 0.5, seed: int = 0,
           hysteresis: Hysteresis | None = None,
           utilities: np.ndarray | None = None) -> Replay:
    """Replay observed rounds through the chart and every baseline.

    ``utilities`` (from :func:`exact_utilities`) spares recosting every plan when
    several charts of one query replay the same rounds.
    """
    spec = chart.spec
    model = make_model(spec.model, catalog, spec.memory_unit)
    utility = Utility.from_weights(spec.weights)
    plans = list(chart.plans)
    actual = actual_statistics(chart, observed)
    n = len(observed)
    if utilities is None:
        utilities = exact_utilities(chart, catalog, observed)
    best = np.argmin(utilities, axis=0)

    def cost(plan, stats):
        return float(utility(model.cost(plan, stats)))

    adaptive = AdaptiveQuery(chart, estimator=estimator, d=d, decay=decay,
                             hysteresis=hysteresis, cost=cost if hysteresis else None)
    position = {id(p): i for i, p in enumerate(plans)}
    chosen = np.empty(n, dtype=np.intp)
    moves = np.zeros(n, dtype=bool)
    switches = np.zeros(n, dtype=bool)
    estimates = {a.statistic: np.empty(n) for a in spec.axes}
    # The estimators see what was observed (nothing where a round defines a statistic
    # not, NaN in the rounds table); the filled-in values serve only to cost the optimum.
    raw = {k: observed[k].to_numpy(dtype=np.float64) for k in actual if k in observed}
    for t in range(n):
        outcome = adaptive.step({k: v[t] for k, v in raw.items() if not math.isnan(v[t])})
        chosen[t] = position[id(outcome.plan)]
        moves[t], switches[t] = outcome.move, outcome.switch
        for k in estimates:
            estimates[k][t] = outcome.estimate[k]
    hit, regret = _outcome(utilities, chosen, best)

    oracle = chart.choose_many({a.statistic: actual[a.statistic] for a in spec.axes})
    oracle_hit, oracle_regret = _outcome(utilities, oracle.plan_index, best)
    rand = np.random.default_rng(seed).integers(0, len(plans), n)
    rand_hit, rand_regret = _outcome(utilities, rand, best)
    # RATE decides once, from the first d rounds that have an optimum at all.
    defined = np.isfinite(utilities[best, np.arange(n)])
    early = np.flatnonzero(defined)[:d] if defined.any() else np.arange(min(d, n))
    first = {k: np.array([np.mean(v[early])]) if len(early) else np.array([np.nan])
             for k, v in actual.items()}
    rate_plan = int(np.argmin(np.nan_to_num(plan_utilities(model, utility, plans, first)[:, 0],
                                            nan=np.inf)))
    rate = np.full(n, rate_plan)
    rate_hit, rate_regret = _outcome(utilities, rate, best)

    ids = np.array([p.id for p in plans], dtype=object)
    rounds = pd.DataFrame({
        "round": observed["round"].to_numpy() if "round" in observed else np.arange(n),
        "start": observed["start"].to_numpy() if "start" in observed else np.arange(n, float),
        **{f"actual:{k}": v for k, v in actual.items()},
        **{f"estimate:{k}": v for k, v in estimates.items()},
        "plan": ids[chosen], "optimal": ids[best], "hit": hit, "regret": regret,
        "move": moves, "switch": switches,
        "oracle_plan": ids[oracle.plan_index], "oracle_hit": oracle_hit,
        "rand_hit": rand_hit, "rate_hit": rate_hit,
    })

    def stats(h, r, index=None):
        some = bool(defined.any())
        out = {"fidelity": float(np.mean(h[defined])) if some else float("nan"),
               "regret": float(np.mean(r[defined])) if some else float("nan")}
        if index is not None:
            out["switches"] = _changes(index)
        return out

    summary = {
        "rounds": n,
        "undefined_rounds": int(n - defined.sum()),
        **stats(hit, regret),
        "moves": int(moves.sum()),
        "switches": int(switches.sum()),
        "misses": {"estimation": int(np.sum((oracle_hit == 1) & (hit == 0))),
                   "discretization": int(np.sum((oracle_hit == 0) & (hit == 0)))},
        "baselines": {
            "rand": stats(rand_hit, rand_regret, rand),
            "rate": {**stats(rate_hit, rate_regret, rate), "plan": str(ids[rate_plan])},
            "oracle_chart": {**stats(oracle_hit, oracle_regret, oracle.plan_index),
                             "moves": _changes(np.ravel_multi_index(
                                 oracle.cells.T, spec.shape))},
        },
    }
    return Replay(name, rounds, summary, tuple(ids))


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
                     "fidelity": result["fidelity"], "regret": result["regret"],
                     "moves": result["moves"], "switches": result["switches"],
                     "oracle_fidelity": result["baselines"]["oracle_chart"]["fidelity"]})
    return pd.DataFrame(rows)


def fidelity_over_time(rounds: pd.DataFrame, bucket_s: float = 100.0) -> pd.DataFrame:
    """Fidelity of the chart and every baseline per ``bucket_s`` of trace time."""
    start = rounds["start"] - rounds["start"].min()
    bucket = (start // bucket_s * bucket_s).rename("from")
    cols = {"chart": "hit", "oracle_chart": "oracle_hit", "rand": "rand_hit", "rate": "rate_hit"}
    return rounds[list(cols.values())].groupby(bucket).mean().rename(
        columns={v: k for k, v in cols.items()}).reset_index()
