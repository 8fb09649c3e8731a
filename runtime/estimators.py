"""Estimating next round's statistics from the rounds observed so far.

- :class:`DecayMean` is OM's estimator (seed 001, section 4.3): the mean of
  the last d observations weighted by ``G(r) = e^{−a·r}``, r = 0 for the most
  recent, ``x_e = Σ F(R−r)·G(r) / Σ G(r)``. We read "the previous d values"
  as d observations, r = 0..d−1 (the paper's sum runs to d, one more).
  :class:`DecayMeans` is the same for several statistics in one window
  array, updated in O(1); a run-time step uses it for all of a query's.
- :class:`LastValue` and :class:`EWMA` are the usual alternatives.
- Forecasters for bursts, which the decay mean lags behind:
  :class:`Holt` (linear trend: level and slope, each exponentially
  smoothed), :class:`MedianLast` (the median of the last d: robust to one
  spike) and :class:`LogKalman` (a one-step Kalman filter on ``log(1 + x)``, a
  local-level model whose gain adapts to how noisy the series has been).
  ``scripts/chart_quality.py`` compares them by the regret they lead to.
- ``sample`` (:data:`DEFAULT_ESTIMATOR`, the default everywhere) predicts
  nothing: each round's plan is chosen at the round's own statistics, measured
  (or sampled) before it runs, as RTStream does; what a round does not give is
  predicted by OM's decay mean.
- :class:`ThresholdHistogram` (:class:`ThresholdHistograms` for several
  statistics at once) is the join-selectivity estimator: it keeps a
  histogram of recent observations and re-estimates (the centre of the
  fullest bin, a robust mode) only when an observation leaves the current
  estimate by more than a relative threshold. The paper builds its
  histograms over join-key values (Poosala); per-round statistics carry the
  observed selectivity, not the keys, so the histogram here is over those.

Every estimator skips NaN observations (a round without tuples says
nothing about a selectivity) and estimates ``None`` before its first one.
:func:`decay_weighted_means` is the same estimate as :class:`DecayMean` for a
whole series at once.

>>> est = DecayMean(d=3, decay=0.5)
>>> for x in (1.0, 2.0, 4.0):
...     est.observe(x)
>>> round(est.estimate(), 4)  # (4 + 2·e^-0.5 + 1·e^-1) / (1 + e^-0.5 + e^-1)
2.8266
>>> decay_weighted_means(np.array([1.0, 2.0, 4.0]), d=3, decay=0.5).round(4).tolist()
[nan, 1.0, 1.6225, 2.8266]
"""

from __future__ import annotations

import math
import operator
from collections import deque
from collections.abc import Sequence
from typing import Protocol

import numpy as np


class Estimator(Protocol):
    def observe(self, value: float) -> None: ...

    def estimate(self) -> float | None: ...


