"""The logical continuous query: a CQL query checked against a catalog.

:func:`parse_query` parses CQL text (the OM paper's and the STREAM paper's
window syntax, see :mod:`cqopt.optimizer.query.dialect`) and builds a
:class:`ContinuousQuery` in steps, one module each, the way sqlglot's
optimizer runs ``qualify`` then ``annotate_types`` then its rules:

1. :mod:`~cqopt.optimizer.query.check_supported`: any clause cqopt does not read
   (QUALIFY, PIVOT, TABLESAMPLE, GROUP BY ALL, outer joins, ...) is refused,
   never ignored;
2. :mod:`~cqopt.optimizer.query.bind`: every stream and column is resolved against
   the catalog, and each stream gets its window (a per-stream window
   overrides the query-level ``WINDOW [...]``; a stream with neither is an
   error, an explicit ``[UNBOUNDED]`` is accepted);
3. :mod:`~cqopt.optimizer.query.check_types`: WHERE, ON and HAVING are type-checked
   (in HAVING an aggregate is an operand: COUNT, SUM and AVG are numbers, MIN
   and MAX have their column's type);
4. :mod:`~cqopt.optimizer.query.classify`: one grouped selection per stream
   (heuristic 1 of the OM paper), the equi-joins with their transitive
   closure, theta predicates, and the projection, aggregates (see
   :mod:`~cqopt.optimizer.query.aggregates`), GROUP BY and HAVING.

The query then knows its tuple widths in bytes and the statistics its cost
depends on.

>>> from cqopt.catalog import Catalog
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "double"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.a > 1 AND S.a <= 4 WINDOW [2]", cat)
>>> q.selections["S"].predicate_sql, q.statistics, q.output_width
('S.a > 1 AND S.a <= 4', ('rate.S', 'sel.S'), 4)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlglot import exp

from cqopt.catalog import Catalog
from cqopt.optimizer.query.aggregates import AGGREGATE_WIDTHS, AGGREGATES, Aggregate, aggregate_text
from cqopt.optimizer.query.bind import ColumnRef, StreamRef, Window, bind
from cqopt.optimizer.query.check_supported import check_supported
from cqopt.optimizer.query.check_types import check_types
from cqopt.optimizer.query.classify import OutputColumn, classify_output, classify_predicates
from cqopt.optimizer.query.dialect import CQL, parse
from cqopt.optimizer.query.errors import QueryError
from cqopt.optimizer.query.join_closure import JoinPredicate, ThetaPredicate
from cqopt.optimizer.query.selections import Selection
from cqopt.optimizer.query.statistics import rate_name, sel_name

# Defined by the steps; importable from here, where callers know them from.
__all__ = ["AGGREGATES", "AGGREGATE_WIDTHS", "Aggregate", "ColumnRef", "ContinuousQuery",
           "OutputColumn", "StreamRef", "Window", "aggregate_text", "build_query",
           "parse_query"]


@dataclass(frozen=True)
class ContinuousQuery:
    """A CQL query checked against a catalog: what its candidate plans are built from."""

    sql: str
    streams: tuple[StreamRef, ...]
    selections: dict[str, Selection]
    joins: tuple[JoinPredicate, ...]
    thetas: tuple[ThetaPredicate, ...]
    projection: tuple[OutputColumn, ...]
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[ColumnRef, ...]
    having: exp.Expression | None
    window: Window | None  # the query-level WINDOW [...], if any
    notes: tuple[str, ...] = field(default=())

    @property
    def stream_names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.streams)

    def stream(self, name: str) -> StreamRef:
        return next(s for s in self.streams if s.name == name)

    @property
    def is_aggregate(self) -> bool:
        return bool(self.aggregates or self.group_by)

    @property
    def output_width(self) -> int:
        return sum(c.width for c in self.projection)

    @property
    def statistics(self) -> tuple[str, ...]:
        """Every statistic the query's cost depends on, in a fixed order."""
        names = [rate_name(s) for s in self.stream_names]
        names += [sel_name(s) for s in self.stream_names if s in self.selections]
        pairs = {p.statistic: None for p in (*self.joins, *self.thetas)}
        return tuple(names + list(pairs))

    def round_seconds(self) -> float:
        """The length of the query's round: its WINDOW [w], else its longest [RANGE w] window.

        Raises
        ------
        QueryError
            The query has no time window to cut rounds by.
        """
        if self.window is not None and self.window.seconds:
            return self.window.seconds
        ranges = [s.window.seconds for s in self.streams if s.window.kind == "range"]
        if not ranges:
            raise QueryError("the query has no time window to cut rounds by: give it WINDOW "
                             "[w] or a [RANGE w] window")
        return max(ranges)

    def required_columns(self, stream: str) -> tuple[str, ...]:
        """Columns of ``stream`` needed above its selection, in catalog order."""
        needed: set[str] = set()
        for col in self.projection:
            if col.source and col.source[0] == stream:
                needed.add(col.source[1])
        for agg in self.aggregates:
            if agg.argument and agg.argument[0] == stream:
                needed.add(agg.argument[1])
        needed |= {c for s, c in self.group_by if s == stream}
        for pred in (*self.joins, *self.thetas):
            needed |= {c for s, c in pred.columns if s == stream}
        return tuple(c.name for c in self.stream(stream).columns if c.name in needed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "sql": self.sql,
            "streams": [{"name": s.name, "alias": s.alias, "window": s.window.to_dict(),
                         "width": s.width} for s in self.streams],
            "window": self.window.to_dict() if self.window else None,
            "selections": {s: sel.to_dict() for s, sel in self.selections.items()},
            "joins": [j.to_dict() for j in self.joins],
            "thetas": [t.to_dict() for t in self.thetas],
            "projection": [{"name": c.name, "width": c.width, "aggregate": c.aggregate,
                            "source": ".".join(c.source) if c.source else None}
                           for c in self.projection],
            "aggregates": [str(a) for a in self.aggregates],
            "group_by": [".".join(c) for c in self.group_by],
            "having": self.having.sql(dialect=CQL) if self.having is not None else None,
            "output_width": self.output_width,
            "statistics": list(self.statistics),
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """A human-readable account of the logical query, as ``cqopt explain`` prints it."""
        lines = ["Streams:"]
        for s in self.streams:
            alias = f" AS {s.alias}" if s.alias else ""
            lines.append(f"  {s.name}{alias} {s.window}  tuple {s.width} B")
        lines.append("Selections (grouped per stream):")
        lines += [f"  {s}: {sel.predicate_sql}  [{sel.rate_class}]"
                  + ("  ALWAYS EMPTY" if sel.always_empty else "")
                  for s, sel in self.selections.items()] or ["  (none)"]
        lines.append("Join predicates (with transitive closure):")
        lines += [f"  {j}{'  (implied)' if j.implied else ''}" for j in self.joins]
        lines += [f"  {t}  (theta)" for t in self.thetas]
        if not (self.joins or self.thetas):
            lines.append("  (none)")
        if self.aggregates or self.group_by:
            lines.append("Aggregates: " + (", ".join(map(str, self.aggregates)) or "(none)"))
            lines.append("Group by: " + (", ".join(".".join(c) for c in self.group_by)
                                         or "(none)"))
            if self.having is not None:
                lines.append("Having: " + self.having.sql(dialect=CQL))
        lines.append("Projection: " + ", ".join(f"{c.name} ({c.width} B)"
                                                for c in self.projection))
        lines.append(f"Output tuple: {self.output_width} B")
        lines.append("Statistics: " + ", ".join(self.statistics))
        lines += [f"Note: {n}" for n in self.notes]
        return "\n".join(lines)


def parse_query(sql: str, catalog: Catalog) -> ContinuousQuery:
    """Parse CQL text and check it against ``catalog``.

    Raises
    ------
    QueryError
        The text does not parse, or names, types or constructs are wrong (see
        the subclasses in :mod:`cqopt.optimizer.query.errors`).
    """
    return build_query(parse(sql), catalog, sql)


def build_query(select: exp.Select, catalog: Catalog, sql: str | None = None) -> ContinuousQuery:
    """Turn a parsed CQL ``SELECT`` into a checked :class:`ContinuousQuery`."""
    try:
        check_supported(select)
        scope = bind(select, catalog)
        check_types(select, scope)
        predicates = classify_predicates(select, scope)
        output = classify_output(select, scope)
    except RecursionError:
        # The checks walk conditions recursively; a chain of 1000 ORs is deeper than Python's stack
        raise QueryError("the condition is nested too deeply; use IN (...) for a long list "
                         "of alternatives") from None
    return ContinuousQuery(
        sql=(sql if sql is not None else select.sql(dialect=CQL)).strip(),
        streams=scope.streams,
        selections=predicates.selections,
        joins=predicates.joins,
        thetas=predicates.thetas,
        projection=output.projection,
        aggregates=output.aggregates,
        group_by=output.group_by,
        having=output.having,
        window=scope.window,
        notes=predicates.notes,
    )
