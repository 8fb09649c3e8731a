"""Heuristic 1 of the OM paper as a rule: one selection operator per stream.

Without it, a stream's selection is applied one conjunct at a time, a chain
of filters (keys ``sel:S.1``, ``sel:S.2``, ...). With it, the chain becomes
the stream's grouped selection (:mod:`cqopt.optimizer.query.selections`:
conjuncts on one column merged into one interval set), one operator that
pays one operator's processing cost. The selectivity statistic ``sel.S`` is
the whole selection's either way (the last filter of a chain carries it), so
only the number of operators changes.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.rules.context import RuleContext
>>> from cqopt.optimizer.rules.enumerate import naive_plan
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import PlanBuilder
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.a > 1 AND S.b = 2 WINDOW [1]", cat)
>>> context = RuleContext(q, PlanBuilder(q))
>>> naive_plan(q).operators()
('src:S', 'sel:S.1', 'sel:S.2')
>>> [p.operators() for p in group_selections([naive_plan(q)], context)]
[('src:S', 'sel:S')]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cqopt.optimizer.plans.builder import shape_of
from cqopt.optimizer.plans.plan import Plan

if TYPE_CHECKING:
    from cqopt.optimizer.rules.context import RuleContext


def group_selections(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """``plans`` with each stream's selection as one operator.

    Parameters
    ----------
    plans
        The candidates so far.
    context
        The query and its plan builder.

    Returns
    -------
    list of Plan
        One plan per plan given, in the same order.

    A shape decision: it sets each plan's ``PlanShape.grouped``, and
    :mod:`~cqopt.optimizer.plans.builder` places the operators from the shape
    (see :mod:`cqopt.optimizer.rules`).
    """
    return [context.builder.build_shape(shape_of(p).with_(grouped=True)) for p in plans]
