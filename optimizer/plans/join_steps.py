"""The predicates and the selectivity statistics of one join step of a left-deep plan.

Joining a stream ``new`` to the streams already joined applies every
equi-join (closed transitively, :mod:`cqopt.optimizer.query.join_closure`)
between ``new`` and them, and every theta predicate whose streams are then
all joined (:func:`step_predicates`); none makes the step a Cartesian product.

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
>>> counted_statistics(q, step_predicates(q, ["TCP", "UDP"], "SF"))
('jsel.SF.UDP',)
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
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
