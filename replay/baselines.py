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
  the trace by the headline score, so its regret, the **headroom**, is what
  any switching can win: where it is below 0.1%, no chart can help that
  query on that trace.

Every method is scored by :func:`score`, and BEST-STATIC is chosen by the
same measure it is scored by. The headline **regret** is the total cost of
the chosen plans over the total cost of the per-round optima, minus 1: it
weighs each round by what it costs, so a round whose optimum costs almost
nothing cannot blow it up (the per-round mean of ``cost / optimum − 1``,
which can, is reported beside it as ``mean_regret``). **Near fidelity** is
the share of rounds whose chosen plan costs at most 1% more than the
optimum: fidelity counts exact hits only, and plans that tie within 1% are
not worth telling apart.

ORACLE-CHART (the chart looked up at the actual statistics) needs the chart,
not only the matrix, and stays in :mod:`cqopt.replay.replay`.

>>> u = np.array([[1.0, 1.0, 4.0],
...               [2.0, 2.0, 1.0]])
>>> optimal(u)[0].tolist(), best_static(u), rate(np.array([3.0, 2.0]))
([0, 0, 1], 1, 1)
>>> hit, regret = outcome(u, np.full(3, best_static(u)), optimal(u)[0])
>>> hit.tolist(), regret.tolist()
([0.0, 0.0, 1.0], [1.0, 1.0, 0.0])
>>> s = score(u, np.full(3, best_static(u)))
>>> [round(s[k], 4) for k in ("regret", "mean_regret", "fidelity")]  # totals 5 against 3
[0.6667, 0.6667, 0.3333]
"""

from __future__ import annotations

import numpy as np

NO_HEADROOM = 0.001  # below this BEST-STATIC regret no chart can help
NEAR = 0.01  # a plan within 1% of the optimum is a near hit


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

    The lowest total is the lowest headline regret of :func:`score` (the
    optima's total is the same for every plan), so no fixed plan scores
    better than BEST-STATIC. A plan infinitely costly in any such round
    totals ∞; if every plan does, the one with the fewest infinite rounds,
    then the lowest finite total.
    """
    utilities = np.asarray(utilities, dtype=np.float64)
    if defined is None:
        defined = optimal(utilities)[1]
    scored = np.where(np.isnan(utilities[:, defined]), np.inf, utilities[:, defined])
    finite = np.isfinite(scored)
    infinite_rounds = np.count_nonzero(~finite, axis=1)
    totals = np.where(finite, scored, 0.0).sum(axis=1)
    return int(np.lexsort((totals, infinite_rounds))[0])


def total_regret(chosen_costs: np.ndarray, optimum_costs: np.ndarray) -> float:
    """``Σ cost(chosen) / Σ cost(optimum) − 1``: regret weighted by what each round costs.

    >>> round(total_regret(np.array([1e-3, 10.0]), np.array([1e-9, 10.0])), 6)  # no blow-up
    0.0001
    >>> total_regret(np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    0.0
    """
    spent, least = float(np.sum(chosen_costs)), float(np.sum(optimum_costs))
    if spent <= least:
        return 0.0
    return spent / least - 1.0 if least > 0 else float("inf")


def score(utilities: np.ndarray, chosen: np.ndarray, best: np.ndarray | None = None,
          defined: np.ndarray | None = None) -> dict[str, float | int]:
    """The headline scores of a plan index per round, over the rounds that have an optimum.

    Parameters
    ----------
    utilities : ndarray of shape (plans, rounds)
        Every plan's cost in every round.
    chosen : ndarray of int, shape (rounds,)
        The plan a method ran in each round.
    best, defined : ndarray, optional
        :func:`optimal`'s result, when the caller has it already.

    Returns
    -------
    dict
        ``regret`` (:func:`total_regret`, the headline), ``mean_regret`` (the
        per-round mean of ``cost / optimum − 1``), ``fidelity`` (exact hits,
        ties count), ``near_fidelity`` (within :data:`NEAR` of the optimum),
        ``switches`` and ``scored_rounds`` (how many rounds were scored).

    Examples
    --------
    >>> u = np.array([[1.0, 1.0, 4.0], [2.0, 1.005, 1.0]])
    >>> s = score(u, np.array([1, 1, 1]))
    >>> s["fidelity"], s["near_fidelity"], s["switches"], s["scored_rounds"]
    (0.3333333333333333, 0.6666666666666666, 0, 3)
    """
    utilities = np.asarray(utilities, dtype=np.float64)
    chosen = np.asarray(chosen)
    if best is None or defined is None:
        best, defined = optimal(utilities)
    hit, regret = outcome(utilities, chosen, best)
    t = np.flatnonzero(defined)
    cost, optimum = utilities[chosen[t], t], utilities[best[t], t]
    some = len(t) > 0
    nan = float("nan")
    return {
        "regret": total_regret(cost, optimum) if some else nan,
        "mean_regret": float(np.mean(regret[t])) if some else nan,
        "fidelity": float(np.mean(hit[t])) if some else nan,
        "near_fidelity": float(np.mean(cost <= optimum * (1 + NEAR))) if some else nan,
        "switches": changes(chosen),
        "scored_rounds": int(len(t)),
    }


def changes(index: np.ndarray) -> int:
    """How often consecutive entries differ: switches of a plan index per round."""
    index = np.asarray(index)
    return int(np.count_nonzero(index[1:] != index[:-1]))
