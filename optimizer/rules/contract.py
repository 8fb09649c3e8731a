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
from typing import TYPE_CHECKING

from cqopt.optimizer.plans.nodes import NODE_CLASSES, PlanNode
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
    # consumer each); below[key] is the set of streams under a node.
    below: dict[str, frozenset[str]] = {}
    order: list[str] = []
    stack: list[tuple[str, bool]] = [(plan.root, False)]
    seen: set[str] = set()
    edges = 0
    while stack:
        key, done = stack.pop()
        node = nodes[key]
        if done:
            below[key] = frozenset([node.stream]) if node.kind == "source" \
                else frozenset().union(*(below[i] for i in node.inputs))
            order.append(key)
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

    kinds = {key: nodes[key].kind for key in order}
    sources = Counter(nodes[k].stream for k, kind in kinds.items() if kind == "source")
    wanted = Counter(query.stream_names)
    if sources != wanted:
        extra, lacking = sources - wanted, wanted - sources
        return "it reads " + "; ".join(
            [f"{s} {n + 1} times" for s, n in extra.items()]
            + [f"never {s}" for s in lacking]) + " (each stream once)"

    selections, joins = _applied_predicates(nodes, texts)
    if selections != expected[0]:
        return _predicate_difference("selection", selections, expected[0])
    if joins != expected[1]:
        return _predicate_difference("join predicate", joins, expected[1])
    for key, kind in kinds.items():
        if kind == "selection" and nodes[key].predicate.stream not in below[key]:
            stream = nodes[key].predicate.stream
            return f"selection {key} on {stream} is not above {stream}'s source"
        if kind == "join" and nodes[key].cartesian and nodes[key].strategy != AUTO:
            return (f"Cartesian step {key} carries the strategy {nodes[key].strategy} "
                    "(a product has no join key to hint)")

    aggregates = [k for k, kind in kinds.items() if kind == "aggregate"]
    if len(aggregates) > 1:
        return f"it aggregates {len(aggregates)} times"
    key = plan.root
    while _is_final_projection(nodes[key]):
        key = nodes[key].inputs[0]
    if aggregates and key != aggregates[0]:
        return f"operators other than the final projection sit above {aggregates[0]}"
    if query.is_aggregate and not aggregates and _is_final_projection(nodes[plan.root]):
        return "it computes the output columns without the query's aggregate"
    return None


def _is_final_projection(node: PlanNode) -> bool:
    return node.kind == "projection" and node.stream is None


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


def _applied_predicates(nodes: dict[str, PlanNode], texts: dict[int, list[str]]
                        ) -> tuple[Counter, Counter]:
    """The selection conjuncts and join predicates the plan applies, each as often as it does."""
    selections, joins = Counter(), Counter()
    for node in nodes.values():
        if node.kind == "selection":
            selections.update(_conjunct_texts(node.predicate, texts))
        elif node.kind == "join":
            for p in node.predicate or ():
                if id(p) not in texts:  # a theta predicate prints its SQL: slow
                    texts[id(p)] = [str(p)]
                joins.update(texts[id(p)])
    return selections, joins


def _predicate_difference(what: str, applied: Counter, expected: Counter) -> str:
    extra, lacking = applied - expected, expected - applied
    if extra:
        text, n = next(iter(extra.items()))
        return f"it applies the {what} {text} {n} time{'s' if n > 1 else ''} too many"
    text, n = next(iter(lacking.items()))
    return f"it never applies the {what} {text}" if n == expected[text] else \
        f"it applies the {what} {text} {n} time{'s' if n > 1 else ''} too few"
