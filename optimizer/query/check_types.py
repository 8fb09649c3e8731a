"""Type-check a query's predicates: WHERE, JOIN ... ON and HAVING.

A predicate is a boolean combination (AND, OR, NOT) of comparisons, BETWEEN
and IN over columns and constants; in HAVING an aggregate is an operand too,
and a column must be grouped. Operands compared with one another must be of
one family: numbers (ints, doubles, timestamps, COUNT, SUM, AVG), strings or
bools; MIN and MAX have their column's type. Anything else raises
:class:`~cqopt.optimizer.query.errors.QueryTypeError` or, for a construct cqopt
does not read, :class:`~cqopt.optimizer.query.errors.UnsupportedQueryError`. Like
sqlglot's ``annotate_types`` this runs on a bound query
(:mod:`cqopt.optimizer.query.bind`); unlike it, nothing is annotated: a query that
passes is well typed, and the tree is left as it was.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.bind import bind
>>> from cqopt.optimizer.query.dialect import parse
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "name": "string(8)"}}}})
>>> select = parse("SELECT S.a FROM S WHERE S.a > 1 AND S.name = 'x' WINDOW [1]")
>>> check_types(select, bind(select, cat))
>>> select = parse("SELECT S.a FROM S WHERE S.name > 1 WINDOW [1]")
>>> check_types(select, bind(select, cat))
Traceback (most recent call last):
...
cqopt.optimizer.query.errors.QueryTypeError: 'S.name > 1': column S.name is string but 1 is a \
number; compare it with a string
"""

from __future__ import annotations

from collections.abc import Collection

from sqlglot import exp

from cqopt.catalog import Column
from cqopt.optimizer.query.aggregates import AGGREGATES, aggregate
from cqopt.optimizer.query.bind import ColumnRef, Scope, group_by, qualify, resolve
from cqopt.optimizer.query.dialect import CQL
from cqopt.optimizer.query.errors import QueryTypeError, UnsupportedQueryError
from cqopt.optimizer.query.literals import literal_value


def check_types(select: exp.Select, scope: Scope) -> None:
    """Check every condition of ``select``: WHERE, each JOIN's ON, and HAVING.

    Raises
    ------
    QueryTypeError
        Operands of different families compared, or SUM/AVG of a non-number.
    UnsupportedQueryError
        A construct other than the predicates above, constants compared with
        constants, or (HAVING) a column neither grouped nor aggregated.
    """
    for condition in conditions(select):
        check_predicate(condition, scope)
    having = select.args.get("having")
    if having is not None:
        # Qualified first, so messages name HAVING's columns as plans do: SUM(A.x)
        check_predicate(qualify(having.this, scope), scope, group_by(select, scope))


def conditions(select: exp.Select) -> list[exp.Expression]:
    """The WHERE condition and each JOIN's ON condition, as written."""
    found = []
    where = select.args.get("where")
    if where is not None:
        found.append(where.this)
    for join in select.args.get("joins") or []:
        if join.args.get("on") is not None:
            found.append(join.args["on"])
    return found


def check_predicate(node: exp.Expression, scope: Scope,
                    group: Collection[ColumnRef] | None = None) -> None:
    """Allow only boolean combinations of comparisons, BETWEEN and IN; type-check them.

    With ``group`` (HAVING), an aggregate is an operand too and a column
    must be one of the grouped columns.
    """
    if isinstance(node, (exp.And, exp.Or)):
        check_predicate(node.left, scope, group)
        check_predicate(node.right, scope, group)
    elif isinstance(node, (exp.Not, exp.Paren)):
        check_predicate(node.this, scope, group)
    elif isinstance(node, (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)):
        _check_operands(node, [node.left, node.right], scope, group)
    elif isinstance(node, exp.Between):
        _check_operands(node, [node.this, node.args["low"], node.args["high"]], scope, group)
    elif isinstance(node, exp.In):
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise UnsupportedQueryError("IN with a subquery is not supported")
        _check_operands(node, [node.this, *node.expressions], scope, group)
    elif isinstance(node, exp.Boolean):
        raise UnsupportedQueryError(f"constant predicate {node.sql(dialect=CQL)} is not "
                                    "supported: remove it")
    elif isinstance(node, exp.Is):
        raise UnsupportedQueryError("IS NULL / IS NOT NULL is not supported: streams "
                                    "here carry no NULLs")
    else:
        over = "aggregates, grouped columns" if group is not None else "columns"
        raise UnsupportedQueryError(
            f"unsupported predicate '{node.sql(dialect=CQL)}' ({type(node).__name__.upper()}):"
            f" use =, <>, <, <=, >, >=, BETWEEN, IN, AND, OR, NOT over {over} and constants")


def _check_operands(node: exp.Expression, operands: list[exp.Expression], scope: Scope,
                    group: Collection[ColumnRef] | None) -> None:
    having = group is not None

    def typed(operand: exp.Expression) -> bool:  # a column, or an aggregate in HAVING
        return isinstance(operand, exp.Column) or (having and type(operand) in AGGREGATES)

    for operand in operands:  # anything else must be a constant
        if not typed(operand):
            literal_value(operand)
    named = [o for o in operands if typed(o)]
    what = "an aggregate or a grouped column" if having else "a column"
    if not named:
        raise UnsupportedQueryError(f"predicate '{node.sql(dialect=CQL)}' compares "
                                    f"constants only: remove it or name {what}")
    if isinstance(node, (exp.Between, exp.In)) and not typed(node.this):
        raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': the left side of "
                                    f"BETWEEN / IN must be {what}")
    if isinstance(node, (exp.Between, exp.In)) and len(named) > 1:
        raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': BETWEEN / IN take "
                                    "constants on the right")
    types = [operand_type(o, scope, group) for o in named]
    first, family = types[0][0], types[0][2]
    for text, type_, fam in types[1:]:
        if fam != family:
            raise QueryTypeError(f"'{node.sql(dialect=CQL)}' compares {first} "
                                 f"({types[0][1]}) with {text} ({type_})")
    for operand in operands:
        if typed(operand):
            continue
        value = literal_value(operand)
        got = "bool" if isinstance(value, bool) else \
            "string" if isinstance(value, str) else "number"
        if got != family:
            column = "column " if isinstance(named[0], exp.Column) else ""
            raise QueryTypeError(
                f"'{node.sql(dialect=CQL)}': {column}{first} is {types[0][1]} but "
                f"{operand.sql(dialect=CQL)} is a {got}; compare it with a {family}")


def operand_type(operand: exp.Expression, scope: Scope,
                 group: Collection[ColumnRef] | None = None) -> tuple[str, str, str]:
    """(text, type, family) of a column or (in HAVING) an aggregate operand.

    COUNT, SUM and AVG are numeric; MIN and MAX have their column's type.
    """
    if isinstance(operand, exp.Column):
        ref = resolve(operand, scope)
        if group is not None and ref not in group:
            raise UnsupportedQueryError(f"HAVING uses {'.'.join(ref)}, which is neither "
                                        "grouped nor aggregated")
        col = scope.column(ref)
        return ".".join(ref), col.type, family(col)
    agg = aggregate(operand, scope)
    if agg.function in ("MIN", "MAX"):
        col = scope.column(agg.argument)
        return str(agg), col.type, family(col)
    return str(agg), "numeric", "number"


def family(col: Column) -> str:
    """The family a column's values compare within: ``bool``, ``string`` or ``number``."""
    return "bool" if col.type == "bool" else "string" if col.type == "string" else "number"
