"""Evaluating a query's predicates on any column engine: pandas, Spark, numpy.

A predicate of the logical query (qualified columns, constants, comparisons,
BETWEEN, IN, AND, OR, NOT) is evaluated by one walk over its sqlglot tree.
The caller's ``operand`` turns each leaf (a column, a constant, or whatever
else it accepts, such as an aggregate in HAVING) into the engine's value; the
connectives and comparisons are Python's operators, which pandas Series,
Spark Columns and numpy arrays all overload, and ``IN`` is their ``isin``.

>>> import pandas as pd, sqlglot
>>> frame = pd.DataFrame({"S.a": [1, 5, 9]})
>>> def operand(node):
...     return frame[f"{node.table}.{node.name}"] if isinstance(node, exp.Column) \\
...         else literal_value(node)
>>> evaluate(sqlglot.parse_one("S.a > 2 AND NOT S.a IN (9)"), operand).tolist()
[False, True, False]
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

from sqlglot import exp

from cqopt.optimizer.query.literals import literal_value

COMPARE: dict[type, Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq, exp.NEQ: operator.ne, exp.LT: operator.lt,
    exp.LTE: operator.le, exp.GT: operator.gt, exp.GTE: operator.ge,
}


def evaluate(node: exp.Expression, operand: Callable[[exp.Expression], Any]) -> Any:
    """``node`` evaluated with ``operand`` for its leaves, on the operand's engine."""
    if isinstance(node, exp.Paren):
        return evaluate(node.this, operand)
    if isinstance(node, exp.And):
        return evaluate(node.left, operand) & evaluate(node.right, operand)
    if isinstance(node, exp.Or):
        return evaluate(node.left, operand) | evaluate(node.right, operand)
    if isinstance(node, exp.Not):
        return ~evaluate(node.this, operand)
    if type(node) in COMPARE:
        return COMPARE[type(node)](evaluate(node.left, operand), evaluate(node.right, operand))
    if isinstance(node, exp.Between):
        value = evaluate(node.this, operand)
        return (value >= evaluate(node.args["low"], operand)) \
            & (value <= evaluate(node.args["high"], operand))
    if isinstance(node, exp.In):
        return evaluate(node.this, operand).isin([literal_value(v) for v in node.expressions])
    return operand(node)
