"""What a rule of the enumeration is, and what it may read besides the plans.

A rule (:class:`Rule`) is a function ``rule(plans, context) -> plans``; the
driver, :func:`~cqopt.optimizer.rules.enumerate.enumerate_plans`, runs a list
of them, handing each the same :class:`RuleContext`.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.plans.builder import PlanBuilder
>>> from cqopt.optimizer.query.logical import parse_query
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
>>> q = parse_query("SELECT S.a FROM S WINDOW [1]", cat)
>>> RuleContext(q, PlanBuilder(q)).max_plans
4096
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from cqopt.catalog import Catalog
from cqopt.optimizer.plans.builder import PlanBuilder
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.rules.join_order_search import CostFunction

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery

# Scores plans at some points (lower is better): an array of shape (plans, points).
StrategyCost = Callable[[Sequence[Plan]], np.ndarray]


@dataclass(frozen=True)
class RuleContext:
    """What a rule may read besides the plans: the query, its builder and the budgets."""

    query: ContinuousQuery
    builder: PlanBuilder
    catalog: Catalog | None = None
    cost: CostFunction | None = None  # scores plans for the join orders' local search
    max_exhaustive: int = 6
    max_plans: int = 4096
    keep: int = 3
    # The chart's model's scores at the points of its box, when the model prices join
    # strategies; None leaves every join to the engine (see rules.join_strategies).
    strategy_cost: StrategyCost | None = None


class Rule(Protocol):
    """A rule: the candidate plans in, the rewritten candidates out.

    A rule reads each plan's decisions with
    :func:`~cqopt.optimizer.plans.builder.shape_of` and builds the plans it
    returns with ``context.builder``; it must keep the plan contract.
    """

    __name__: str

    def __call__(self, plans: list[Plan], context: RuleContext) -> list[Plan]: ...
