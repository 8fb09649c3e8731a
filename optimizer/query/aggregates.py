"""Aggregates of a continuous query: COUNT, SUM, AVG, MIN and MAX of one column.

:func:`aggregate` reads one aggregate call of the parsed query: ``COUNT(*)``
or a function of one column, resolved against the query's
:class:`~cqopt.optimizer.query.bind.Scope`. SUM and AVG need a numeric column; the
result of COUNT, SUM and AVG is 8 bytes wide, MIN and MAX keep their
column's width. An aggregate's text, ``SUM(S.a)``, is its name in plans and in
the executor, and its default output name.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.bind import bind
>>> from cqopt.optimizer.query.dialect import parse
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "name": "string(12)"}}}})
>>> select = parse("SELECT SUM(a), MAX(S.name), COUNT(*) FROM S WINDOW [1]")
>>> scope = bind(select, cat)
>>> [(str(agg), agg.width) for agg in (aggregate(e, scope) for e in select.expressions)]
[('SUM(S.a)', 8), ('MAX(S.name)', 12), ('COUNT(*)', 8)]
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from cqopt.optimizer.query.bind import ColumnRef, Scope, resolve
from cqopt.optimizer.query.dialect import CQL
from cqopt.optimizer.query.errors import QueryTypeError, UnsupportedQueryError

AGGREGATES: dict[type, str] = {
    exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX",
}
# Width in bytes of an aggregate's result; MIN and MAX keep their column's width.
AGGREGATE_WIDTHS = {"COUNT": 8, "SUM": 8, "AVG": 8}


@dataclass(frozen=True)
class Aggregate:
    """One aggregate the query computes."""

    function: str  # COUNT, SUM, AVG, MIN, MAX
    argument: ColumnRef | None  # None for COUNT(*)
    width: int

    def __str__(self) -> str:
        return aggregate_text(self.function, self.argument)


def aggregate_text(function: str, argument: ColumnRef | None) -> str:
    """An aggregate's text: its name in plans and the executor, and its default output name.

    >>> aggregate_text("SUM", ("S", "a")), aggregate_text("COUNT", None)
    ('SUM(S.a)', 'COUNT(*)')
    """
    return f"{function}({'*' if argument is None else '.'.join(argument)})"


def aggregate(node: exp.Expression, scope: Scope) -> Aggregate:
    """The :class:`Aggregate` an aggregate call (one of :data:`AGGREGATES`) computes.

    Raises
    ------
    UnsupportedQueryError
        DISTINCT, ``SUM(*)`` and the like, or an argument that is not one column.
    QueryTypeError
        SUM or AVG of a column that is not numeric.
    """
    function = AGGREGATES[type(node)]
    arg = node.this
    if isinstance(arg, exp.Distinct):
        raise UnsupportedQueryError(f"{function}(DISTINCT ...) is not supported")
    if isinstance(arg, exp.Star) or (function == "COUNT" and arg is None):
        if function != "COUNT":
            raise UnsupportedQueryError(f"{function}(*) is not defined: name a column")
        return Aggregate("COUNT", None, AGGREGATE_WIDTHS["COUNT"])
    if not isinstance(arg, exp.Column) or node.expressions:
        raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': aggregate one column")
    ref = resolve(arg, scope)
    col = scope.column(ref)
    if function in ("SUM", "AVG") and not (col.is_numeric and col.type != "timestamp"):
        raise QueryTypeError(f"{function}({'.'.join(ref)}) needs a numeric column; "
                             f"{'.'.join(ref)} is {col.type}")
    return Aggregate(function, ref, AGGREGATE_WIDTHS.get(function, col.width))
