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
    ARRAYS,
    Constant,
    Array,
    CostModelError,
    OperatorCost,
    PlanCost,
    PointCosting,
    catalog_constants,
    elementwise,
    plan_cost,
    plan_operators,
    selectivity,
    statistic,
    sum_arrays,
    times,
    window_seconds,
)
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.query.join_closure import JoinPredicate
from cqopt.optimizer.query.statistics import rate_name

FINEST_GRANULARITY_SECONDS = 1e-6


# -- output stream characteristics, formulas (1)-(8) ----------------------------
# Each formula takes ``xp``, the elementwise namespace of base.py: numpy for
# grids, Python floats at one point; a direct call ignores floating-point warnings.

def _empty(d: Array, l: Array, *, xp=ARRAYS) -> Array:
    """l with the empty stream's l = 0 wherever d is infinite."""
    return xp.where(xp.isinf(d), 0.0, l)


@elementwise
def projection(d: Array, l: Array, *, xp=ARRAYS) -> tuple[Array, Array]:
    """(1): a projection leaves (d, l, g) unchanged."""
    return d, l


@elementwise
def selection(d: Array, l: Array, sel: Array, *, xp=ARRAYS) -> tuple[Array, Array]:
    """(2): ``d' = d / sel``; sel = 0 gives the empty stream."""
    d_out = xp.where(sel > 0, d / xp.where(sel > 0, sel, 1.0), np.inf)
    return d_out, _empty(d_out, l, xp=xp)


@elementwise
def union(ds: list[Array], ls: list[Array], *, xp=ARRAYS) -> tuple[Array, Array]:
    """(3): rates add; l' is the rate-weighted mean of the l_i."""
    rate = sum_arrays((xp.divide(1.0, d) for d in ds), xp=xp)
    d_out = xp.divide(1.0, rate)
    l_out = xp.divide(sum_arrays((xp.divide(l, d) for d, l in zip(ds, ls)), xp=xp), rate)
    return d_out, xp.where(rate > 0, l_out, 0.0)


@elementwise
def cartesian_product(d1: Array, l1: Array, d2: Array, l2: Array, *,
                      xp=ARRAYS) -> tuple[Array, Array]:
    """(4): ``d' = d1·d2 / (l1 + l2)``, ``l' = l1·l2 / (l1 + l2)``."""
    d_out = xp.divide(d1 * d2, l1 + l2)
    # l1·l2 / (l1 + l2) tends to l2 as l1 grows: an [UNBOUNDED] side is not ∞/∞ = NaN
    l_out = xp.where(xp.isinf(l1), l2,
                     xp.where(xp.isinf(l2), l1, xp.divide(l1 * l2, l1 + l2)))
    d_out = xp.where(xp.isinf(d1) | xp.isinf(d2), np.inf, d_out)
    return d_out, _empty(d_out, l_out, xp=xp)


def _hit_fraction(d: Array, exponent: Array, instant: float = 1.0, *, xp=ARRAYS) -> Array:
    """``1 − (1 − 1/d)^exponent`` with d and the exponent counted in time instants.

    Cardenas's term (reading 4): ``instant`` is the length of one instant in
    the unit of d and the exponent, so the term is
    ``1 − (1 − instant/d)^(exponent/instant)``; the base is clamped to [0, 1]
    (d shorter than one instant: every instant is hit). Evaluated as
    ``−expm1(n·log1p(−x))``, accurate for the large exponents of a fine instant.
    """
    x = xp.clip(xp.divide(instant, xp.value(d)), 0.0, 1.0)
    return -xp.expm1(xp.value(exponent) / instant * xp.log1p(-x))


@elementwise
def scalar_aggregation(d: Array, l: Array, g: Array, instant: float = 1.0, *,
                       xp=ARRAYS) -> tuple[Array, Array]:
    """(5): if d < l, ``d' = l' = g / (1 − (1 − 1/d)^{2g})``, else unchanged.

    ``instant``: see :func:`_hit_fraction` (1: the paper's integer time domain).
    """
    split = xp.divide(g, _hit_fraction(d, 2 * g, instant, xp=xp))
    dense = d < l
    return xp.where(dense, split, d), xp.where(dense, split, l)


