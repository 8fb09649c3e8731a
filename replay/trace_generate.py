"""Synthetic stream traces whose statistics move the way OM must follow.

Arrivals come from a Markov-modulated Poisson process with a chosen
coefficient of variation of the per-second rate (or the inter-arrival times
of a real trace, replayed: :func:`load_interarrivals`), and attribute values
follow a Zipf law whose skew and popularity ranking drift, so that a
selection's selectivity changes over time.

>>> import math
>>> from cqopt.catalog import Catalog
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [100, 300],
...     "columns": {"ts": "timestamp", "a": "int", "tag": "string(8)"}}}})
>>> trace = generate_trace(cat.stream("S"), 60.0, seed=7)
>>> list(trace.columns), math.isclose(len(trace) / 60.0, 200, rel_tol=0.2)
(['ts', 'a', 'tag'], True)
>>> bool(trace.ts.is_monotonic_increasing), int(trace.a.min()) >= 1, int(trace.a.max()) <= 50
(True, True, True)
"""

from __future__ import annotations

import gzip
import io
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd

from cqopt.catalog import Stream
from cqopt.errors import LimitedReader, check_regular_file, open_regular
from cqopt.replay.trace_format import (
    TS_NAMES,
    TraceError,
    _first_line,
    read_trace_frame,
    trace_format,
)

# Generator constants. Eight modulating states give a near-continuous spread of
# rates; a state lasts 10 s on average, long against the 1-s buckets the rate CV
# is measured on and short against a 10-minute run.
MMPP_STATES = 8
MEAN_SOJOURN_S = 10.0
DRIFT_AMPLITUDE = 0.5  # the Zipf exponent swings by +-50% over a drift period
ZIPF_LEVELS = 33  # exponents the drift is discretized to (one CDF each); odd: zipf_a is one
VOCABULARY = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel")
# An inter-arrival file's CSV text, after decompression: the DEC-PKT-1 arrivals are 17 MB.
MAX_INTERARRIVAL_BYTES = 512 << 20
_GOLDEN = (math.sqrt(5) - 1) / 2  # spreads the columns' drift phases evenly


# -- generating --------------------------------------------------------------------
def generate_trace(stream: Stream, duration_s: float, *, seed: int,
                   mean_rate: float | None = None, rate_cv: float = 0.25,
                   zipf_a: float = 1.5, domain: int = 50, drift_period_s: float = 300.0,
                   interarrivals: np.ndarray | None = None,
                   sojourn_s: float = MEAN_SOJOURN_S,
                   steady: dict[str, int] | None = None) -> pd.DataFrame:
    """A synthetic trace of ``stream`` over ``[0, duration_s)``: ``ts`` plus the stream's columns.

    Arrivals come from a Markov-modulated Poisson process: ``MMPP_STATES``
    rate levels (log-normal quantiles around ``mean_rate``, by default the
    middle of the stream's catalog range), a new level drawn uniformly every
    ``sojourn_s`` seconds on average, spread so that the per-second arrival
    count has coefficient of variation ``rate_cv``. A Poisson count alone has
    CV ``1/sqrt(rate)``: a smaller ``rate_cv`` is not reachable and gives plain
    Poisson arrivals. With ``interarrivals`` the real gaps are replayed from
    time 0 (cycled if the trace is longer than they last; rescaled to
    ``mean_rate`` only if that is given).

    Values, all drifting with period ``drift_period_s`` (``math.inf``: no
    drift): int and long columns are Zipf over ``1..domain`` with exponent
    ``zipf_a * (1 + 0.5 sin(2 pi t / period + phase))``, and the value ranked
    first moves up by one each period (the ranking rotates); strings take the
    same law over a vocabulary of 8 words; doubles are exponential with a mean
    of 100 that swings by 50%; bools are true with a probability swinging
    between 0.2 and 0.8; timestamp columns are the arrival time. Same seed,
    same frame.

    ``steady`` names integer columns (to their domain size) drawn uniformly
    from ``1..domain`` with no drift: keys such as host ids, whose equi-join
    selectivity then stays near ``1/domain`` as OM's λ-λ chart assumes.
    """
    if not (duration_s > 0 and math.isfinite(duration_s)):
        raise ValueError(f"duration_s must be a positive number, got {duration_s!r}")
    if domain < 1:
        raise ValueError(f"domain must be at least 1, got {domain}")
    if not zipf_a > 0:
        raise ValueError(f"zipf_a must be positive, got {zipf_a}")
    if not drift_period_s > 0:
        raise ValueError(f"drift_period_s must be positive (math.inf for no drift), "
                         f"got {drift_period_s}")
    rng = np.random.default_rng(seed)
    if interarrivals is None:
        rate = (sum(stream.rate) / 2) if mean_rate is None else float(mean_rate)
        if not rate > 0:
            raise ValueError(f"mean_rate must be positive, got {mean_rate}")
        ts = mmpp_arrivals(rng, duration_s, rate, rate_cv, sojourn_s)
    else:
        ts = replayed_arrivals(interarrivals, duration_s, mean_rate)
    columns: dict[str, np.ndarray] = {"ts": ts}
    drift = _Drift(ts, drift_period_s, zipf_a)
    steady = {name.lower(): size for name, size in (steady or {}).items()}
    unknown = set(steady) - {c.name.lower() for c in stream.columns
                             if c.type in ("int", "long")}
    if unknown:
        raise ValueError(f"steady columns must be int or long columns of {stream.name}: "
                         f"{', '.join(sorted(unknown))}")
    for index, col in enumerate(stream.columns):
        phase = 2 * math.pi * ((index * _GOLDEN) % 1.0)
        if col.type == "timestamp":
            values = ts.copy()
        elif col.name.lower() in steady:
            values = rng.integers(1, steady[col.name.lower()] + 1, len(ts))
        elif col.type in ("int", "long"):
            values = drift.ranked(rng, domain, phase) + 1
        elif col.type == "string":
            values = np.asarray(VOCABULARY, dtype=object)[drift.ranked(rng, len(VOCABULARY),
                                                                       phase)]
        elif col.type == "double":
            values = rng.exponential(1.0, len(ts)) * 100.0 * (1 + 0.5 * drift.wave(phase))
        elif col.type == "bool":
            values = rng.random(len(ts)) < 0.5 + 0.3 * drift.wave(phase)
        else:  # the catalog knows no other type
            raise ValueError(f"column {col.name}: cannot generate type {col.type}")
        if col.name.lower() == "ts":
            continue  # the arrival time already is ts
        columns[col.name] = values
    return pd.DataFrame(columns)


