"""Constants in predicates: the one place their Python values are read."""

from __future__ import annotations

from typing import Any

from sqlglot import exp

from optimizer.dialect import CQL
from optimizer.errors import UnsupportedQueryError


def literal_value(node: exp.Expression) -> Any:
    """The Python value of a literal constant, or raise UnsupportedQueryError."""
    if isinstance(node, exp.Paren):
        return literal_value(node.this)
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        value = literal_value(node.this)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        number = float(node.this)
        return int(number) if number.is_integer() and "." not in node.this \
            and "e" not in node.this.lower() else number
    raise UnsupportedQueryError(
        f"unsupported expression '{node.sql(dialect=CQL)}': only a column compared with a "
        "constant, or two columns compared, may appear in a predicate")
