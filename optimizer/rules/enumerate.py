"""Candidate plans of a continuous query: the OM paper's heuristics as a list of rules.

:data:`HEURISTICS` lists the rules in the order they run, the way sqlglot's
optimizer keeps its ``RULES``; :func:`enumerate_plans` runs them. The rules
start from the plan the query's text reads as (:func:`naive_plan`: the
streams joined in FROM order, each stream's selection applied above the
joins one conjunct at a time, nothing on top) and each one rewrites the list
of candidates it is given (section 4.2 of the OM paper):

1. :mod:`~cqopt.optimizer.rules.group_selections` (heuristic 1): one
   selection operator per stream, not one per conjunct;
2. :mod:`~cqopt.optimizer.rules.aggregate_last` (heuristic 4): the
   aggregate, with the query's HAVING, above the joins, then the output
   columns;
3. :mod:`~cqopt.optimizer.rules.pushdown` (heuristic 2): each stream's
   selection and projection pushed down to its source, in both orders where
   both are worth having;
4. :mod:`~cqopt.optimizer.rules.join_orders` (heuristic 3): the left-deep
   join orders without Cartesian products (unless the join graph leaves no
   choice), the join order outermost; past ``max_exhaustive`` streams or
   ``max_plans`` plans a local search's best few;
5. :mod:`~cqopt.optimizer.rules.join_strategies` (not the paper's): each
   join's physical strategy (broadcast, shuffle-hash, sort-merge: Spark's
   join hints), the strategies no better anywhere in the chart's box
   dropped, when the cost model prices them (``strategy_cost``); otherwise
   every join is left to the engine.

The rules that multiply the plans run last, so that the others rewrite one
plan, not hundreds; the plans come out the same in any order that keeps
pushdown before join_orders (the join order is the outermost loop) and
join_strategies after join_orders (a strategy belongs to a step of one order).

A rule is a function ``rule(plans, context) -> plans``
(:class:`~cqopt.optimizer.rules.context.Rule`),
named by its ``__name__``. After each rule the driver checks the plan
contract (:mod:`cqopt.optimizer.rules.contract`: a tree, every stream read
once, every predicate applied once, the aggregate at the top) and raises a
:class:`PlanContractError` naming the rule whose plans break it, as
DataFusion's optimizer names the rule that changed a plan's schema. An
ablation runs the list without some rules (:func:`rules_without`, ``cqopt
explain --without RULE``).

**The plan count** is join orders × σ/π combinations, so the stream count
alone does not bound it: 6 streams joined on one column (a clique after the
closure) with σ and π each would be 360 × 2^6 = 23,040 plans. The local
search bounds the join orders, never the per-stream σ/π choices; the join
strategies multiply what is left by at most 4 per join, within ``max_plans``.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> host = {"rate": [50, 500], "columns": {"src_host": "int", "dest_host": "int"}}
>>> cat = Catalog.from_dict({"streams": {"TCP": host, "UDP": host, "SF": host}})
>>> q2 = parse_query("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
...                  "AND UDP.dest_host = SF.dest_host WINDOW [1]", cat)
>>> [p.id for p in enumerate_plans(q2)]
['TCP⋈UDP⋈SF', 'TCP⋈SF⋈UDP', 'UDP⋈SF⋈TCP']
>>> top = enumerate_plans(q2)[0].node("join:2")
>>> [str(p) for p in top.predicate], top.selectivity
(['SF.dest_host = TCP.src_host', 'SF.dest_host = UDP.dest_host'], ('jsel.SF.UDP',))
>>> [p.id for p in enumerate_plans(q2, rules=rules_without(["join_orders"]))]
['TCP⋈UDP⋈SF']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from cqopt.catalog import Catalog
from cqopt.errors import CqoptError, did_you_mean
from cqopt.optimizer.plans.builder import PlanBuilder, PlanShape
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.rules.aggregate_last import aggregate_last
from cqopt.optimizer.rules.context import Rule, RuleContext, StrategyCost
from cqopt.optimizer.rules.contract import contract_violation
from cqopt.optimizer.rules.group_selections import group_selections
from cqopt.optimizer.rules.join_order_search import CostFunction
from cqopt.optimizer.rules.join_orders import join_orders
from cqopt.optimizer.rules.join_strategies import join_strategies
from cqopt.optimizer.rules.pushdown import pushdown

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery


# The rules that multiply the plans last (module docstring).
HEURISTICS: tuple[Rule, ...] = (
    group_selections,
    aggregate_last,
    pushdown,
    join_orders,
    join_strategies,
)


class PlanContractError(RuntimeError):
    """A rule handed on plans that break the plan contract (a bug in the rule)."""


def naive_plan(query: ContinuousQuery, builder: PlanBuilder | None = None) -> Plan:
    """The plan the rules start from: FROM order, selections ungrouped above the joins.

    It stops below the aggregate and the output columns.
    """
    builder = builder or PlanBuilder(query)
    return builder.build_shape(PlanShape(query.stream_names, {s: "" for s in query.stream_names},
                                         grouped=False, complete=False))


def rule_names(rules: Iterable[Rule] = HEURISTICS) -> tuple[str, ...]:
    """The names ``rules`` go by (``--without`` takes them)."""
    return tuple(rule.__name__ for rule in rules)


def rules_without(names: Iterable[str], rules: Sequence[Rule] = HEURISTICS) -> tuple[Rule, ...]:
    """``rules`` less the ones named, for an ablation.

    Raises
    ------
    CqoptError
        A name is not one of the rules'.

    Examples
    --------
    >>> rule_names(rules_without(["pushdown"]))
    ('group_selections', 'aggregate_last', 'join_orders', 'join_strategies')
    >>> rules_without(["push_down"])
    Traceback (most recent call last):
    ...
    cqopt.errors.CqoptError: --without push_down: no such rule (...); did you mean 'pushdown'?
    """
    known = rule_names(rules)
    names = list(names)
    for name in names:
        if name not in known:
            raise CqoptError(f"--without {name}: no such rule (the rules are "
                             f"{', '.join(known)}){did_you_mean(name, known)}")
    return tuple(rule for rule in rules if rule.__name__ not in names)


def enumerate_plans(query: ContinuousQuery, *, rules: Sequence[Rule] = HEURISTICS,
                    max_exhaustive: int = 6, max_plans: int = 4096,
                    cost: CostFunction | None = None, catalog: Catalog | None = None,
                    keep: int = 3, strategy_cost: StrategyCost | None = None) -> list[Plan]:
    """Every candidate plan of ``query`` that ``rules`` leave, in a deterministic order.

    Parameters
    ----------
    query
        The query to plan.
    rules
        The rules to run, in order (:data:`HEURISTICS` by default).
    max_exhaustive, max_plans
        Past this many streams, or this many plans, the join orders come from
        a local search (see :mod:`~cqopt.optimizer.rules.join_orders`).
    cost
        Scores plans for the local search only.
    catalog
        Gives the local search's stand-in cost its rates when ``cost`` is None.
    keep
        How many join orders the local search returns (fewer if ``keep``
        orders times the σ/π combinations would pass ``max_plans``; at least one).
    strategy_cost
        Scores plans at the points of the chart's box, an array (plans, points),
        when the cost model prices join strategies; None (the default) leaves
        every join to the engine (see :mod:`~cqopt.optimizer.rules.join_strategies`).

    Returns
    -------
    list of Plan
        The candidates, each a complete plan of ``query``.

    Raises
    ------
    PlanContractError
        A rule's plans break the plan contract; the message names the rule.
    CqoptError
        The rules leave plans that do not compute the query's result (run
        without ``aggregate_last``).
    """
    context = RuleContext(query, PlanBuilder(query), catalog, cost, max_exhaustive,
                          max_plans, keep, strategy_cost)
    plans = [naive_plan(query, context.builder)]
    _check(plans, query, "the naive plan")
    for rule in rules:
        plans = list(rule(plans, context))
        _check(plans, query, f"rule {rule.__name__}")
    incomplete = [p.id for p in plans if not _is_complete(p)]
    if incomplete:
        raise CqoptError(f"the plans stop below the query's output (plan {incomplete[0]}): the "
                         f"rules {', '.join(rule_names(rules)) or '(none)'} place no aggregate "
                         "and no output columns; keep aggregate_last")
    return plans


def _check(plans: list[Plan], query: ContinuousQuery, after: str) -> None:
    broken = contract_violation(plans, query)
    if broken is not None:
        raise PlanContractError(f"{after} broke the plan contract: {broken}")


def _is_complete(plan: Plan) -> bool:
    """Whether ``plan`` computes its query's output (a plan built by hand is taken as is)."""
    shape = plan.graph.graph.get("shape")
    return shape is None or shape.complete
