"""Physical plans: trees of stream operators on a networkx DiGraph.

A :class:`Plan` is a tree of operators whose edges point the way data flows
(input -> consumer) and whose single root emits the query's result. Each
graph node holds its operator, one of the frozen dataclasses of
:mod:`cqopt.optimizer.plans.nodes`, under the attribute ``op``
(:meth:`Plan.node` returns it). Every operator has the fields of the node
contract that the cost models read:

========== ==================================================================
attribute  meaning
========== ==================================================================
kind       ``source``, ``selection``, ``projection``, ``join`` or ``aggregate``
streams    the stream names at and below the node, in join order
inputs     the input node keys in order (left, right for a join)
rate_class ``None`` (source), ``selection-equality`` / ``selection-range``,
           ``projection``, ``equi-join`` (every join, theta and Cartesian
           too), ``aggregate``: the operator's processing-rate class
selectivity statistic names whose product is the operator's selectivity:
           ``("sel.S",)`` for a selection, the counted ``jsel.A.B`` names
           for a join (see
           :func:`~cqopt.optimizer.plans.join_steps.counted_statistics`),
           ``()`` otherwise
in_widths  bytes of one input tuple per input; out_width: of one output tuple
window     the stream's :class:`~cqopt.optimizer.query.bind.Window` on a source
stream     the stream on source, selection and projection nodes
predicate  the :class:`~cqopt.optimizer.query.selections.Selection` of a selection,
           the tuple of join/theta predicates a join applies
columns    the ``(stream, column)`` pairs a projection keeps; on the query's
           final projection the output columns, where an aggregate's result
           is ``(None, "COUNT(*)")`` (it belongs to no stream)
========== ==================================================================

Other fields: ``emits`` (the columns a node outputs, in order, as the
pairs above) on every node; ``cartesian`` on a join (it applies no
predicate); ``aggregates``, ``group_by`` and ``having`` on an aggregate. A
kind has only its own fields (a join has no ``stream``).
A per-stream projection has ``stream`` set; the query's final projection
(key ``proj:out``) has ``stream`` None.

A plan's :attr:`Plan.id` is read off its structure, so it is the same in
every process: the left-deep join order, left to right, ``⋈`` for a join
step and ``×`` for a Cartesian one, and after each stream that has both a
selection and a projection their order bottom-up, ``[σπ]`` or ``[πσ]``.
Parentheses appear only around a right input that is itself a join (never
in left-deep plans). A join whose strategy is not the engine's choice has
its tag in braces after the join symbol, ``TCP⋈{br}UDP`` (see
:mod:`~cqopt.optimizer.plans.strategies`). What every candidate of one query shares (the
aggregate, the final projection) is left out, so an id names a plan among
its query's candidates.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int", "c": "double"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]", cat)
>>> plans = enumerate_plans(q)
>>> [p.id for p in plans]
['S[σπ]', 'S[πσ]']
>>> print(plans[1].explain())
Project [S.a]  (8 B -> 4 B)
└─ Select S.b = 1  sel.S  selection-equality  (8 B -> 8 B)
   └─ Project [S.a, S.b]  (16 B -> 8 B)
      └─ Stream S [RANGE 1 SECONDS]  (16 B)
>>> plans[1].operators()
('src:S', 'proj:S', 'sel:S', 'proj:out')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx

from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.nodes import KINDS, ColumnRef, node_attributes
from cqopt.optimizer.plans.strategies import AUTO, LABELS, TAGS
from cqopt.optimizer.query.dialect import CQL

__all__ = ["KINDS", "ColumnRef", "Plan", "column_text", "describe_node", "plan_id"]

SELECT, PROJECT = "σ", "π"
JOIN, CROSS = "⋈", "×"


class Plan:
    """One candidate plan: a tree of operator nodes with a canonical id."""

    def __init__(self, graph: nx.DiGraph, root: str):
        self.graph = graph
        self.root = root
        self.id = plan_id(graph, root)

    @property
    def join_order(self) -> tuple[str, ...]:
        return self.node(self.root).streams

    @property
    def cartesian(self) -> bool:
        """Whether some join of the plan is a Cartesian product."""
        return any(isinstance(op, kinds.JoinNode) and op.cartesian
                   for _, op in self.graph.nodes(data="op"))

    def node(self, key: str) -> kinds.PlanNode:
        """The operator at ``key``."""
        return self.graph.nodes[key]["op"]

    def operators(self) -> tuple[str, ...]:
        """Node keys bottom-up: inputs before their consumer, left subtree first."""
        order: list[str] = []

        def visit(key: str) -> None:
            for child in self.node(key).inputs:
                visit(child)
            order.append(key)

        visit(self.root)
        return tuple(order)

    def explain(self, notes: Mapping[str, str] | None = None) -> str:
        """An indented tree, root first, one operator per line; ``notes`` (operator key
        to text: estimates, actual rows) appended to the operators' lines."""
        lines: list[str] = []
        notes = notes or {}

        def visit(key: str, lead: str, rest: str) -> None:
            note = f"  {notes[key]}" if key in notes else ""
            lines.append(lead + describe_node(self.node(key)) + note)
            inputs = self.node(key).inputs
            for i, child in enumerate(inputs):
                last = i == len(inputs) - 1
                visit(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))

        visit(self.root, "", "")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready account: id, join order, tree text and every node bottom-up."""
        return {
            "id": self.id,
            "join_order": list(self.join_order),
            "cartesian": self.cartesian,
            "tree": self.explain(),
            "nodes": [{"key": key, **_node_dict(self.node(key))} for key in self.operators()],
        }

    def __repr__(self) -> str:
        kinds = [self.node(k).kind for k in nx.topological_sort(self.graph)]
        return f"<Plan {self.id}: {len(kinds)} operators, {' '.join(kinds)}>"


def plan_id(graph: nx.DiGraph, root: str) -> str:
    """The canonical id of the plan rooted at ``root`` (see the module docstring)."""
    return _id_text(graph.nodes[root]["op"], graph)


@kinds.consumer("the plan id")
def _id_text(node: kinds.PlanNode, graph: nx.DiGraph) -> str:
    """The id of the subtree at ``node`` (see the module docstring)."""


@_id_text.register
def _(node: kinds.JoinNode, graph: nx.DiGraph) -> str:
    left, right = (graph.nodes[k]["op"] for k in node.inputs)
    right_text = _id_text(right, graph)
    if isinstance(right, kinds.JoinNode):
        right_text = f"({right_text})"
    tag = TAGS[node.strategy]
    return (_id_text(left, graph) + (CROSS if node.cartesian else JOIN)
            + (f"{{{tag}}}" if tag else "") + right_text)


@_id_text.register
def _(node: kinds.SourceNode, graph: nx.DiGraph) -> str:
    return node.stream


@_id_text.register
def _(node: kinds.AggregateNode, graph: nx.DiGraph) -> str:
    # the same in every candidate: left out of the id
    return _id_text(graph.nodes[node.inputs[0]]["op"], graph)


@_id_text.register
def _(node: kinds.ProjectionNode, graph: nx.DiGraph) -> str:
    if node.stream is None:  # the final projection: the same in every candidate
        return _id_text(graph.nodes[node.inputs[0]]["op"], graph)
    return _chain_id(node, graph)


@_id_text.register
def _(node: kinds.SelectionNode, graph: nx.DiGraph) -> str:
    if node.stream is None:  # applied above the joins (pushdown left out): not in the id
        return _id_text(graph.nodes[node.inputs[0]]["op"], graph)
    return _chain_id(node, graph)


_CHAIN_SYMBOL = {kinds.SelectionNode: SELECT, kinds.ProjectionNode: PROJECT}


def _chain_id(node: kinds.PlanNode, graph: nx.DiGraph) -> str:
    """A stream and, when it has both, its σ/π order bottom-up."""
    ops = []  # the stream's own chain of σ and π, read top-down
    while not isinstance(node, kinds.SourceNode):
        ops.append(_CHAIN_SYMBOL[type(node)])
        node = graph.nodes[node.inputs[0]]["op"]
    chain = "".join(reversed(ops))
    both = SELECT in chain and PROJECT in chain
    return node.stream + (f"[{chain}]" if both else "")


def column_text(ref: ColumnRef) -> str:
    return ref[1] if ref[0] is None else f"{ref[0]}.{ref[1]}"


@kinds.consumer("explain")
def describe_node(node: kinds.PlanNode) -> str:
    """One line of ``explain``: the operator, its key facts and its widths."""


def _widths(node: kinds.PlanNode) -> str:
    return " + ".join(f"{w} B" for w in node.in_widths) + f" -> {node.out_width} B"


def _selectivity(node: kinds.PlanNode) -> str:
    return "  " + " * ".join(node.selectivity) if node.selectivity else ""


@describe_node.register
def _(node: kinds.SourceNode) -> str:
    return f"Stream {node.stream} {node.window}  ({node.out_width} B)"


@describe_node.register
def _(node: kinds.SelectionNode) -> str:
    return (f"Select {node.predicate.predicate_sql}{_selectivity(node)}  {node.rate_class}  "
            f"({_widths(node)})")


@describe_node.register
def _(node: kinds.ProjectionNode) -> str:
    names = node.names or [column_text(c) for c in node.columns]
    return f"Project [{', '.join(names)}]  ({_widths(node)})"


@describe_node.register
def _(node: kinds.JoinNode) -> str:
    if node.cartesian:
        return f"Cartesian product  ({_widths(node)})"
    predicates = " AND ".join(str(p) for p in node.predicate)
    how = "" if node.strategy == AUTO else f"  [{LABELS[node.strategy]}]"
    return f"Join {predicates}{_selectivity(node)}{how}  ({_widths(node)})"


@describe_node.register
def _(node: kinds.AggregateNode) -> str:
    parts = ["Aggregate " + (", ".join(map(str, node.aggregates)) or "(none)")]
    if node.group_by:
        parts.append("GROUP BY " + ", ".join(".".join(c) for c in node.group_by))
    if node.having is not None:
        parts.append("HAVING " + node.having.sql(dialect=CQL))
    return "  ".join(parts) + f"  ({_widths(node)})"


def _node_dict(node: kinds.PlanNode) -> dict[str, Any]:
    """The node's attributes as JSON values (predicates as SQL text)."""
    out: dict[str, Any] = {}
    for name, value in node_attributes(node).items():
        if name == "window":
            value = value.to_dict() if value is not None else None
        elif name == "predicate" and value is not None:
            value = value.predicate_sql if isinstance(node, kinds.SelectionNode) \
                else [str(p) for p in value]
        elif name in ("columns", "emits") and value is not None:
            value = [column_text(c) for c in value]
        elif name == "group_by":
            value = [".".join(c) for c in value]
        elif name == "aggregates":
            value = [str(a) for a in value]
        elif name == "having":
            value = value.sql(dialect=CQL) if value is not None else None
        elif isinstance(value, tuple):
            value = list(value)
        out[name] = value
    return out
