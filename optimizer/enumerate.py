"""Candidate plans of a continuous query: the OM paper's heuristics (section 4.2).

1. **Group selections.** Already done by the logical query: one
   :class:`~cqopt.optimizer.group_selections.Selection` per stream.
2. **Push selections and projections down**, in both orders. A stream gets a
   projection only when the columns it needs above (its output, aggregate,
   GROUP BY and join columns: ``query.required_columns``) are a strict subset
   of its columns. With a selection too, both orders are candidates: σ→π
   (the projection keeps the columns needed above) and π→σ (it also keeps the
   columns the selection reads), the latter only when that is still a strict
   subset. The query's own projection list applies at the top: a final
   projection ``proj:out`` is added when what the last operator emits is not
   already, as a multiset, the output columns (the order of columns is free).
3. **Left-deep join orders.** The first pair is unordered (the stream earlier
   in FROM goes left), then one stream at a time. An order whose step joins a
   stream sharing no predicate with the streams joined so far (a Cartesian
   product) is left out, unless the join graph leaves no choice: then the
   orders with the fewest Cartesian steps are kept and their plans are marked
   ``cartesian``. Connectivity counts the transitive closure of the equi-joins
   (``query.joins``), and a theta predicate links a stream once all its other
   streams are joined. The candidates are every join order times every
   combination of per-stream σ/π orders, join order outermost.
4. **Aggregate last**, above the joins, with the query's HAVING.

**Redundant equi-join predicates.** With the closure, joining C to {A, B}
can apply ``A.x = C.z`` and ``B.y = C.z``, which lie in one equivalence class:
A.x = B.y already holds after A ⋈ B, so either predicate implies the other.
The join applies them all (a harmless filter) but its ``selectivity`` counts
one per equivalence class, a written predicate before an implied one, then
the smallest statistic name, so the selectivity is not squared. A statistic
name is listed once per join even when several classes or a theta predicate
of the same pair of streams yield it: ``jsel.A.C`` is the selectivity of A
and C's join as a whole, the way ``query.statistics`` lists it once.

**More streams than** ``max_exhaustive`` (default 6), **or more plans than**
``max_plans`` (default 4096): a local search replaces full enumeration of the
join orders. The plan count is join orders × σ/π combinations, so the stream
count alone does not bound it: 6 streams joined on one column (a clique after
the closure) with σ and π each would be 360 × 2^6 = 23,040 plans. The greedy
start begins with the connected pair whose partial plan costs least and then
adds, one at a time, the connected stream that minimises
``cost(partial_plan)``; the improvement phase swaps two positions of the
order, taking the best swap, while the cost drops. Partial and full plans are
costed with each stream's first σ/π order (σ→π). The best ``keep`` orders
found come back (fewer when ``keep`` times the combinations would pass
``max_plans``, never none), each with every σ/π combination: the budget
bounds the join orders, never the per-stream σ/π choices. Without a
``cost`` callable, :func:`intermediate_size_cost` stands in: the sum of the
joins' estimated result sizes per window, from rate midpoints (the catalog's,
else 1 tuple/s), selectivities of 0.5 and the window sizes.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.logical import parse_query
>>> host = {"rate": [50, 500], "columns": {"src_host": "int", "dest_host": "int"}}
>>> cat = Catalog.from_dict({"streams": {"TCP": host, "UDP": host, "SF": host}})
>>> q2 = parse_query("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
...                  "AND UDP.dest_host = SF.dest_host WINDOW [1]", cat)
>>> [p.id for p in enumerate_plans(q2)]
['TCP⋈UDP⋈SF', 'TCP⋈SF⋈UDP', 'UDP⋈SF⋈TCP']
>>> top = enumerate_plans(q2)[0].node("join:2")
>>> [str(p) for p in top["predicate"]], top["selectivity"]
(['SF.dest_host = TCP.src_host', 'SF.dest_host = UDP.dest_host'], ('jsel.SF.UDP',))
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from functools import lru_cache

import networkx as nx

from cqopt.catalog import Catalog
from cqopt.optimizer.join_closure import JoinPredicate, ThetaPredicate
from cqopt.optimizer.logical import ContinuousQuery, OutputColumn, aggregate_text
from cqopt.optimizer.plan import PROJECT, SELECT, ColumnRef, Plan, column_text
from cqopt.optimizer.statistics import DEFAULT_SELECTIVITY, default_value, rate_name

SELECT_PROJECT = SELECT + PROJECT  # σ→π: select, then project
PROJECT_SELECT = PROJECT + SELECT  # π→σ: project, then select
CostFunction = Callable[[Plan], float]


def enumerate_plans(query: ContinuousQuery, *, max_exhaustive: int = 6,
                    max_plans: int = 4096, cost: CostFunction | None = None,
                    catalog: Catalog | None = None, keep: int = 3) -> list[Plan]:
    """Every candidate plan of ``query`` (a local search's best few beyond
    ``max_exhaustive`` streams or ``max_plans`` plans), in a deterministic order.

    ``cost`` scores plans for the local search only; ``catalog`` gives the
    stand-in cost its rates when ``cost`` is None; ``keep`` is how many join
    orders the local search returns (fewer if ``keep`` orders times the σ/π
    combinations would pass ``max_plans``; at least one).
    """
    builder = PlanBuilder(query)
    combos = stream_order_combinations(query)
    orders = join_orders(query) if len(query.streams) <= max_exhaustive else None
    # The plan count is orders × combinations, not the stream count (module docstring)
    if orders is None or len(orders) * len(combos) > max_plans:
        scorer = cost if cost is not None else intermediate_size_cost(catalog)
        kept = max(1, min(keep, max_plans // len(combos)))
        orders = local_search_orders(query, scorer, keep=kept, builder=builder)
    return [builder.build(order, combo) for order in orders for combo in combos]


# -- heuristic 2: σ and π per stream ----------------------------------------
def stream_orders(query: ContinuousQuery, stream: str) -> tuple[str, ...]:
    """The candidate orders of ``stream``'s own operators, bottom-up.

    ``("σπ", "πσ")`` when both orders are worth having, else one of ``("σπ",)``,
    ``("σ",)``, ``("π",)`` or ``("",)`` (the source alone).
    """
    everything = len(query.stream(stream).columns)
    project_above = len(query.required_columns(stream)) < everything
    selection = query.selections.get(stream)
    if selection is None:
        return (PROJECT,) if project_above else ("",)
    if not project_above:
        return (SELECT,)
    if len(_projection_columns(query, stream, below_selection=True)) < everything:
        return SELECT_PROJECT, PROJECT_SELECT
    return (SELECT_PROJECT,)


def stream_order_combinations(query: ContinuousQuery) -> list[dict[str, str]]:
    """Every combination of per-stream orders; the first stream varies slowest."""
    names = query.stream_names
    choices = [stream_orders(query, s) for s in names]
    return [dict(zip(names, combo)) for combo in itertools.product(*choices)]


def _projection_columns(query: ContinuousQuery, stream: str,
                        below_selection: bool) -> tuple[str, ...]:
    """Columns a projection on ``stream`` keeps, in catalog order."""
    needed = set(query.required_columns(stream))
    if below_selection:
        needed |= set(query.selections[stream].columns_used)
    return tuple(c.name for c in query.stream(stream).columns if c.name in needed)


# -- heuristic 3: left-deep join orders --------------------------------------
def step_predicates(query: ContinuousQuery, joined: Collection[str],
                    new: str) -> tuple[JoinPredicate | ThetaPredicate, ...]:
    """The predicates a join of ``new`` to the streams ``joined`` applies."""
    equi = [p for p in query.joins if new in p.streams
            and (p.streams[0] if p.streams[1] == new else p.streams[1]) in joined]
    theta = [t for t in query.thetas
             if new in t.streams and all(s == new or s in joined for s in t.streams)]
    return (*equi, *theta)


def counted_statistics(query: ContinuousQuery,
                       predicates: Sequence[JoinPredicate | ThetaPredicate],
                       classes: Mapping[ColumnRef, ColumnRef] | None = None) -> tuple[str, ...]:
    """The statistics of one join step's selectivity: one per equivalence class.

    See the module docstring: of the equi-joins in one class, the written one
    (then the smallest statistic name) counts; each theta counts; each name once.
    """
    classes = classes if classes is not None else _equivalence_classes(query)
    chosen: dict[ColumnRef, JoinPredicate] = {}
    for p in predicates:
        if isinstance(p, JoinPredicate):
            cls = classes[p.left]
            best = chosen.get(cls)
            if best is None or (p.implied, p.statistic, str(p)) < \
                    (best.implied, best.statistic, str(best)):
                chosen[cls] = p
    names = [p.statistic for p in predicates
             if isinstance(p, ThetaPredicate) or chosen[classes[p.left]] is p]
    return tuple(dict.fromkeys(names))


def _equivalence_classes(query: ContinuousQuery) -> dict[ColumnRef, ColumnRef]:
    """Each equi-joined column -> the smallest column of its class."""
    graph = nx.Graph()
    graph.add_edges_from(p.columns for p in query.joins)
    return {col: min(component) for component in nx.connected_components(graph)
            for col in component}


def cartesian_steps(query: ContinuousQuery, order: Sequence[str]) -> int:
    """How many steps of the left-deep ``order`` join without any predicate."""
    return sum(not step_predicates(query, order[:i], order[i]) for i in range(1, len(order)))


def join_orders(query: ContinuousQuery) -> list[tuple[str, ...]]:
    """Every left-deep order with the fewest Cartesian steps (none when possible).

    The first pair is unordered: the stream earlier in FROM is on the left.
    Orders come depth-first, streams taken in FROM order.
    """
    names = query.stream_names
    if len(names) == 1:
        return [names]
    streams = frozenset(names)

    @lru_cache(maxsize=None)
    def fewest(joined: frozenset[str]) -> int:
        """The fewest Cartesian steps that join the remaining streams to ``joined``."""
        if joined == streams:
            return 0
        return min(_is_cartesian(query, joined, s) + fewest(joined | {s})
                   for s in names if s not in joined)

    orders: list[tuple[str, ...]] = []

    def extend(order: tuple[str, ...], joined: frozenset[str], budget: int) -> None:
        if joined == streams:
            orders.append(order)
            return
        for s in names:
            if s not in joined:
                step = _is_cartesian(query, joined, s)
                if step + fewest(joined | {s}) == budget:
                    extend(order + (s,), joined | {s}, budget - step)

    best = min(fewest(frozenset([s])) for s in names)
    for a, b in itertools.combinations(names, 2):
        step = _is_cartesian(query, frozenset([a]), b)
        if step + fewest(frozenset([a, b])) == best:
            extend((a, b), frozenset([a, b]), best - step)
    return orders


def _is_cartesian(query: ContinuousQuery, joined: Collection[str], new: str) -> int:
    return 0 if step_predicates(query, joined, new) else 1


def local_search_orders(query: ContinuousQuery, cost: CostFunction, keep: int = 3, *,
                        builder: PlanBuilder | None = None) -> list[tuple[str, ...]]:
    """The ``keep`` cheapest left-deep orders a greedy start and pairwise swaps find.

    Costs are ``cost`` of plans built with each stream's first σ/π order.
    Ties are broken by the order's positions in FROM, so the result is
    deterministic whenever ``cost`` is.
    """
    names = query.stream_names
    if len(names) < 2:
        return [names]
    position = {s: i for i, s in enumerate(names)}
    builder = builder or PlanBuilder(query)

    def score(order: Sequence[str], complete: bool) -> float:
        return float(cost(builder.build(order, complete=complete)))

    def tie(order: Sequence[str]) -> tuple[int, ...]:
        return tuple(position[s] for s in order)

    # Greedy start: a step with a predicate whenever one exists.
    pairs = [(a, b) for a, b in itertools.combinations(names, 2)]
    linked = [p for p in pairs if not _is_cartesian(query, p[:1], p[1])] or pairs
    order = min(linked, key=lambda p: (score(p, False), tie(p)))
    while len(order) < len(names):
        rest = [s for s in names if s not in order]
        candidates = [s for s in rest if not _is_cartesian(query, order, s)] or rest
        order = min((order + (s,) for s in candidates),
                    key=lambda o: (score(o, len(o) == len(names)), tie(o)))
    allowed = cartesian_steps(query, order)

    # Improvement: the best swap of two positions, while the cost drops.
    seen: dict[tuple[str, ...], float] = {order: score(order, True)}
    refused: set[tuple[str, ...]] = set()  # orders with more Cartesian steps
    current = order
    while True:
        best_swap = None
        for i, j in itertools.combinations(range(len(current)), 2):
            swapped = list(current)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            candidate = _canonical(swapped, position)
            if candidate in refused:
                continue
            if candidate not in seen:
                if cartesian_steps(query, candidate) > allowed:
                    refused.add(candidate)
                    continue
                seen[candidate] = score(candidate, True)
            if best_swap is None or (seen[candidate], tie(candidate)) < \
                    (seen[best_swap], tie(best_swap)):
                best_swap = candidate
        if best_swap is None or seen[best_swap] >= seen[current]:
            break
        current = best_swap
    ranked = sorted(seen, key=lambda o: (seen[o], tie(o)))
    return ranked[:max(keep, 1)]


def _canonical(order: Sequence[str], position: Mapping[str, int]) -> tuple[str, ...]:
    """The order with its (unordered) first pair in FROM order."""
    first, second, *rest = order
    if position[second] < position[first]:
        first, second = second, first
    return (first, second, *rest)


def intermediate_size_cost(catalog: Catalog | None = None) -> CostFunction:
    """The local search's stand-in cost: the sum of the joins' estimated sizes.

    A stream's window holds ``rate x seconds`` tuples (a ROWS window its row
    count; NOW and UNBOUNDED count as one second), the rate being the middle
    of the catalog's range, or 1 tuple/s without a catalog. Every selection
    and every counted join statistic passes half of its input.
    """

    def window_tuples(node: dict) -> float:
        rate = default_value(rate_name(node["stream"]), catalog) if catalog is not None else 1.0
        window = node["window"]
        if window.kind == "rows":
            return float(window.rows)
        return rate * (window.seconds if window.kind == "range" else 1.0)

    def cost(plan: Plan) -> float:
        sizes: dict[str, float] = {}
        total = 0.0
        for key in plan.operators():
            node = plan.node(key)
            inputs = [sizes[k] for k in node["inputs"]]
            if node["kind"] == "source":
                sizes[key] = window_tuples(node)
            elif node["kind"] == "join":
                sizes[key] = inputs[0] * inputs[1] * \
                    DEFAULT_SELECTIVITY ** len(node["selectivity"])
                total += sizes[key]
            else:
                sizes[key] = inputs[0] * DEFAULT_SELECTIVITY ** len(node["selectivity"])
        return total

    return cost


# -- building one plan --------------------------------------------------------
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
        self.classes = _equivalence_classes(query)
        self.orders = {s: stream_orders(query, s) for s in query.stream_names}
        self._chains: dict[tuple[str, str], tuple[tuple[str, dict], ...]] = {}
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
            graph.add_nodes_from(chain)
            graph.add_edges_from((attrs["inputs"][0], key) for key, attrs in chain[1:])
            tops.append(chain[-1][0])
        top = tops[0]
        for i in range(1, len(join_order)):
            top = self._join(graph, f"join:{i}", top, tops[i], join_order[i])
        if complete:
            if self.query.is_aggregate:
                top = self._aggregate(graph, top)
            top = self._output_projection(graph, top)
        return Plan(graph, top)

    def chain(self, stream: str, order: str) -> tuple[tuple[str, dict], ...]:
        """The (key, attributes) of ``stream``'s source and σ/π operators, bottom-up."""
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

    def _make_chain(self, stream: str, order: str) -> list[tuple[str, dict]]:
        ref = self.query.stream(stream)
        widths = {c.name: c.width for c in ref.columns}
        nodes = [(f"src:{stream}", _node("source", streams=(stream,), stream=stream,
                                         window=ref.window, out_width=ref.width,
                                         emits=tuple((stream, c.name) for c in ref.columns)))]
        for i, op in enumerate(order):
            below = nodes[-1][1]
            inputs, streams, in_widths = (nodes[-1][0],), (stream,), (below["out_width"],)
            if op == SELECT:
                selection = self.query.selections[stream]
                nodes.append((f"sel:{stream}", _node(
                    "selection", inputs=inputs, streams=streams, in_widths=in_widths,
                    stream=stream, rate_class=selection.rate_class,
                    selectivity=(selection.statistic,), predicate=selection,
                    out_width=below["out_width"], emits=below["emits"])))
            else:
                kept = _projection_columns(self.query, stream,
                                           below_selection=SELECT in order[i + 1:])
                columns = tuple((stream, c) for c in kept)
                nodes.append((f"proj:{stream}", _node(
                    "projection", inputs=inputs, streams=streams, in_widths=in_widths,
                    stream=stream, rate_class="projection", columns=columns, emits=columns,
                    out_width=sum(widths[c] for c in kept))))
        return nodes

    def _join(self, graph: nx.DiGraph, key: str, left: str, right: str, new: str) -> str:
        a, b = graph.nodes[left], graph.nodes[right]
        predicates, statistics = self.step(a["streams"], new)
        return _add(graph, key, _node(
            "join", inputs=(left, right), streams=(*a["streams"], new),
            in_widths=(a["out_width"], b["out_width"]), rate_class="equi-join",
            predicate=predicates, selectivity=statistics, cartesian=not predicates,
            out_width=a["out_width"] + b["out_width"], emits=a["emits"] + b["emits"]))

    def _aggregate(self, graph: nx.DiGraph, top: str) -> str:
        q, below = self.query, graph.nodes[top]
        widths = _column_widths(q)
        return _add(graph, "agg", _node(
            "aggregate", inputs=(top,), streams=below["streams"],
            in_widths=(below["out_width"],), rate_class="aggregate",
            aggregates=q.aggregates, group_by=q.group_by, having=q.having,
            emits=tuple(q.group_by) + tuple((None, str(a)) for a in q.aggregates),
            out_width=sum(widths[c] for c in q.group_by) + sum(a.width for a in q.aggregates)))

    def _output_projection(self, graph: nx.DiGraph, top: str) -> str:
        """Project to the output columns unless ``top`` already emits exactly them."""
        below = graph.nodes[top]
        if Counter(self._outputs) == Counter(below["emits"]):
            return top
        return _add(graph, "proj:out", _node(
            "projection", inputs=(top,), streams=below["streams"],
            in_widths=(below["out_width"],), rate_class="projection",
            columns=self._outputs, emits=self._outputs, out_width=self.query.output_width,
            names=tuple(_output_text(c) for c in self.query.projection)))


def _node(kind: str, **attributes) -> dict:
    """A node's attributes: the contract's defaults, overridden by ``attributes``."""
    node = {"kind": kind, "streams": (), "inputs": (), "rate_class": None, "selectivity": (),
            "in_widths": (), "out_width": 0, "window": None, "stream": None,
            "predicate": None, "columns": None}
    node.update(attributes)
    return node


def _add(graph: nx.DiGraph, key: str, node: dict) -> str:
    graph.add_node(key, **node)
    graph.add_edges_from((k, key) for k in node["inputs"])
    return key


def output_column_ref(column: OutputColumn) -> ColumnRef:
    """The pair an output column is in plans: ``(stream, column)`` or ``(None, "SUM(S.a)")``."""
    if column.aggregate:
        return None, aggregate_text(column.aggregate, column.source)
    return column.source


def _output_text(column: OutputColumn) -> str:
    ref = output_column_ref(column)
    text = column_text(ref)
    default = ref[1]  # an aggregate's default name is its text, a column's its name
    return text if column.name in (default, text) else f"{text} AS {column.name}"


def _column_widths(query: ContinuousQuery) -> dict[ColumnRef, int]:
    return {(s.name, c.name): c.width for s in query.streams for c in s.columns}
