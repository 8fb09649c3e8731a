"""Bind a query's names to the catalog: streams, windows and columns.

:func:`bind` resolves every FROM item to a catalog stream (by name, with its
alias) and gives each stream its window: its own ``S [RANGE ...]``, else the
query-level ``WINDOW [...]``. A stream with neither is an error, because CQL's
default ``[UNBOUNDED]`` would make every plan's cost infinite; an explicit
``[UNBOUNDED]`` is accepted. The result is a :class:`Scope`, against which
:func:`resolve` finds the stream of one column reference (qualified or not,
any case) and :func:`qualify` rewrites a tree's columns as ``Stream.column``
in the catalog's spelling, as sqlglot's ``qualify_columns`` does.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.dialect import parse
>>> cat = Catalog.from_dict({"streams": {"TCP": {"rate": [1, 10],
...     "columns": {"src_host": "int"}}}})
>>> select = parse("SELECT t.SRC_HOST FROM TCP AS t WHERE src_host > 1 WINDOW [2]")
>>> scope = bind(select, cat)
>>> [(s.name, s.alias, str(s.window)) for s in scope.streams]
[('TCP', 't', '[RANGE 2 SECONDS]')]
>>> qualify(select.args["where"].this, scope).sql()
'TCP.src_host > 1'
>>> bind(parse("SELECT TCP.src_host FROM TCP"), cat)
Traceback (most recent call last):
...
cqopt.optimizer.query.errors.MissingWindowError: stream TCP has no window: add a query-level \
WINDOW [1] (seconds) or a per-stream window such as TCP [RANGE 10 SECONDS]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sqlglot import exp

from cqopt.catalog import Catalog, Column, find_column
from cqopt.errors import did_you_mean
from cqopt.optimizer.query.dialect import CQL, query_window, table_window, window_seconds
from cqopt.optimizer.query.errors import (
    AmbiguousColumnError,
    MissingWindowError,
    UnknownColumnError,
    UnknownStreamError,
    UnsupportedQueryError,
)
from cqopt.optimizer.query.literals import literal_value

# The windows a query may ask for: beyond them a window's state is no real memory size
# (RANGE 1e297 SECONDS) or shorter than the times a trace can tell apart.
MIN_RANGE_SECONDS = 0.001
MAX_RANGE_SECONDS = 365 * 24 * 3600
MAX_ROWS = 2**31

ColumnRef = tuple[str, str]  # (stream, column), both spelled as in the catalog


@dataclass(frozen=True)
class Window:
    """A stream's window: ``range`` (seconds), ``rows`` (count), ``now`` or ``unbounded``."""

    kind: str
    seconds: float | None = None
    rows: int | None = None
    partition_by: tuple[str, ...] = ()

    def __str__(self) -> str:
        part = f"PARTITION BY {', '.join(self.partition_by)} " if self.partition_by else ""
        if self.kind == "range":
            return f"[{part}RANGE {self.seconds:g} SECONDS]"
        if self.kind == "rows":
            return f"[{part}ROWS {self.rows}]"
        return f"[{self.kind.upper()}]"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seconds": self.seconds, "rows": self.rows,
                "partition_by": list(self.partition_by)}


