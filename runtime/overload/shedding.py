"""Load shedding for sliding-window SUM and COUNT queries (Babcock, Datar, Motwani; seed 004).

Random-sampling *load shedders* are placed in the data-flow diagram so that
the load equation holds and the largest relative error across queries is as
small as it can be.

The paper's formulas, as implemented here:

- **Proposition 3.1** (Hoeffding): a query whose N contributing values
  ``v_j`` (sum ``A``, sum of squares ``SS``) are each kept with probability P
  and scaled by ``1/P`` has
  ``Pr{|Â − A| ≥ ε·A} ≤ 2·exp(−2·P²·ε²·A² / SS)`` (:func:`hoeffding_bound`).
- **The error constant** ``C_i = sqrt((σ_i² + μ_i²) / (2·N_i·μ_i²) · log(2/δ))``
  (:func:`error_constant`): with ``P_i·ε_i ≥ C_i`` the relative error exceeds
  ``ε_i`` with probability at most δ. A COUNT has μ = 1, σ = 0.
- **Observation 3.2**: at the optimum every shed query has the same error
  ``ε_max``, so ``P_i = C_i·λ`` with ``λ = 1/ε_max`` (:func:`effective_rates`).
- **Algorithm 1** (SetSamplingRate, Observations 3.3–3.5, Theorem 3.6):
  label each operator with the queries whose paths contain it; operators with
  one label form a *shared segment*. A shedder sits only at the start of a
  segment: before operator x with rate ``P_x / P_parent(x)`` where
  ``P_x = max P_i`` over the queries in x's label (and ``P_parent = 1`` at the
  stream, Observation 3.5), and none where that ratio is 1
  (:func:`place_shedders`). The prefix product of rates at x is then ``P_x``.
- **The load equation (2.1)**:
  ``Σ_i t_i · r_src(i) · p_i · Π_{x ∈ U_i} s_x·p_x ≤ 1`` (:func:`load`), with
  U_i the operators upstream of O_i. After Algorithm 1 its left side is
  ``Σ_x t_x · r_src(x) · S_x · P_x`` with ``S_x`` the product of upstream
  selectivities, linear in λ (Section 3.2.1); :func:`solve_load` makes it tight.
- **Answers** are the sum over the kept tuples scaled by ``1/P_i``
  (:func:`scale_answer`): unbiased.

Readings where the paper leaves a choice open:

- ``log`` is the natural logarithm (Hoeffding's bound is in ``exp``).
- *Time unit.* ``t_i`` in seconds per tuple and ``r_j`` in tuples per second:
  the left side of (2.1) is then the busy fraction of one second. A budget
  other than 1 (a round's deadline over its length, a share of a core) is the
  ``capacity`` argument.
- *The discontinuity at P_i = 1* (Section 3.2.1, details deferred to the
  paper's full version). We clamp ``P_i = min(1, C_i·λ)``: a query whose
  rate reaches 1 is not shed at all and its answer is exact (its bound is
  ε = 0); every other query has ``ε = 1/λ``. The clamped left side of (2.1)
  is continuous, piecewise linear and non-decreasing in λ, so the largest λ
  that meets it is found exactly, segment by segment; maximising λ minimises
  the largest error among the shed queries. We do not search the further
  option of forcing a query to exactness below the point where its rate
  reaches 1 (that can trade one query's bound for another's).
- *No bound can be given* when ``N_i = 0`` or ``μ_i = 0`` (an empty window, a
  zero mean): C_i is infinite and such a query is never shed (P_i = 1). If
  the operators only such queries need already break (2.1), no shedding of
  the others can meet it: the result says so (``met`` false) and sheds the
  others to rate 0.
- *A query whose last operator other queries continue from* needs a shedder
  between that operator and its answer when its rate is below theirs: it
  costs nothing in (2.1) (no operator follows it) and is reported in
  :attr:`Placement.answers`.

Example 3.1 of the paper (A feeds B for q1 and C for q2, targets 0.5 and 0.8):

>>> tree = FlowTree(parent={"A": "S", "B": "A", "C": "A"}, rate={"S": 100.0},
...                 selectivity={"A": 0.5, "B": 0.0, "C": 0.0},
...                 seconds_per_tuple={"A": 0.002, "B": 0.02, "C": 0.002},
...                 answer={"q1": "B", "q2": "C"})
>>> place_shedders(tree, {"q1": 0.5, "q2": 0.8}).shedders()
{'A': 0.8, 'B': 0.625}
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from cqopt.charts.overload_settings import DELTA
from cqopt.errors import CqoptError


def error_constant(mean: ArrayLike, std: ArrayLike, count: ArrayLike,
                   delta: float = DELTA) -> np.ndarray:
    """Babcock's ``C_i = sqrt((σ² + μ²) / (2·N·μ²) · log(2/δ))``, broadcast over queries.

    Parameters
    ----------
    mean, std : array_like
        μ_i and σ_i of the summed values in the query's window (COUNT: 1 and 0).
    count : array_like
        N_i, the tuples that would reach the aggregate without shedding.
    delta : float
        The confidence: the bound fails with probability at most δ (default
        :data:`~cqopt.charts.overload_settings.DELTA`, the paper's 0.01).

    Returns
    -------
    numpy.ndarray
        C_i; infinite where no bound exists (``N = 0`` or ``μ = 0``).

    Raises
    ------
    CqoptError
        δ outside (0, 1), a negative count or a negative standard deviation.

    Examples
    --------
    >>> error_constant(2.0, 2.0, 100, 0.01).round(5)  # sqrt(8 / 800 · log 200)
    np.float64(0.23018)
    >>> error_constant([1.0, 1.0], [0.0, 0.0], [0, 400]).round(4).tolist()  # COUNTs
    [inf, 0.0814]
    """
    if not 0.0 < delta < 1.0:
        raise CqoptError(f"the error bound's confidence delta must lie in (0, 1), got {delta}")
    mean, std, count = (np.asarray(a, dtype=np.float64) for a in (mean, std, count))
    if np.any(count < 0) or np.any(std < 0):
        raise CqoptError("a query's tuple count and standard deviation must be >= 0")
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = (std**2 + mean**2) / (2.0 * count * mean**2)
    ratio = np.where((count == 0) | (mean == 0), np.inf, ratio)
    return np.sqrt(ratio * math.log(2.0 / delta))


def hoeffding_bound(sampling_rate: ArrayLike, epsilon: ArrayLike, total: ArrayLike,
                    sum_squares: ArrayLike) -> np.ndarray:
    """Proposition 3.1: ``Pr{|Â − A| ≥ ε·A} ≤ 2·exp(−2·P²·ε²·A² / SS)``.

    Parameters
    ----------
    sampling_rate : array_like
        P, the effective sampling rate of the query.
    epsilon : array_like
        The relative error ε.
    total, sum_squares : array_like
        ``A = Σ v_j`` and ``SS = Σ v_j²`` over the window's contributing values.

    Returns
    -------
    numpy.ndarray
        The bound on the probability (it may exceed 1, where it says nothing).

    Examples
    --------
    At ``ε = C/P`` the bound is δ itself:

    >>> c = float(error_constant(2.0, 2.0, 100, 0.01))
    >>> float(hoeffding_bound(0.5, c / 0.5, total=200.0, sum_squares=800.0)).__round__(10)
    0.01
    """
    p, eps, a, ss = (np.asarray(x, dtype=np.float64) for x in
                     (sampling_rate, epsilon, total, sum_squares))
    return 2.0 * np.exp(-2.0 * p**2 * eps**2 * a**2 / ss)


def effective_rates(constants: ArrayLike, multiplier: float) -> np.ndarray:
    """``P_i = min(1, C_i·λ)``: the rates giving every shed query the error ``1/λ``.

    Parameters
    ----------
    constants : array_like
        The queries' C_i (infinite: no bound can be given, never shed).
    multiplier : float
        λ = 1/ε_max (infinite: no overload, nothing shed).

    Returns
    -------
    numpy.ndarray
        P_i, each in [0, 1].

    Examples
    --------
    >>> effective_rates([0.05, 0.5, np.inf], 4.0).tolist()
    [0.2, 1.0, 1.0]
    """
    c = np.asarray(constants, dtype=np.float64)
    if math.isinf(multiplier):  # no overload: nothing is shed, whatever C is
        return np.ones_like(c)
    with np.errstate(invalid="ignore"):  # inf · 0 when λ = 0
        rates = np.minimum(1.0, c * multiplier)
    return np.where(np.isinf(c), 1.0, rates)  # no bound can be given: never shed


@dataclass(frozen=True)
class FlowTree:
    """A data-flow diagram without stream-stream joins: one tree of operators per stream.

    Parameters
    ----------
    parent : Mapping[str, str]
        Each operator's upstream operator, or the name of the stream it reads.
    rate : Mapping[str, float]
        Each stream's arrival rate r_j (tuples per second).
    selectivity, seconds_per_tuple : Mapping[str, float]
        Each operator's s_i and t_i. A query's last operator (its aggregate)
        feeds nothing, so its selectivity is never used.
    answer : Mapping[str, str]
        Each query's last operator: its path is that operator and its ancestors.

    Raises
    ------
    CqoptError
        An operator without statistics, a parent that is neither an operator nor a
        stream, a cycle, a negative statistic, or a query naming an unknown operator.
    """

    parent: Mapping[str, str]
    rate: Mapping[str, float]
    selectivity: Mapping[str, float]
    seconds_per_tuple: Mapping[str, float]
    answer: Mapping[str, str]
    paths: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        for op, up in self.parent.items():
            if up not in self.parent and up not in self.rate:
                raise CqoptError(f"operator {op!r} reads {up!r}, which is neither an operator "
                                 "nor a stream with a rate")
            for name, table in (("selectivity", self.selectivity),
                                ("seconds_per_tuple", self.seconds_per_tuple)):
                value = table.get(op)
                if value is None or not value >= 0:
                    raise CqoptError(f"operator {op!r} needs a {name} >= 0, got {value!r}")
        for stream, r in self.rate.items():
            if not r >= 0:
                raise CqoptError(f"stream {stream!r} needs a rate >= 0, got {r!r}")
        paths = {}
        for query, last in self.answer.items():
            if last not in self.parent:
                raise CqoptError(f"query {query!r} ends at {last!r}, which is not an operator")
            path = [last]
            while path[-1] in self.parent:
                if len(path) > len(self.parent):
                    raise CqoptError(f"the operators above {last!r} form a cycle")
                path.append(self.parent[path[-1]])
            paths[query] = tuple(reversed(path))  # stream first, last operator last
        object.__setattr__(self, "paths", paths)

    def labels(self) -> dict[str, frozenset[str]]:
        """Each operator's label: the queries whose paths contain it (Section 3.2)."""
        out: dict[str, set[str]] = {op: set() for op in self.parent}
        for query, path in self.paths.items():
            for op in path[1:]:
                out[op].add(query)
        return {op: frozenset(q) for op, q in out.items()}

    def source(self, op: str) -> str:
        """The stream at the root of ``op``'s tree."""
        while op in self.parent:
            op = self.parent[op]
        return op

    def arrival_rates(self) -> dict[str, float]:
        """Each operator's input rate without shedding: ``r_src · Π_{x ∈ U} s_x``."""
        out: dict[str, float] = {}

        def rate(op: str) -> float:
            if op not in out:
                up = self.parent[op]
                out[op] = (self.rate[up] if up not in self.parent
                           else rate(up) * self.selectivity[up])
            return out[op]

        for op in self.parent:
            rate(op)
        return out


@dataclass(frozen=True)
class Placement:
    """Shedders and the effective rates they give.

    Attributes
    ----------
    before : dict[str, float]
        The sampling rate p_i of the shedder right before each operator (1: none).
    answers : dict[str, float]
        A shedder between a query's last operator and its answer, where others
        continue from that operator (rate < 1 only; free in the load equation).
    prefix : dict[str, float]
        Each operator's prefix path probability, ``P_x`` of Theorem 3.6.
    effective : dict[str, float]
        Each query's effective sampling rate P_i.
    """

    before: dict[str, float]
    answers: dict[str, float]
    prefix: dict[str, float]
    effective: dict[str, float]

    def shedders(self) -> dict[str, float]:
        """The operators that have a shedder before them, with its rate."""
        return {op: p for op, p in self.before.items() if p < 1.0}


def place_shedders(tree: FlowTree, effective: Mapping[str, float]) -> Placement:
    """Algorithm 1 (SetSamplingRate): where to shed, and how much, for given rates P_i.

    Parameters
    ----------
    tree : FlowTree
        The data-flow diagram.
    effective : Mapping[str, float]
        Each query's target effective sampling rate P_i in (0, 1].

    Returns
    -------
    Placement
        A shedder before operator x with rate ``P_x / P_parent(x)`` wherever that
        is below 1: only at the start of shared segments (Observation 3.3), the
        child on q_max's path without one (3.4), ``P_max`` on an initial segment (3.5).

    Raises
    ------
    CqoptError
        A rate outside [0, 1], or a query of the tree without a rate.

    Examples
    --------
    >>> tree = FlowTree(parent={"A": "S", "B": "A"}, rate={"S": 10.0},
    ...                 selectivity={"A": 1.0, "B": 0.0}, seconds_per_tuple={"A": 0.1, "B": 0.1},
    ...                 answer={"q": "B"})
    >>> place_shedders(tree, {"q": 0.4}).shedders()  # no sharing: shed before the first operator
    {'A': 0.4}
    """
    for query in tree.answer:
        p = effective.get(query)
        if p is None or not 0.0 <= p <= 1.0:
            raise CqoptError(f"query {query!r} needs an effective sampling rate in [0, 1], "
                             f"got {p!r}")
    labels = tree.labels()
    prefix = {op: max((effective[q] for q in label), default=0.0)
              for op, label in labels.items()}
    before = {}
    for op in tree.parent:
        up = tree.parent[op]
        above = prefix[up] if up in tree.parent else 1.0
        # An operator no query reads (prefix 0) gets everything dropped before it.
        before[op] = prefix[op] / above if above > 0 else 1.0
    answers = {q: effective[q] / prefix[last] for q, last in tree.answer.items()
               if prefix[last] > 0 and effective[q] < prefix[last]}
    return Placement(before, answers, prefix, {q: float(effective[q]) for q in tree.answer})


def load(tree: FlowTree, placement: Placement | None = None) -> float:
    """The left side of the load equation (2.1): seconds of work per second of input.

    ``Σ_i t_i · r_src(i) · p_i · Π_{x ∈ U_i} s_x·p_x``; without a placement, no shedding.

    Parameters
    ----------
    tree : FlowTree
        The data-flow diagram.
    placement : Placement, optional
        The shedders (their ``before`` rates are read).

    Returns
    -------
    float
        Seconds of work per second of input (the system keeps up at <= 1).

    Examples
    --------
    >>> tree = FlowTree(parent={"A": "S"}, rate={"S": 10.0}, selectivity={"A": 0.0},
    ...                 seconds_per_tuple={"A": 0.2}, answer={"q": "A"})
    >>> load(tree), load(tree, place_shedders(tree, {"q": 0.25}))
    (2.0, 0.5)
    """
    arriving = tree.arrival_rates()
    total = 0.0
    for op, t in tree.seconds_per_tuple.items():
        if op not in tree.parent:
            continue
        kept = 1.0
        if placement is not None:
            x = op  # the product of the shedders' rates on the path down to op
            while x in tree.parent:
                kept *= placement.before[x]
                x = tree.parent[x]
        total += t * arriving[op] * kept
    return total


@dataclass(frozen=True)
class Shedding:
    """The solution of the load equation for the queries' error constants.

    Attributes
    ----------
    multiplier : float
        λ = 1/ε_max; infinite when nothing needs shedding.
    epsilon : dict[str, float]
        Each query's promised relative error: ``C_i/P_i``, 0 where ``P_i = 1``.
    placement : Placement
        Where the shedders go (Algorithm 1).
    load_before, load_after : float
        The left side of (2.1) without shedding and with this placement.
    met : bool
        Whether the placement meets the capacity.
    """

    multiplier: float
    epsilon: dict[str, float]
    placement: Placement
    load_before: float
    load_after: float
    met: bool

    @property
    def overloaded(self) -> bool:
        """Whether anything is shed."""
        return bool(self.placement.shedders() or self.placement.answers)


def solve_load(tree: FlowTree, constants: Mapping[str, float],
               capacity: float = 1.0) -> Shedding:
    """The largest λ with ``P_i = min(1, C_i·λ)`` placed by Algorithm 1 meeting (2.1).

    Parameters
    ----------
    tree : FlowTree
        The data-flow diagram with its rates and operator statistics.
    constants : Mapping[str, float]
        Each query's C_i (:func:`error_constant`).
    capacity : float
        The right side of (2.1): seconds of work available per second.

    Returns
    -------
    Shedding
        When (2.1) holds without shedding: λ = ∞, every p_i = 1, every ε_i = 0.

    Raises
    ------
    CqoptError
        A query without a constant, a negative constant, or a capacity <= 0.

    Examples
    --------
    One query, twice over capacity: half its tuples go, before its first operator.

    >>> tree = FlowTree(parent={"A": "S"}, rate={"S": 10.0}, selectivity={"A": 0.0},
    ...                 seconds_per_tuple={"A": 0.2}, answer={"q": "A"})
    >>> result = solve_load(tree, {"q": 0.05})
    >>> result.multiplier, result.placement.shedders(), result.epsilon
    (10.0, {'A': 0.5}, {'q': 0.1})
    """
    if not capacity > 0:
        raise CqoptError(f"the load capacity must be > 0, got {capacity!r}")
    for query in tree.answer:
        c = constants.get(query)
        if c is None or not c >= 0:
            raise CqoptError(f"query {query!r} needs an error constant C >= 0, got {c!r}")
    labels = tree.labels()
    arriving = tree.arrival_rates()
    # Per operator: work at full rate (t·r·S) and the label's largest C; its prefix
    # probability after Algorithm 1 is min(1, λ·c_max), so the load is Σ w·min(1, λ·c).
    ops = [op for op in tree.parent if labels[op]]
    work = np.array([tree.seconds_per_tuple[op] * arriving[op] for op in ops])
    c_max = np.array([max(constants[q] for q in labels[op]) for op in ops])
    before = load(tree)  # operators no query reads count here; Algorithm 1 drops their input

    def load_at(lam: float) -> float:
        return float(np.sum(work * effective_rates(c_max, lam)))

    fixed = float(work[np.isinf(c_max)].sum())  # never shed: no bound for their queries
    if float(work.sum()) <= capacity:
        lam = math.inf
    elif fixed > capacity:
        lam = 0.0
    else:
        # Breakpoints where an operator's prefix reaches 1; between them the load is linear.
        finite = c_max[np.isfinite(c_max) & (c_max > 0)]
        points = np.unique(np.concatenate([[0.0], 1.0 / finite]))
        loads = np.array([load_at(x) for x in points])
        k = int(np.searchsorted(loads, capacity, side="right"))  # loads[k-1] <= cap < loads[k]
        lo = points[k - 1]
        with np.errstate(divide="ignore"):
            linear = np.isfinite(c_max) & (1.0 / c_max > lo)  # prefix still below 1 past lo
        slope = float(np.sum(np.where(linear, work * c_max, 0.0)))
        lam = float(lo + (capacity - loads[k - 1]) / slope)
    rates = {q: float(effective_rates(constants[q], lam)) for q in tree.answer}
    placement = place_shedders(tree, rates)
    after = load(tree, placement)
    epsilon = {q: (0.0 if rates[q] >= 1.0 else
                   math.inf if rates[q] == 0.0 else constants[q] / rates[q]) for q in rates}
    return Shedding(lam, epsilon, placement, before, after,
                    met=after <= capacity * (1.0 + 1e-9))


def scale_answer(kept_sum: ArrayLike, effective_rate: ArrayLike) -> np.ndarray:
    """The unbiased answer from the kept tuples: ``Σ_kept v / P``.

    Parameters
    ----------
    kept_sum : array_like
        The SUM (or COUNT) over the tuples that passed every shedder.
    effective_rate : array_like
        The query's effective sampling rate P_i, in (0, 1].

    Returns
    -------
    numpy.ndarray
        The scaled answer.

    Raises
    ------
    CqoptError
        A rate outside (0, 1].

    Examples
    --------
    >>> scale_answer([30.0, 12.0], [0.5, 1.0]).tolist()
    [60.0, 12.0]
    """
    kept = np.asarray(kept_sum, dtype=np.float64)
    rate = np.asarray(effective_rate, dtype=np.float64)
    if np.any(rate <= 0) or np.any(rate > 1):
        raise CqoptError("an effective sampling rate must lie in (0, 1] to scale an answer")
    return kept / rate