@elementwise
def groupby_aggregation(d: Array, l: Array, g: Array, n: ArrayLike, instant: float = 1.0, *,
                        xp=ARRAYS) -> tuple[Array, Array]:
    """(6): n groups of ``n·d`` each, aggregated (5) and united (3)."""
    n = xp.value(n)
    per_group = xp.divide(g, _hit_fraction(n * d, 2 * g, instant, xp=xp))
    dense = n * d < l
    return xp.where(dense, xp.divide(per_group, n), d), xp.where(dense, per_group, l)


@elementwise
def window(d: Array, l: Array, g: Array, w: Array, *, xp=ARRAYS) -> tuple[Array, Array]:
    """(7): ``d' = g·d / l``, ``l' = (⌊w/g⌋ + 1)·g`` (reading 3)."""
    d_out = xp.where(xp.isinf(d), np.inf, xp.divide(g * d, l))
    l_out = xp.where(xp.isinf(w), np.inf, (xp.floor(xp.divide(w, g)) + 1.0) * g)
    return d_out, _empty(d_out, l_out, xp=xp)


@elementwise
def granularity(d: Array, l: Array, g_new: ArrayLike, *, xp=ARRAYS) -> tuple[Array, Array]:
    """(8): coarsen to ĝ: shorten by ĝ, thin out, or empty, by l against ĝ and 2ĝ."""
    g_new = xp.value(g_new)
    thinned = xp.divide(d * g_new, l - g_new)
    d_out = xp.where(l >= 2 * g_new, d, xp.where(l > g_new, thinned, np.inf))
    l_out = xp.where(l >= 2 * g_new, l - g_new, xp.where(l > g_new, g_new, 0.0))
    return d_out, l_out


# -- memory (bytes) and CPU (seconds per time unit), section 3.4 ----------------

def _per(d: Array, *, xp=ARRAYS) -> Array:
    """Elements per time unit, 1/d (0 for the empty stream)."""
    return xp.divide(1.0, d)


@elementwise
def join_memory(d1: Array, l1: Array, s1: float, d2: Array, l2: Array, s2: float, *,
                xp=ARRAYS) -> Array:
    """(9): ``(⌈l1/d1⌉ + d2/(2·d1))·s1 + (⌈l2/d2⌉ + d1/(2·d2))·s2`` (reading 7)."""
    wait1 = xp.where(xp.isinf(d2), 0.0, xp.divide(d2, 2 * d1))
    wait2 = xp.where(xp.isinf(d1), 0.0, xp.divide(d1, 2 * d2))
    side1 = xp.where(xp.isinf(d1), 0.0, xp.ceil(xp.divide(l1, d1)) + wait1)
    side2 = xp.where(xp.isinf(d2), 0.0, xp.ceil(xp.divide(l2, d2)) + wait2)
    # a side projected to 0 bytes holds 0
    return times.raw(side1, s1, xp=xp) + times.raw(side2, s2, xp=xp)


@elementwise
def join_cpu(d1: Array, l1: Array, d2: Array, l2: Array, jsel: Array, c: PipesConstants,
             hashed: bool = True, *, xp=ARRAYS) -> Array:
    """(10)–(14): insertion, probing, result generation and reorganization.

    ``hashed=False`` is the nested-loops join: one bucket, no hash calls.
    """
    buckets = c.hash_buckets if hashed else 1
    c_hash = c.hash if hashed else 0.0
    per1, per2 = _per(d1, xp=xp), _per(d2, xp=xp)
    arrivals = per1 + per2
    # times(): an empty input, or jsel = 0 beside an unbounded window, costs 0, not NaN
    both = times.raw(per1, per2, xp=xp)
    insert = arrivals * (c_hash + c.bucket + c.heap)  # (11)
    probe = (times.raw(both, l2 / buckets + l1 / buckets, xp=xp) * c.predicate
             + arrivals * c_hash)  # (12)
    result = times.raw(jsel, l1 + l2, both, xp=xp) * c.projection_function  # (13)
    reorg = arrivals * (2 * c.expire + c.bucket + c.heap)  # (14)
    return insert + probe + result + reorg