class DecayMeans:
    """OM's decay-weighted mean for ``n`` statistics at once, each updated in O(1).

    A new observation updates its statistic's weighted sum as
    ``S ← e^{−a}·S + x − e^{−a·d}·x_dropped`` (the value leaving the window);
    once per d observations the sum is recomputed from the window, so
    rounding never accumulates. :meth:`observe` takes one value per statistic
    (NaN skips that statistic); the estimates are read from :attr:`values`.

    The windows of all statistics lie in one ring of ``n·d`` slots, each
    statistic with its own place in it (a NaN moves only the others).

    >>> means = DecayMeans(2, d=3, decay=0.5)
    >>> for round_ in ((1.0, 10.0), (2.0, float("nan")), (4.0, 30.0)):
    ...     means.observe(round_)
    >>> [round(v, 4) for v in means.values]  # the second skipped its NaN: (30 + 10·e^-0.5) / (1 + e^-0.5)
    [2.8266, 22.4492]
    """

    def __init__(self, n: int, d: int = 5, decay: float = 0.5,
                 upper: Sequence[float] | None = None,
                 initial: Sequence[float] | None = None):
        if d < 1 or decay < 0 or n < 0:
            raise ValueError(f"need n >= 0, d >= 1 and decay >= 0, got n={n}, d={d}, "
                             f"decay={decay}")
        self.n, self.d = n, d
        self.weights = tuple(math.exp(-decay * r) for r in range(d))  # weights[r], r = 0 newest
        self._weight_sums = tuple(math.fsum(self.weights[:k]) for k in range(1, d + 1))
        self._step, self._leaving = math.exp(-decay), math.exp(-decay * d)
        # Each statistic's largest valid value (1 for a selectivity): a weighted mean of
        # values in [0, upper] lies there too; the running update may miss by an ulp.
        self._upper = [math.inf] * n if upper is None else [float(u) for u in upper]
        self._sums = [0.0] * n
        # The estimates: ``initial`` (or None) until a statistic's first observation.
        self.values: list[float | None] = [None] * n if initial is None else list(initial)
        self._ring = [0.0] * (n * d)  # statistic i's window: slots i·d .. i·d + d − 1
        self._next = [0] * n  # per statistic, the slot (0..d−1) its next value goes to
        self._counts = [0] * n

    def observe(self, values: Sequence[float]) -> None:
        """One round: one value per statistic, in order; NaN says nothing.

        A loop in floats: for the few statistics of a query it beats numpy's
        per-call overhead, and a list comprehension's.
        """
        ring, nexts, counts, sums, out = self._ring, self._next, self._counts, self._sums, \
            self.values
        d, step, leaving, norms, upper = (self.d, self._step, self._leaving,
                                          self._weight_sums, self._upper)
        for i, x in enumerate(values):
            if x != x:
                continue
            slot = nexts[i]
            j = i * d + slot
            dropped = ring[j]  # 0.0 until the window is full
            ring[j] = x
            n = counts[i]
            if n < d:
                counts[i] = n = n + 1
            slot += 1
            if slot == d:  # once a window: the exact sum, newest first
                slot = 0
                s = math.fsum(map(operator.mul, self.weights, reversed(ring[j + 1 - d:j + 1])))
            else:
                s = step * sums[i] + x - leaving * dropped
            nexts[i] = slot
            sums[i] = s
            e = s / norms[n - 1]
            out[i] = 0.0 if e < 0.0 else upper[i] if e > upper[i] else e


class DecayMean:
    """OM's decay-weighted mean over the last ``d`` observations of one statistic.

    :class:`DecayMeans` for one statistic: the estimate is worked out when an
    observation arrives, so :meth:`estimate` is a read.
    """

    def __init__(self, d: int = 5, decay: float = 0.5):
        self._means = DecayMeans(1, d, decay)
        self.d, self.weights = d, self._means.weights

    def observe(self, value: float) -> None:
        self._means.observe((value,))

    def estimate(self) -> float | None:
        return self._means.values[0]

    def __repr__(self) -> str:
        return _describe(self, d=self.d)


class LastValue:
    """The last observation."""

    def __init__(self):
        self.last: float | None = None

    def observe(self, value: float) -> None:
        if not math.isnan(value):
            self.last = value

    def estimate(self) -> float | None:
        return self.last

    def __repr__(self) -> str:
        return _describe(self)


class EWMA:
    """Exponentially weighted moving average, ``e ← α·x + (1 − α)·e``."""

    def __init__(self, alpha: float = 0.3):
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must lie in (0, 1], got {alpha}")
        self.alpha = alpha
        self.value: float | None = None

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        self.value = value if self.value is None else \
            self.alpha * value + (1 - self.alpha) * self.value

    def estimate(self) -> float | None:
        return self.value

    def __repr__(self) -> str:
        return _describe(self, alpha=self.alpha)


class Holt:
    """Holt's linear trend: ``level ← α·x + (1−α)(level + slope)``,
    ``slope ← β(level − level_prev) + (1−β)·slope``; forecast ``level + slope``
    (never below 0: rates and selectivities are not negative).

    >>> est = Holt(alpha=0.5, beta=0.5)
    >>> for x in (1.0, 2.0, 3.0):
    ...     est.observe(x)
    >>> round(est.estimate(), 4)
    2.9375
    """

    def __init__(self, alpha: float = 0.5, beta: float = 0.2):
        if not (0 < alpha <= 1 and 0 <= beta <= 1):
            raise ValueError(f"need 0 < alpha <= 1 and 0 <= beta <= 1, got {alpha}, {beta}")
        self.alpha, self.beta = alpha, beta
        self.level: float | None = None
        self.slope = 0.0

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        if self.level is None:
            self.level = value
            return
        previous = self.level
        self.level = self.alpha * value + (1 - self.alpha) * (self.level + self.slope)
        self.slope = self.beta * (self.level - previous) + (1 - self.beta) * self.slope

    def estimate(self) -> float | None:
        return None if self.level is None else max(self.level + self.slope, 0.0)

    def __repr__(self) -> str:
        return _describe(self, alpha=self.alpha, beta=self.beta)


