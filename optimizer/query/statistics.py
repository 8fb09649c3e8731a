"""Names of the statistics a query depends on: one flat namespace.

``rate.S`` (tuples/s), ``sel.S`` (fraction of S's tuples passing its grouped
selection), ``jsel.A.B`` (fraction of the cross product A x B that joins,
stream names sorted). Used by the cost models, chart axes, estimators, CLI
and reports alike.

>>> rate_name("TCP"), sel_name("TCP"), jsel_name("UDP", "SF")
('rate.TCP', 'sel.TCP', 'jsel.SF.UDP')
>>> split_name("jsel.SF.UDP")
('jsel', ('SF', 'UDP'))
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

from cqopt.catalog.catalog import MAX_RATE
from cqopt.errors import CqoptError, parse_number
from cqopt.optimizer.query.errors import QueryError

KINDS = ("rate", "sel", "jsel")


def rate_name(stream: str) -> str:
    return f"rate.{stream}"


def sel_name(stream: str) -> str:
    return f"sel.{stream}"


def jsel_name(*streams: str | Iterable[str]) -> str:
    """The join selectivity between two (or more, for a theta predicate) streams."""
    flat = [s for item in streams for s in ([item] if isinstance(item, str) else item)]
    return "jsel." + ".".join(sorted(flat))


def split_name(name: str) -> tuple[str, tuple[str, ...]]:
    """``"rate.TCP"`` -> ``("rate", ("TCP",))``; a malformed name is a QueryError."""
    kind, _, rest = name.partition(".")
    streams = tuple(rest.split(".")) if rest else ()
    arity_ok = len(streams) == 1 if kind in ("rate", "sel") else len(streams) >= 2
    if kind not in KINDS or not arity_ok or not all(streams):
        hint = (f"; did you mean '{kind.lower()}.{rest}'?" if kind.lower() in KINDS
                and kind not in KINDS else "")
        raise QueryError(f"malformed statistic name {name!r}: expected rate.STREAM, "
                         f"sel.STREAM or jsel.STREAM_A.STREAM_B{hint}")
    return kind, streams


DEFAULT_SELECTIVITY = 0.5

# Where a statistic's fixed value came from, as the build reports it.
SOURCE_WORKLOAD = "workload"
SOURCE_DISTINCT = "catalog distinct values"
SOURCE_RANGE = "catalog rate range"
SOURCE_DEFAULT = "default"
SOURCE_CONTRADICTION = "contradictory selection"


def default_source(name: str, catalog, query=None) -> tuple[float, str]:
    """The value a statistic takes when nobody gives one, and where it comes from.

    A rate is the middle of the stream's catalog range. A join selectivity
    ``jsel.A.B`` of an equi-join whose columns declare their number of
    distinct values in the catalog is the textbook 1 / max(distinct of the two
    columns) (the smallest such estimate over the pair's join predicates);
    without them, and for a selection, it is :data:`DEFAULT_SELECTIVITY`. A
    selection ``query`` knows to be a contradiction passes nothing: 0.

    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.query.logical import parse_query
    >>> cat = Catalog.from_dict({"streams": {
    ...     "A": {"rate": [1, 9], "columns": {"k": {"type": "int", "distinct": 1000}}},
    ...     "B": {"rate": [1, 9], "columns": {"k": {"type": "int", "distinct": 50}}}}})
    >>> q = parse_query("SELECT * FROM A, B WHERE A.k = B.k WINDOW [1]", cat)
    >>> default_source("jsel.A.B", cat, q), default_source("rate.A", cat, q)
    ((0.001, 'catalog distinct values'), (5.0, 'catalog rate range'))
    """
    kind, streams = split_name(name)
    if kind == "sel" and query is not None:
        selection = query.selections.get(streams[0])
        if selection is not None and selection.always_empty:
            return 0.0, SOURCE_CONTRADICTION
    if kind == "rate":
        stream = catalog.stream(streams[0])
        if stream is None:
            raise QueryError(f"statistic {name!r} names a stream the catalog does not have")
        lo, hi = stream.rate
        return (lo + hi) / 2, SOURCE_RANGE
    if kind == "jsel" and query is not None:
        estimates = []
        for join in query.joins:
            if join.statistic != name:
                continue
            counts = [getattr(catalog.stream(s).column(c), "distinct", None)
                      for s, c in join.columns]
            if all(counts):
                estimates.append(1.0 / max(counts))
        if estimates:
            return min(estimates), SOURCE_DISTINCT
    return DEFAULT_SELECTIVITY, SOURCE_DEFAULT


def default_value(name: str, catalog, query=None) -> float:
    """The value a statistic takes when nobody gives one (see :func:`default_source`)."""
    return default_source(name, catalog, query)[0]


def check_value(name: str, value: float) -> float:
    """``value`` as a float if it is a valid value of statistic ``name``, else a QueryError.

    Anything that is no finite number in the statistic's range is refused:
    text that is no number, a value too large for a float (``10**400``),
    NaN, a negative rate or one above :data:`~cqopt.catalog.catalog.MAX_RATE`
    (1e15 tuples/s), a selectivity outside [0, 1].

    >>> check_value("sel.S", "0.25")
    0.25
    >>> check_value("rate.S", 10**400)
    Traceback (most recent call last):
    ...
    cqopt.optimizer.query.errors.QueryError: statistic rate.S must be a number a float can hold, got an int of 401 digits
    """
    kind, _ = split_name(name)
    if isinstance(value, str):  # typed by a user: read as the command line reads numbers
        try:
            value = parse_number(value, f"statistic {name}")
        except CqoptError as err:
            raise QueryError(str(err)) from None
    elif isinstance(value, (bytes, bytearray, bool)) or \
            not isinstance(value, numbers.Real):  # float() would read b"1" and True as 1.0
        raise QueryError(f"statistic {name} must be a number, got {_short(value)}")
    try:
        x = float(value)
    except OverflowError:
        raise QueryError(f"statistic {name} must be a number a float can hold, got "
                         f"{_short(value)}") from None
    except (TypeError, ValueError):
        raise QueryError(f"statistic {name} must be a number, got {_short(value)}") from None
    if x != x:
        raise QueryError(f"statistic {name} is NaN")
    if kind == "rate" and not 0 <= x <= MAX_RATE:
        raise QueryError(f"statistic {name} is a rate in tuples/s and must be finite, >= 0 "
                         f"and at most {MAX_RATE:g}, got {x:g}")
    if kind != "rate" and not 0 <= x <= 1:
        raise QueryError(f"statistic {name} is a selectivity and must lie in [0, 1], "
                         f"got {x:g}")
    return x


def check_values(name: str, values) -> None:
    """:func:`check_value` for a whole array: a QueryError naming the first bad row."""
    import numpy as np

    kind, _ = split_name(name)
    raw = np.asarray(values)
    if raw.dtype.kind not in "iuf":  # text, bytes, truth values: each as check_value reads it
        for row, value in enumerate(raw.ravel().tolist()):
            try:
                check_value(name, value)
            except QueryError as err:
                raise QueryError(f"row {row}: {err}") from None
    try:
        x = np.asarray(values, dtype=np.float64)
    except OverflowError:
        raise QueryError(f"statistic {name}: a value is too large for a float") from None
    except (TypeError, ValueError):
        raise QueryError(f"statistic {name} must be numbers, got "
                         f"{_short(values)}") from None
    bad = np.isnan(x) | (x < 0) | (x > (MAX_RATE if kind == "rate" else 1.0))
    if bad.any():
        row = int(np.argmax(bad.ravel()))
        try:
            check_value(name, x.ravel()[row])
        except QueryError as err:
            raise QueryError(f"row {row}: {err}") from None


def _short(value: object) -> str:
    """A value for an error message: huge ints by their size, long texts cut."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        # str() of an int past 4,300 digits raises; its size is what matters here.
        return f"an int of {int(value.bit_length() * 0.30103) + 1} digits"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
