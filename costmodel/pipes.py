"""The PIPES cost model (seed 002, section 3): stream characteristics (d, l, g).

A stream is described by d, the mean distance between start timestamps, l,
the mean length of validity intervals, and g, the time granularity, all in
the catalog's time unit. Each formula below takes and returns numpy arrays
that broadcast; the paper's numbering is kept. The model propagates (d, l, g)
bottom up through a plan, sums memory (bytes) and CPU (seconds per second),
and reads the output rate as 1/d' at the root.

Readings the paper leaves open, each pinned by a test:

1. A source has ``d = 1/λ``, ``l = g`` (valid for one time instant) and g its
   catalog granularity, else the finest the system has, 1 µs.
2. Every source passes through its window operator ω (formula 7); memory and
   CPU of ω are booked on the source node. A ``[ROWS c]`` window is a time
   window of ``w = c·d`` (the paper's c/λ) with memory ``c·s`` and CPU
   ``(2C_Q + C_S)/d``; ``[NOW]`` is w = 0; ``[UNBOUNDED]`` is w = ∞.
3. In (7) the ``+1`` of ``⌊(w+1)/g⌋·g`` is one time instant at the finest
   granularity, i.e. one granule g: ``l' = (⌊w/g⌋ + 1)·g``. With the paper's
   integer time and g = 1 the two agree; with g = 1 µs in seconds it avoids
   adding a whole second to every window.
4. Cardenas's term ``(1 − 1/d)^g`` in (5), (6), (15), (17) is derived on
   the paper's integer time domain, whose instant is 1: d and g count
   instants. The model evaluates it in instants of the finest granularity,
   1 µs: ``(1 − i/d)^(g/i)`` with ``i = 1 µs`` in the catalog's time unit, so
   the result does not depend on the time unit and is continuous in λ. The
   base is clamped to [0, 1]: with d under one instant every instant is hit.
   The formula functions take ``instant`` (default 1, the paper's domain).
5. Joins are symmetric hash joins, formulas (9)–(14), when they apply an
   equality; a join with only theta predicates, or a Cartesian product, is
   the symmetric nested-loops join, "a special SHJ where each hash table only
   contains a single bucket and the costs to evaluate the hash function are
   set to 0". A join is a Cartesian product (4) followed by a selection (2)
   with the join selectivity.
6. Group-by with n groups (6): the state and CPU of (15)–(19) are those of n
   scalar aggregations over streams with ``n·d``. n is the model's
   ``groups`` parameter (default 16): the number of groups is not a
   statistic in this namespace.
7. The empty stream is ``d = ∞, l = 0``. An empty input yields an empty
   output; in (9) the waiting term ``d_j / (2·d_i)`` of a non-empty input is
   taken as 0 when the other input is empty (nothing arrives to wait for).
8. The paper's sanity figure, a join of two 100 elements/s streams with a
   10 s window holding about 140 kB, implies an element size of about 70
   bytes in PIPES (Java objects); the test states this.
9. ``[UNBOUNDED]`` gives l = ∞; 0 · ∞ is taken as 0 (``base.times``: no
   element, or no byte, of an unbounded window), and (4) reads
   ``l1·l2/(l1 + l2)`` as l2 when l1 = ∞. Costs may be infinite, never NaN.

>>> d, l = cartesian_product(np.float64(2.0), np.float64(10.0), 4.0, 10.0)
>>> float(d), float(l)
(0.4, 5.0)
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import ArrayLike

from cqopt.catalog import Catalog, PipesConstants
from cqopt.costmodel.base import (
    Array,
    CostModelError,
    OperatorCost,
    PlanCost,
    selectivity,
    statistic,
    sum_arrays,
    times,
    window_seconds,
)
from cqopt.optimizer.join_closure import JoinPredicate
from cqopt.optimizer.statistics import rate_name

FINEST_GRANULARITY_SECONDS = 1e-6


# -- output stream characteristics, formulas (1)-(8) ----------------------------

def _empty(d: Array, l: Array) -> Array:
    """l with the empty stream's l = 0 wherever d is infinite."""
    return np.where(np.isinf(d), 0.0, l)