class MedianLast:
    """The median of the last ``d`` observations.

    >>> est = MedianLast(d=3)
    >>> for x in (1.0, 50.0, 2.0):
    ...     est.observe(x)
    >>> est.estimate()
    2.0
    """

    def __init__(self, d: int = 5):
        if d < 1:
            raise ValueError(f"need d >= 1, got {d}")
        self.history: deque[float] = deque(maxlen=d)

    def observe(self, value: float) -> None:
        if not math.isnan(value):
            self.history.append(value)

    def estimate(self) -> float | None:
        return float(np.median(self.history)) if self.history else None

    def __repr__(self) -> str:
        return _describe(self, d=self.history.maxlen)


class LogKalman:
    """A one-step Kalman filter on ``y = log(1 + x)``: a random-walk level seen in noise.

    The level's variance grows by ``q`` per round; an observation has variance
    ``r``, estimated as the running mean square of the innovations minus the
    predicted variance (at least ``q``), so the gain is high on a series that
    moves and low on one that only jitters. The forecast is ``exp(level) − 1``.

    >>> est = LogKalman()
    >>> for x in (100.0, 100.0, 100.0):
    ...     est.observe(x)
    >>> round(est.estimate(), 6)
    100.0
    """

    def __init__(self, q: float = 0.01, r: float = 0.05):
        if not (q > 0 and r > 0):
            raise ValueError(f"need q > 0 and r > 0, got {q}, {r}")
        self.q, self.r = q, r
        self.level: float | None = None
        self.variance = 1.0
        self.innovation_sq = r

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        y = math.log1p(max(value, 0.0))
        if self.level is None:
            self.level = y
            return
        predicted = self.variance + self.q
        innovation = y - self.level
        self.innovation_sq = 0.9 * self.innovation_sq + 0.1 * innovation ** 2
        r = max(self.innovation_sq - predicted, self.q)
        gain = predicted / (predicted + r)
        self.level += gain * innovation
        self.variance = (1 - gain) * predicted

    def estimate(self) -> float | None:
        return None if self.level is None else math.expm1(self.level)

    def __repr__(self) -> str:
        return _describe(self, q=self.q, r=self.r)


ESTIMATORS = ("decay", "last", "ewma", "holt", "median", "kalman")

# The one default of AdaptiveQuery, replay(), cqopt.fidelity and the CLI: a round is
# decided at its own statistics (measured before it runs; in a replay, as a sampler
# of 10% of its tuples would measure them). On every trace of scripts/chart_quality.py
# it came within 1.5x of the oracle chart's regret; OM's prediction from earlier
# rounds (decay) did in 8 of 17.
DEFAULT_ESTIMATOR = "sample"


