"""Heuristic 1 of the OM paper: group the selections on each stream into one.

Every conjunct of a query's condition that touches one stream belongs to that
stream's selection. Conjuncts over one column and constants merge into one
:class:`~cqopt.optimizer.query.intervals.IntervalSet` per column (conjunctive ranges
become one interval, ``OR`` on a column a union of intervals, a contradiction
the empty set); conjuncts over several columns of the stream stay as they are
(the residual). The selection is classed ``selection-equality`` when every
column is restricted to a point set and every residual is an equality, else
``selection-range``: the two classes have different processing rates.

>>> import sqlglot
>>> conj = [sqlglot.parse_one(c) for c in ("S.a > 5", "S.a < 10", "S.b = 1 OR S.b = 3")]
>>> sel = group_selections("S", conj)
>>> sel.predicate_sql, sel.rate_class
('S.a > 5 AND S.a < 10 AND S.b IN (1, 3)', 'selection-range')
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from cqopt.optimizer.query.errors import UnsupportedQueryError
from cqopt.optimizer.query.intervals import IntervalSet
from cqopt.optimizer.query.literals import literal_value
from cqopt.optimizer.query.statistics import sel_name

COMPARISONS: dict[type, str] = {
    exp.EQ: "=", exp.NEQ: "<>", exp.LT: "<", exp.LTE: "<=", exp.GT: ">", exp.GTE: ">=",
}
FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


@dataclass(frozen=True)
class Selection:
    """The grouped selection on one stream."""

    stream: str
    columns: dict[str, IntervalSet]  # column -> the values that pass
    residual: tuple[exp.Expression, ...]  # conjuncts over several columns of the stream
    predicate: exp.Expression  # the whole selection as one condition

    @property
    def always_empty(self) -> bool:
        return any(s.is_empty for s in self.columns.values())

    @property
    def always_true(self) -> bool:
        return not self.residual and all(s.is_everything for s in self.columns.values())

    @property
    def rate_class(self) -> str:
        points = all(s.is_points for s in self.columns.values())
        equalities = all(isinstance(r, exp.EQ) for r in self.residual)
        return "selection-equality" if points and equalities else "selection-range"

    @property
    def statistic(self) -> str:
        return sel_name(self.stream)

    @property
    def columns_used(self) -> tuple[str, ...]:
        used = dict.fromkeys(self.columns)
        for r in self.residual:
            used.update(dict.fromkeys(c.name for c in r.find_all(exp.Column)))
        return tuple(used)

    @functools.cached_property
    def predicate_sql(self) -> str:
        # Cached: explain, classification and every plan ask, and an IN list of 100,000
        # values takes a second to print.
        return self.predicate.sql()

    @functools.cached_property
    def conjuncts_sql(self) -> tuple[str, ...]:
        """The text of each conjunct of the predicate (the plan contract counts them)."""
        parts = _leaf_conjuncts(self.predicate)
        return (self.predicate_sql,) if len(parts) == 1 else tuple(p.sql() for p in parts)

    def to_dict(self) -> dict[str, Any]:
        return {"predicate": self.predicate_sql, "class": self.rate_class,
                "always_empty": self.always_empty, "statistic": self.statistic,
                "columns": {c: repr(s) for c, s in self.columns.items()}}


def group_selections(stream: str, conjuncts: list[exp.Expression]) -> Selection:
    """Group the conjuncts (qualified, over ``stream`` only) into one Selection."""
    columns: dict[str, IntervalSet] = {}
    residual: list[exp.Expression] = []
    seen: set[exp.Expression] = set()  # a set: thousands of conjuncts stay linear
    for conjunct in conjuncts:
        found = column_set(conjunct)
        if found is None:
            if conjunct not in seen:
                seen.add(conjunct)
                residual.append(conjunct)
            continue
        column, values = found
        columns[column] = columns[column] & values if column in columns else values
    columns = {c: s for c, s in columns.items() if not s.is_everything}
    parts = [p for c, s in columns.items()
             for p in _conjuncts(interval_condition(exp.column(c, stream), s))]
    # The parts are new nodes: only the residual, still in the query's tree, is copied
    # (a deep copy of an IN list of 100,000 values costs more than building it).
    predicate = exp.and_(*parts, *(r.copy() for r in residual), copy=False) \
        if parts or residual else exp.true()
    return Selection(stream, columns, tuple(residual), predicate)


def split_selection(selection: Selection) -> tuple[Selection, ...]:
    """``selection`` ungrouped: one Selection per conjunct of its predicate.

    What a plan applies when heuristic 1 is switched off (see
    :mod:`cqopt.optimizer.rules.group_selections`).

    >>> import sqlglot
    >>> sel = group_selections("S", [sqlglot.parse_one("S.a > 5 AND S.b = 1")])
    >>> [p.predicate_sql for p in split_selection(sel)]
    ['S.a > 5', 'S.b = 1']
    """
    parts = _leaf_conjuncts(selection.predicate)
    if len(parts) == 1:
        return (selection,)
    # Each part keeps its own text: grouped again, A.a BETWEEN 0 AND 0 would read A.a = 0
    return tuple(dataclasses.replace(group_selections(selection.stream, [part]), predicate=part)
                 for part in parts)




def column_set(node: exp.Expression) -> tuple[str, IntervalSet] | None:
    """The column and value set of a predicate over one column and constants, else None."""
    node = node.unnest()
    if type(node) in COMPARISONS:
        left, right = node.left, node.right
        op = COMPARISONS[type(node)]
        if isinstance(right, exp.Column) and not isinstance(left, exp.Column):
            left, right, op = right, left, FLIPPED[op]
        if isinstance(left, exp.Column) and not isinstance(right, exp.Column):
            return left.name, IntervalSet.compare(op, literal_value(right))
        return None
    if isinstance(node, exp.Between) and isinstance(node.this, exp.Column):
        lo, hi = literal_value(node.args["low"]), literal_value(node.args["high"])
        return node.this.name, IntervalSet.between(lo, hi)
    if isinstance(node, exp.In) and isinstance(node.this, exp.Column):
        # One sort of all the points, not one union per value: n log n, not n^2.
        try:
            values = IntervalSet.points_of(literal_value(item) for item in node.expressions)
        except TypeError:  # 'a' < 1: an IN list mixing numbers and strings
            raise UnsupportedQueryError(f"the IN list on {node.this.name} mixes numbers and "
                                        "strings; use one kind") from None
        return node.this.name, values
    if isinstance(node, exp.Not):
        inner = column_set(node.this)
        return (inner[0], inner[1].complement()) if inner else None
    if isinstance(node, (exp.And, exp.Or)):
        # A chain a = 1 OR a = 2 OR ... is flattened, not recursed into: no depth limit,
        # and an OR of n terms is one sort.
        sets = []
        for part in node.flatten():
            found = column_set(part)
            if found is None or (sets and found[0] != sets[0][0]):
                return None
            sets.append(found)
        if isinstance(node, exp.Or):
            return sets[0][0], _of([iv for _, s in sets for iv in s.intervals])
        combined = sets[0][1]
        for _, s in sets[1:]:
            combined = combined & s
        return sets[0][0], combined
    return None


def _of(intervals: list) -> IntervalSet:
    try:
        return IntervalSet.of(intervals)
    except TypeError:  # 'a' < 1: the values of one column compared with another kind
        raise UnsupportedQueryError("the constants compared with one column mix numbers "
                                    "and strings; use one kind") from None


def interval_condition(column: exp.Column, values: IntervalSet) -> exp.Expression:
    """A condition on ``column`` that holds exactly for ``values``."""
    if values.is_empty:
        return exp.false()
    if values.is_points:
        points = [_literal(v) for v in values.points]
        return exp.EQ(this=column.copy(), expression=points[0]) if len(points) == 1 \
            else exp.In(this=column.copy(), expressions=points)
    excluded = values.complement()
    if excluded.is_points:  # x <> 3, or NOT x IN (...)
        points = [_literal(v) for v in excluded.points]
        return exp.NEQ(this=column.copy(), expression=points[0]) if len(points) == 1 \
            else exp.not_(exp.In(this=column.copy(), expressions=points))
    terms = []
    for iv in values.intervals:
        if iv.is_point:
            terms.append(exp.EQ(this=column.copy(), expression=_literal(iv.lo)))
        elif iv.lo is not None and iv.hi is not None and iv.lo_closed and iv.hi_closed:
            terms.append(exp.Between(this=column.copy(), low=_literal(iv.lo),
                                     high=_literal(iv.hi)))
        else:
            bounds = []
            if iv.lo is not None:
                cls = exp.GTE if iv.lo_closed else exp.GT
                bounds.append(cls(this=column.copy(), expression=_literal(iv.lo)))
            if iv.hi is not None:
                cls = exp.LTE if iv.hi_closed else exp.LT
                bounds.append(cls(this=column.copy(), expression=_literal(iv.hi)))
            terms.append(exp.and_(*bounds) if len(bounds) > 1 else bounds[0])
    if len(terms) == 1:
        return terms[0]
    return exp.or_(*[exp.paren(t) if isinstance(t, exp.And) else t for t in terms])


def _conjuncts(node: exp.Expression) -> list[exp.Expression]:
    # Flatten so that the grouped predicate reads a AND b AND c, not (a AND b) AND c.
    return list(node.flatten()) if isinstance(node, exp.And) else [node]


def _leaf_conjuncts(node: exp.Expression) -> list[exp.Expression]:
    """Every conjunct of ``node``, ANDs in parentheses opened too, left to right."""
    out, stack = [], [node]
    while stack:  # a loop, not recursion: a chain of thousands of ANDs has no depth limit
        part = stack.pop().unnest()
        if isinstance(part, exp.And):
            stack.extend(reversed(list(part.flatten())))
        else:
            out.append(part)
    return out


def _literal(value: Any) -> exp.Expression:
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, str):
        return exp.Literal.string(value)
    return exp.Literal.number(value)
