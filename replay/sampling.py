"""What a sampler plan would measure of each round, simulated from its exact statistics.

A micro-batch engine holds a round's tuples before it runs the round, so it
need not predict the round from earlier ones (OM's Algorithm 2, made for a
tuple-at-a-time engine): it can count each stream's tuples (exact rates)
and run the plan's selections and joins on a simple random sample of them
(RTStream's sampler plan, seed 000, section 4.2). :func:`sampled_statistics`
simulates that sampler on the per-round statistics a fidelity replay has,
so that ``cqopt fidelity --estimator sample:RATIO`` scores the choice a run
would make from its own rounds:

- ``rate.S``: exact, ``n_S / W`` (a count costs no sample);
- ``sel.S``: of ``m`` tuples drawn without replacement from the round's
  ``n_S``, of which ``K = round(sel · n_S)`` pass, the share that passes:
  hypergeometric, as a sample without replacement is. RTStream samples more
  where an operator is cheap to sample and its selectivity drives the cost:
  a selection costs one pass over its sample, so it draws
  ``m = min(n_S, max(ceil(RATIO · n_S), SELECTION_FLOOR))`` (at least 1,000
  tuples, a standard error of at most 0.016), while a join keeps ``RATIO``;
- ``jsel.A.B``: the round's ``M = round(jsel · n_A · n_B)`` matching pairs
  each survive the two samples with probability ``(m_A / n_A)(m_B / n_B)``,
  and the estimate is the survivors over ``m_A · m_B``. Pairs that share a
  tuple survive together, which this binomial draw ignores, so the simulated
  join estimate is a little less variable than a real sampler's (a reading
  of ours: the replay has counts, not tuples).

A round without tuples on a stream gives NaN for the statistics that need
them, as its exact statistics do; the caller predicts those.

>>> import pandas as pd
>>> observed = pd.DataFrame({"rate.S": [1000.0, 0.0], "sel.S": [0.25, np.nan]})
>>> s = sampled_statistics(observed, ["rate.S", "sel.S"], ratio=1.0, window_s=1.0)
>>> s["rate.S"].tolist(), s["sel.S"].tolist()[0], bool(np.isnan(s["sel.S"][1]))
([1000.0, 0.0], 0.25, True)
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from cqopt.errors import CqoptError, parse_number
from cqopt.optimizer.query.statistics import rate_name, split_name


SELECTION_FLOOR = 1000  # tuples a selection's sample holds at least (all, if fewer)


MIN_SAMPLE_RATIO = 1e-6  # a smaller share samples no tuple of any round a trace holds


def parse_sample_ratio(text: str) -> float:
    """``sample`` or ``sample:RATIO`` -> the ratio (default 0.1), in (0, 1].

    >>> parse_sample_ratio("sample"), parse_sample_ratio("sample:0.05")
    (0.1, 0.05)
    """
    head, colon, ratio = text.partition(":")
    try:
        value = parse_number(ratio, "") if colon else 0.1  # ASCII digits, as typed elsewhere
    except CqoptError:
        value = float("nan")
    if head != "sample" or not MIN_SAMPLE_RATIO <= value <= 1.0:
        raise CqoptError(f"--estimator {text!r}: the sample ratio must be a number from "
                         f"{MIN_SAMPLE_RATIO:g} to 1, e.g. sample:0.1")
    return value


def sampled_statistics(observed: pd.DataFrame, names: Iterable[str], ratio: float, *,
                       window_s: float, seed: int = 0) -> dict[str, np.ndarray]:
    """Per round, each statistic as a simple random sample of ``ratio`` of the round measures.

    Parameters
    ----------
    observed : DataFrame
        The exact per-round statistics (``rate.S``, ``sel.S``, ``jsel.A.B`` columns).
    names : iterable of str
        The statistics to estimate; those ``observed`` lacks are left out.
    ratio : float
        The share of each stream's tuples the sampler draws, in (0, 1].
    window_s : float
        The round's length in seconds (tuples = rate · window_s).
    seed : int
        The sampler's random seed.

    Returns
    -------
    dict of str to ndarray
        One value per round (NaN where a round has no tuples to measure).
    """
    rng = np.random.default_rng(seed)
    n_rounds = len(observed)

    def tuples(stream: str) -> np.ndarray:
        column = rate_name(stream)
        if column not in observed:
            return np.full(n_rounds, np.nan)
        return np.rint(observed[column].to_numpy(dtype=np.float64) * window_s)

    def drawn(n: np.ndarray) -> np.ndarray:
        return np.where(n > 0, np.minimum(n, np.ceil(ratio * n)), 0.0)

    out: dict[str, np.ndarray] = {}
    for name in names:
        if name not in observed:
            continue
        exact = observed[name].to_numpy(dtype=np.float64)
        kind, streams = split_name(name)
        if kind == "rate":
            out[name] = exact.copy()
        elif kind == "sel":
            n = tuples(streams[0])
            ok = np.isfinite(exact) & (n > 0)
            m = np.minimum(n, np.maximum(drawn(n), SELECTION_FLOOR))
            passing = np.rint(np.where(ok, exact, 0.0) * np.where(ok, n, 0.0))
            hits = rng.hypergeometric(passing.astype(np.int64),
                                      np.where(ok, n - passing, 0).astype(np.int64),
                                      np.where(ok, m, 0).astype(np.int64))
            out[name] = np.where(ok, hits / np.where(ok, m, 1.0), np.nan)
        elif len(streams) == 2:  # jsel.A.B (a theta predicate over more streams: predicted)
            n_a, n_b = tuples(streams[0]), tuples(streams[1])
            ok = np.isfinite(exact) & (n_a > 0) & (n_b > 0)
            m_a, m_b = drawn(n_a), drawn(n_b)
            pairs = np.rint(np.where(ok, exact * n_a * n_b, 0.0))
            keep = np.where(ok, (m_a / np.where(ok, n_a, 1.0)) * (m_b / np.where(ok, n_b, 1.0)),
                            0.0)
            # The binomial ignores that sampled pairs are at most m_A · m_B: cap it there.
            survivors = np.minimum(rng.binomial(pairs.astype(np.int64), np.clip(keep, 0.0, 1.0)),
                                   m_a * m_b)
            out[name] = np.where(ok, survivors / np.where(ok, m_a * m_b, 1.0), np.nan)
    return out
