"""Join predicates and the transitive closure of equi-joins.

``A.x = B.y AND B.y = C.z`` implies ``A.x = C.z``: columns equated by
equi-join predicates form equivalence classes, and every pair of columns of
different streams in one class is a join predicate (marked ``implied`` when
the query did not write it). Two columns of one stream in a class imply a
selection ``S.a = S.b`` on that stream. A multi-stream predicate that is not
an equality of two columns is a theta predicate, applied once all its streams
are joined.

>>> import sqlglot
>>> preds = [sqlglot.parse_one(p) for p in ("A.x = B.y", "B.y = C.z")]
>>> joins, thetas, implied = close_joins(preds)
>>> [(str(j), j.implied) for j in joins]
[('A.x = B.y', False), ('A.x = C.z', True), ('B.y = C.z', False)]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import networkx as nx
from sqlglot import exp

from cqopt.optimizer.query.statistics import jsel_name

ColumnRef = tuple[str, str]


@dataclass(frozen=True)
class JoinPredicate:
    """An equi-join ``left = right`` between columns of two streams (left < right)."""

    left: ColumnRef
    right: ColumnRef
    implied: bool = False

    @property
    def streams(self) -> tuple[str, str]:
        return self.left[0], self.right[0]

    @property
    def columns(self) -> tuple[ColumnRef, ...]:
        return self.left, self.right

    @property
    def statistic(self) -> str:
        return jsel_name(*self.streams)

    @property
    def expression(self) -> exp.Expression:
        return exp.EQ(this=exp.column(self.left[1], self.left[0]),
                      expression=exp.column(self.right[1], self.right[0]))

    def __str__(self) -> str:
        return f"{'.'.join(self.left)} = {'.'.join(self.right)}"

    def to_dict(self) -> dict[str, Any]:
        return {"predicate": str(self), "implied": self.implied, "statistic": self.statistic}


@dataclass(frozen=True)
class ThetaPredicate:
    """Any other predicate over two or more streams."""

    streams: tuple[str, ...]  # sorted
    expression: exp.Expression

    @property
    def columns(self) -> tuple[ColumnRef, ...]:
        return tuple(dict.fromkeys((c.table, c.name)
                                   for c in self.expression.find_all(exp.Column)))

    @property
    def statistic(self) -> str:
        return jsel_name(self.streams)

    def __str__(self) -> str:
        return self.expression.sql()

    def to_dict(self) -> dict[str, Any]:
        return {"predicate": str(self), "streams": list(self.streams),
                "statistic": self.statistic}


def close_joins(conjuncts: list[exp.Expression]) -> tuple[
        list[JoinPredicate], list[ThetaPredicate], dict[str, list[exp.Expression]]]:
    """Split qualified multi-stream conjuncts into equi-joins (closed) and thetas.

    Returns the join predicates, the theta predicates, and the selections
    the closure implies, per stream.
    """
    equated = nx.Graph()
    thetas: list[ThetaPredicate] = []
    for conjunct in conjuncts:
        if (isinstance(conjunct, exp.EQ) and isinstance(conjunct.left, exp.Column)
                and isinstance(conjunct.right, exp.Column)
                and conjunct.left.table != conjunct.right.table):
            equated.add_edge((conjunct.left.table, conjunct.left.name),
                             (conjunct.right.table, conjunct.right.name))
        else:
            streams = tuple(sorted({c.table for c in conjunct.find_all(exp.Column)}))
            theta = ThetaPredicate(streams, conjunct)
            if theta not in thetas:
                thetas.append(theta)
    joins: list[JoinPredicate] = []
    implied_selections: dict[str, list[exp.Expression]] = {}
    for component in nx.connected_components(equated):
        members = sorted(component)
        for i, a in enumerate(members):
            for b in members[i + 1:]:
                if a[0] != b[0]:
                    joins.append(JoinPredicate(a, b, implied=not equated.has_edge(a, b)))
                elif a != b:
                    implied_selections.setdefault(a[0], []).append(
                        exp.EQ(this=exp.column(a[1], a[0]), expression=exp.column(b[1], b[0])))
    joins.sort(key=lambda j: (j.left, j.right))
    return joins, thetas, implied_selections
