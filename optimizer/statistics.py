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

from collections.abc import Iterable

from optimizer.errors import QueryError

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
        raise QueryError(f"malformed statistic name {name!r}: expected rate.STREAM, "
                         "sel.STREAM or jsel.STREAM_A.STREAM_B")
    return kind, streams
