"""The error a catalog file raises."""

from __future__ import annotations

from cqopt.errors import CqoptError


class CatalogError(CqoptError):
    """A catalog file is missing, unreadable or invalid.

    >>> str(CatalogError("cat.toml", "streams.TCP.rate", "must be [lo, hi]", "two numbers"))
    'cat.toml: streams.TCP.rate: must be [lo, hi] (expected two numbers)'
    """

    def __init__(self, source: str, key: str, problem: str, expected: str | None = None):
        self.source, self.key, self.problem, self.expected = source, key, problem, expected
        where = f"{source}: {key}: " if key else f"{source}: "
        tail = f" (expected {expected})" if expected else ""
        super().__init__(f"{where}{problem}{tail}")