@elementwise
def aggregation_memory(d: Array, l: Array, g: Array, s: float, instant: float = 1.0, *,
                       xp=ARRAYS) -> Array:
    """(15): ``⌈(l/g)·(1 − (1 − 1/d)^g)⌉ · s``; ``instant``: see :func:`_hit_fraction`."""
    # an empty stream holds 0
    state = xp.ceil(times.raw(xp.divide(l, g), _hit_fraction(d, g, instant, xp=xp), xp=xp))
    return times.raw(state, s, xp=xp)


@elementwise
def aggregation_cpu(d: Array, l: Array, g: Array, d_out: Array, c: PipesConstants,
                    instant: float = 1.0, *, xp=ARRAYS) -> Array:
    """(16)–(19): updates, new aggregates and reorganization, per time unit."""
    dense = d < l
    per, per_out = _per(d, xp=xp), _per(d_out, xp=xp)
    update = xp.where(dense, times.raw(xp.divide(l, d * g), _hit_fraction(d, g, instant, xp=xp),
                                       xp=xp) * (c.overlap + c.update_aggregate), 0.0)  # (17)
    new = xp.where(dense, per * c.list_op + per / 2 * c.init_aggregate,
                   per * (c.list_op + c.init_aggregate))  # (18)
    reorg = per_out * (c.overlap + c.list_op) + per * c.overlap  # (19)
    return update + new + reorg


@elementwise
def window_cpu(d: Array, c: PipesConstants, tuple_based: bool = False, *, xp=ARRAYS) -> Array:
    """Section 3.6.1: ``C_S/d`` per time window, ``(2C_Q + C_S)/d`` per tuple window."""
    return _per(d, xp=xp) * ((2 * c.queue if tuple_based else 0.0) + c.set_timestamp)


@elementwise
def granularity_cpu(d: Array, c: PipesConstants, *, xp=ARRAYS) -> Array:
    """Section 3.6.2: ``2·C_R / d``, C_R the cost of rounding a timestamp."""
    return _per(d, xp=xp) * 2 * c.round_timestamp


@elementwise
def stateless_cpu(d: Array, per_element: float, *, xp=ARRAYS) -> Array:
    """Selection ``C_P/d``, projection ``C_F/d``, union ``C_T/d'`` (section 3.5.1)."""
    return _per(d, xp=xp) * per_element


# -- the model ------------------------------------------------------------------

class PIPES(PointCosting):
    """PIPES' (d, l, g) model over a catalog's constants."""

    name = "pipes"
    memory_units = ("bytes",)

    def __init__(self, catalog: Catalog, groups: int = 16, memory_unit: str = "bytes"):
        if memory_unit != "bytes":
            raise CostModelError(f"the PIPES model counts memory in bytes only, got "
                                 f"memory unit {memory_unit!r}")
        if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
            raise CostModelError(f"groups must be a whole number >= 1, got {groups!r}")
        self.catalog = catalog
        self.groups = groups
        self.memory_unit = memory_unit

    def constants(self) -> dict[str, Constant]:
        """Each per-operation cost (seconds) and the group count, with their sources.

        >>> from cqopt.catalog import Catalog
        >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 2],
        ...     "columns": {"a": "int"}}}})
        >>> PIPES(cat).constants()["groups"].source
        'the model (PIPES(groups=...), default 16)'
        """
        return {**catalog_constants(self.catalog.pipes, "pipes",
                                    "default (of the order of a modern CPU's cost)"),
                "groups": Constant(float(self.groups),
                                   "the model (PIPES(groups=...), default 16)")}

    def _cost(self, plan, stats: Mapping[str, ArrayLike], xp) -> PlanCost:
        unit = self.catalog.seconds_per_time_unit
        chars: dict[str, tuple[Array, Array, Array]] = {}  # node -> (d, l, g)
        operators: dict[str, OperatorCost] = {}
        for key, node in plan_operators(plan):
            inputs = tuple(chars[i] for i in node.inputs)
            chars[key], memory, cpu = pipes_operator(node, self, stats, inputs, xp)
            rate = xp.divide(1.0, chars[key][0] * unit)
            operators[key] = OperatorCost(rate, xp.value(memory), xp.value(cpu) / unit)
        return plan_cost(operators[plan.root].rate, operators, xp)


