"""Build one left-deep plan of a query, given its join order and σ/π orders.

A plan is each stream's source with its own selection and projection above
it (in the stream's σ/π order, see :mod:`cqopt.optimizer.pushdown`), the
streams joined left-deep in the given order (each join applying
:func:`~cqopt.optimizer.join_orders.step_predicates`, its selectivity the
:func:`~cqopt.optimizer.join_orders.counted_statistics`), then, heuristic 4
of the OM paper, the aggregate last, with the query's HAVING. A final
projection ``proj:out`` is added when what the last operator emits is not
already, as a multiset, the output columns (the order of columns is free).
Every node is one of :mod:`cqopt.optimizer.plan_nodes`' operators.

:class:`PlanBuilder` builds many plans of one query and computes what they
share (per-stream operator chains, join steps) once.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.logical import parse_query
>>> host = {"rate": [1, 10], "columns": {"x": "int", "y": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host}})
>>> q = parse_query("SELECT B.y, COUNT(*) FROM A, B WHERE A.x = B.x AND A.y > 2 "
...                 "GROUP BY B.y WINDOW [1]", cat)
>>> plan = build_plan(q, ("B", "A"), {"A": "σπ"})
>>> plan.id, plan.operators()
('B⋈A[σπ]', ('src:B', 'src:A', 'sel:A', 'proj:A', 'join:1', 'agg'))
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING

import networkx as nx

from cqopt.optimizer.classify import OutputColumn, output_column_ref
from cqopt.optimizer.join_orders import counted_statistics, equivalence_classes, step_predicates
from cqopt.optimizer.plan import SELECT, ColumnRef, Plan, column_text
from cqopt.optimizer.plan_nodes import (
    AggregateNode,
    JoinNode,
    PlanNode,
    ProjectionNode,
    SelectionNode,
    SourceNode,
)
from cqopt.optimizer.pushdown import projection_columns, stream_orders

if TYPE_CHECKING:
    from cqopt.optimizer.logical import ContinuousQuery


def build_plan(query: ContinuousQuery, join_order: Sequence[str],
               orders: Mapping[str, str] | None = None, *, complete: bool = True) -> Plan:
    """The left-deep plan joining ``join_order`` with each stream's σ/π ``orders``.

    A stream missing from ``orders`` takes its first candidate order. With
    ``complete=False`` the plan stops at the last join (a partial plan for the
    local search): no aggregate and no final projection.
    """
    return PlanBuilder(query).build(join_order, orders, complete=complete)


class PlanBuilder:
    """Builds the plans of one query, computing what they share only once."""

    def __init__(self, query: ContinuousQuery):
        self.query = query
        self.classes = equivalence_classes(query)
        self.orders = {s: stream_orders(query, s) for s in query.stream_names}
        self._chains: dict[tuple[str, str], tuple[tuple[str, PlanNode], ...]] = {}
        self._steps: dict[tuple[frozenset[str], str], tuple[tuple, tuple[str, ...]]] = {}
        self._outputs = tuple(output_column_ref(c) for c in query.projection)

    def build(self, join_order: Sequence[str], orders: Mapping[str, str] | None = None, *,
              complete: bool = True) -> Plan:
        """See :func:`build_plan`."""
        graph = nx.DiGraph()
        orders = orders or {}
        tops = []
        for s in join_order:
            chain = self.chain(s, orders.get(s) or self.orders[s][0])
            graph.add_nodes_from((key, {"op": op}) for key, op in chain)
            graph.add_edges_from((op.inputs[0], key) for key, op in chain[1:])
            tops.append(chain[-1][0])
        top = tops[0]
        for i in range(1, len(join_order)):
            top = self._join(graph, f"join:{i}", top, tops[i], join_order[i])
        if complete:
            if self.query.is_aggregate:
                top = self._aggregate(graph, top)
            top = self._output_projection(graph, top)
        return Plan(graph, top)

    def chain(self, stream: str, order: str) -> tuple[tuple[str, PlanNode], ...]:
        """The (key, operator) of ``stream``'s source and σ/π operators, bottom-up."""
        if (stream, order) not in self._chains:
            self._chains[stream, order] = tuple(self._make_chain(stream, order))
        return self._chains[stream, order]

    def step(self, joined: Collection[str], new: str) -> tuple[tuple, tuple[str, ...]]:
        """The predicates joining ``new`` to ``joined`` applies, and its statistics."""
        key = (frozenset(joined), new)
        if key not in self._steps:
            predicates = step_predicates(self.query, joined, new)
            self._steps[key] = predicates, counted_statistics(self.query, predicates,
                                                             self.classes)
        return self._steps[key]

    def _make_chain(self, stream: str, order: str) -> list[tuple[str, PlanNode]]:
        ref = self.query.stream(stream)
        widths = {c.name: c.width for c in ref.columns}
        nodes: list[tuple[str, PlanNode]] = [(f"src:{stream}", SourceNode(
            streams=(stream,), stream=stream, window=ref.window, out_width=ref.width,
            emits=tuple((stream, c.name) for c in ref.columns)))]
        for i, op in enumerate(order):
            below = nodes[-1][1]
            inputs, streams, in_widths = (nodes[-1][0],), (stream,), (below.out_width,)
            if op == SELECT:
                selection = self.query.selections[stream]
                nodes.append((f"sel:{stream}", SelectionNode(
                    inputs=inputs, streams=streams, in_widths=in_widths,
                    stream=stream, rate_class=selection.rate_class,
                    selectivity=(selection.statistic,), predicate=selection,
                    out_width=below.out_width, emits=below.emits)))
            else:
                kept = projection_columns(self.query, stream,
                                          below_selection=SELECT in order[i + 1:])
                columns = tuple((stream, c) for c in kept)
                nodes.append((f"proj:{stream}", ProjectionNode(
                    inputs=inputs, streams=streams, in_widths=in_widths,
                    stream=stream, rate_class="projection", columns=columns, emits=columns,
                    out_width=sum(widths[c] for c in kept))))
        return nodes

    def _join(self, graph: nx.DiGraph, key: str, left: str, right: str, new: str) -> str:
        a, b = graph.nodes[left]["op"], graph.nodes[right]["op"]
        predicates, statistics = self.step(a.streams, new)
        return _add(graph, key, JoinNode(
            inputs=(left, right), streams=(*a.streams, new),
            in_widths=(a.out_width, b.out_width), rate_class="equi-join",
            predicate=predicates, selectivity=statistics, cartesian=not predicates,
            out_width=a.out_width + b.out_width, emits=a.emits + b.emits))

    def _aggregate(self, graph: nx.DiGraph, top: str) -> str:
        q, below = self.query, graph.nodes[top]["op"]
        widths = _column_widths(q)
        return _add(graph, "agg", AggregateNode(
            inputs=(top,), streams=below.streams,
            in_widths=(below.out_width,), rate_class="aggregate",
            aggregates=q.aggregates, group_by=q.group_by, having=q.having,
            emits=tuple(q.group_by) + tuple((None, str(a)) for a in q.aggregates),
            out_width=sum(widths[c] for c in q.group_by) + sum(a.width for a in q.aggregates)))

    def _output_projection(self, graph: nx.DiGraph, top: str) -> str:
        """Project to the output columns unless ``top`` already emits exactly them."""
        below = graph.nodes[top]["op"]
        if Counter(self._outputs) == Counter(below.emits):
            return top
        return _add(graph, "proj:out", ProjectionNode(
            inputs=(top,), streams=below.streams, stream=None,
            in_widths=(below.out_width,), rate_class="projection",
            columns=self._outputs, emits=self._outputs, out_width=self.query.output_width,
            names=tuple(_output_text(c) for c in self.query.projection)))


def _add(graph: nx.DiGraph, key: str, node: PlanNode) -> str:
    graph.add_node(key, op=node)
    graph.add_edges_from((k, key) for k in node.inputs)
    return key


def _output_text(column: OutputColumn) -> str:
    ref = output_column_ref(column)
    text = column_text(ref)
    default = ref[1]  # an aggregate's default name is its text, a column's its name
    return text if column.name in (default, text) else f"{text} AS {column.name}"


def _column_widths(query: ContinuousQuery) -> dict[ColumnRef, int]:
    return {(s.name, c.name): c.width for s in query.streams for c in s.columns}
