"""Build one left-deep plan of a query from its :class:`PlanShape`.

A plan is each stream's source with its own selection and projection above
it (in the stream's σ/π order, see :mod:`cqopt.optimizer.plans.stream_orders`), the
streams joined left-deep in the given order (each join applying
:func:`~cqopt.optimizer.plans.join_steps.step_predicates`, its selectivity the
:func:`~cqopt.optimizer.plans.join_steps.counted_statistics`), then, heuristic 4
of the OM paper, the aggregate last, with the query's HAVING. A final
projection ``proj:out`` is added when what the last operator emits is not
already, as a multiset, the output columns (the order of columns is free).
Every node is one of :mod:`cqopt.optimizer.plans.nodes`' operators.

The shape also says what the rules of :mod:`cqopt.optimizer.rules.enumerate` have
decided so far, so that a plan can be built before they have all run: a
stream whose order is ``""`` has its selection applied above the joins (key
``sel:S``, ``stream`` None: not pushed down), ``grouped=False`` applies a
stream's selection as one operator per conjunct (keys ``sel:S.1``,
``sel:S.2``, ...), and ``complete=False`` stops below the aggregate and the
final projection. Each plan keeps its shape (:func:`shape_of`), which is how
a rule rebuilds it with one decision changed.

:class:`PlanBuilder` builds many plans of one query and computes what they
share (per-stream operator chains, join steps) once.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
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
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING

import networkx as nx

from cqopt.optimizer.plans.join_steps import (
    counted_statistics,
    equivalence_classes,
    step_predicates,
)
from cqopt.optimizer.plans.nodes import (
    AggregateNode,
    JoinNode,
    PlanNode,
    ProjectionNode,
    SelectionNode,
    SourceNode,
)
from cqopt.optimizer.plans.plan import SELECT, ColumnRef, Plan, column_text
from cqopt.optimizer.plans.stream_orders import projection_columns, stream_orders
from cqopt.optimizer.plans.strategies import AUTO
from cqopt.optimizer.query.classify import OutputColumn, output_column_ref
from cqopt.optimizer.query.selections import Selection, split_selection

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery


@dataclass(frozen=True)
class PlanShape:
    """What a left-deep plan of a query is built from: the decisions of the rules.

    ``orders`` maps a stream to its σ/π order bottom-up (``"σπ"``, ``"π"``,
    ...; ``""`` for nothing at the stream, its selection then applied above
    the joins); a stream missing from it takes its first candidate order.
    ``strategies`` holds each join step's strategy in join order (``join:1``
    first; see :mod:`~cqopt.optimizer.plans.strategies`); a step past its end
    is the engine's choice.
    """

    join_order: tuple[str, ...]
    orders: Mapping[str, str] = field(default_factory=dict)
    grouped: bool = True  # one selection operator per stream, else one per conjunct
    complete: bool = True  # the aggregate and the final projection on top
    strategies: tuple[str, ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "join_order", tuple(self.join_order))
        object.__setattr__(self, "orders", MappingProxyType(dict(self.orders)))
        object.__setattr__(self, "strategies", tuple(self.strategies))

    def strategy(self, step: int) -> str:
        """The strategy of join step ``step`` (1 for ``join:1``)."""
        return self.strategies[step - 1] if step <= len(self.strategies) else AUTO

    def with_(self, **changes) -> PlanShape:
        """This shape with some decisions changed (:func:`dataclasses.replace`)."""
        return replace(self, **changes)


def build_plan(query: ContinuousQuery, join_order: Sequence[str],
               orders: Mapping[str, str] | None = None, *, complete: bool = True) -> Plan:
    """The left-deep plan joining ``join_order`` with each stream's σ/π ``orders``.

    A stream missing from ``orders`` takes its first candidate order. With
    ``complete=False`` the plan stops at the last join (a partial plan for the
    local search): no aggregate and no final projection.
    """
    return PlanBuilder(query).build(join_order, orders, complete=complete)


def shape_of(plan: Plan) -> PlanShape:
    """The shape ``plan`` was built from.

    Raises
    ------
    ValueError
        The plan was not made by a :class:`PlanBuilder` (a decoded plan, say).
    """
    shape = plan.graph.graph.get("shape")
    if shape is None:
        raise ValueError(f"plan {plan.id} carries no shape: only a PlanBuilder's plans do")
    return shape


class PlanBuilder:
    """Builds the plans of one query, computing what they share only once."""

    def __init__(self, query: ContinuousQuery):
        self.query = query
        self.classes = equivalence_classes(query)
        self.orders = {s: stream_orders(query, s) for s in query.stream_names}
        self._chains: dict[tuple[str, str, bool], tuple[tuple[str, PlanNode], ...]] = {}
        self._steps: dict[tuple[frozenset[str], str], tuple[tuple, tuple[str, ...]]] = {}
        self._parts: dict[str, tuple[Selection, ...]] = {}
        self._outputs = tuple(output_column_ref(c) for c in query.projection)

    def build(self, join_order: Sequence[str], orders: Mapping[str, str] | None = None, *,
              complete: bool = True) -> Plan:
        """See :func:`build_plan`."""
        return self.build_shape(PlanShape(tuple(join_order), orders or {}, complete=complete))

    def build_shape(self, shape: PlanShape) -> Plan:
        """The plan of ``shape`` (see the module docstring)."""
        graph = nx.DiGraph(shape=shape)
        tops, unpushed = [], []
        for s in shape.join_order:
            order = shape.orders.get(s)
            order = self.orders[s][0] if order is None else order
            chain = self.chain(s, order, shape.grouped)
            graph.add_nodes_from((key, {"op": op}) for key, op in chain)
            graph.add_edges_from((op.inputs[0], key) for key, op in chain[1:])
            tops.append(chain[-1][0])
            if SELECT not in order and s in self.query.selections:
                unpushed.append(s)
        top = tops[0]
        for i in range(1, len(shape.join_order)):
            top = self._join(graph, f"join:{i}", top, tops[i], shape.join_order[i],
                             shape.strategy(i))
        for s in unpushed:
            for key, selection, statistics in self.selections(s, shape.grouped):
                top = _add(graph, key, self._selection(graph.nodes[top]["op"], top, selection,
                                                       statistics, stream=None))
        if shape.complete:
            if self.query.is_aggregate:
                top = self._aggregate(graph, top)
            top = self._output_projection(graph, top)
        return Plan(graph, top)

    def chain(self, stream: str, order: str, grouped: bool = True
              ) -> tuple[tuple[str, PlanNode], ...]:
        """The (key, operator) of ``stream``'s source and σ/π operators, bottom-up."""
        if (stream, order, grouped) not in self._chains:
            self._chains[stream, order, grouped] = tuple(self._make_chain(stream, order,
                                                                          grouped))
        return self._chains[stream, order, grouped]

    def selections(self, stream: str, grouped: bool = True
                   ) -> list[tuple[str, Selection, tuple[str, ...]]]:
        """The (key, selection, statistics) of the operators applying ``stream``'s selection.

        Grouped, one operator with the stream's statistic. Ungrouped, one per
        conjunct: the statistic is measured for the selection as a whole, so
        the last conjunct carries it and the chain passes what one grouped
        operator passes.
        """
        selection = self.query.selections[stream]
        if grouped:
            return [(f"sel:{stream}", selection, (selection.statistic,))]
        if stream not in self._parts:
            self._parts[stream] = split_selection(selection)
        parts = self._parts[stream]
        return [(f"sel:{stream}.{i}", part,
                 (selection.statistic,) if i == len(parts) else ())
                for i, part in enumerate(parts, 1)]

    def step(self, joined: Collection[str], new: str) -> tuple[tuple, tuple[str, ...]]:
        """The predicates joining ``new`` to ``joined`` applies, and its statistics."""
        key = (frozenset(joined), new)
        if key not in self._steps:
            predicates = step_predicates(self.query, joined, new)
            self._steps[key] = predicates, counted_statistics(self.query, predicates,
                                                             self.classes)
        return self._steps[key]

    def _make_chain(self, stream: str, order: str, grouped: bool
                    ) -> list[tuple[str, PlanNode]]:
        ref = self.query.stream(stream)
        widths = {c.name: c.width for c in ref.columns}
        nodes: list[tuple[str, PlanNode]] = [(f"src:{stream}", SourceNode(
            streams=(stream,), stream=stream, window=ref.window, out_width=ref.width,
            emits=tuple((stream, c.name) for c in ref.columns)))]
        for i, op in enumerate(order):
            below = nodes[-1][1]
            inputs, streams, in_widths = (nodes[-1][0],), (stream,), (below.out_width,)
            if op == SELECT:
                for key, selection, statistics in self.selections(stream, grouped):
                    nodes.append((key, self._selection(nodes[-1][1], nodes[-1][0], selection,
                                                       statistics, stream=stream)))
            else:
                kept = projection_columns(self.query, stream,
                                          below_selection=SELECT in order[i + 1:])
                columns = tuple((stream, c) for c in kept)
                nodes.append((f"proj:{stream}", ProjectionNode(
                    inputs=inputs, streams=streams, in_widths=in_widths,
                    stream=stream, rate_class="projection", columns=columns, emits=columns,
                    out_width=sum(widths[c] for c in kept))))
        return nodes

    @staticmethod
    def _selection(below: PlanNode, below_key: str, selection: Selection,
                   statistics: tuple[str, ...], stream: str | None) -> SelectionNode:
        """A selection node over ``below``; ``stream`` None when it sits above the joins."""
        return SelectionNode(inputs=(below_key,), streams=below.streams,
                             in_widths=(below.out_width,), stream=stream,
                             rate_class=selection.rate_class, selectivity=statistics,
                             predicate=selection, out_width=below.out_width, emits=below.emits)

    def _join(self, graph: nx.DiGraph, key: str, left: str, right: str, new: str,
              strategy: str = AUTO) -> str:
        a, b = graph.nodes[left]["op"], graph.nodes[right]["op"]
        predicates, statistics = self.step(a.streams, new)
        return _add(graph, key, JoinNode(
            inputs=(left, right), streams=(*a.streams, new),
            in_widths=(a.out_width, b.out_width), rate_class="equi-join",
            predicate=predicates, selectivity=statistics, cartesian=not predicates,
            out_width=a.out_width + b.out_width, emits=a.emits + b.emits, strategy=strategy))

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
