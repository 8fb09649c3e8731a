"""The contract every candidate plan keeps, checked after each rule of the enumeration.

:func:`~cqopt.optimizer.rules.enumerate.enumerate_plans` runs its rules one after
another and, as DataFusion's optimizer checks a plan's schema after each of
its rules, hands the plans of each rule to :func:`contract_violation`. A plan
of a query keeps the contract when:

1. it is a tree: a DAG whose edges are its nodes' ``inputs``, every node
   reaching the root, one consumer per node, and every node holds one of
   :mod:`~cqopt.optimizer.plans.nodes`' operators;
2. it reads every stream of the query exactly once (one source each);
3. it applies every predicate exactly once: each stream's selection (grouped,
   or one operator per conjunct) above that stream's source, and each join
   and theta predicate in one join;
4. its aggregate, if it has one, is at the top (under the final projection
   only), and a complete plan (one with the final projection) of an
   aggregate query has it;
5. a Cartesian step leaves its strategy to the engine (no join hint).

The candidates as a whole are not empty and have distinct ids.

What each operator brings to the contract (its streams, the predicates it applies,
what it breaks on its own) is :func:`contract_part`, one function per kind as every
consumer of plan nodes is (:func:`cqopt.optimizer.plans.nodes.consumer`), so a new
kind is named by ``tests/test_plan_nodes.py`` until it has its part.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.plans.builder import build_plan
>>> host = {"rate": [1, 10], "columns": {"x": "int", "y": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host}})
>>> q = parse_query("SELECT A.y FROM A, B WHERE A.x = B.x AND A.y > 2 WINDOW [1]", cat)
>>> plan = build_plan(q, ("A", "B"))
>>> contract_violation([plan], q) is None
True
>>> plan.graph.remove_node("sel:A")
>>> print(contract_violation([plan], q))
plan A⋈B: node join:1 reads sel:A, which is not in the plan
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.nodes import (
    NODE_CLASSES,
    AggregateNode,
    JoinNode,
    PlanNode,
    ProjectionNode,
    SelectionNode,
    SourceNode,
)
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.plans.strategies import AUTO
from cqopt.optimizer.query.selections import Selection

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery


def contract_violation(plans: Sequence[Plan], query: ContinuousQuery) -> str | None:
    """What the first plan that breaks the contract does wrong, or None if all keep it.

    Parameters
    ----------
    plans
        The candidates after one rule.
    query
        The query they are plans of.

    Returns
    -------
    str or None
        One sentence naming the plan and what it breaks.
    """
    if not plans:
        return "no plan is left"
    ids = Counter(p.id for p in plans)
    repeated = [i for i, n in ids.items() if n > 1]
    if repeated:
        return f"{len(repeated)} plan ids are given twice or more, e.g. {repeated[0]}"
    texts: dict[int, list[str]] = {}  # conjunct texts per Selection: plans share them
    expected = _expected_predicates(query, texts)
    for plan in plans:
        broken = _plan_violation(plan, query, expected, texts)
        if broken is not None:
            return f"plan {plan.id}: {broken}"
    return None


def _plan_violation(plan: Plan, query: ContinuousQuery, expected: tuple[Counter, Counter],
                    texts: dict[int, list[str]]) -> str | None:
    graph = plan.graph
    nodes = {key: data.get("op") for key, data in graph.nodes(data=True)}
    if plan.root not in nodes:
        return f"its root {plan.root} is not in the plan"
    # One walk down from the root: a tree reaches each node once (so no cycle, one
    # consumer each); each node's part (its streams below, what it applies) on the way up.
    parts: dict[str, _Part] = {}
    stack: list[tuple[str, bool]] = [(plan.root, False)]
    seen: set[str] = set()
    edges = 0
    while stack:
        key, done = stack.pop()
        node = nodes[key]
        if done:
            below = frozenset().union(*(parts[i].streams for i in node.inputs))
            parts[key] = contract_part(node, key, below, texts)
            continue
        if key in seen:
            return f"node {key} is reached twice from the root (a cycle or two consumers)"
        seen.add(key)
        if not isinstance(node, PlanNode):
            return f"node {key} holds no operator (a PlanNode under 'op')"
        if type(node) not in NODE_CLASSES:
            return f"node {key} is of unknown kind {node.kind!r}"
        inputs = node.inputs
        for i in inputs:
            if i not in nodes:
                return f"node {key} reads {i}, which is not in the plan"
            if not graph.has_edge(i, key):
                return f"node {key} reads {i}, but no edge says so"
        edges += len(inputs)
        stack.append((key, True))
        stack.extend((i, False) for i in reversed(inputs))
    if len(seen) != len(nodes):
        return f"not every node reaches the root {plan.root}"
    if graph.number_of_edges() != edges:
        return "it has edges no node's inputs name"
    return _parts_violation(plan.root, parts, nodes, query, expected)


def _parts_violation(root: str, parts: dict[str, _Part], nodes: dict[str, PlanNode],
                     query: ContinuousQuery, expected: tuple[Counter, Counter]) -> str | None:
    """What the plan's parts (bottom-up, in ``parts``' order) break together, or None."""
    sources = Counter(part.source for part in parts.values() if part.source is not None)
    wanted = Counter(query.stream_names)
    if sources != wanted:
        extra, lacking = sources - wanted, wanted - sources
        return "it reads " + "; ".join(
            [f"{s} {n + 1} times" for s, n in extra.items()]
            + [f"never {s}" for s in lacking]) + " (each stream once)"

    # counted in the plan's node order, so a difference names the same predicate first
    selections = Counter(t for key in nodes for t in parts[key].selections)
    joins = Counter(t for key in nodes for t in parts[key].joins)
    if selections != expected[0]:
        return _predicate_difference("selection", selections, expected[0])
    if joins != expected[1]:
        return _predicate_difference("join predicate", joins, expected[1])
    for part in parts.values():
        if part.problem is not None:
            return part.problem

    aggregates = [key for key, part in parts.items() if part.aggregate]
    if len(aggregates) > 1:
        return f"it aggregates {len(aggregates)} times"
    key = root
    while parts[key].final_projection:
        key = nodes[key].inputs[0]
    if aggregates and key != aggregates[0]:
        return f"operators other than the final projection sit above {aggregates[0]}"
    if query.is_aggregate and not aggregates and parts[root].final_projection:
        return "it computes the output columns without the query's aggregate"
    return None


@dataclass(frozen=True)
class _Part:
    """What one operator brings to the contract."""

    streams: frozenset[str]  # the streams at and below it
    source: str | None = None  # the stream a source reads
    selections: tuple[str, ...] = ()  # the selection conjuncts it applies
    joins: tuple[str, ...] = ()  # the join and theta predicates it applies
    aggregate: bool = False
    final_projection: bool = False
    problem: str | None = None  # what it breaks on its own


@kinds.consumer("the plan contract")
def contract_part(node: PlanNode, key: str, below: frozenset[str],
                  texts: dict[int, list[str]]) -> _Part:
    """Node ``key``'s part in the contract: ``below`` is the streams under its inputs,
    ``texts`` the predicates' texts, shared by the plans of one check."""