def mmpp_arrivals(rng: np.random.Generator, duration_s: float, mean_rate: float,
                  rate_cv: float, sojourn_s: float = MEAN_SOJOURN_S,
                  states: int = MMPP_STATES) -> np.ndarray:
    """Sorted arrival times in ``[0, duration_s)`` of a Markov-modulated Poisson process.

    The modulating chain jumps, at rate ``1/sojourn_s``, to a state drawn
    uniformly (possibly the same), so its rate has autocorrelation
    ``exp(-t/sojourn_s)``. The per-second count then has variance
    ``mean_rate + sigma^2 f`` with ``f`` the variance kept by averaging over
    one second; sigma is set so that this equals ``(rate_cv * mean_rate)^2``.
    """
    if rate_cv < 0:
        raise ValueError(f"rate_cv must be >= 0, got {rate_cv}")
    if not sojourn_s > 0:
        raise ValueError(f"sojourn_s must be positive, got {sojourn_s}")
    levels = mean_rate * _rate_levels(_rate_process_cv(mean_rate, rate_cv, sojourn_s), states)
    # The chain's path: sojourns until the run is covered.
    sojourns = rng.exponential(sojourn_s, int(duration_s / sojourn_s * 1.5) + 16)
    while sojourns.sum() < duration_s:
        sojourns = np.concatenate([sojourns, rng.exponential(sojourn_s, len(sojourns))])
    starts = np.concatenate([[0.0], np.cumsum(sojourns)[:-1]])
    keep = starts < duration_s
    starts = starts[keep]
    lengths = np.minimum(sojourns[keep], duration_s - starts)
    state = rng.integers(states, size=len(starts))
    counts = rng.poisson(levels[state] * lengths)
    # Given its count, a Poisson segment's arrivals are uniform over the segment.
    offsets = rng.random(int(counts.sum()))
    ts = np.repeat(starts, counts) + np.repeat(lengths, counts) * offsets
    ts.sort()  # segments are disjoint and in order, so this only sorts within each
    return ts[ts < duration_s]


def _rate_process_cv(mean_rate: float, rate_cv: float, sojourn_s: float) -> float:
    """The CV the modulating rate needs for per-second counts of CV ``rate_cv``."""
    a = 1.0 / sojourn_s  # the rate's autocorrelation decay, per second
    kept = 2 * (a - 1 + math.exp(-a)) / (a * a)  # Var(1-s mean of the rate) / Var(rate)
    excess = (rate_cv * mean_rate) ** 2 - mean_rate  # what Poisson noise leaves to the rate
    return math.sqrt(max(excess, 0.0) / kept) / mean_rate