def projection(d: Array, l: Array) -> tuple[Array, Array]:
    """(1): a projection leaves (d, l, g) unchanged."""
    return d, l


def selection(d: Array, l: Array, sel: Array) -> tuple[Array, Array]:
    """(2): ``d' = d / sel``; sel = 0 gives the empty stream."""
    with np.errstate(divide="ignore"):
        d_out = np.where(sel > 0, d / np.where(sel > 0, sel, 1.0), np.inf)
    return d_out, _empty(d_out, l)


def union(ds: list[Array], ls: list[Array]) -> tuple[Array, Array]:
    """(3): rates add; l' is the rate-weighted mean of the l_i."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = sum_arrays(1.0 / d for d in ds)
        d_out = 1.0 / rate
        l_out = sum_arrays(l / d for d, l in zip(ds, ls)) / rate
    return d_out, np.where(rate > 0, l_out, 0.0)


def cartesian_product(d1: Array, l1: Array, d2: Array, l2: Array) -> tuple[Array, Array]:
    """(4): ``d' = d1·d2 / (l1 + l2)``, ``l' = l1·l2 / (l1 + l2)``."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d_out = d1 * d2 / (l1 + l2)
        # l1·l2 / (l1 + l2) tends to l2 as l1 grows: an [UNBOUNDED] side is not ∞/∞ = NaN
        l_out = np.where(np.isinf(l1), l2, np.where(np.isinf(l2), l1, l1 * l2 / (l1 + l2)))
    d_out = np.where(np.isinf(d1) | np.isinf(d2), np.inf, d_out)
    return d_out, _empty(d_out, l_out)