Characteristics = tuple[Array, Array, Array]  # a stream's (d, l, g)


@kinds.consumer("the PIPES model")
def pipes_operator(node: kinds.PlanNode, model: PIPES, stats: Mapping[str, ArrayLike],
                   inputs: tuple[Characteristics, ...], xp
                   ) -> tuple[Characteristics, Array, Array]:
    """One operator's output (d, l, g), memory and CPU (per time unit), given its inputs'
    (d, l, g) in order."""


def _instant(model: PIPES) -> float:
    """One time instant, in time units."""
    return FINEST_GRANULARITY_SECONDS / model.catalog.seconds_per_time_unit


@pipes_operator.register
def _(node: kinds.SourceNode, model: PIPES, stats, inputs, xp):
    c, unit = model.catalog.pipes, model.catalog.seconds_per_time_unit
    memory = xp.value(0.0)
    stream = model.catalog.stream(node.stream)
    lam = statistic(stats, rate_name(node.stream), xp=xp)
    g = xp.value(stream.granularity if stream and stream.granularity
                 else FINEST_GRANULARITY_SECONDS / unit)
    d = xp.divide(1.0, lam * unit)
    win = node.window
    rows = win.rows if win is not None and win.kind == "rows" else None
    # the shared reading: c/λ for [ROWS c]
    w = window_seconds.raw(win, lam, xp=xp) / unit
    d_out, l_out = window.raw(d, xp.broadcast(g, d), g, w, xp=xp)
    cpu = window_cpu.raw(d, c, tuple_based=rows is not None, xp=xp)
    if rows is not None:
        memory = xp.value(rows * node.out_width)
    return (d_out, l_out, g), memory, cpu


@pipes_operator.register
def _(node: kinds.SelectionNode, model: PIPES, stats, inputs, xp):
    (d, l, g), = inputs
    sel = selectivity(stats, node.selectivity, xp=xp)
    d_out, l_out = selection.raw(d, l, sel, xp=xp)
    cpu = stateless_cpu.raw(d, model.catalog.pipes.predicate, xp=xp)
    return (d_out, l_out, g), xp.value(0.0), cpu


@pipes_operator.register
def _(node: kinds.ProjectionNode, model: PIPES, stats, inputs, xp):
    (d, l, g), = inputs
    d_out, l_out = projection.raw(d, l, xp=xp)
    cpu = stateless_cpu.raw(d, model.catalog.pipes.projection_function, xp=xp)
    return (d_out, l_out, g), xp.value(0.0), cpu


@pipes_operator.register
def _(node: kinds.JoinNode, model: PIPES, stats, inputs, xp):
    (d1, l1, g), (d2, l2, _) = inputs
    jsel = selectivity(stats, node.selectivity, xp=xp)
    d_prod, l_prod = cartesian_product.raw(d1, l1, d2, l2, xp=xp)
    d_out, l_out = selection.raw(d_prod, l_prod, jsel, xp=xp)
    s1, s2 = node.in_widths
    memory = join_memory.raw(d1, l1, s1, d2, l2, s2, xp=xp)
    hashed = any(isinstance(p, JoinPredicate) for p in node.predicate or ())
    cpu = join_cpu.raw(d1, l1, d2, l2, jsel, model.catalog.pipes, hashed=hashed, xp=xp)
    return (d_out, l_out, g), memory, cpu


@pipes_operator.register
def _(node: kinds.AggregateNode, model: PIPES, stats, inputs, xp):
    (d, l, g), = inputs
    c, instant, s = model.catalog.pipes, _instant(model), node.out_width
    if node.group_by:
        n = model.groups
        d_out, l_out = groupby_aggregation.raw(d, l, g, n, instant, xp=xp)
        memory = n * aggregation_memory.raw(n * d, l, g, s, instant, xp=xp)
        cpu = n * aggregation_cpu.raw(n * d, l, g, d_out * n, c, instant, xp=xp)
    else:
        d_out, l_out = scalar_aggregation.raw(d, l, g, instant, xp=xp)
        memory = aggregation_memory.raw(d, l, g, s, instant, xp=xp)
        cpu = aggregation_cpu.raw(d, l, g, d_out, c, instant, xp=xp)
    return (d_out, l_out, g), memory, cpu
