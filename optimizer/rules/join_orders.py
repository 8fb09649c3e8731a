"""Heuristic 3 of the OM paper as a rule: left-deep join orders, no Cartesian products.

Each plan given is rebuilt with every left-deep join order of
:func:`~cqopt.optimizer.rules.left_deep.join_orders` (none with a Cartesian
product unless the join graph leaves no choice; then the fewest), the join
order outermost: every plan given in the first order, then in the second, ...

**More streams than** ``context.max_exhaustive``, **or more plans than**
``context.max_plans``: a local search
(:mod:`cqopt.optimizer.rules.join_order_search`) replaces the full list of join
orders. The best ``keep`` orders it finds come back (fewer when ``keep``
times the plans given would pass ``max_plans``, never none), each with every
plan given: the budget bounds the join orders, never the choices earlier
rules made. Without this rule the streams are joined in FROM order.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.rules.context import RuleContext
>>> from cqopt.optimizer.rules.enumerate import naive_plan
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import PlanBuilder
>>> host = {"rate": [1, 10], "columns": {"x": "int", "y": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host, "C": host}})
>>> q = parse_query("SELECT * FROM A, B, C WHERE A.x = C.x AND B.y = C.y WINDOW [1]", cat)
>>> naive_plan(q).id
'A×B⋈C'
>>> [p.id for p in join_orders([naive_plan(q)], RuleContext(q, PlanBuilder(q)))]
['A⋈C⋈B', 'B⋈C⋈A']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cqopt.optimizer.plans.builder import shape_of
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.rules import left_deep
from cqopt.optimizer.rules.join_order_search import intermediate_size_cost, local_search_orders

if TYPE_CHECKING:
    from cqopt.optimizer.rules.context import RuleContext


def join_orders(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """Each plan of ``plans`` in every left-deep order worth having (join order outermost).

    Parameters
    ----------
    plans
        The candidates so far.
    context
        The query, its plan builder, the budgets (``max_exhaustive``,
        ``max_plans``, ``keep``) and the local search's ``cost`` or ``catalog``.

    Returns
    -------
    list of Plan
        For each join order, each plan given rebuilt in it.

    A shape decision: it sets each plan's ``PlanShape.join_order``, and
    :mod:`~cqopt.optimizer.plans.builder` places the joins, their predicates and
    statistics from the shape (see :mod:`cqopt.optimizer.rules`).
    """
    query = context.query
    shapes = [shape_of(p) for p in plans]
    orders = left_deep.join_orders(query) \
        if len(query.streams) <= context.max_exhaustive else None
    # The plan count is orders × plans given, not the stream count (module docstring)
    if orders is None or len(orders) * len(shapes) > context.max_plans:
        scorer = context.cost if context.cost is not None \
            else intermediate_size_cost(context.catalog)
        kept = max(1, min(context.keep, context.max_plans // len(shapes)))
        orders = local_search_orders(query, scorer, keep=kept, builder=context.builder,
                                     like=shapes[0])
    return [context.builder.build_shape(shape.with_(join_order=order))
            for order in orders for shape in shapes]
