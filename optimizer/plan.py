"""Physical plans: trees of stream operators on a networkx DiGraph.

A :class:`Plan` is a tree of operators whose edges point the way data flows
(input -> consumer) and whose single root emits the query's result. Every
node carries the attributes of the node contract that the cost models read:

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
           for a join (see :mod:`cqopt.optimizer.join_orders`), ``()`` otherwise
in_widths  bytes of one input tuple per input; out_width: of one output tuple
window     the stream's :class:`~cqopt.optimizer.bind.Window` on a source
stream     the stream on source, selection and projection nodes
predicate  the :class:`~cqopt.optimizer.group_selections.Selection` of a selection,
           the tuple of join/theta predicates a join applies
columns    the ``(stream, column)`` pairs a projection keeps; on the query's
           final projection the output columns, where an aggregate's result
           is ``(None, "COUNT(*)")`` (it belongs to no stream)
========== ==================================================================

Other attributes: ``emits`` (the columns a node outputs, in order, as the
pairs above) on every node; ``cartesian`` on a join (it applies no
predicate); ``aggregates``, ``group_by`` and ``having`` on an aggregate.
A per-stream projection has ``stream`` set; the query's final projection
(key ``proj:out``) has ``stream`` None.

A plan's :attr:`Plan.id` is read off its structure, so it is the same in
every process: the left-deep join order, left to right, ``⋈`` for a join
step and ``×`` for a Cartesian one, and after each stream that has both a
selection and a projection their order bottom-up, ``[σπ]`` or ``[πσ]``.
Parentheses appear only around a right input that is itself a join (never
in left-deep plans). What every candidate of one query shares (the
aggregate, the final projection) is left out, so an id names a plan among
its query's candidates.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.logical import parse_query
>>> from cqopt.optimizer.enumerate import enumerate_plans
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
from typing import TYPE_CHECKING, Any

import networkx as nx

from cqopt.optimizer.dialect import CQL

if TYPE_CHECKING:  # annotations only: importing the optimizer never imports pyspark
    from pyspark.sql import DataFrame

    from cqopt.optimizer.logical import ContinuousQuery

KINDS = ("source", "selection", "projection", "join", "aggregate")
# The node contract: every node has these attributes (see the module docstring).
CONTRACT = ("kind", "streams", "inputs", "rate_class", "selectivity", "in_widths",
            "out_width", "window", "stream", "predicate", "columns")
SELECT, PROJECT = "σ", "π"
JOIN, CROSS = "⋈", "×"

ColumnRef = tuple[str | None, str]


class Plan:
    """One candidate plan: a tree of operator nodes with a canonical id."""

    def __init__(self, graph: nx.DiGraph, root: str):
        self.graph = graph
        self.root = root
        self.id = plan_id(graph, root)

    @property
    def join_order(self) -> tuple[str, ...]:
        return self.graph.nodes[self.root]["streams"]

    @property
    def cartesian(self) -> bool:
        """Whether some join of the plan is a Cartesian product."""
        return any(attrs.get("cartesian") for _, attrs in self.graph.nodes(data=True))

    def node(self, key: str) -> dict[str, Any]:
        return self.graph.nodes[key]

    def operators(self) -> tuple[str, ...]:
        """Node keys bottom-up: inputs before their consumer, left subtree first."""
        order: list[str] = []

        def visit(key: str) -> None:
            for child in self.graph.nodes[key]["inputs"]:
                visit(child)
            order.append(key)

        visit(self.root)
        return tuple(order)

    def explain(self) -> str:
        """An indented tree, root first, one operator per line."""
        lines: list[str] = []

        def visit(key: str, lead: str, rest: str) -> None:
            lines.append(lead + describe_node(self.graph.nodes[key]))
            inputs = self.graph.nodes[key]["inputs"]
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
            "nodes": [{"key": key, **_node_dict(self.graph.nodes[key])}
                      for key in self.operators()],
        }

    def to_sql(self, dialect: str = "spark", *, query: ContinuousQuery | None = None,
               pretty: bool = True) -> str:
        """The plan as SQL of ``dialect`` that keeps its shape: each stream's σ/π
        order as nested subqueries, the left-deep join order, the aggregate on
        top; the windows in a leading comment. See
        :func:`cqopt.optimizer.plan_sql.plan_sql` (``query`` names the output
        columns; a construct the dialect cannot express is a ``PlanSqlError``).
        """
        from cqopt.optimizer.plan_sql import plan_sql

        return plan_sql(self, dialect, query=query, pretty=pretty)

    def to_spark(self, frames: Mapping[str, DataFrame], *,
                 query: ContinuousQuery | None = None) -> DataFrame:
        """The plan as a PySpark DataFrame pipeline over one window per stream.

        See :func:`cqopt.spark.plan_frame.to_spark`. The Spark module is
        imported here, inside the method, because the optimizer (and the
        run-time chart lookup above it) must import without pyspark: only
        ``cqopt.spark`` may import it, and only when a plan runs on Spark.
        """
        from cqopt.spark.plan_frame import to_spark

        return to_spark(self, frames, query=query)

    def __repr__(self) -> str:
        kinds = [self.graph.nodes[k]["kind"] for k in nx.topological_sort(self.graph)]
        return f"<Plan {self.id}: {len(kinds)} operators, {' '.join(kinds)}>"


def plan_id(graph: nx.DiGraph, root: str) -> str:
    """The canonical id of the plan rooted at ``root`` (see the module docstring)."""

    def render(key: str) -> str:
        node = graph.nodes[key]
        if node["kind"] == "join":
            left, right = node["inputs"]
            right_text = render(right)
            if graph.nodes[right]["kind"] == "join":
                right_text = f"({right_text})"
            return render(left) + (CROSS if node.get("cartesian") else JOIN) + right_text
        if node["kind"] == "source":
            return node["stream"]
        if node["stream"] is None:  # aggregate or final projection: the same in every candidate
            return render(node["inputs"][0])
        ops = []  # the stream's own chain of σ and π, read top-down
        while node["kind"] != "source":
            ops.append(SELECT if node["kind"] == "selection" else PROJECT)
            node = graph.nodes[node["inputs"][0]]
        chain = "".join(reversed(ops))
        both = SELECT in chain and PROJECT in chain
        return node["stream"] + (f"[{chain}]" if both else "")

    return render(root)


def column_text(ref: ColumnRef) -> str:
    return ref[1] if ref[0] is None else f"{ref[0]}.{ref[1]}"


def describe_node(node: dict[str, Any]) -> str:
    """One line of ``explain``: the operator, its key facts and its widths."""
    kind = node["kind"]
    if kind == "source":
        return f"Stream {node['stream']} {node['window']}  ({node['out_width']} B)"
    widths = " + ".join(f"{w} B" for w in node["in_widths"]) + f" -> {node['out_width']} B"
    selectivity = "  " + " * ".join(node["selectivity"]) if node["selectivity"] else ""
    if kind == "selection":
        sel = node["predicate"]
        return f"Select {sel.predicate_sql}{selectivity}  {node['rate_class']}  ({widths})"
    if kind == "projection":
        names = node.get("names") or [column_text(c) for c in node["columns"]]
        return f"Project [{', '.join(names)}]  ({widths})"
    if kind == "join":
        if node.get("cartesian"):
            return f"Cartesian product  ({widths})"
        predicates = " AND ".join(str(p) for p in node["predicate"])
        return f"Join {predicates}{selectivity}  ({widths})"
    parts = ["Aggregate " + (", ".join(map(str, node["aggregates"])) or "(none)")]
    if node["group_by"]:
        parts.append("GROUP BY " + ", ".join(".".join(c) for c in node["group_by"]))
    if node["having"] is not None:
        parts.append("HAVING " + node["having"].sql(dialect=CQL))
    return "  ".join(parts) + f"  ({widths})"


def _node_dict(node: dict[str, Any]) -> dict[str, Any]:
    """The node's attributes as JSON values (predicates as SQL text)."""
    out: dict[str, Any] = {}
    for name, value in node.items():
        if name == "window":
            value = value.to_dict() if value is not None else None
        elif name == "predicate" and value is not None:
            value = value.predicate_sql if node["kind"] == "selection" \
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