def _rate_levels(cv: float, states: int) -> np.ndarray:
    """``states`` positive levels of mean 1 and coefficient of variation ``cv``.

    Log-normal quantiles: always positive, symmetric for a small CV and
    skewed (rare high bursts) for a large one.
    """
    if cv == 0:
        return np.ones(states)
    from scipy.optimize import brentq
    from scipy.stats import norm

    z = norm.ppf((np.arange(states) + 0.5) / states)

    def levels(s: float) -> np.ndarray:
        w = np.exp(s * (z - z.max()))  # shifted so large s cannot overflow
        return w / w.mean()

    top = math.sqrt(states - 1)  # the CV as one level takes everything
    if cv >= top * 0.999:
        raise ValueError(f"a rate CV of {cv:.3g} is beyond what {states} modulating states "
                         f"give (< {top:.3g}); ask for a smaller rate_cv")
    s = brentq(lambda s: levels(s).std() - cv, 0.0, 50.0)
    return levels(s)


def replayed_arrivals(interarrivals: np.ndarray, duration_s: float,
                      mean_rate: float | None = None) -> np.ndarray:
    """Arrival times ``0, g0, g0+g1, ...`` below ``duration_s``, cycling the gaps ``g``."""
    gaps = np.asarray(interarrivals, dtype=float)
    gaps = gaps[~np.isnan(gaps)]
    if gaps.size == 0 or (gaps < 0).any() or not np.isfinite(gaps).all() or gaps.sum() <= 0:
        raise ValueError("interarrivals must be finite, non-negative and not all zero")
    if mean_rate is not None:
        gaps = gaps * (1.0 / mean_rate) / gaps.mean()
    cycles = int(duration_s // gaps.sum()) + 1
    ts = np.concatenate([[0.0], np.cumsum(np.tile(gaps, cycles))])
    return ts[ts < duration_s]


def interarrival_slice(interarrivals: np.ndarray, start_s: float, duration_s: float,
                       scale: float = 1.0) -> np.ndarray:
    """The gaps of the real arrivals from ``start_s`` seconds into the series, at ``scale``×
    the rate.

    The series is cycled when ``start_s + duration_s`` runs past its end, so every
    offset gives ``duration_s`` of arrivals. ``scale`` multiplies the rate (divides
    every gap) and keeps the series' burstiness: streams that replay different
    slices at different scales have their own arrival series and their own means.

    >>> interarrival_slice(np.array([1.0, 2.0, 3.0]), 1.0, 4.0).tolist()  # from t = 1 s
    [2.0, 3.0]
    >>> interarrival_slice(np.array([1.0, 2.0, 3.0]), 0.0, 3.0, scale=2.0).tolist()
    [0.5, 1.0, 1.5]
    """
    gaps = np.asarray(interarrivals, dtype=float)
    gaps = gaps[~np.isnan(gaps)]
    if gaps.size == 0 or (gaps < 0).any() or not np.isfinite(gaps).all() or gaps.sum() <= 0:
        raise ValueError("interarrivals must be finite, non-negative and not all zero")
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"the rate scale must be a positive number, got {scale!r}")
    if not (start_s >= 0 and math.isfinite(start_s)):
        raise ValueError(f"the offset must be a non-negative number of seconds, got {start_s!r}")
    total = gaps.sum()
    first = int(np.searchsorted(np.cumsum(gaps), start_s % total, side="right"))
    rolled = np.roll(gaps, -first)
    cycles = int((duration_s * scale) // total) + 1
    tiled = np.tile(rolled, cycles)
    keep = int(np.searchsorted(np.cumsum(tiled), duration_s * scale, side="left")) + 1
    return tiled[:keep] / scale


class _Drift:
    """The generator's slowly moving value laws, evaluated at the arrival times."""

    def __init__(self, ts: np.ndarray, period: float, zipf_a: float):
        self.ts, self.period, self.zipf_a = ts, period, zipf_a
        # Rank 1 is value ``period number`` (mod the domain): the ranking rotates.
        self.shift = np.floor(ts / period).astype(np.int64) if math.isfinite(period) \
            else np.zeros(len(ts), dtype=np.int64)

    def wave(self, phase: float) -> np.ndarray:
        if not math.isfinite(self.period):
            return np.zeros(len(self.ts))  # no drift: every law at its middle
        return np.sin(2 * math.pi * self.ts / self.period + phase)

    def ranked(self, rng: np.random.Generator, domain: int, phase: float) -> np.ndarray:
        """0-based values: Zipf ranks under the drifting exponent, rotated by the shift."""
        exponent = self.zipf_a * (1 + DRIFT_AMPLITUDE * self.wave(phase))
        lo, hi = self.zipf_a * (1 - DRIFT_AMPLITUDE), self.zipf_a * (1 + DRIFT_AMPLITUDE)
        grid = np.linspace(lo, hi, ZIPF_LEVELS)
        level = np.clip(np.rint((exponent - lo) / (hi - lo) * (ZIPF_LEVELS - 1)), 0,
                        ZIPF_LEVELS - 1).astype(np.int64)
        u = rng.random(len(self.ts))
        ranks = np.empty(len(self.ts), dtype=np.int64)
        weights = np.arange(1, domain + 1, dtype=float)
        for i in np.unique(level):  # one CDF per exponent level, not per tuple
            cdf = np.cumsum(weights ** -grid[i])
            rows = level == i
            ranks[rows] = np.searchsorted(cdf / cdf[-1], u[rows], side="right")
        ranks = np.minimum(ranks, domain - 1)  # u within rounding of 1
        return (ranks + self.shift) % domain


def zipf_share(a: float, domain: int) -> float:
    """The share of the most frequent value of a Zipf law with exponent ``a`` over ``domain``.

    >>> round(zipf_share(1.5, 50), 3)
    0.429
    """
    return 1.0 / float(np.sum(np.arange(1, domain + 1, dtype=float) ** -a))


def _csv_text(path: str) -> io.BufferedReader:
    """``path``'s text, gunzipped if it is a gzip, that fails past MAX_INTERARRIVAL_BYTES."""
    raw = open_regular(path, MAX_INTERARRIVAL_BYTES)
    stream = gzip.GzipFile(fileobj=raw) if raw.peek(2)[:2] == b"\x1f\x8b" else raw
    return io.BufferedReader(LimitedReader(stream, MAX_INTERARRIVAL_BYTES, path))


def load_interarrivals(path: str | Path, *, interarrival_column: str | None = None,
                       ts_column: str | None = None) -> np.ndarray:
    """Inter-arrival times (seconds) from a trace with a gap column or a timestamp column.

    The trace is a CSV file, or any other trace format
    (:func:`~cqopt.replay.trace_format.read_trace_frame` reads it).

    Without a named column, the first column whose name contains
    ``interarrival`` (or is ``gap``, ``iat``) is taken as the gaps, else the
    first of ``ts_seconds, ts, timestamp, time`` as arrival times, whose
    differences (in file order) are the gaps. Empty cells are skipped: the
    DEC-PKT-1 file leaves the first row's gap empty.
    """
    path = str(path)
    if not os.path.exists(path):
        raise TraceError(path, "no such file")
    frame = None
    try:
        check_regular_file(path, MAX_INTERARRIVAL_BYTES)  # /dev/zero, a FIFO: never read
        if trace_format(path) == "csv":  # read through a bound on its gunzipped size
            with _csv_text(path) as text:
                header = list(pd.read_csv(text, nrows=0).columns)
        else:  # another registered format: its own reader
            frame = read_trace_frame(path)
            header = [str(c) for c in frame.columns]
    except (ValueError, OSError, UnicodeDecodeError) as err:
        raise TraceError(path, f"not a readable trace file: {_first_line(err)}") from None
    by_lower = {c.lower().strip(): c for c in header}

    def named(name: str) -> str:
        if name.lower() not in by_lower:
            raise TraceError(path, f"no column {name!r}; the columns are {', '.join(header)}")
        return by_lower[name.lower()]

    gap_col = time_col = None
    if interarrival_column is not None:
        gap_col = named(interarrival_column)
    elif ts_column is not None:
        time_col = named(ts_column)
    else:
        gap_col = next((c for low, c in by_lower.items()
                        if "interarrival" in low.replace("_", "").replace("-", "")
                        or low in ("gap", "iat")), None)
        if gap_col is None:
            time_col = next((by_lower[n] for n in ("ts_seconds", *TS_NAMES) if n in by_lower),
                            None)
        if gap_col is None and time_col is None:
            raise TraceError(path, "no inter-arrival column (a name containing "
                             "'interarrival') and no time column (ts_seconds, ts, timestamp, "
                             f"time); the columns are {', '.join(header)}; pass "
                             "interarrival_column= or ts_column=")
    column = gap_col or time_col
    try:
        if frame is not None:
            raw = frame[column].dropna()
        else:
            with _csv_text(path) as text:
                raw = pd.read_csv(text, usecols=[column])[column].dropna()
    except OSError as err:  # past MAX_INTERARRIVAL_BYTES once decompressed
        raise TraceError(path, f"not a readable CSV file: {_first_line(err)}") from None
    values = raw if pd.api.types.is_numeric_dtype(raw) else \
        pd.to_numeric(raw.astype(str).str.strip().replace("", np.nan).dropna(), errors="coerce")
    bad = int(values.isna().sum())
    if bad:
        raise TraceError(path, f"column {column} has {bad} non-numeric values")
    values = values.dropna().to_numpy(dtype=float)
    gaps = values if gap_col else np.diff(values)
    if gaps.size == 0:
        raise TraceError(path, f"column {column} yields no inter-arrival time")
    if (gaps < 0).any() or not np.isfinite(gaps).all():
        what = "negative gaps" if gap_col else "times that go backwards"
        raise TraceError(path, f"column {column} has {what}; inter-arrival times must be >= 0")
    return gaps
