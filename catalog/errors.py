"""Errors cqopt raises at a user.

Every failure a user can cause (a bad file, a bad query, a bad option) is a
:class:`CqoptError`. Its message says what was wrong, where, and what to do;
the CLI prints it without a traceback and exits with status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class CqoptError(Exception):
    """Base class of every error cqopt reports to a user."""


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


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ``"; did you mean 'X'?"`` suffix naming the closest choice, or ``""``.

    >>> did_you_mean("TPC", ["TCP", "UDP"])
    "; did you mean 'TCP'?"
    """
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    return f"; did you mean '{by_lower[close[0]]}'?" if close else ""
