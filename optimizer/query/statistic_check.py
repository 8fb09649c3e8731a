"""The one check of statistics given for a query: names it does not have are refused.

``cqopt choose``, ``ChartSet.choose``/``choose_many`` and
``AdaptiveQuery.step`` (and whatever else takes statistics for a query) call
:func:`check_given`; values are checked by
:func:`cqopt.optimizer.query.statistics.check_value`.

>>> check_given(["rate.TCP"], ["rate.TCP", "sel.TCP"], where="query Q1")
()
"""

from __future__ import annotations

from collections.abc import Iterable

from cqopt.errors import did_you_mean, printable
from cqopt.optimizer.query.errors import QueryError


class UnknownStatisticError(QueryError):
    """A statistic was given that the query does not depend on."""


def check_given(given: Iterable[str], statistics: Iterable[str],
                used: Iterable[str] | None = None, *, where: str) -> tuple[str, ...]:
    """Refuse statistic names ``statistics`` lacks; return the given ones ``used`` lacks.

    Parameters
    ----------
    given : iterable of str
        The statistic names a caller gave.
    statistics : iterable of str
        Every statistic the query depends on (a chart's axes and fixed ones).
    used : iterable of str, optional
        The statistics that count (a chart's axes); default ``statistics``.
    where : str
        What the statistics are for, e.g. ``"query Q1"``.

    Returns
    -------
    tuple of str
        The given statistics of the query that ``used`` lacks (a chart's
        fixed statistics): harmless, but worth a warning.

    Raises
    ------
    UnknownStatisticError
        A given name is no statistic of the query; the message suggests the
        closest one and names every given statistic the chart does not use.

    Examples
    --------
    >>> check_given(["rate.TCP", "sel.TCP"], ["rate.TCP", "sel.TCP"], ["rate.TCP"],
    ...             where="query Q1")
    ('sel.TCP',)
    >>> check_given(["rate.TPC"], ["rate.TCP", "sel.TCP"], where="query Q1")
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.statistic_check.UnknownStatisticError: query Q1 has no statistic rate.TPC (did you mean rate.TCP?); its statistics are rate.TCP, sel.TCP; of those given, the chart does not use rate.TPC
    """
    statistics = list(statistics)
    known = set(statistics)
    used = known if used is None else set(used)
    given = [printable(g)[:80] if g not in known else g for g in given]  # no raw newline
    unknown = [g for g in given if g not in known]
    idle = tuple(g for g in given if g in known and g not in used)
    if unknown:
        hints = [did_you_mean(g, statistics).removeprefix("; did you mean ").strip("'?")
                 for g in unknown]
        hint = ", ".join(h for h in hints if h)
        raise UnknownStatisticError(
            f"{where} has no statistic {', '.join(unknown)}"
            + (f" (did you mean {hint}?)" if hint else "")
            + f"; its statistics are {', '.join(statistics)}; of those given, the chart "
            f"does not use {', '.join([*unknown, *idle])}")
    return idle
