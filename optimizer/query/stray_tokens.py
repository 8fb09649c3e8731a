"""Tokens sqlglot's parser reads and drops, refused where they stand.

sqlglot forgives what other SQL dialects allow: an empty element in a list
(``SELECT a, , b``, ``IN (1, 2,, 3)``, ``IN ( ,5)``, a trailing comma), a query
parameter (``?``, ``:name``) read as a name, an alias on ``*`` that nothing
keeps, and ``COUNT()`` read as ``COUNT(*)``. Each one leaves the query meaning
something the user did not write, so :class:`NoStrayTokens` refuses it with the
token's line and column.

Example:
    >>> from cqopt.optimizer.query.dialect import parse
    >>> parse("SELECT S.a, , S.b FROM S")
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.errors.CQLSyntaxError: syntax error: line 1, column 13: an empty element in a list: expected a value after ',' (near ',')
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.parsers.base import BaseParser
from sqlglot.tokens import TokenType

T = t.TypeVar("T")


class NoStrayTokens(BaseParser):
    """The base parser, refusing the tokens it would otherwise drop or misread."""

    def _parse_csv(self, parse_method: t.Callable[[], T | None], sep: TokenType = TokenType.COMMA) -> list[T]:
        # Every separator stands between two elements: no empty element, leading or
        # trailing separator (the base parser skips the element that parsed to None).
        item = parse_method()
        items = [] if item is None else [item]
        while self._match(sep):
            if item is None:
                self.raise_error(f"an empty element in a list: expected a value before "
                                 f"'{self._prev.text}'", self._prev)
            if isinstance(item, exp.Expr):
                self._add_comments(item)
            item = parse_method()
            if item is None:
                self.raise_error(f"an empty element in a list: expected a value after "
                                 f"'{self._prev.text}'", self._curr or self._prev)
            items.append(item)
        return items

    def _parse_placeholder(self) -> exp.Expr | None:
        placeholder = super()._parse_placeholder()
        if isinstance(placeholder, (exp.Placeholder, exp.Parameter)):
            self.raise_error(f"'{self._prev.text}' is a query parameter; a continuous query "
                             "has none: write the value or the name itself", self._prev)
        return placeholder

    def _parse_alias(self, this: exp.Expr | None, explicit: bool = False) -> exp.Expr | None:
        aliased = super()._parse_alias(this, explicit=explicit)
        if this is not None and aliased is not this and this.is_star:
            self.raise_error("'*' cannot be renamed: an alias names one column, "
                             "write the columns to rename them", self._prev)
        return aliased

    def _parse_function(self, *args: t.Any, **kwargs: t.Any) -> exp.Expr | None:
        function = super()._parse_function(*args, **kwargs)
        if isinstance(function, exp.Count) and function.this is None \
                and not function.expressions:
            self.raise_error("COUNT() needs what it counts: COUNT(*) or COUNT(column)",
                             self._prev)
        return function