@dataclass(frozen=True)
class StreamRef:
    """A stream as the query uses it."""

    name: str  # the catalog's spelling
    alias: str | None
    window: Window
    width: int  # bytes of one tuple
    columns: tuple[Column, ...]

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (case-insensitive), or None."""
        return find_column(self.columns, name)


@dataclass(frozen=True)
class Scope:
    """The streams of one query and the names that bind them.

    ``names`` maps each stream's lower-case catalog name and alias to it;
    ``window`` is the query-level ``WINDOW [...]``, if any.
    """

    streams: tuple[StreamRef, ...]
    names: Mapping[str, StreamRef]
    window: Window | None = None

    @property
    def stream_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.streams)

    def stream(self, name: str) -> StreamRef:
        """A bound stream by its catalog name (the catalog name is always bound)."""
        return self.names[name.lower()]

    def column(self, ref: ColumnRef) -> Column:
        """The catalog column of a resolved ``(stream, column)``."""
        return self.stream(ref[0]).column(ref[1])


def bind(select: exp.Select, catalog: Catalog) -> Scope:
    """Resolve ``select``'s streams against ``catalog`` and give each its window.

    Parameters
    ----------
    select
        A parsed query that passed :func:`~cqopt.optimizer.query.check_supported.check_supported`.
    catalog
        The streams and their columns.

    Returns
    -------
    Scope
        The streams in FROM order, each with its window.

    Raises
    ------
    UnknownStreamError
        A FROM item the catalog does not have (with the closest name).
    MissingWindowError
        A stream with no window of its own and no query-level ``WINDOW [...]``.
    UnsupportedQueryError
        No FROM, a FROM item that is not a stream name, a stream or name used
        twice, or a window that is not positive and finite.
    """
    from_ = select.args.get("from_") or select.args.get("from")
    if from_ is None:
        raise UnsupportedQueryError("the query has no FROM clause: name at least one stream")
    tables = [from_.this] + [j.this for j in select.args.get("joins") or []]
    # Bind every name first, with a stand-in window: a window may name columns.
    unwindowed = _bind_names(tables, catalog)
    query_win = query_window(select)
    default = window(query_win, unwindowed) if query_win is not None else None
    streams = []
    for table, ref in zip(tables, unwindowed.streams):
        own = table_window(table)
        if own is not None:
            streams.append(replace(ref, window=window(own, unwindowed, ref.name)))
        elif default is not None:
            streams.append(replace(ref, window=default))
        else:
            raise MissingWindowError(
                f"stream {ref.name} has no window: add a query-level WINDOW [1] (seconds) "
                f"or a per-stream window such as {ref.name} [RANGE 10 SECONDS]")
    by_name = {s.name: s for s in streams}
    names = {key: by_name[ref.name] for key, ref in unwindowed.names.items()}
    return Scope(tuple(streams), names, default)


def _bind_names(tables: list[exp.Expression], catalog: Catalog) -> Scope:
    """The streams ``tables`` name, each bound by catalog name and alias."""
    names: dict[str, StreamRef] = {}
    streams: list[StreamRef] = []
    for table in tables:
        if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
            raise UnsupportedQueryError(
                f"unsupported FROM item '{table.sql(dialect=CQL)}': name a stream")
        name = table.name
        stream = catalog.stream(name)
        if stream is None:
            raise UnknownStreamError(f"unknown stream '{name}'"
                                     f"{did_you_mean(name, catalog.streams)}; the "
                                     f"catalog {catalog.source} has "
                                     + ", ".join(catalog.streams))
        if any(s.name == stream.name for s in streams):
            raise UnsupportedQueryError(f"stream {stream.name} appears twice: self-joins "
                                        "are not supported")
        alias = table.alias or None
        ref = StreamRef(stream.name, alias, Window("unbounded"), stream.width, stream.columns)
        # dict.fromkeys, not a set: the first clash reported is the same on every run
        for key in dict.fromkeys((stream.name.lower(), (alias or stream.name).lower())):
            if key in names:
                raise UnsupportedQueryError(f"the name '{key}' is bound twice in FROM: "
                                            "give each stream its own alias")
            names[key] = ref
        streams.append(ref)
    return Scope(tuple(streams), names)


def window(node: exp.Expression, scope: Scope, stream: str | None = None) -> Window:
    """The :class:`Window` a parsed window denotes; ``stream`` owns a per-stream one.

    Raises
    ------
    UnsupportedQueryError
        A size that is not positive, a range outside 1 ms to 1 year, a ROWS
        count that is not a whole number or beyond 2^31, or PARTITION BY outside a stream's window or over another
        stream's column.
    """
    kind = node.args.get("kind")
    kind = (kind.name if isinstance(kind, exp.Expression) else str(kind)).lower()
    parts = []
    for col in node.args.get("partition_by") or []:
        if stream is None:
            raise UnsupportedQueryError("PARTITION BY belongs in a stream's window, "
                                        "S [PARTITION BY S.a ROWS 10]")
        owner, name = resolve(col, scope) if col.table else (stream, col.name)
        column = scope.stream(owner).column(name)
        if owner != stream or column is None:
            raise UnsupportedQueryError(f"the window of {stream} partitions by "
                                        f"'{col.sql(dialect=CQL)}', which is not a column "
                                        f"of {stream}")
        parts.append(column.name)
    parts = tuple(parts)
    if kind == "range":
        seconds = window_seconds(node)
        if not seconds or seconds <= 0:
            raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)} must have a "
                                        "positive size")
        if not MIN_RANGE_SECONDS <= seconds <= MAX_RANGE_SECONDS:
            raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)} is "
                                        f"{'too long' if seconds > 1 else 'too short'}: a "
                                        "range window spans 1 MILLISECONDS to 1 year "
                                        f"({MAX_RANGE_SECONDS:,} SECONDS)")
        return Window("range", seconds=float(seconds), partition_by=parts)
    if kind == "rows":
        size = literal_value(node.args["size"])
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)}: ROWS needs a "
                                        "positive whole number of tuples")
        if size > MAX_ROWS:
            raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)} is too long: a ROWS "
                                        f"window holds at most 2^31 = {MAX_ROWS:,} tuples")
        return Window("rows", rows=size, partition_by=parts)
    return Window(kind, partition_by=parts)


def resolve(col: exp.Column, scope: Scope) -> ColumnRef:
    """The ``(stream, column)`` a column reference names, in the catalog's spelling.

    Raises
    ------
    UnknownStreamError
        The qualifier is no stream or alias of the query.
    UnknownColumnError
        No stream (or not the named one) has the column.
    AmbiguousColumnError
        An unqualified column belongs to more than one stream.
    """
    name = col.name
    if col.table:
        ref = scope.names.get(col.table.lower())
        if ref is None:
            known = [s.alias or s.name for s in scope.streams]
            raise UnknownStreamError(f"'{col.sql(dialect=CQL)}' names an unknown stream "
                                     f"'{col.table}'{did_you_mean(col.table, known)}; the "
                                     f"query's streams are {', '.join(known)}")
        column = ref.column(name)
        if column is None:
            raise UnknownColumnError(
                f"stream {ref.name} has no column '{name}'"
                f"{did_you_mean(name, [c.name for c in ref.columns])}; its columns are "
                + ", ".join(c.name for c in ref.columns))
        return ref.name, column.name
    owners = [(ref, c) for ref in scope.streams if (c := ref.column(name)) is not None]
    if not owners:
        every = [c.name for ref in scope.streams for c in ref.columns]
        raise UnknownColumnError(f"no stream of the query has a column '{name}'"
                                 f"{did_you_mean(name, every)}")
    if len(owners) > 1:
        raise AmbiguousColumnError(
            f"column '{name}' is ambiguous: it belongs to "
            + " and ".join(r.name for r, _ in owners)
            + f"; qualify it, e.g. {owners[0][0].name}.{name}")
    return owners[0][0].name, owners[0][1].name


def qualify(node: exp.Expression, scope: Scope) -> exp.Expression:
    """A copy of ``node`` whose columns are ``Stream.column`` in the catalog's spelling."""
    def fix(n: exp.Expression) -> exp.Expression:
        if isinstance(n, exp.Column):
            stream, column = resolve(n, scope)
            return exp.column(column, stream)
        return n
    return node.copy().transform(fix)


def group_by(select: exp.Select, scope: Scope) -> tuple[ColumnRef, ...]:
    """The resolved GROUP BY columns, each once, in the order written.

    Raises
    ------
    UnsupportedQueryError
        A GROUP BY item that is not a column.
    """
    group = []
    for item in (select.args["group"].expressions if select.args.get("group") else []):
        if not isinstance(item, exp.Column):
            raise UnsupportedQueryError(f"GROUP BY '{item.sql(dialect=CQL)}': group by "
                                        "columns only")
        group.append(resolve(item, scope))
    return tuple(dict.fromkeys(group))  # GROUP BY A.x, A.x groups by A.x once
