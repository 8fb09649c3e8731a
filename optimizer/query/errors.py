"""Errors raised while parsing and checking a continuous query."""

from __future__ import annotations

from cqopt.errors import CqoptError, shorten


class QueryError(CqoptError):
    """A continuous query cannot be accepted."""


class CQLSyntaxError(QueryError):
    """The query text does not parse; carries the line, column and token."""

    def __init__(self, message: str, line: int | None = None, col: int | None = None,
                 token: str | None = None):
        self.line, self.col, self.token = line, col, token
        where = f"line {line}, column {col}: " if line is not None else ""
        near = f" (near '{shorten(token)}')" if token else ""
        super().__init__(f"syntax error: {where}{message}{near}")


class UnknownStreamError(QueryError):
    """The query names a stream the catalog does not have."""


class UnknownColumnError(QueryError):
    """The query names a column its stream does not have."""


class AmbiguousColumnError(QueryError):
    """An unqualified column belongs to more than one stream of the query."""


class MissingWindowError(QueryError):
    """A stream has no window of its own and the query has no ``WINDOW [...]``."""


class UnsupportedQueryError(QueryError):
    """A construct cqopt does not optimize (subqueries, outer joins, ...)."""


class QueryTypeError(QueryError):
    """A predicate compares a column with a value of another type."""


class WorkloadError(CqoptError):
    """A workload file is missing, unreadable or invalid."""
