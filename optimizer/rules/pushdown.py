"""Heuristic 2 of the OM paper as a rule: push selections and projections down.

Each plan given becomes one plan per combination of per-stream σ/π orders
(:func:`stream_order_combinations`, the first stream varying slowest): the
stream's selection, and a projection keeping only the columns needed above,
sit right above its source, in both orders where both are worth having
(:func:`~cqopt.optimizer.plans.stream_orders.stream_orders` says which).
Without this rule a stream's selection is applied above the joins and every
column travels up to the query's final projection.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.rules.context import RuleContext
>>> from cqopt.optimizer.rules.enumerate import naive_plan
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import PlanBuilder
>>> host = {"rate": [1, 10], "columns": {"x": "int", "y": "int", "z": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host}})
>>> q = parse_query("SELECT A.x FROM A, B WHERE A.x = B.x AND A.y > 2 WINDOW [1]", cat)
>>> context = RuleContext(q, PlanBuilder(q))
>>> naive_plan(q).operators()
('src:A', 'src:B', 'join:1', 'sel:A.1')
>>> [p.operators() for p in pushdown([naive_plan(q)], context)]
... # doctest: +NORMALIZE_WHITESPACE
[('src:A', 'sel:A.1', 'proj:A', 'src:B', 'proj:B', 'join:1'),
 ('src:A', 'proj:A', 'sel:A.1', 'src:B', 'proj:B', 'join:1')]
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

from cqopt.optimizer.plans.builder import shape_of
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.plans.stream_orders import stream_orders

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery
    from cqopt.optimizer.rules.context import RuleContext


def pushdown(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """Each plan of ``plans`` once per combination of pushed-down σ/π orders.

    Parameters
    ----------
    plans
        The candidates so far.
    context
        The query and its plan builder.

    Returns
    -------
    list of Plan
        The plans of the first plan given, then of the second, ...; each
        plan's σ/π combinations in the order of ``stream_order_combinations``.

    A shape decision: it sets each plan's ``PlanShape.orders``, and
    :mod:`~cqopt.optimizer.plans.builder` places each stream's selection and
    projection from the shape (see :mod:`cqopt.optimizer.rules`).
    """
    combinations = stream_order_combinations(context.query)
    return [context.builder.build_shape(shape_of(p).with_(orders=combination))
            for p in plans for combination in combinations]


def stream_order_combinations(query: ContinuousQuery) -> list[dict[str, str]]:
    """Every combination of per-stream orders; the first stream varies slowest."""
    names = query.stream_names
    choices = [stream_orders(query, s) for s in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]
