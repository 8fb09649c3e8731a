"""Option values the command line reads, checked as argparse reads them.

:func:`number` is every numeric option's ``type``: it reads the text with
:func:`cqopt.errors.parse_number` (ASCII digits only, finite, within the
option's bounds), so a bad value is one ``cqopt: error: argument --X: ...``
line before any work starts. :func:`dialect` does the same for a sqlglot
dialect name.

>>> number(low=0)("0.25"), number(integer=True, low=1)("3")
(0.25, 3)
>>> number(low=0)("nan")
Traceback (most recent call last):
...
argparse.ArgumentTypeError: 'nan': expected a number in ASCII digits, e.g. 0.5, 12 or 1e3
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cqopt.errors import CqoptError, did_you_mean, parse_number


def number(*, integer: bool = False, low: float | None = None, above: float | None = None,
           high: float | None = None) -> Callable[[str], float]:
    """An argparse ``type`` reading a number within the given bounds (see parse_number).

    Parameters
    ----------
    integer : bool
        A whole number (returned as an int).
    low, above, high : float, optional
        ``low <= x``, ``above < x``, ``x <= high``.

    Returns
    -------
    callable
        ``text -> number``, raising :class:`argparse.ArgumentTypeError`.
    """
    def read(text: str) -> float:
        try:
            return parse_number(text, "", integer=integer, low=low, above=above, high=high)
        except CqoptError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    read.__name__ = "whole number" if integer else "number"
    return read


def dialect(text: str) -> str:
    """An argparse ``type``: a sqlglot dialect name, e.g. ``spark`` or ``duckdb``.

    >>> dialect("duckdb")
    'duckdb'
    """
    import sqlglot

    known = sorted(d.value for d in sqlglot.Dialects if d.value)
    if text.lower() not in known:
        raise argparse.ArgumentTypeError(
            f"{text!r}: not a SQL dialect sqlglot knows{did_you_mean(text, known)}; it knows "
            + ", ".join(known))
    return text.lower()
