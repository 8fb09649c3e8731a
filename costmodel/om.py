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
   window or an infinite rate; an aggregate over an empty window
   (``λ · W = 0`` tuples) has the formula's infinite rate. Costs are never
   NaN, though they may be infinite.

Sources cost nothing: the paper counts operator buffers only.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.optimizer.logical import parse_query
>>> from cqopt.optimizer.enumerate import enumerate_plans
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
from cqopt.optimizer.statistics import rate_name


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
        times_, window_seconds_ = times.raw, window_seconds.raw
        rates: dict[str, Array] = {}
        windows: dict[str, Array] = {}
        operators: dict[str, OperatorCost] = {}
        bytes_ = self.memory_unit == "bytes"
        for key, node in plan_operators(plan):
            if node["kind"] == "source":
                lam = statistic(stats, rate_name(node["stream"]), xp=xp)
                rates[key], windows[key] = lam, window_seconds_(node["window"], lam, xp=xp)
                zero = xp.full(lam, 0.0)
                operators[key] = OperatorCost(lam, zero, zero)
                continue
            inputs = node["inputs"]
            tpr = self.catalog.operators.rate(node["rate_class"])
            in_widths = node["in_widths"] if bytes_ else (1,) * len(inputs)
            out_width = node["out_width"] if bytes_ else 1
            sel = selectivity(stats, node["selectivity"], xp=xp)
            window = sum_arrays((windows[i] for i in inputs), xp=xp) / len(inputs)
            # times(): 0 · ∞ is 0, e.g. a selection passing nothing under an
            # [UNBOUNDED] window queues nothing (base.py); no cost is NaN.
            if node["kind"] == "join":
                lam_l, lam_r = (rates[i] for i in inputs)
                busy = xp.divide(lam_l + lam_r, tpr)  # seconds to process one second of input
                throttle = xp.maximum(busy, 1.0) if self.capacity else busy
                pairs = times_(sel, lam_l, lam_r, window, xp=xp)
                # no arrivals: 0, not 0/0
                out = xp.where(pairs > 0, xp.divide(pairs, throttle), 0.0)
                buffered = times_(lam_l * in_widths[0] + lam_r * in_widths[1], busy, window,
                                  xp=xp)
            else:
                lam = rates[inputs[0]]
                busy = xp.divide(lam, tpr)
                processed = xp.minimum(lam, tpr) if self.capacity else lam
                if node["kind"] == "aggregate":
                    out = xp.divide(tpr, times_(processed, window, xp=xp))  # 1 / (C_Ω · λ · W)
                else:
                    out = times_(sel, processed, xp=xp)  # sel is 1 for a projection
                buffered = times_(lam, busy, window, in_widths[0], xp=xp)
            queued = times_(out, window, out_width, xp=xp)
            rates[key], windows[key] = out, window
            operators[key] = OperatorCost(out, buffered + queued, busy)
        return plan_cost(rates[plan.root], operators, xp)
