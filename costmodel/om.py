"""The OM rate/memory cost model (seed 001, section 4.1), vectorized.

Per operator, with λ its input rate (tuples/s), W its window (seconds) and
tpr its processing rate (tuples/s, from the catalog by the operator's rate
class):

- output rate c_r: selection ``sel · λ``, projection ``λ``, aggregate
  ``1 / (C_Ω · λ · W)`` with ``C_Ω = 1 / tpr``, join
  ``sel · λ_L · λ_R · W / (C_L · λ_L + C_R · λ_R)`` with ``C = 1 / tpr``;
- input buffering ``c_inp = λ · (λ · W / tpr)``, intermediate queue
  ``c_int = c_r · W``, memory ``c_m = c_inp + c_int``;
- the plan's rate ``C_r`` is its root's, its memory ``C_m`` the sum.

Readings the paper leaves open (COSTMODELS.md), each pinned by a test:

1. **Capacity** (default on): an operator cannot emit faster than it
   processes. A unary operator processes ``min(λ, tpr)`` tuples/s; a join
   needs ``(λ_L + λ_R) / tpr`` seconds for one second of arrivals and its
   output is throttled by that only when it exceeds 1 second, so its rate is
   ``sel · λ_L · λ_R · W / max(1, (λ_L + λ_R) / tpr)``. This reproduces the
   paper's Figure 2 (rates 5.0 and 2.5). ``capacity=False`` gives the
   literal formulas.
2. **Memory unit** (default ``bytes``): input buffering is counted at the
   input tuple's width, the intermediate queue at the output tuple's width,
   so a projection that narrows tuples saves memory above it. ``tuples``
   gives the literal formulas.
3. **Join inputs**: while the join processes one window
   (``(λ_L + λ_R) · W / tpr`` seconds), each input buffers its own arrivals:
   ``c_inp = (λ_L · s_L + λ_R · s_R) · (λ_L + λ_R) · W / tpr``. The join's W
   is the mean of its inputs' windows (``base``).
4. CPU, which the paper does not cost, is the busy fraction ``λ / tpr``
   (seconds of work per second), summed over operators.
5. **0 · ∞ is 0** (``base.times``): a zero rate, a selectivity of 0 or a
   ``[NOW]`` window contributes no memory even beside an ``[UNBOUNDED]``
   window or an infinite rate. An aggregate over an empty window
   (``λ · W = 0`` tuples) emits nothing (rate 0, no queue), where the
   formula's ``1 / (C_Ω · λ · W)`` would be infinite: read literally, every
   plan of an aggregate query would cost ∞ in a round without tuples and the
   round could not be scored. Costs are never NaN, though they may be
   infinite (an ``[UNBOUNDED]`` window).

Sources cost nothing: the paper counts operator buffers only.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> import numpy as np, pathlib
>>> from cqopt.examples import example
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> q = parse_query("SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]", cat)
>>> costs = [OM(cat).cost(p, {"rate.TCP": 500.0, "sel.TCP": np.array([0.1, 0.9])})
...          for p in enumerate_plans(q)]
>>> [c.rate.tolist() for c in costs]
[[50.0, 450.0], [50.0, 450.0]]
"""

from __future__ import annotations

from collections.abc import Mapping

from numpy.typing import ArrayLike

from cqopt.catalog import Catalog
from cqopt.costmodel.base import (
    Constant,
    Array,
    CostModelError,
    OperatorCost,
    PlanCost,
    PointCosting,
    catalog_constants,
    plan_cost,
    plan_operators,
    selectivity,
    statistic,
    sum_arrays,
    times,
    window_seconds,
)
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.query.statistics import rate_name


class OM(PointCosting):
    """OM's rate/memory model over a catalog's processing rates."""

    name = "om"
    memory_units = ("bytes", "tuples")

    def __init__(self, catalog: Catalog, memory_unit: str = "bytes", capacity: bool = True):
        if memory_unit not in ("bytes", "tuples"):
            raise CostModelError(f"the OM model's memory unit is 'bytes' or 'tuples', "
                                 f"got {memory_unit!r}")
        self.catalog = catalog
        self.memory_unit = memory_unit
        self.capacity = capacity

    def constants(self) -> dict[str, Constant]:
        """Each rate class's tuple processing rate (tuples/s) and where it came from.

        >>> from cqopt.catalog import Catalog
        >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 2],
        ...     "columns": {"a": "int"}}}})
        >>> OM(cat).constants()["equi_join"]
        Constant(value=3000.0, source="default (the OM paper's measurement)")
        """
        return catalog_constants(self.catalog.operators, "operators",
                                 "default (the OM paper's measurement)")

    def _cost(self, plan, stats: Mapping[str, ArrayLike], xp) -> PlanCost:
        rates: dict[str, Array] = {}
        windows: dict[str, Array] = {}
        operators: dict[str, OperatorCost] = {}
        for key, node in plan_operators(plan):
            inputs = tuple((rates[i], windows[i]) for i in node.inputs)
            rates[key], windows[key], operators[key] = om_operator(node, self, stats, inputs,
                                                                   xp)
        return plan_cost(rates[plan.root], operators, xp)