def _hit_fraction(d: Array, exponent: Array, instant: float = 1.0) -> Array:
    """``1 − (1 − 1/d)^exponent`` with d and the exponent counted in time instants.

    Cardenas's term (reading 4): ``instant`` is the length of one instant in
    the unit of d and the exponent, so the term is
    ``1 − (1 − instant/d)^(exponent/instant)``; the base is clamped to [0, 1]
    (d shorter than one instant: every instant is hit). Evaluated as
    ``−expm1(n·log1p(−x))``, accurate for the large exponents of a fine instant.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        x = np.clip(instant / np.asarray(d, dtype=np.float64), 0.0, 1.0)
        return -np.expm1(np.asarray(exponent, dtype=np.float64) / instant * np.log1p(-x))


def scalar_aggregation(d: Array, l: Array, g: Array,
                       instant: float = 1.0) -> tuple[Array, Array]:
    """(5): if d < l, ``d' = l' = g / (1 − (1 − 1/d)^{2g})``, else unchanged.

    ``instant``: see :func:`_hit_fraction` (1: the paper's integer time domain).
    """
    with np.errstate(divide="ignore"):
        split = g / _hit_fraction(d, 2 * g, instant)
    dense = d < l
    return np.where(dense, split, d), np.where(dense, split, l)


def groupby_aggregation(d: Array, l: Array, g: Array, n: ArrayLike,
                        instant: float = 1.0) -> tuple[Array, Array]:
    """(6): n groups of ``n·d`` each, aggregated (5) and united (3)."""
    n = np.asarray(n, dtype=np.float64)
    with np.errstate(divide="ignore"):
        per_group = g / _hit_fraction(n * d, 2 * g, instant)
    dense = n * d < l
    return np.where(dense, per_group / n, d), np.where(dense, per_group, l)


def window(d: Array, l: Array, g: Array, w: Array) -> tuple[Array, Array]:
    """(7): ``d' = g·d / l``, ``l' = (⌊w/g⌋ + 1)·g`` (reading 3)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        d_out = np.where(np.isinf(d), np.inf, g * d / l)
        l_out = np.where(np.isinf(w), np.inf, (np.floor(w / g) + 1.0) * g)
    return d_out, _empty(d_out, l_out)


def granularity(d: Array, l: Array, g_new: ArrayLike) -> tuple[Array, Array]:
    """(8): coarsen to ĝ: shorten by ĝ, thin out, or empty, by l against ĝ and 2ĝ."""
    g_new = np.asarray(g_new, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        thinned = d * g_new / (l - g_new)
    d_out = np.where(l >= 2 * g_new, d, np.where(l > g_new, thinned, np.inf))
    l_out = np.where(l >= 2 * g_new, l - g_new, np.where(l > g_new, g_new, 0.0))
    return d_out, l_out


# -- memory (bytes) and CPU (seconds per time unit), section 3.4 ----------------

def _per(d: Array) -> Array:
    """Elements per time unit, 1/d (0 for the empty stream)."""
    with np.errstate(divide="ignore"):
        return 1.0 / d


def join_memory(d1: Array, l1: Array, s1: float, d2: Array, l2: Array, s2: float) -> Array:
    """(9): ``(⌈l1/d1⌉ + d2/(2·d1))·s1 + (⌈l2/d2⌉ + d1/(2·d2))·s2`` (reading 7)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        wait1 = np.where(np.isinf(d2), 0.0, d2 / (2 * d1))
        wait2 = np.where(np.isinf(d1), 0.0, d1 / (2 * d2))
        side1 = np.where(np.isinf(d1), 0.0, np.ceil(l1 / d1) + wait1)
        side2 = np.where(np.isinf(d2), 0.0, np.ceil(l2 / d2) + wait2)
    return times(side1, s1) + times(side2, s2)  # a side projected to 0 bytes holds 0


def join_cpu(d1: Array, l1: Array, d2: Array, l2: Array, jsel: Array, c: PipesConstants,
             hashed: bool = True) -> Array:
    """(10)–(14): insertion, probing, result generation and reorganization.

    ``hashed=False`` is the nested-loops join: one bucket, no hash calls.
    """
    buckets = c.hash_buckets if hashed else 1
    c_hash = c.hash if hashed else 0.0
    arrivals = _per(d1) + _per(d2)
    # times(): an empty input, or jsel = 0 beside an unbounded window, costs 0, not NaN
    both = times(_per(d1), _per(d2))
    insert = arrivals * (c_hash + c.bucket + c.heap)  # (11)
    probe = times(both, l2 / buckets + l1 / buckets) * c.predicate + arrivals * c_hash  # (12)
    result = times(jsel, l1 + l2, both) * c.projection_function  # (13)
    reorg = arrivals * (2 * c.expire + c.bucket + c.heap)  # (14)
    return insert + probe + result + reorg


def aggregation_memory(d: Array, l: Array, g: Array, s: float,
                       instant: float = 1.0) -> Array:
    """(15): ``⌈(l/g)·(1 − (1 − 1/d)^g)⌉ · s``; ``instant``: see :func:`_hit_fraction`."""
    state = np.ceil(times(l / g, _hit_fraction(d, g, instant)))  # an empty stream holds 0
    return times(state, s)


def aggregation_cpu(d: Array, l: Array, g: Array, d_out: Array, c: PipesConstants,
                    instant: float = 1.0) -> Array:
    """(16)–(19): updates, new aggregates and reorganization, per time unit."""
    dense = d < l
    with np.errstate(divide="ignore", invalid="ignore"):
        update = np.where(dense, times(l / (d * g), _hit_fraction(d, g, instant))
                          * (c.overlap + c.update_aggregate), 0.0)  # (17)
        new = np.where(dense, _per(d) * c.list_op + _per(d) / 2 * c.init_aggregate,
                       _per(d) * (c.list_op + c.init_aggregate))  # (18)
        reorg = _per(d_out) * (c.overlap + c.list_op) + _per(d) * c.overlap  # (19)
    return update + new + reorg


def window_cpu(d: Array, c: PipesConstants, tuple_based: bool = False) -> Array:
    """Section 3.6.1: ``C_S/d`` per time window, ``(2C_Q + C_S)/d`` per tuple window."""
    return _per(d) * ((2 * c.queue if tuple_based else 0.0) + c.set_timestamp)


def granularity_cpu(d: Array, c: PipesConstants) -> Array:
    """Section 3.6.2: ``2·C_R / d``, C_R the cost of rounding a timestamp."""
    return _per(d) * 2 * c.round_timestamp


def stateless_cpu(d: Array, per_element: float) -> Array:
    """Selection ``C_P/d``, projection ``C_F/d``, union ``C_T/d'`` (section 3.5.1)."""
    return _per(d) * per_element


# -- the model ------------------------------------------------------------------

class PIPES:
    """PIPES' (d, l, g) model over a catalog's constants."""

    name = "pipes"

    def __init__(self, catalog: Catalog, groups: int = 16, memory_unit: str = "bytes"):
        if memory_unit != "bytes":
            raise CostModelError(f"the PIPES model counts memory in bytes only, got "
                                 f"memory unit {memory_unit!r}")
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            raise CostModelError(f"groups must be a whole number >= 1, got {groups!r}")
        self.catalog = catalog
        self.groups = groups
        self.memory_unit = memory_unit

    def cost(self, plan, stats: Mapping[str, ArrayLike]) -> PlanCost:
        """Output rate, memory and CPU of ``plan`` over the broadcast grid of ``stats``."""
        c = self.catalog.pipes
        unit = self.catalog.seconds_per_time_unit
        instant = FINEST_GRANULARITY_SECONDS / unit  # one time instant, in time units
        chars: dict[str, tuple[Array, Array, Array]] = {}  # node -> (d, l, g)
        operators: dict[str, OperatorCost] = {}
        for key in plan.operators():
            node = plan.node(key)
            kind = node["kind"]
            memory = np.float64(0.0)
            if kind == "source":
                stream = self.catalog.stream(node["stream"])
                lam = statistic(stats, rate_name(node["stream"]))
                g = np.float64((stream.granularity if stream and stream.granularity
                                else FINEST_GRANULARITY_SECONDS / unit))
                with np.errstate(divide="ignore"):
                    d = 1.0 / (lam * unit)
                win = node["window"]
                rows = win.rows if win is not None and win.kind == "rows" else None
                w = window_seconds(win, lam) / unit  # the shared reading: c/λ for [ROWS c]
                d_out, l_out = window(d, np.broadcast_to(g, np.shape(d)), g, w)
                cpu = window_cpu(d, c, tuple_based=rows is not None)
                if rows is not None:
                    memory = np.float64(rows * node["out_width"])
            elif kind in ("selection", "projection"):
                d, l, g = chars[node["inputs"][0]]
                if kind == "selection":
                    d_out, l_out = selection(d, l, selectivity(stats, node["selectivity"]))
                    cpu = stateless_cpu(d, c.predicate)
                else:
                    d_out, l_out = projection(d, l)
                    cpu = stateless_cpu(d, c.projection_function)
            elif kind == "join":
                (d1, l1, g), (d2, l2, _) = (chars[i] for i in node["inputs"])
                jsel = selectivity(stats, node["selectivity"])
                d_prod, l_prod = cartesian_product(d1, l1, d2, l2)
                d_out, l_out = selection(d_prod, l_prod, jsel)
                s1, s2 = node["in_widths"]
                memory = join_memory(d1, l1, s1, d2, l2, s2)
                hashed = any(isinstance(p, JoinPredicate) for p in node["predicate"] or ())
                cpu = join_cpu(d1, l1, d2, l2, jsel, c, hashed=hashed)
            elif kind == "aggregate":
                d, l, g = chars[node["inputs"][0]]
                s = node["out_width"]
                if node.get("group_by"):
                    n = self.groups
                    d_out, l_out = groupby_aggregation(d, l, g, n, instant)
                    memory = n * aggregation_memory(n * d, l, g, s, instant)
                    cpu = n * aggregation_cpu(n * d, l, g, d_out * n, c, instant)
                else:
                    d_out, l_out = scalar_aggregation(d, l, g, instant)
                    memory = aggregation_memory(d, l, g, s, instant)
                    cpu = aggregation_cpu(d, l, g, d_out, c, instant)
            else:  # pragma: no cover - the plan contract has no other kind
                raise ValueError(f"unknown operator kind {kind!r}")
            chars[key] = (d_out, l_out, g)
            with np.errstate(divide="ignore"):
                rate = 1.0 / (d_out * unit)
            operators[key] = OperatorCost(rate, np.asarray(memory, dtype=np.float64),
                                          np.asarray(cpu) / unit)
        return PlanCost(
            rate=operators[plan.root].rate,
            memory=sum_arrays(op.memory for op in operators.values()),
            cpu=sum_arrays(op.cpu for op in operators.values()),
            operators=operators,
        )
