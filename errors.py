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


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """A ``"; did you mean 'X'?"`` suffix naming the closest choice, or ``""``.

    >>> did_you_mean("TPC", ["TCP", "UDP"])
    "; did you mean 'TCP'?"
    """
    by_lower = {c.lower(): c for c in choices}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.5)
    return f"; did you mean '{by_lower[close[0]]}'?" if close else ""
