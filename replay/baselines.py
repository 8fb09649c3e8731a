"""The baselines a chart is measured against, over the utilities matrix of a replay.

``utilities`` has one row per candidate plan and one column per round: every
plan costed exactly at the round's actual statistics
(:func:`cqopt.replay.replay.exact_utilities`). Each baseline is a plan index
per round:

- :func:`optimal`: the per-round optimum, the yardstick of hits and regret;
- :func:`rand`: a seeded random plan per round (RAND);
- :func:`rate`: one plan chosen once, from static statistics, never switched
  (RATE; the caller costs the plans at those statistics);
- :func:`best_static`: the one plan with the lowest total cost over the
  replayed rounds, in hindsight (BEST-STATIC). No static plan does better on
  the trace, so its regret, the **headroom**, is what any switching can win:
  where it is below 0.1%, no chart can help that query on that trace.

ORACLE-CHART (the chart looked up at the actual statistics) needs the chart,
not only the matrix, and stays in :mod:`cqopt.replay.replay`.

>>> u = np.array([[1.0, 1.0, 4.0],
...               [2.0, 2.0, 1.0]])
>>> optimal(u)[0].tolist(), best_static(u), rate(np.array([3.0, 2.0]))
([0, 0, 1], 1, 1)
>>> hit, regret = outcome(u, np.full(3, best_static(u)), optimal(u)[0])
>>> hit.tolist(), regret.tolist()
([0.0, 0.0, 1.0], [1.0, 1.0, 0.0])
"""

from __future__ import annotations

import numpy as np

NO_HEADROOM = 0.001  # below this BEST-STATIC regret no chart can help


def optimal(utilities: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest plan per round, and whether the round has one (some plan costs < ∞)."""
    utilities = np.asarray(utilities, dtype=np.float64)
    best = np.argmin(np.where(np.isnan(utilities), np.inf, utilities), axis=0)
    defined = np.isfinite(utilities[best, np.arange(utilities.shape[1])])
    return best, defined


def outcome(utilities: np.ndarray, chosen: np.ndarray, best: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Hit and regret ``cost(chosen) / cost(optimum) − 1`` per round; NaN where undefined.

    A plan that costs no more than the optimum is a hit (ties count); a round
    whose optimum is 0 and the chosen plan's cost positive has infinite regret.
    """
    t = np.arange(utilities.shape[1])
    cost, optimum = utilities[chosen, t], utilities[best, t]
    hit = cost <= optimum * (1 + 1e-12)
    with np.errstate(invalid="ignore", divide="ignore"):
        regret = np.where(hit, 0.0, cost / optimum - 1.0)
    undefined = ~np.isfinite(optimum)  # every plan costs infinitely much: no right answer
    return np.where(undefined, np.nan, hit), np.where(undefined, np.nan, regret)


def rand(n_plans: int, n_rounds: int, seed: int = 0) -> np.ndarray:
    """RAND: a plan drawn uniformly per round, reproducibly from ``seed``."""
    return np.random.default_rng(seed).integers(0, n_plans, n_rounds)


def rate(static_costs: np.ndarray) -> int:
    """RATE's plan: the cheapest at the static statistics (``static_costs`` per plan)."""
    return int(np.argmin(np.nan_to_num(np.asarray(static_costs, dtype=np.float64),
                                       nan=np.inf)))


def best_static(utilities: np.ndarray, defined: np.ndarray | None = None) -> int:
    """BEST-STATIC's plan: the lowest total cost over the rounds that have an optimum.

    A plan infinitely costly in any such round totals ∞; if every plan does,
    the one with the fewest infinite rounds, then the lowest finite total.
    """
    utilities = np.asarray(utilities, dtype=np.float64)
    if defined is None:
        defined = optimal(utilities)[1]
    scored = np.where(np.isnan(utilities[:, defined]), np.inf, utilities[:, defined])
    finite = np.isfinite(scored)
    infinite_rounds = np.count_nonzero(~finite, axis=1)
    totals = np.where(finite, scored, 0.0).sum(axis=1)
    return int(np.lexsort((totals, infinite_rounds))[0])


def summary(hit: np.ndarray, regret: np.ndarray, defined: np.ndarray,
            index: np.ndarray | None = None) -> dict[str, float | int]:
    """Fidelity and mean regret over the defined rounds, and switches if ``index`` is given."""
    some = bool(np.any(defined))
    out: dict[str, float | int] = {
        "fidelity": float(np.mean(hit[defined])) if some else float("nan"),
        "regret": float(np.mean(regret[defined])) if some else float("nan")}
    if index is not None:
        out["switches"] = changes(index)
    return out


def changes(index: np.ndarray) -> int:
    """How often consecutive entries differ: switches of a plan index per round."""
    index = np.asarray(index)
    return int(np.count_nonzero(index[1:] != index[:-1]))