@kinds.consumer("the OM model")
def om_operator(node: kinds.PlanNode, model: OM, stats: Mapping[str, ArrayLike],
                inputs: tuple[tuple[Array, Array], ...], xp
                ) -> tuple[Array, Array, OperatorCost]:
    """One operator's output rate, window (seconds) and cost, given its inputs' (rate,
    window) pairs in order."""


@om_operator.register
def _(node: kinds.SourceNode, model: OM, stats, inputs, xp):
    lam = statistic(stats, rate_name(node.stream), xp=xp)
    zero = xp.full(lam, 0.0)
    return lam, window_seconds.raw(node.window, lam, xp=xp), OperatorCost(lam, zero, zero)


def _widths(node: kinds.PlanNode, model: OM) -> tuple[tuple[int, ...], int]:
    """In and out widths in the model's memory unit."""
    if model.memory_unit == "bytes":
        return node.in_widths, node.out_width
    return (1,) * len(node.inputs), 1


def _window(inputs: tuple[tuple[Array, Array], ...], xp) -> Array:
    """An operator's window: the mean of its inputs'."""
    return sum_arrays((w for _, w in inputs), xp=xp) / len(inputs)


@om_operator.register
def _(node: kinds.JoinNode, model: OM, stats, inputs, xp):
    times_ = times.raw
    tpr = model.catalog.operators.rate(node.rate_class)
    in_widths, out_width = _widths(node, model)
    sel = selectivity(stats, node.selectivity, xp=xp)
    window = _window(inputs, xp)
    # times(): 0 · ∞ is 0, e.g. a selection passing nothing under an
    # [UNBOUNDED] window queues nothing (base.py); no cost is NaN.
    (lam_l, _), (lam_r, _) = inputs
    busy = xp.divide(lam_l + lam_r, tpr)  # seconds to process one second of input
    throttle = xp.maximum(busy, 1.0) if model.capacity else busy
    pairs = times_(sel, lam_l, lam_r, window, xp=xp)
    # no arrivals: 0, not 0/0
    out = xp.where(pairs > 0, xp.divide(pairs, throttle), 0.0)
    buffered = times_(lam_l * in_widths[0] + lam_r * in_widths[1], busy, window, xp=xp)
    queued = times_(out, window, out_width, xp=xp)
    return out, window, OperatorCost(out, buffered + queued, busy)


def _unary(node: kinds.PlanNode, model: OM, stats, inputs, xp, *, aggregate: bool = False):
    times_ = times.raw
    tpr = model.catalog.operators.rate(node.rate_class)
    in_widths, out_width = _widths(node, model)
    sel = selectivity(stats, node.selectivity, xp=xp)
    window = _window(inputs, xp)
    lam = inputs[0][0]
    busy = xp.divide(lam, tpr)
    processed = xp.minimum(lam, tpr) if model.capacity else lam
    if aggregate:
        # 1 / (C_Ω · λ · W); an empty window (λ · W = 0) aggregates nothing and
        # emits nothing, not the formula's ∞.
        tuples = times_(processed, window, xp=xp)
        out = xp.where(tuples > 0, xp.divide(tpr, xp.where(tuples > 0, tuples, 1.0)), 0.0)
    else:
        out = times_(sel, processed, xp=xp)  # sel is 1 for a projection
    buffered = times_(lam, busy, window, in_widths[0], xp=xp)
    queued = times_(out, window, out_width, xp=xp)
    return out, window, OperatorCost(out, buffered + queued, busy)


@om_operator.register
def _(node: kinds.SelectionNode, model: OM, stats, inputs, xp):
    return _unary(node, model, stats, inputs, xp)


@om_operator.register
def _(node: kinds.ProjectionNode, model: OM, stats, inputs, xp):
    return _unary(node, model, stats, inputs, xp)


@om_operator.register
def _(node: kinds.AggregateNode, model: OM, stats, inputs, xp):
    return _unary(node, model, stats, inputs, xp, aggregate=True)
