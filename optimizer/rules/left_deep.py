"""Heuristic 3 of the OM paper (section 4.2): left-deep join orders.

The first pair is unordered (the stream earlier in FROM goes left), then one
stream at a time. An order whose step joins a stream sharing no predicate
with the streams joined so far (a Cartesian product) is left out, unless the
join graph leaves no choice: then the orders with the fewest Cartesian steps
are kept. Connectivity counts the transitive closure of the equi-joins
(``query.joins``), and a theta predicate links a stream once all its other
streams are joined.

**Redundant equi-join predicates.** With the closure, joining C to {A, B}
can apply ``A.x = C.z`` and ``B.y = C.z``, which lie in one equivalence class:
A.x = B.y already holds after A ⋈ B, so either predicate implies the other.
The join applies them all (a harmless filter) but its selectivity
(:func:`counted_statistics`) counts one per equivalence class, a written
predicate before an implied one, then the smallest statistic name, so the
selectivity is not squared. A statistic name is listed once per join even
when several classes or a theta predicate of the same pair of streams yield
it: ``jsel.A.C`` is the selectivity of A and C's join as a whole, the way
``query.statistics`` lists it once.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> host = {"rate": [50, 500], "columns": {"src_host": "int", "dest_host": "int"}}
>>> cat = Catalog.from_dict({"streams": {"TCP": host, "UDP": host, "SF": host}})
>>> q = parse_query("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
...                 "AND UDP.dest_host = SF.dest_host WINDOW [1]", cat)
>>> join_orders(q)
[('TCP', 'UDP', 'SF'), ('TCP', 'SF', 'UDP'), ('UDP', 'SF', 'TCP')]
>>> counted_statistics(q, step_predicates(q, ["TCP", "UDP"], "SF"))
('jsel.SF.UDP',)
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

import networkx as nx

from cqopt.optimizer.query.join_closure import ColumnRef, JoinPredicate, ThetaPredicate

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery


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
    ``classes`` is :func:`equivalence_classes` of ``query``, if already known.
    """
    classes = classes if classes is not None else equivalence_classes(query)
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


def equivalence_classes(query: ContinuousQuery) -> dict[ColumnRef, ColumnRef]:
    """Each equi-joined column -> the smallest column of its class."""
    graph = nx.Graph()
    graph.add_edges_from(p.columns for p in query.joins)
    return {col: min(component) for component in nx.connected_components(graph)
            for col in component}


def is_cartesian(query: ContinuousQuery, joined: Collection[str], new: str) -> int:
    """1 if joining ``new`` to ``joined`` applies no predicate, else 0."""
    return 0 if step_predicates(query, joined, new) else 1


def cartesian_steps(query: ContinuousQuery, order: Sequence[str]) -> int:
    """How many steps of the left-deep ``order`` join without any predicate."""
    return sum(is_cartesian(query, order[:i], order[i]) for i in range(1, len(order)))


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
        return min(is_cartesian(query, joined, s) + fewest(joined | {s})
                   for s in names if s not in joined)

    orders: list[tuple[str, ...]] = []

    def extend(order: tuple[str, ...], joined: frozenset[str], budget: int) -> None:
        if joined == streams:
            orders.append(order)
            return
        for s in names:
            if s not in joined:
                step = is_cartesian(query, joined, s)
                if step + fewest(joined | {s}) == budget:
                    extend(order + (s,), joined | {s}, budget - step)

    best = min(fewest(frozenset([s])) for s in names)
    for a, b in itertools.combinations(names, 2):
        step = is_cartesian(query, frozenset([a]), b)
        if step + fewest(frozenset([a, b])) == best:
            extend((a, b), frozenset([a, b]), best - step)
    return orders