class ThresholdHistograms:
    """Histograms of recent observations for ``n`` statistics, re-read only when one strays.

    Each statistic keeps its last ``window`` observations (in one ring of
    ``n·window`` slots) and an estimate, the centre of its histogram's fullest
    bin (a robust mode), worked out again only when an observation leaves the
    estimate by more than ``threshold`` (relative). :meth:`observe` takes one
    value per statistic (NaN skips it); the estimates are :attr:`values`
    (``initial``, or None, before a statistic's first observation).

    >>> est = ThresholdHistograms(2, threshold=0.5)
    >>> for round_ in ((0.010, 0.3), (0.011, 0.3), (0.012, 0.9)):
    ...     est.observe(round_)
    >>> # 0.011, 0.012 stay within 50% of 0.01; 0.9 strays: the fullest of 8 bins over
    >>> # (0.3, 0.3, 0.9) is [0.3, 0.375)
    >>> est.values, est.reestimates
    ([0.01, 0.3375], [1, 2])
    """

    def __init__(self, n: int, window: int = 20, bins: int = 8, threshold: float = 0.2,
                 initial: Sequence[float] | None = None):
        if window < 1 or bins < 1 or threshold < 0 or n < 0:
            raise ValueError("need n >= 0, window >= 1, bins >= 1, threshold >= 0")
        self.window, self.bins, self.threshold = window, bins, threshold
        self._ring = [0.0] * (n * window)  # statistic i's window: slots i·window ...
        self._next = [0] * n
        self._counts = [0] * n
        self._own: list[float | None] = [None] * n  # the estimate from observations
        self.values: list[float | None] = [None] * n if initial is None else list(initial)
        self.reestimates = [0] * n

    def observe(self, values: Sequence[float]) -> None:
        """One round: one value per statistic, in order; NaN says nothing."""
        ring, nexts, counts, own = self._ring, self._next, self._counts, self._own
        w, threshold = self.window, self.threshold
        for i, x in enumerate(values):
            if x != x:
                continue
            slot = nexts[i]
            ring[i * w + slot] = x
            nexts[i] = (slot + 1) % w
            if counts[i] < w:
                counts[i] += 1
            v = own[i]
            if v is None or abs(x - v) > threshold * abs(v):
                own[i] = self.values[i] = self._mode(i)
                self.reestimates[i] += 1

    def _mode(self, i: int) -> float:
        start = i * self.window
        values = np.asarray(self._ring[start:start + self._counts[i]])
        if values.min() == values.max():
            return float(values[0])
        try:
            counts, edges = np.histogram(values, bins=self.bins)
        except ValueError:  # a range too narrow for finite bins: [0, 5e-324], [1 - ulp, 1]
            return float(np.median(values))
        j = int(np.argmax(counts))
        return float((edges[j] + edges[j + 1]) / 2)


class ThresholdHistogram:
    """The join-selectivity estimator for one statistic: :class:`ThresholdHistograms` of one.

    >>> est = ThresholdHistogram(threshold=0.5)
    >>> for x in (0.010, 0.011, 0.012):
    ...     est.observe(x)
    >>> est.estimate(), est.reestimates  # 0.011 and 0.012 stay within 50%
    (0.01, 1)
    >>> est.observe(0.05); est.reestimates
    2
    """

    def __init__(self, window: int = 20, bins: int = 8, threshold: float = 0.2):
        self._histograms = ThresholdHistograms(1, window, bins, threshold)

    def observe(self, value: float) -> None:
        self._histograms.observe((value,))

    def estimate(self) -> float | None:
        return self._histograms.values[0]

    def __repr__(self) -> str:
        return _describe(self)

    @property
    def reestimates(self) -> int:
        return self._histograms.reestimates[0]


def make_estimator(kind: str, *, d: int = 5, decay: float = 0.5, alpha: float = 0.3):
    """An estimator by name: ``decay`` (OM's), ``last``, ``ewma``, ``holt``, ``median``
    (of the last d) or ``kalman`` (on the log rate)."""
    if kind == "decay":
        return DecayMean(d, decay)
    if kind == "last":
        return LastValue()
    if kind == "ewma":
        return EWMA(alpha)
    if kind == "holt":
        return Holt()
    if kind == "median":
        return MedianLast(d)
    if kind == "kalman":
        return LogKalman()
    raise ValueError(f"unknown estimator {kind!r} (expected one of {', '.join(ESTIMATORS)})")


def decay_weighted_means(series: np.ndarray, d: int = 5, decay: float = 0.5) -> np.ndarray:
    """:class:`DecayMean`'s estimate before each round and after the last: length n + 1.

    Entry t uses the observations of rounds < t (NaN skipped); NaN before any.
    """
    series = np.asarray(series, dtype=np.float64)
    est = DecayMean(d, decay)
    out = np.full(len(series) + 1, np.nan)
    for t, x in enumerate(series):
        e = est.estimate()
        out[t] = np.nan if e is None else e
        est.observe(x)
    e = est.estimate()
    out[-1] = np.nan if e is None else e
    return out


def _describe(estimator, **params: object) -> str:
    """``<Holt(alpha=0.5, beta=0.2): estimate 312>``: what it is and what it expects now.

    >>> e = EWMA(alpha=0.3); e.observe(10.0); e
    <EWMA(alpha=0.3): estimate 10>
    """
    value = estimator.estimate()
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return (f"<{type(estimator).__name__}({shown}): estimate "
            f"{'none yet' if value is None else format(value, 'g')}>")
