"""Candidate plans of a continuous query: the OM paper's heuristics (section 4.2).

1. **Group selections.** Already done by the logical query: one
   :class:`~cqopt.optimizer.group_selections.Selection` per stream.
2. **Push selections and projections down**, in both orders where both are
   worth having (:mod:`cqopt.optimizer.pushdown`). The query's own projection
   list applies at the top (:mod:`cqopt.optimizer.plan_builder`).
3. **Left-deep join orders** without Cartesian products unless the join graph
   leaves no choice; then the orders with the fewest Cartesian steps, their
   plans marked ``cartesian`` (:mod:`cqopt.optimizer.join_orders`).
4. **Aggregate last**, above the joins, with the query's HAVING.

The candidates are every join order times every combination of per-stream
σ/π orders, join order outermost, each built by
:class:`~cqopt.optimizer.plan_builder.PlanBuilder`.

**More streams than** ``max_exhaustive`` (default 6), **or more plans than**
``max_plans`` (default 4096): a local search
(:mod:`cqopt.optimizer.join_order_search`) replaces full enumeration of the
join orders. The plan count is join orders × σ/π combinations, so the stream
count alone does not bound it: 6 streams joined on one column (a clique after
the closure) with σ and π each would be 360 × 2^6 = 23,040 plans. The best
``keep`` orders found come back (fewer when ``keep`` times the combinations
would pass ``max_plans``, never none), each with every σ/π combination: the
budget bounds the join orders, never the per-stream σ/π choices.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.logical import parse_query
>>> host = {"rate": [50, 500], "columns": {"src_host": "int", "dest_host": "int"}}
>>> cat = Catalog.from_dict({"streams": {"TCP": host, "UDP": host, "SF": host}})
>>> q2 = parse_query("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
...                  "AND UDP.dest_host = SF.dest_host WINDOW [1]", cat)
>>> [p.id for p in enumerate_plans(q2)]
['TCP⋈UDP⋈SF', 'TCP⋈SF⋈UDP', 'UDP⋈SF⋈TCP']
>>> top = enumerate_plans(q2)[0].node("join:2")
>>> [str(p) for p in top.predicate], top.selectivity
(['SF.dest_host = TCP.src_host', 'SF.dest_host = UDP.dest_host'], ('jsel.SF.UDP',))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cqopt.catalog import Catalog
from cqopt.optimizer.join_order_search import (
    CostFunction,
    intermediate_size_cost,
    local_search_orders,
)
from cqopt.optimizer.join_orders import join_orders
from cqopt.optimizer.plan import Plan
from cqopt.optimizer.plan_builder import PlanBuilder
from cqopt.optimizer.pushdown import stream_order_combinations

if TYPE_CHECKING:
    from cqopt.optimizer.logical import ContinuousQuery


def enumerate_plans(query: ContinuousQuery, *, max_exhaustive: int = 6,
                    max_plans: int = 4096, cost: CostFunction | None = None,
                    catalog: Catalog | None = None, keep: int = 3) -> list[Plan]:
    """Every candidate plan of ``query`` (a local search's best few beyond
    ``max_exhaustive`` streams or ``max_plans`` plans), in a deterministic order.

    ``cost`` scores plans for the local search only; ``catalog`` gives the
    stand-in cost its rates when ``cost`` is None; ``keep`` is how many join
    orders the local search returns (fewer if ``keep`` orders times the σ/π
    combinations would pass ``max_plans``; at least one).
    """
    builder = PlanBuilder(query)
    combos = stream_order_combinations(query)
    orders = join_orders(query) if len(query.streams) <= max_exhaustive else None
    # The plan count is orders × combinations, not the stream count (module docstring)
    if orders is None or len(orders) * len(combos) > max_plans:
        scorer = cost if cost is not None else intermediate_size_cost(catalog)
        kept = max(1, min(keep, max_plans // len(combos)))
        orders = local_search_orders(query, scorer, keep=kept, builder=builder)
    return [builder.build(order, combo) for order in orders for combo in combos]
