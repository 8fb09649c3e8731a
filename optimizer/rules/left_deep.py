"""Heuristic 3 of the OM paper (section 4.2): left-deep join orders.

The first pair is unordered (the stream earlier in FROM goes left), then one
stream at a time. An order whose step joins a stream sharing no predicate
with the streams joined so far (a Cartesian product) is left out, unless the
join graph leaves no choice: then the orders with the fewest Cartesian steps
are kept. Connectivity counts the transitive closure of the equi-joins
(``query.joins``), and a theta predicate links a stream once all its other
streams are joined.

The predicates and the selectivity of each join step are
:func:`~cqopt.optimizer.plans.join_steps.step_predicates` and
:func:`~cqopt.optimizer.plans.join_steps.counted_statistics`.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> host = {"rate": [50, 500], "columns": {"src_host": "int", "dest_host": "int"}}
>>> cat = Catalog.from_dict({"streams": {"TCP": host, "UDP": host, "SF": host}})
>>> q = parse_query("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
...                 "AND UDP.dest_host = SF.dest_host WINDOW [1]", cat)
>>> join_orders(q)
[('TCP', 'UDP', 'SF'), ('TCP', 'SF', 'UDP'), ('UDP', 'SF', 'TCP')]
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from functools import lru_cache
from typing import TYPE_CHECKING

from cqopt.optimizer.plans.join_steps import step_predicates

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery


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
