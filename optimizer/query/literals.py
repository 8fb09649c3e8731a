"""Constants in predicates: the one place their Python values are read.

A number written with ASCII digits only is an ``int`` (every digit kept, however
long); any other number is a ``float``, and must be finite.

>>> import sqlglot
>>> [literal_value(sqlglot.parse_one(t)) for t in ("12345678901234567890", "-2.5e1")]
[12345678901234567890, -25.0]
"""

from __future__ import annotations

import math
from typing import Any

from sqlglot import exp

from cqopt.errors import DECIMAL
from cqopt.optimizer.query.dialect import CQL
from cqopt.optimizer.query.errors import UnsupportedQueryError

# Python's int() refuses longer digit strings (sys.get_int_max_str_digits); no stream
# column holds such a value anyway.
MAX_DIGITS = 4300


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
        return node.this if node.is_string else number_value(node.this)
    raise UnsupportedQueryError(
        f"unsupported expression '{node.sql(dialect=CQL)}': only a column compared with a "
        "constant, or two columns compared, may appear in a predicate")


def number_value(text: str) -> int | float:
    """The value of a number literal's text: an exact int for digits only, else a finite float."""
    if text.isascii() and text.isdigit():  # ASCII digits only; no regex per literal
        if len(text) > MAX_DIGITS:
            raise UnsupportedQueryError(f"the constant {text[:12]}... has {len(text)} digits; "
                                        f"constants may have at most {MAX_DIGITS}")
        return int(text)  # not through float: 12345678901234567890 keeps its digits
    if not DECIMAL.fullmatch(text):  # float() alone also takes "1_0", "inf", "٣"
        raise UnsupportedQueryError(f"'{text}' is not a number: write digits, optionally with "
                                    "a decimal point and an exponent such as 1.5e3")
    value = float(text)
    if not math.isfinite(value):
        raise UnsupportedQueryError(f"the constant {text} is too large: constants must be "
                                    "finite")
    return value