@contract_part.register
def _(node: SourceNode, key: str, below: frozenset[str], texts: dict[int, list[str]]) -> _Part:
    return _Part(frozenset([node.stream]), source=node.stream)


@contract_part.register
def _(node: SelectionNode, key: str, below: frozenset[str],
      texts: dict[int, list[str]]) -> _Part:
    stream = node.predicate.stream
    return _Part(below, selections=tuple(_conjunct_texts(node.predicate, texts)),
                 problem=None if stream in below else
                 f"selection {key} on {stream} is not above {stream}'s source")


@contract_part.register
def _(node: ProjectionNode, key: str, below: frozenset[str],
      texts: dict[int, list[str]]) -> _Part:
    return _Part(below, final_projection=node.stream is None)


@contract_part.register
def _(node: JoinNode, key: str, below: frozenset[str], texts: dict[int, list[str]]) -> _Part:
    applied = []
    for p in node.predicate or ():
        if id(p) not in texts:  # a theta predicate prints its SQL: slow
            texts[id(p)] = [str(p)]
        applied += texts[id(p)]
    return _Part(below, joins=tuple(applied),
                 problem=(f"Cartesian step {key} carries the strategy {node.strategy} (a "
                          "product has no join key to hint)")
                 if node.cartesian and node.strategy != AUTO else None)


@contract_part.register
def _(node: AggregateNode, key: str, below: frozenset[str],
      texts: dict[int, list[str]]) -> _Part:
    return _Part(below, aggregate=True)


def _conjunct_texts(selection: Selection, texts: dict[int, list[str]]) -> list[str]:
    if id(selection) not in texts:
        texts[id(selection)] = [f"{selection.stream}: {t}"
                                for t in selection.conjuncts_sql]
    return texts[id(selection)]


def _expected_predicates(query: ContinuousQuery,
                         texts: dict[int, list[str]]) -> tuple[Counter, Counter]:
    selections = Counter(t for sel in query.selections.values()
                         for t in _conjunct_texts(sel, texts))
    return selections, Counter(str(p) for p in (*query.joins, *query.thetas))


def _predicate_difference(what: str, applied: Counter, expected: Counter) -> str:
    extra, lacking = applied - expected, expected - applied
    if extra:
        text, n = next(iter(extra.items()))
        return f"it applies the {what} {text} {n} time{'s' if n > 1 else ''} too many"
    text, n = next(iter(lacking.items()))
    return f"it never applies the {what} {text}" if n == expected[text] else \
        f"it applies the {what} {text} {n} time{'s' if n > 1 else ''} too few"
