"""Physical join strategies as a rule: each join hinted as Spark may run it.

Each plan given becomes one plan per combination of its joins' kept
strategies (:mod:`~cqopt.optimizer.plans.strategies`: broadcast of the left
or of the right input, shuffle-hash, sort-merge), the first join varying
slowest. A Cartesian step keeps the engine's choice. Without this rule, or
when the chart's cost model does not price strategies
(``context.strategy_cost`` is None: the OM and PIPES models cost a join the
same whichever way it runs), every join is left to the engine and the plans
come back unchanged, so such charts do not multiply their plans for nothing.

**Which strategies are kept, and the plan count.** ``context.strategy_cost``
scores plans at a few points of the chart's box (its corners and centre).
One join's strategy changes that join's cost alone (the tuples each join
emits do not depend on how it runs), so each join step is judged on its
own: its four variants, the plan's other joins left to the engine, are
scored, and a strategy is dropped when another costs no more at every
point (of two that cost the same everywhere, the first in
:data:`~cqopt.optimizer.plans.strategies.STRATEGIES` order stays). A plan
with a dropped strategy at some join is then beaten everywhere on those
points by the plan with the better one there. The engine model's
strategy costs are linear in each side's tuples but for a sort's
``n log n``, and the tuples are products of the statistics, so the
differences between two strategies are at their extremes on the box's
corners or close to them. What is left is bounded: a plan given yields at
most ``max(1, max_plans // len(plans))`` plans; past that, the kept strategy
that is cheapest at the fewest points is dropped from the join that keeps
the most, until the product fits (each join keeps at least one). So the
rule multiplies the plan count by at most 4 per join, usually by far less,
and never passes ``max_plans`` (unless the plans given already do).

>>> import numpy as np
>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.rules.context import RuleContext
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import PlanBuilder, build_plan
>>> host = {"rate": [1, 10], "columns": {"x": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host}})
>>> q = parse_query("SELECT * FROM A, B WHERE A.x = B.x WINDOW [1]", cat)
>>> plans = [build_plan(q, ("A", "B"))]
>>> [p.id for p in join_strategies(plans, RuleContext(q, PlanBuilder(q)))]
['A⋈B']
>>> def broadcast_wins(ps):  # broadcasts cost 1, the others 2, at two points
...     return np.array([[1.0, 1.0] if "{b" in p.id else [2.0, 2.0] for p in ps])
>>> context = RuleContext(q, PlanBuilder(q), strategy_cost=broadcast_wins)
>>> [p.id for p in join_strategies(plans, context)]
['A⋈{bl}B']
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from cqopt.optimizer.plans.builder import PlanShape, shape_of
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.plans.strategies import AUTO, HINTED

if TYPE_CHECKING:
    from cqopt.optimizer.rules.context import RuleContext


def join_strategies(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """Each plan of ``plans`` once per combination of its joins' kept strategies.

    Parameters
    ----------
    plans
        The candidates so far (their join orders chosen).
    context
        The query, its builder, ``max_plans`` and ``strategy_cost`` (None:
        the plans come back unchanged).

    Returns
    -------
    list of Plan
        The plans of the first plan given, then of the second, ...

    A shape decision: it sets each plan's ``PlanShape.strategies``, and
    :mod:`~cqopt.optimizer.plans.builder` places the hinted joins from the shape
    (see :mod:`cqopt.optimizer.rules`).
    """
    score = context.strategy_cost
    if score is None or not plans:
        return plans
    budget = max(1, context.max_plans // len(plans))
    out = []
    for plan in plans:
        shape = shape_of(plan)
        steps = len(shape.join_order) - 1
        kept = [kept_strategies(shape, step, plan, context) for step in range(1, steps + 1)]
        for combination in itertools.product(*_within(kept, budget)):
            out.append(context.builder.build_shape(shape.with_(strategies=combination)))
    return out


def kept_strategies(shape: PlanShape, step: int, plan: Plan, context: RuleContext
                    ) -> list[tuple[str, int]]:
    """Join step ``step``'s undominated strategies, each with the points where it is cheapest.

    A Cartesian step keeps the engine's choice alone.
    """
    if plan.node(f"join:{step}").cartesian:
        return [(AUTO, 0)]
    variants = [shape.with_(strategies=_set(shape.strategies, step, s)) for s in HINTED]
    costs = np.asarray(context.strategy_cost([context.builder.build_shape(v)
                                              for v in variants]), dtype=np.float64)
    costs = np.where(np.isnan(costs), np.inf, costs).reshape(len(variants), -1)
    wins = np.bincount(np.argmin(costs, axis=0), minlength=len(variants))
    kept = []
    for i, strategy in enumerate(HINTED):
        dominated = any(np.all(costs[j] <= costs[i])
                        and (j < i or np.any(costs[j] < costs[i]))
                        for j in range(len(HINTED)) if j != i)
        if not dominated:
            kept.append((strategy, int(wins[i])))
    return kept


def _set(strategies: Sequence[str], step: int, strategy: str) -> tuple[str, ...]:
    """``strategies`` with join step ``step``'s set (the steps before it left as they are)."""
    padded = list(strategies) + [AUTO] * max(0, step - len(strategies))
    padded[step - 1] = strategy
    return tuple(padded)


def _within(kept: list[list[tuple[str, int]]], budget: int) -> list[list[str]]:
    """Each step's strategies, the fewest-won dropped until their product fits ``budget``."""
    kept = [list(k) for k in kept]
    while int(np.prod([len(k) for k in kept])) > budget:
        widest = max(range(len(kept)), key=lambda i: (len(kept[i]), -i))
        loser = min(range(len(kept[widest])), key=lambda j: (kept[widest][j][1], -j))
        del kept[widest][loser]
    return [[s for s, _ in k] for k in kept]
