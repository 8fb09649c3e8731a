"""Estimating next round's statistics from the rounds observed so far.

- :class:`DecayMean` is OM's estimator (seed 001, section 4.3): the mean of
  the last d observations weighted by ``G(r) = e^{−a·r}``, r = 0 for the most
  recent, ``x_e = Σ F(R−r)·G(r) / Σ G(r)``. We read "the previous d values"
  as d observations, r = 0..d−1 (the paper's sum runs to d, one more).
- :class:`LastValue` and :class:`EWMA` are the usual alternatives.
- Forecasters for bursts, which the decay mean lags behind:
  :class:`Holt` (linear trend: level and slope, each exponentially
  smoothed), :class:`MedianLast` (the median of the last d: robust to one
  spike) and :class:`LogKalman` (a one-step Kalman filter on ``log(1 + x)``, a
  local-level model whose gain adapts to how noisy the series has been).
  ``scripts/chart_quality.py`` compares them by the regret they lead to; the
  default stays OM's decay mean unless another wins on the developers' traces.
- :class:`ThresholdHistogram` is the join-selectivity estimator: it keeps a
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
from typing import Protocol

import numpy as np


class Estimator(Protocol):
    def observe(self, value: float) -> None: ...

    def estimate(self) -> float | None: ...


class DecayMean:
    """OM's decay-weighted mean over the last ``d`` observations.

    The estimate is worked out when an observation arrives (d products in
    floats), so :meth:`estimate` is a read: a run-time step asks for it every
    round.
    """

    def __init__(self, d: int = 5, decay: float = 0.5):
        if d < 1 or decay < 0:
            raise ValueError(f"need d >= 1 and decay >= 0, got d={d}, decay={decay}")
        self.d = d
        self.weights = tuple(math.exp(-decay * r) for r in range(d))  # weights[r], r = 0 newest
        self._weight_sums = tuple(math.fsum(self.weights[:n]) for n in range(1, d + 1))
        self.history: deque[float] = deque(maxlen=d)  # newest first
        self._estimate: float | None = None

    def observe(self, value: float) -> None:
        if value != value:  # NaN: a round without tuples says nothing
            return
        self.history.appendleft(value)
        self._estimate = sum(map(operator.mul, self.history, self.weights)) / \
            self._weight_sums[len(self.history) - 1]

    def estimate(self) -> float | None:
        return self._estimate


class LastValue:
    """The last observation."""

    def __init__(self):
        self.last: float | None = None

    def observe(self, value: float) -> None:
        if not math.isnan(value):
            self.last = value

    def estimate(self) -> float | None:
        return self.last


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


ESTIMATORS = ("decay", "last", "ewma", "holt", "median", "kalman")


class ThresholdHistogram:
    """A histogram of recent observations, re-read only when an observation strays.

    >>> est = ThresholdHistogram(threshold=0.5)
    >>> for x in (0.010, 0.011, 0.012):
    ...     est.observe(x)
    >>> est.estimate(), est.reestimates  # 0.011 and 0.012 stay within 50%
    (0.01, 1)
    >>> est.observe(0.05); est.reestimates
    2
    """

    def __init__(self, window: int = 20, bins: int = 8, threshold: float = 0.2):
        if window < 1 or bins < 1 or threshold < 0:
            raise ValueError("need window >= 1, bins >= 1, threshold >= 0")
        self.history: deque[float] = deque(maxlen=window)
        self.bins = bins
        self.threshold = threshold
        self.value: float | None = None
        self.reestimates = 0

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        self.history.append(value)
        if self.value is None or abs(value - self.value) > self.threshold * abs(self.value):
            self.value = self._mode()
            self.reestimates += 1

    def _mode(self) -> float:
        values = np.asarray(self.history)
        if values.min() == values.max():
            return float(values[0])
        counts, edges = np.histogram(values, bins=self.bins)
        i = int(np.argmax(counts))
        return float((edges[i] + edges[i + 1]) / 2)

    def estimate(self) -> float | None:
        return self.value


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
