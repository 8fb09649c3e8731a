"""A local search for good left-deep join orders, when there are too many to list.

Past ``max_exhaustive`` streams or ``max_plans`` plans,
:func:`~cqopt.optimizer.rules.enumerate.enumerate_plans` asks
:func:`local_search_orders` for a few orders instead of listing all of
:func:`~cqopt.optimizer.rules.left_deep.join_orders`. The greedy start begins with
the connected pair whose partial plan costs least and then adds, one at a
time, the connected stream that minimises ``cost(partial_plan)``; the
improvement phase swaps two positions of the order, taking the best swap,
while the cost drops, never accepting more Cartesian steps than the greedy
order has. Partial and full plans are costed with each stream's first σ/π
order (σ→π). Without a cost model, :func:`intermediate_size_cost` stands in:
the sum of the joins' estimated result sizes per window.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> cat = Catalog.from_dict({"streams": {
...     s: {"rate": [r, 2 * r], "columns": {"k": "int"}} for s, r in
...     (("A", 1000), ("B", 10), ("C", 1))}})
>>> q = parse_query("SELECT * FROM A, B, C WHERE A.k = B.k AND B.k = C.k WINDOW [1]", cat)
>>> local_search_orders(q, intermediate_size_cost(cat), keep=2)
[('B', 'C', 'A'), ('A', 'C', 'B')]
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from cqopt.catalog import Catalog
from cqopt.optimizer.plans.builder import PlanBuilder, PlanShape
from cqopt.optimizer.plans.nodes import JoinNode, SourceNode
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.statistics import DEFAULT_SELECTIVITY, default_value, rate_name
from cqopt.optimizer.rules.left_deep import cartesian_steps, is_cartesian

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery

CostFunction = Callable[[Plan], float]


def local_search_orders(query: ContinuousQuery, cost: CostFunction, keep: int = 3, *,
                        builder: PlanBuilder | None = None,
                        like: PlanShape | None = None) -> list[tuple[str, ...]]:
    """The ``keep`` cheapest left-deep orders a greedy start and pairwise swaps find.

    Costs are ``cost`` of plans built like ``like`` (the σ/π orders and
    grouping of the rules that ran before; by default each stream's first
    σ/π order), in the order tried. Ties are broken by the order's positions
    in FROM, so the result is deterministic whenever ``cost`` is.
    """
    names = query.stream_names
    if len(names) < 2:
        return [names]
    position = {s: i for i, s in enumerate(names)}
    builder = builder or PlanBuilder(query)
    like = like or PlanShape(names)

    def score(order: Sequence[str], complete: bool) -> float:
        return float(cost(builder.build_shape(like.with_(join_order=order, complete=complete))))

    def tie(order: Sequence[str]) -> tuple[int, ...]:
        return tuple(position[s] for s in order)

    # Greedy start: a step with a predicate whenever one exists.
    pairs = [(a, b) for a, b in itertools.combinations(names, 2)]
    linked = [p for p in pairs if not is_cartesian(query, p[:1], p[1])] or pairs
    order = min(linked, key=lambda p: (score(p, False), tie(p)))
    while len(order) < len(names):
        rest = [s for s in names if s not in order]
        candidates = [s for s in rest if not is_cartesian(query, order, s)] or rest
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

    def window_tuples(node: SourceNode) -> float:
        rate = default_value(rate_name(node.stream), catalog) if catalog is not None else 1.0
        window = node.window
        if window.kind == "rows":
            return float(window.rows)
        return rate * (window.seconds if window.kind == "range" else 1.0)

    def cost(plan: Plan) -> float:
        sizes: dict[str, float] = {}
        total = 0.0
        for key in plan.operators():
            node = plan.node(key)
            inputs = [sizes[k] for k in node.inputs]
            if isinstance(node, SourceNode):
                sizes[key] = window_tuples(node)
            elif isinstance(node, JoinNode):
                sizes[key] = inputs[0] * inputs[1] * \
                    DEFAULT_SELECTIVITY ** len(node.selectivity)
                total += sizes[key]
            else:  # a unary operator passes its selectivity's share
                sizes[key] = inputs[0] * DEFAULT_SELECTIVITY ** len(node.selectivity)
        return total

    return cost
