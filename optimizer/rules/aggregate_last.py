"""Heuristic 4 of the OM paper as a rule: the aggregate last, then the output columns.

Each plan gets, above its joins and selections, the query's aggregate with
its GROUP BY and HAVING (an aggregate query only), then a final projection
``proj:out`` to the output columns unless the top already emits them. No
other placement of the aggregate is implemented, so without this rule the
plans stop below the query's output and
:func:`~cqopt.optimizer.rules.enumerate.enumerate_plans` refuses them.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.rules.context import RuleContext
>>> from cqopt.optimizer.rules.enumerate import naive_plan
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import PlanBuilder
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int"}}}})
>>> q = parse_query("SELECT S.a, COUNT(*) FROM S GROUP BY S.a WINDOW [1]", cat)
>>> [p.operators() for p in aggregate_last([naive_plan(q)], RuleContext(q, PlanBuilder(q)))]
[('src:S', 'agg')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cqopt.optimizer.plans.builder import shape_of
from cqopt.optimizer.plans.plan import Plan

if TYPE_CHECKING:
    from cqopt.optimizer.rules.context import RuleContext


def aggregate_last(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """``plans`` completed: the aggregate on top, then the output columns.

    Parameters
    ----------
    plans
        The candidates so far.
    context
        The query and its plan builder.

    Returns
    -------
    list of Plan
        One complete plan per plan given, in the same order.

    A shape decision: it sets each plan's ``PlanShape.complete``, and
    :mod:`~cqopt.optimizer.plans.builder` places the aggregate and the final
    projection from the shape (see :mod:`cqopt.optimizer.rules`).
    """
    return [context.builder.build_shape(shape_of(p).with_(complete=True)) for p in plans]
