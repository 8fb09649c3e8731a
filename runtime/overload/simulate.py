"""Deadlines and load shedding replayed over per-round statistics, without an engine.

For each round r of a trace's per-round statistics (``rate.S`` in tuples per
second, ``sel.S``, ...; the columns :mod:`cqopt.replay.rounds` reads):

1. ``T_r`` = the predicted seconds of the round at full input, from a given
   (vectorized) callable: the engine cost model, or any other.
2. If ``T_r`` exceeds the round's deadline ``D_r``, shed: keep the largest
   share ``p_r`` of every stream's tuples, dropped at the inputs before the
   first operator, for which the prediction at rates ``p_r·rate`` fits ``D_r``.
   For one query without shared operators this is both Babcock et al.'s
   placement (a single shedder with ``p = P``, as early as possible; seed 004,
   §3.2) and RTStream's early drop ``ε = D/T`` (seed 000, §4.4) when the time
   is linear in the input; a join's time is not, so ``p_r`` is found by
   bisection (the prediction is assumed to grow with the rates).
3. Count the tuples dropped, ``Σ_S rate.S · round_seconds · (1 − p_r)``, the
   deadline misses with and without shedding, and for an aggregate the
   promised bound ``ε_r = C_r / p_r`` at confidence δ with
   ``C_r`` from :func:`~cqopt.runtime.overload.shedding.error_constant` over
   the round's contributing tuples (0 when nothing is shed).

Readings: a round whose prediction exceeds its deadline even at
``min_kept`` is run at ``min_kept`` and counted as a miss (``unreachable``);
shedding aims at the deadline less an optional ``reserve`` for bursts;
a miss is judged on the prediction, or, given the seconds each round really
took at full input, on those scaled by the model's ratio ``T(p_r)/T(1)``.
:func:`relative_errors` and :func:`bound_coverage` score answers scaled by
``1/p`` against exact ones computed offline.

>>> stats = {"rate.S": np.array([100.0, 300.0]), "sel.S": np.array([0.5, 0.5])}
>>> run = simulate_rounds(stats, lambda s: 0.005 * s["rate.S"], deadline=1.0, round_seconds=1.0)
>>> run.kept.round(4).tolist(), run.dropped.round(1).tolist(), run.missed_without.tolist()
([1.0, 0.6667], [0.0, 100.0], [False, True])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cqopt.charts.overload_settings import DELTA
from cqopt.errors import CqoptError
from cqopt.runtime.overload.shedding import error_constant

Predict = Callable[[Mapping[str, np.ndarray]], ArrayLike]


@dataclass(frozen=True)
class ShedRounds:
    """Per-round outcome of :func:`simulate_rounds`; every array has one entry per round.

    Attributes
    ----------
    predicted : numpy.ndarray
        Predicted seconds at full input.
    deadline : numpy.ndarray
        The round's deadline, seconds.
    kept : numpy.ndarray
        The share of each stream's tuples kept (1: nothing shed).
    predicted_after : numpy.ndarray
        Predicted seconds at the kept share.
    seconds_without, seconds_with : numpy.ndarray
        The seconds misses are judged on, without and with shedding.
    dropped : numpy.ndarray
        Tuples shed.
    epsilon : numpy.ndarray
        The promised relative error of the aggregate at confidence ``delta``
        (0 where nothing is shed; NaN without aggregate statistics).
    delta : float
        The confidence of ``epsilon``.
    unreachable : numpy.ndarray
        Rounds no shedding down to ``min_kept`` could fit.
    """

    predicted: np.ndarray
    deadline: np.ndarray
    kept: np.ndarray
    predicted_after: np.ndarray
    seconds_without: np.ndarray
    seconds_with: np.ndarray
    dropped: np.ndarray
    epsilon: np.ndarray
    delta: float
    unreachable: np.ndarray

    @property
    def missed_without(self) -> np.ndarray:
        return self.seconds_without > self.deadline

    @property
    def missed_with(self) -> np.ndarray:
        return self.seconds_with > self.deadline * (1.0 + 1e-9)

    def summary(self) -> dict[str, float]:
        """Shares of rounds missed with and without shedding, rounds shed, tuples dropped,
        and the largest promised error.

        >>> simulate_rounds({"rate.S": np.array([1.0, 3.0])}, lambda s: s["rate.S"], 2.0,
        ...                 round_seconds=1.0).summary()["miss_share_without"]
        0.5
        """
        rounds = len(self.kept)
        finite = self.epsilon[np.isfinite(self.epsilon)]
        return {"rounds": rounds,
                "miss_share_without": float(self.missed_without.mean()) if rounds else 0.0,
                "miss_share_with": float(self.missed_with.mean()) if rounds else 0.0,
                "shed_share": float((self.kept < 1.0).mean()) if rounds else 0.0,
                "tuples_dropped": float(self.dropped.sum()),
                "max_epsilon": float(finite.max()) if finite.size else float("nan"),
                "delta": self.delta}


def scaled_rates(stats: Mapping[str, ArrayLike], kept: ArrayLike) -> dict[str, ArrayLike]:
    """``stats`` with every rate (``rate.S``) times the share ``kept`` of its tuples.

    >>> scaled_rates({"rate.S": 400.0, "sel.S": 0.5}, 0.25)
    {'rate.S': 100.0, 'sel.S': 0.5}
    """
    return {k: (v * kept if k.startswith("rate.") else v) for k, v in stats.items()}


def simulate_rounds(stats: Mapping[str, ArrayLike], predict_seconds: Predict,
                    deadline: float | ArrayLike, round_seconds: float, *,
                    aggregate: Mapping[str, ArrayLike] | None = None, delta: float = DELTA,
                    actual_seconds: ArrayLike | None = None, min_kept: float = 0.0,
                    reserve: float | ArrayLike = 0.0, iterations: int = 40) -> ShedRounds:
    """Replay deadlines and input shedding over per-round statistics.

    Parameters
    ----------
    stats : Mapping[str, array_like]
        Per-round statistics, one array per column (``rate.S`` in tuples per second).
    predict_seconds : callable
        ``predict_seconds(stats) -> seconds`` per round, vectorized over rounds.
    deadline : float or array_like
        Each round's deadline in seconds (a scalar for all).
    round_seconds : float
        The length of a round, to turn rates into tuples.
    aggregate : Mapping[str, array_like], optional
        For an aggregate query, ``count``, ``mean`` and ``std`` of the tuples that
        reach it per round (COUNT: mean 1, std 0).
    delta : float
        The confidence of the promised bound (default
        :data:`~cqopt.charts.overload_settings.DELTA`).
    actual_seconds : array_like, optional
        The seconds each round really took at full input.
    min_kept : float
        The least share of input a round may keep (its least QoS).
    reserve : float or array_like
        The share of each deadline held back for bursts the prediction misses
        (PIPES §4.1.2 keeps such a reserve): shedding plans to finish within
        ``(1 − reserve)·D``; misses are still judged against D.
    iterations : int
        Halvings of the bisection for the kept share.

    Returns
    -------
    ShedRounds

    Raises
    ------
    CqoptError
        No ``rate.*`` column, columns of different lengths, a round length
        that is not positive, or aggregate statistics without count, mean and
        std. The deadline and ``min_kept`` are taken as judged
        (:class:`~cqopt.charts.overload_settings.OverloadSettings`).

    Examples
    --------
    A join's time grows with both rates: a quarter of the time needs half of each.

    >>> stats = {"rate.S": np.array([400.0]), "rate.T": np.array([400.0])}
    >>> join = lambda s: 1e-5 * s["rate.S"] * s["rate.T"]
    >>> simulate_rounds(stats, join, deadline=0.4, round_seconds=1.0).kept.round(6).tolist()
    [0.5]
    """
    columns = {k: np.asarray(v, dtype=np.float64) for k, v in stats.items()}
    rates = [k for k in columns if k.startswith("rate.")]
    if not rates:
        raise CqoptError("shedding needs at least one rate.STREAM column in the round statistics")
    lengths = {v.shape for v in columns.values()}
    if len(lengths) != 1 or len(next(iter(lengths))) != 1:
        raise CqoptError(f"the round statistics must be 1-d columns of one length, got {lengths}")
    rounds = next(iter(lengths))[0]
    deadlines = np.broadcast_to(np.asarray(deadline, dtype=np.float64), (rounds,)).copy()
    if not round_seconds > 0:
        raise CqoptError(f"a round's length must be > 0 seconds, got {round_seconds}")
    reserved = np.broadcast_to(np.asarray(reserve, dtype=np.float64), (rounds,))
    if not np.all((reserved >= 0) & (reserved < 1)):
        raise CqoptError("the reserve is a share of the deadline in [0, 1)")
    budget = deadlines * (1.0 - reserved)

    def predict(kept: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.asarray(predict_seconds(scaled_rates(columns, kept)),
                                          dtype=np.float64), (rounds,))

    full = predict(np.ones(rounds))
    floor = np.full(rounds, min_kept)
    at_floor = predict(floor)
    over = full > budget
    unreachable = over & (at_floor > budget)
    lo, hi = floor.copy(), np.ones(rounds)  # lo fits (or is the floor), hi does not
    search = over & ~unreachable
    for _ in range(iterations if search.any() else 0):
        mid = (lo + hi) / 2
        fits = predict(np.where(search, mid, 1.0)) <= budget
        lo = np.where(search & fits, mid, lo)
        hi = np.where(search & ~fits, mid, hi)
    kept = np.where(over, lo, 1.0)
    after = predict(kept)
    if actual_seconds is None:
        without, with_ = full, after
    else:
        without = np.asarray(actual_seconds, dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            with_ = np.where(full > 0, without * after / full, without)
    tuples = sum(columns[k] for k in rates) * round_seconds
    epsilon = np.full(rounds, np.nan)
    if aggregate is not None:
        missing = {"count", "mean", "std"} - set(aggregate)
        if missing:
            raise CqoptError(f"aggregate statistics need count, mean and std; missing "
                             f"{sorted(missing)}")
        c = error_constant(aggregate["mean"], aggregate["std"], aggregate["count"], delta)
        with np.errstate(divide="ignore", invalid="ignore"):
            epsilon = np.where(kept >= 1.0, 0.0, np.where(kept > 0, c / kept, np.inf))
    return ShedRounds(full, deadlines, kept, after, without, with_, tuples * (1.0 - kept),
                      epsilon, delta, unreachable)


def relative_errors(exact: ArrayLike, kept_sum: ArrayLike, kept: ArrayLike) -> np.ndarray:
    """``|kept_sum / p − exact| / |exact|`` per round (NaN where the exact answer is 0).

    Parameters
    ----------
    exact : array_like
        The exact answers, computed offline without shedding.
    kept_sum : array_like
        The sums over the kept tuples.
    kept : array_like
        The share kept per round (the scaling is ``1/kept``).

    Returns
    -------
    numpy.ndarray

    Examples
    --------
    >>> relative_errors([100.0, 50.0], [45.0, 50.0], [0.5, 1.0]).tolist()
    [0.1, 0.0]
    """
    exact = np.asarray(exact, dtype=np.float64)
    p = np.asarray(kept, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        answer = np.where(p > 0, np.asarray(kept_sum, dtype=np.float64) / p, 0.0)
        return np.where(exact != 0, np.abs(answer - exact) / np.abs(exact), np.nan)


def bound_coverage(errors: ArrayLike, epsilon: ArrayLike) -> float:
    """The share of rounds whose measured error is within the promised ε (target: ≥ 1 − δ).

    Parameters
    ----------
    errors : array_like
        Measured relative errors (:func:`relative_errors`); NaN rounds are left out.
    epsilon : array_like
        The promised ε per round.

    Returns
    -------
    float
        The share in [0, 1] (1 when no round can be scored).

    Examples
    --------
    >>> bound_coverage([0.01, 0.2, 0.0], [0.05, 0.1, 0.0])
    0.6666666666666666
    """
    errors = np.asarray(errors, dtype=np.float64)
    epsilon = np.asarray(epsilon, dtype=np.float64)
    scored = ~np.isnan(errors)
    return float(np.mean(errors[scored] <= epsilon[scored] + 1e-12)) if scored.any() else 1.0
