"""RTStream's deadline-driven QoS management (Wei, Prasad, Son, Stankovic; seed 000, §4.3–4.4).

Periodic query instances have deadlines. An application gives each query an
*input/quality table*: the fraction of input tuples dropped (one column per
input stream) against the quality of the answer (:class:`QualityTable`).

- **Estimated time** (§4.3, equation 1; equation 2 from operator j on):
  ``T_i = n·t_ij + Σ_{p>j} n·t_ip·Π_{k=j}^{p−1} s_ik`` (:func:`chain_seconds`);
  a plan with joins adds its branches' costs and the join's (a callable per
  query, so any cost model plugs in).
- **Inter-query negotiation** (§4.3, Figure 7): lower the common QoS level
  from 100% until every active instance can finish by its deadline at the
  drop ratios the tables give for that level; then give each instance a
  pseudo-deadline in proportion to its estimated time (:func:`negotiate`).
- **Intra-query refinement** (§4.4): before an instance starts, if its
  estimated time T exceeds the time left D it keeps ``ε = D/T`` of its input,
  dropped early, at the inputs (:func:`kept_fraction`); a join's inputs drop
  in the ratio the table gives (:func:`refine`).
- **Quality** (§5.2.2): the table's quality at the retained fraction (the
  product of every dropping step's kept share, :func:`retained_fraction`);
  for a join the input with the larger drop against the table's ratios
  counts (the worst case); a missed deadline has quality 0.

Readings where the paper leaves a choice open (its Figure 7 pseudo-code is
lost in the seed's conversion):

- *Between rows* the table is interpolated linearly in quality; a table
  without a 100% row starts at (100%, nothing dropped). A level below a
  table's last row keeps that row: its *least* QoS.
- *Lowering the level* goes down in steps of ``step`` (1% by default) to the
  lowest least-QoS among the tables.
- *Meeting every deadline* is the Earliest-Deadline-First test RTStream's
  scheduler implies: in deadline order, each instance's cumulative estimated
  time from ``now`` is within its deadline.
- *Pseudo-deadlines in proportion to estimated times*: in EDF order instance
  i's pseudo-deadline is ``now + σ·Σ_{k≤i} T_k`` with the largest stretch σ
  that keeps every one within its deadline, ``σ = min_k (d_k − now)/Σ_{j≤k} T_j``.
  With one common deadline D this gives each instance ``D·T_i/ΣT``, the
  paper's Figure 2(C). When even the least QoS misses, σ = 1 (the expected
  finish times) and the instances that miss are counted.
- *A join's time along the table*: its drop ratios follow the table's row
  for a level, and the refinement finds the highest level whose estimated
  time fits by bisection (the time is assumed to grow with the level).
- *Observed drops beyond a table's last row* have quality 0: the
  application said nothing about them.

The paper's example (§4.3): at QoS 70% three queries drop 75%, 30% and 3%.

>>> tables = [QualityTable.from_rows("Q0", [(1.0, 0.0), (0.7, 0.75), (0.0, 1.0)]),
...           QualityTable.from_rows("Q1", [(1.0, 0.0), (0.0, 1.0)]),
...           QualityTable.from_rows("Q2", [(1.0, 0.0), (0.7, 0.03), (0.0, 1.0)])]
>>> [round(float(t.drops_at(0.7)[0]), 2) for t in tables]
[0.75, 0.3, 0.03]
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from cqopt.errors import CqoptError


@dataclass(frozen=True)
class QualityTable:
    """A query's input/quality table: rows of (quality, drop ratio per input).

    Build one with :meth:`from_rows`, which checks it: qualities falling row by
    row, every input's drop ratio never smaller at a lower quality, all within [0, 1].

    Attributes
    ----------
    query : str
        The query the table belongs to.
    inputs : tuple of str
        The input streams, one drop-ratio column each.
    quality : numpy.ndarray
        ``(rows,)``, falling.
    drops : numpy.ndarray
        ``(rows, inputs)``, rising down the table.
    """

    query: str
    inputs: tuple[str, ...]
    quality: np.ndarray
    drops: np.ndarray

    @classmethod
    def from_rows(cls, query: str, rows: Sequence[Sequence[float]],
                  inputs: Sequence[str] = ("input",)) -> QualityTable:
        """A checked table from rows ``(quality, drop_1, ..., drop_k)``, highest quality first.

        Raises
        ------
        CqoptError
            A row of the wrong width or with a value outside [0, 1], a quality that
            does not fall, or a drop ratio that falls as quality falls (naming the
            query and the row, counted from 1).

        Examples
        --------
        >>> QualityTable.from_rows("q", [(1.0, 0.0), (0.8, 0.1), (0.6, 0.05)])
        Traceback (most recent call last):
        ...
        cqopt.errors.CqoptError: input/quality table of query 'q', row 3: drops 0.05 of input ...
        """
        inputs = tuple(inputs)
        where = f"input/quality table of query {query!r}"
        if not rows:
            raise CqoptError(f"{where} is empty; give at least one (quality, drop ratio) row")
        table = []
        for i, row in enumerate(rows, 1):
            if len(row) != 1 + len(inputs):
                raise CqoptError(f"{where}, row {i}: expected a quality and {len(inputs)} drop "
                                 f"ratio(s) (for {', '.join(inputs)}), got {len(row)} values")
            values = [float(v) for v in row]
            if not all(0.0 <= v <= 1.0 for v in values):
                raise CqoptError(f"{where}, row {i}: quality and drop ratios must lie in "
                                 f"[0, 1], got {tuple(values)}")
            if table:
                previous = table[-1]
                if not values[0] < previous[0]:
                    raise CqoptError(f"{where}, row {i}: quality {values[0]:g} is not below "
                                     f"row {i - 1}'s {previous[0]:g}; list rows from the "
                                     "highest quality down")
                for k, name in enumerate(inputs, 1):
                    if values[k] < previous[k]:
                        raise CqoptError(
                            f"{where}, row {i}: drops {values[k]:g} of input {name!r}, less "
                            f"than row {i - 1}'s {previous[k]:g} at a higher quality; a table "
                            "must drop at least as much as quality falls")
            table.append(values)
        if table[0][0] < 1.0:  # full quality needs nothing dropped
            table.insert(0, [1.0] + [0.0] * len(inputs))
        array = np.array(table)
        return cls(query, inputs, array[:, 0], array[:, 1:])

    @property
    def least(self) -> float:
        """The lowest quality the table allows."""
        return float(self.quality[-1])

    def drops_at(self, level: float) -> np.ndarray:
        """Each input's drop ratio at a quality level (interpolated; clamped to the table).

        >>> QualityTable.from_rows("j", [(0.5, 0.4, 0.2)], inputs=("S", "T")).drops_at(0.75)
        array([0.2, 0.1])
        """
        q = self.quality[::-1]  # np.interp needs rising x
        return np.array([np.interp(level, q, column[::-1]) for column in self.drops.T])

    def quality_of(self, drops: ArrayLike) -> float:
        """The quality of an instance that dropped ``drops`` of its inputs (§5.2.2).

        Per input, the highest level whose drop ratio is at least the observed
        one; the lowest over the inputs (a join counts its worse branch).

        >>> table = QualityTable.from_rows("j", [(0.5, 0.4, 0.2)], inputs=("S", "T"))
        >>> table.quality_of([0.2, 0.1]), table.quality_of([0.2, 0.2]), table.quality_of([0.5, 0])
        (0.75, 0.5, 0.0)
        """
        drops = np.broadcast_to(np.asarray(drops, dtype=np.float64), (len(self.inputs),))
        return min(self._quality_for(k, float(x)) for k, x in enumerate(drops))

    def _quality_for(self, k: int, dropped: float) -> float:
        column = self.drops[:, k]
        if dropped <= column[0]:
            return float(self.quality[0])
        best = 0.0  # beyond the last row
        for a in range(len(column) - 1):  # segments from higher to lower quality
            d0, d1 = column[a], column[a + 1]
            if d0 <= dropped <= d1:
                q0, q1 = self.quality[a], self.quality[a + 1]
                q = q0 if d1 == d0 else q0 + (dropped - d0) / (d1 - d0) * (q1 - q0)
                best = max(best, float(q))
        return best


def chain_seconds(n: float, seconds_per_tuple: ArrayLike, selectivity: ArrayLike,
                  start: int = 0) -> float:
    """RTStream's equations 1 and 2: a chain's estimated time from operator ``start`` on,

    ``T = n·t_j + Σ_{p>j} n·t_p·Π_{k=j}^{p−1} s_k`` for ``n`` tuples waiting at operator j.

    Parameters
    ----------
    n : float
        Tuples waiting at operator ``start`` (the input volume for equation 1).
    seconds_per_tuple, selectivity : array_like
        Every operator's t and s, in the order the scheduler runs them.
    start : int
        j, the operator now scheduled (0: the whole plan, equation 1).

    Returns
    -------
    float
        Estimated seconds.

    Examples
    --------
    >>> chain_seconds(1000, [0.001, 0.002, 0.01], [0.5, 0.2, 0.0])  # 1 + 1 + 1
    3.0
    >>> chain_seconds(100, [0.001, 0.002, 0.01], [0.5, 0.2, 0.0], start=1)  # 0.2 + 0.2
    0.4
    """
    t = np.asarray(seconds_per_tuple, dtype=np.float64)[start:]
    s = np.asarray(selectivity, dtype=np.float64)[start:]
    reaching = np.concatenate([[1.0], np.cumprod(s)[:-1]])  # share of n reaching each operator
    return float(n * np.sum(t * reaching))


def kept_fraction(remaining: float, estimated: float) -> float:
    """§4.4: ``ε = D/T``, the share of input to keep so ``T·ε`` fits in ``D`` (1 if it fits).

    >>> kept_fraction(0.5, 2.0), kept_fraction(3.0, 2.0), kept_fraction(-1.0, 2.0)
    (0.25, 1.0, 0.0)
    """
    if estimated <= remaining:
        return 1.0
    return max(0.0, remaining / estimated)


def retained_fraction(kept: ArrayLike) -> float:
    """The share of input an instance used when each step kept ``kept`` of what reached it.

    >>> retained_fraction([0.8, 0.5])  # §5.2.2: drop 20%, then 50%
    0.4
    """
    return float(np.prod(np.asarray(kept, dtype=np.float64)))


Seconds = Callable[[np.ndarray], float]


@dataclass(frozen=True)
class QueryInstance:
    """One ready instance of a periodic query.

    Parameters
    ----------
    table : QualityTable
        Its input/quality table (its ``query`` names the instance).
    deadline : float
        Absolute time by which it must finish.
    seconds : callable
        Estimated execution time for the kept share of each input
        (``kept = 1 − drops``, an array in the table's input order).
    """

    table: QualityTable
    deadline: float
    seconds: Seconds

    @property
    def name(self) -> str:
        return self.table.query

    def seconds_at(self, level: float) -> float:
        """Estimated time at a QoS level's drop ratios."""
        return float(self.seconds(1.0 - self.table.drops_at(level)))


@dataclass(frozen=True)
class Negotiation:
    """The common QoS level and what it means for each instance.

    Attributes
    ----------
    level : float
        The common QoS level chosen (each table keeps at least its least QoS).
    met : bool
        Whether every instance is expected to meet its deadline.
    drops, seconds, pseudo_deadlines, quality : dict
        Per instance: drop ratios (array per input), estimated seconds at them,
        pseudo-deadline (absolute), and quality (0 for an expected miss).
    misses : list of str
        Instances expected to miss their deadline (empty when ``met``).
    """

    level: float
    met: bool
    drops: dict[str, np.ndarray]
    seconds: dict[str, float]
    pseudo_deadlines: dict[str, float]
    quality: dict[str, float]
    misses: list[str]

    @property
    def average_quality(self) -> float:
        """RTStream's metric (equation 3): the mean quality, misses counting 0."""
        return float(np.mean(list(self.quality.values()))) if self.quality else 1.0


def _edf(instances: Sequence[QueryInstance], times: Sequence[float], now: float):
    """Instances in deadline order (ties in given order) and their cumulative finish times."""
    order = sorted(range(len(instances)), key=lambda i: instances[i].deadline)
    finish = np.cumsum([times[i] for i in order])
    return order, finish


def negotiate(instances: Sequence[QueryInstance], now: float = 0.0,
              step: float = 0.01) -> Negotiation:
    """§4.3's inter-query negotiation: the highest common QoS level meeting every deadline.

    Parameters
    ----------
    instances : sequence of QueryInstance
        The active (ready) query instances.
    now : float
        The current time, in the deadlines' clock.
    step : float
        How far the level falls per try (1% by default).

    Returns
    -------
    Negotiation
        At full quality when nothing is overloaded; at the least QoS, with the
        expected misses counted, when no level meets every deadline.

    Raises
    ------
    CqoptError
        A step outside (0, 1], or two instances with the same name.

    Examples
    --------
    >>> linear = QualityTable.from_rows("q", [(0.0, 1.0)])
    >>> result = negotiate([QueryInstance(linear, 1.0, lambda kept: 2.0 * kept[0])], step=0.1)
    >>> round(result.level, 2), result.pseudo_deadlines, result.met
    (0.5, {'q': 1.0}, True)
    """
    if not 0.0 < step <= 1.0:
        raise CqoptError(f"the QoS negotiation's step must lie in (0, 1], got {step}")
    floor = min((q.table.least for q in instances), default=1.0)
    tries = int(math.floor((1.0 - floor) / step + 1e-9)) + 1
    levels = [round(1.0 - k * step, 12) for k in range(tries)]
    if levels[-1] > floor:
        levels.append(floor)
    for level in levels:
        outcome = at_level(instances, level, now)
        if outcome.met:
            break
    return outcome


def at_level(instances: Sequence[QueryInstance], level: float,
             now: float = 0.0) -> Negotiation:
    """Every instance at one common QoS ``level``: who meets its deadline, and the quality.

    What :func:`negotiate` gives at the level it settles on; at level 1 (every
    tuple kept), the outcome without negotiation, misses counting quality 0.

    Raises
    ------
    CqoptError
        Two instances with the same name.

    Examples
    --------
    >>> q = [QueryInstance(QualityTable.from_rows(n, [(0.0, 1.0)]), 1.0,
    ...                    lambda kept: 0.75 * kept[0]) for n in ("a", "b")]
    >>> full = at_level(q, 1.0)  # a finishes at 0.75 s, b at 1.5 s: b misses
    >>> full.met, full.misses, full.average_quality
    (False, ['b'], 0.5)
    """
    names = [q.name for q in instances]
    if len(set(names)) != len(names):
        raise CqoptError(f"two query instances share a name: {names}")
    times = [q.seconds_at(level) for q in instances]
    order, finish = _edf(instances, times, now)
    met = all(now + f <= instances[i].deadline for i, f in zip(order, finish))
    if met:
        stretches = [(instances[i].deadline - now) / f for i, f in zip(order, finish) if f > 0]
        stretch = float(min(stretches, default=1.0))
    else:
        stretch = 1.0
    pseudo = {names[i]: now + stretch * float(f) for i, f in zip(order, finish)}
    misses = [names[i] for i, f in zip(order, finish) if now + f > instances[i].deadline]
    times = [float(t) for t in times]
    drops = {q.name: q.table.drops_at(level) for q in instances}
    quality = {q.name: (0.0 if q.name in misses else q.table.quality_of(drops[q.name]))
               for q in instances}
    return Negotiation(level, met, drops, dict(zip(names, times)), pseudo, quality, misses)


@dataclass(frozen=True)
class Refinement:
    """What an instance keeps of each input to finish in the time left (§4.4).

    Attributes
    ----------
    kept : numpy.ndarray
        The share of each input kept (dropped early, at the inputs).
    seconds : float
        The estimated time at those shares.
    quality : float
        The table's quality at them.
    met : bool
        Whether the estimate fits the time left (false: at the least QoS it does not).
    """

    kept: np.ndarray
    seconds: float
    quality: float
    met: bool


def refine(instance: QueryInstance, remaining: float, iterations: int = 40) -> Refinement:
    """§4.4's intra-query refinement: drop early, just enough to fit ``remaining`` seconds.

    One input: keep ``ε = D/T`` (:func:`kept_fraction`), at most down to the
    table's least QoS. Several (a join): follow the table's rows, so the
    inputs drop in the table's ratio, to the highest level that fits.

    Examples
    --------
    >>> table = QualityTable.from_rows("q", [(0.0, 1.0)])
    >>> refine(QueryInstance(table, 1.0, lambda kept: 2.0 * kept[0]), remaining=0.5)
    Refinement(kept=array([0.25]), seconds=0.5, quality=0.25, met=True)
    """
    table = instance.table
    full = float(instance.seconds(np.ones(len(table.inputs))))
    if full <= remaining:
        return Refinement(np.ones(len(table.inputs)), full, float(table.quality[0]), True)
    least_kept = 1.0 - table.drops_at(table.least)
    if len(table.inputs) == 1:
        kept = np.array([max(kept_fraction(remaining, full), float(least_kept[0]))])
    else:
        lo, hi = table.least, 1.0
        if instance.seconds_at(lo) <= remaining:
            for _ in range(iterations):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if instance.seconds_at(mid) <= remaining else (lo, mid)
        kept = 1.0 - table.drops_at(lo)
    seconds = float(instance.seconds(kept))
    return Refinement(kept, seconds, table.quality_of(1.0 - kept),
                      met=seconds <= remaining * (1.0 + 1e-9))
