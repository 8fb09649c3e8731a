"""The logical continuous query: a CQL query checked against a catalog.

:func:`parse_query` parses CQL text (the OM paper's and the STREAM paper's
window syntax, see :mod:`cqopt.optimizer.dialect`), resolves every stream and
column against the catalog, type-checks predicates, and returns a
:class:`ContinuousQuery`:

- the streams with their windows (a per-stream window overrides the
  query-level ``WINDOW [...]``; a stream with neither gets CQL's default,
  ``[UNBOUNDED]``, and a note says so);
- one grouped selection per stream (heuristic 1 of the OM paper, see
  :mod:`cqopt.optimizer.group_selections`);
- the equi-join predicates with their transitive closure and any other
  (theta) join predicates (see :mod:`cqopt.optimizer.join_closure`);
- the projection list, the aggregates, GROUP BY and HAVING (checked like
  WHERE, an aggregate counting as an operand: COUNT, SUM and AVG are
  numbers, MIN and MAX have their column's type);
- tuple widths in bytes, and the statistics the query depends on.

What the builder does not read is refused, never ignored: any clause of the
parsed query outside an allowlist (QUALIFY, PIVOT, TABLESAMPLE, GROUP BY ALL,
...) raises :class:`~cqopt.optimizer.errors.UnsupportedQueryError`. An output
column is named by its alias, else its column name, else (an aggregate) its
text ``SUM(S.a)``; colliding names without an alias are qualified
(``S.a``), and one alias given twice is an error.

>>> from cqopt.catalog import Catalog
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "double"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.a > 1 AND S.a <= 4 WINDOW [2]", cat)
>>> q.selections["S"].predicate_sql, q.statistics, q.output_width
('S.a > 1 AND S.a <= 4', ('rate.S', 'sel.S'), 4)
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from sqlglot import exp
from sqlglot.optimizer.normalize import normalize, normalized

from cqopt.catalog import Catalog, Column, find_column
from cqopt.errors import did_you_mean
from cqopt.optimizer.dialect import (
    CQL,
    WINDOW_ARG,
    parse,
    query_window,
    table_window,
    window_seconds,
)
from cqopt.optimizer.errors import (
    AmbiguousColumnError,
    QueryError,
    QueryTypeError,
    UnknownColumnError,
    UnknownStreamError,
    UnsupportedQueryError,
)
from cqopt.optimizer.group_selections import Selection, group_selections
from cqopt.optimizer.join_closure import JoinPredicate, ThetaPredicate, close_joins
from cqopt.optimizer.literals import literal_value
from cqopt.optimizer.statistics import jsel_name, rate_name, sel_name

AGGREGATES: dict[type, str] = {
    exp.Count: "COUNT", exp.Sum: "SUM", exp.Avg: "AVG", exp.Min: "MIN", exp.Max: "MAX",
}
# Width in bytes of an aggregate's result; MIN and MAX keep their column's width.
AGGREGATE_WIDTHS = {"COUNT": 8, "SUM": 8, "AVG": 8}

ColumnRef = tuple[str, str]  # (stream, column), both spelled as in the catalog

# What cqopt reads of a parsed query, per node: an allowlist, because sqlglot parses
# many clauses a continuous query does not have, and one left unread would be
# silently ignored (QUALIFY A.x = 2 dropped from the result). Any other truthy arg
# is refused, with the clause's name where we know it.
SELECT_ARGS = frozenset({"expressions", "from_", "from", "joins", "where", "group", "having",
                         WINDOW_ARG})
TABLE_ARGS = frozenset({"this", "alias", WINDOW_ARG})
JOIN_ARGS = frozenset({"this", "on", "side", "kind"})  # side and kind are checked apart
GROUP_ARGS = frozenset({"expressions"})
JOIN_KINDS = ("", "INNER", "CROSS")
SELECT_CLAUSES = {
    "with_": "WITH (common table expressions)", "with": "WITH (common table expressions)",
    "order": "ORDER BY", "limit": "LIMIT / FETCH", "offset": "OFFSET",
    "distinct": "SELECT DISTINCT",
    "qualify": "QUALIFY", "into": "SELECT ... INTO", "connect": "CONNECT BY",
    "locks": "FOR UPDATE (a locking clause)", "sort": "SORT BY", "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY", "windows": "a named window (WINDOW w AS (...))",
    "laterals": "LATERAL VIEW", "pivots": "PIVOT / UNPIVOT", "sample": "TABLESAMPLE",
    "kind": "SELECT AS STRUCT / VALUE", "hint": "a query hint", "exclude": "SELECT * EXCLUDE",
    "prewhere": "PREWHERE", "settings": "SETTINGS", "options": "OPTION (...)",
    "match": "MATCH_RECOGNIZE",
}
TABLE_CLAUSES = {
    "pivots": "PIVOT / UNPIVOT", "sample": "TABLESAMPLE", "hints": "a table hint such as "
    "WITH (NOLOCK)", "when": "time travel (AT / BEFORE)", "version": "time travel "
    "(FOR SYSTEM_TIME AS OF)", "system_time": "time travel (FOR SYSTEM_TIME AS OF)",
    "changes": "CHANGES", "ordinality": "WITH ORDINALITY", "partition": "PARTITION (...)",
    "only": "ONLY", "indexed": "INDEXED BY", "laterals": "LATERAL VIEW",
    "joins": "a nested join", "rows_from": "ROWS FROM",
}
GROUP_CLAUSES = {"all": "GROUP BY ALL", "rollup": "WITH ROLLUP", "cube": "WITH CUBE",
                 "grouping_sets": "GROUPING SETS", "totals": "WITH TOTALS"}
JOIN_CLAUSES = {"match_condition": "MATCH_CONDITION", "global_": "GLOBAL JOIN",
                "directed": "DIRECTED JOIN"}


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
class OutputColumn:
    """One column of the query's result."""

    name: str
    width: int
    source: ColumnRef | None = None  # the stream column it comes from
    aggregate: str | None = None  # COUNT, SUM, AVG, MIN or MAX


@dataclass(frozen=True)
class Aggregate:
    function: str  # COUNT, SUM, AVG, MIN, MAX
    argument: ColumnRef | None  # None for COUNT(*)
    width: int

    def __str__(self) -> str:
        return aggregate_text(self.function, self.argument)


def aggregate_text(function: str, argument: ColumnRef | None) -> str:
    """An aggregate's text: its name in plans and the executor, and its default output name.

    >>> aggregate_text("SUM", ("S", "a")), aggregate_text("COUNT", None)
    ('SUM(S.a)', 'COUNT(*)')
    """
    return f"{function}({'*' if argument is None else '.'.join(argument)})"


@dataclass(frozen=True)
class ContinuousQuery:
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
    """Parse CQL text and check it against ``catalog``."""
    return build_query(parse(sql), catalog, sql)


def build_query(select: exp.Select, catalog: Catalog, sql: str | None = None) -> ContinuousQuery:
    """Turn a parsed CQL ``SELECT`` into a checked :class:`ContinuousQuery`."""
    try:
        return _Builder(select, catalog).build(sql if sql is not None
                                               else select.sql(dialect=CQL))
    except RecursionError:
        # The checks walk conditions recursively; a chain of 1000 ORs is deeper than Python's stack
        raise QueryError("the condition is nested too deeply; use IN (...) for a long list "
                         "of alternatives") from None


def _construct(node: exp.Expression) -> str:
    return type(node).__name__.upper()


def _refuse_unread(node: exp.Expression, allowed: frozenset[str], clauses: dict[str, str],
                   where: str) -> None:
    """Raise for any truthy arg of ``node`` outside ``allowed`` (see SELECT_ARGS)."""
    for arg, value in node.args.items():
        if not value or arg in allowed:
            continue
        what = clauses.get(arg)
        if what is None:  # a clause we have no name for: show what was written
            first = value[0] if isinstance(value, list) else value
            text = first.sql(dialect=CQL) if isinstance(first, exp.Expression) else ""
            what = f"{arg.rstrip('_').upper()}" + (f" ('{text}')" if text else "")
        raise UnsupportedQueryError(f"{what} is not supported in {where}")


class _Builder:
    """One query's resolution against the catalog."""

    def __init__(self, select: exp.Select, catalog: Catalog):
        self.select = select
        self.catalog = catalog
        self.bindings: dict[str, StreamRef] = {}  # lower-case name or alias -> stream
        self.streams: list[StreamRef] = []
        self.notes: list[str] = []

    # -- checks -------------------------------------------------------------
    def reject_unsupported(self) -> None:
        s = self.select
        for node in s.walk():
            if node is not s and isinstance(node, (exp.Select, exp.Subquery, exp.SetOperation)):
                raise UnsupportedQueryError("subqueries are not supported: write one SELECT "
                                            "over streams")
            if isinstance(node, exp.Window):
                raise UnsupportedQueryError("SQL window functions (OVER ...) are not "
                                            "supported; use a stream window such as "
                                            "S [RANGE 10 SECONDS]")
        _refuse_unread(s, SELECT_ARGS, SELECT_CLAUSES, "a continuous query")
        if s.args.get("group") is not None:
            _refuse_unread(s.args["group"], GROUP_ARGS, GROUP_CLAUSES, "a continuous query")
        joins = s.args.get("joins") or []
        from_ = s.args.get("from_") or s.args.get("from")
        for table in ([from_.this] if from_ is not None else []) + [j.this for j in joins]:
            if isinstance(table, exp.Table):  # other FROM items: bind_streams says why not
                self.check_table(table)
        for join in joins:
            side, kind = (join.side or "").upper(), (join.kind or "").upper()
            if side or kind not in JOIN_KINDS:
                what = " ".join(w for w in (side, kind) if w) or "this"
                raise UnsupportedQueryError(f"{what} JOIN is not supported: only inner joins "
                                            "(JOIN ... ON, or FROM A, B WHERE ...)")
            if join.args.get("using"):
                raise UnsupportedQueryError("JOIN ... USING is not supported: write "
                                            "JOIN ... ON A.x = B.x")
            if join.args.get("method"):
                raise UnsupportedQueryError(f"{join.args['method']} JOIN is not supported")
            _refuse_unread(join, JOIN_ARGS, JOIN_CLAUSES, "a join")

    def check_table(self, table: exp.Table) -> None:
        """A FROM item names a stream: no qualifier, column aliases or table clauses."""
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsupportedQueryError(f"qualified stream name '{table.sql(dialect=CQL)}'"
                                        " is not supported: use the catalog's name")
        alias = table.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            raise UnsupportedQueryError(f"column aliases in FROM ('{table.sql(dialect=CQL)}') "
                                        "are not supported: alias the stream only, A AS b")
        _refuse_unread(table, TABLE_ARGS, TABLE_CLAUSES, "FROM")

    # -- streams and columns ------------------------------------------------
    def bind_streams(self) -> None:
        from_ = self.select.args.get("from_") or self.select.args.get("from")
        if from_ is None:
            raise UnsupportedQueryError("the query has no FROM clause: name at least one stream")
        tables = [from_.this] + [j.this for j in self.select.args.get("joins") or []]
        for table in tables:  # bind every name first: windows may name columns
            if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
                raise UnsupportedQueryError(
                    f"unsupported FROM item '{table.sql(dialect=CQL)}': name a stream")
            name = table.name
            stream = self.catalog.stream(name)
            if stream is None:
                raise UnknownStreamError(f"unknown stream '{name}'"
                                         f"{did_you_mean(name, self.catalog.streams)}; the "
                                         f"catalog {self.catalog.source} has "
                                         + ", ".join(self.catalog.streams))
            if any(s.name == stream.name for s in self.streams):
                raise UnsupportedQueryError(f"stream {stream.name} appears twice: self-joins "
                                            "are not supported")
            alias = table.alias or None
            ref = StreamRef(stream.name, alias, Window("unbounded"), stream.width,
                            stream.columns)
            # dict.fromkeys, not a set: the first clash reported is the same on every run
            for key in dict.fromkeys((stream.name.lower(), (alias or stream.name).lower())):
                if key in self.bindings:
                    raise UnsupportedQueryError(f"the name '{key}' is bound twice in FROM: "
                                                "give each stream its own alias")
                self.bindings[key] = ref
            self.streams.append(ref)
        query_win = query_window(self.select)
        default = self.window(query_win) if query_win is not None else None
        for i, (table, ref) in enumerate(zip(tables, list(self.streams))):
            own = table_window(table)
            if own is not None:
                window = self.window(own, ref.name)
            elif default is not None:
                window = default
            else:
                window = Window("unbounded")
                self.notes.append(f"stream {ref.name} has no window: CQL's default "
                                  "[UNBOUNDED] applies")
            self.streams[i] = replace(ref, window=window)
            for key, bound in self.bindings.items():
                if bound is ref:
                    self.bindings[key] = self.streams[i]

    def window(self, node: exp.Expression, stream: str | None = None) -> Window:
        kind = node.args.get("kind")
        kind = (kind.name if isinstance(kind, exp.Expression) else str(kind)).lower()
        parts = []
        for col in node.args.get("partition_by") or []:
            if stream is None:
                raise UnsupportedQueryError("PARTITION BY belongs in a stream's window, "
                                            "S [PARTITION BY S.a ROWS 10]")
            owner, name = self.resolve(col) if col.table else (stream, col.name)
            column = self.stream_ref(owner).column(name)
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
            if not math.isfinite(seconds):  # 1e308 HOURS is a finite number of hours only
                raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)} is too long: its "
                                            "size in seconds must be finite")
            return Window("range", seconds=float(seconds), partition_by=parts)
        if kind == "rows":
            size = literal_value(node.args["size"])
            if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
                raise UnsupportedQueryError(f"window {node.sql(dialect=CQL)}: ROWS needs a "
                                            "positive whole number of tuples")
            return Window("rows", rows=size, partition_by=parts)
        return Window(kind, partition_by=parts)

    def resolve(self, col: exp.Column) -> ColumnRef:
        """The (stream, column) a column reference names, or a QueryError."""
        name = col.name
        if col.table:
            ref = self.bindings.get(col.table.lower())
            if ref is None:
                known = [s.alias or s.name for s in self.streams]
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
        owners = [(ref, c) for ref in self.streams if (c := ref.column(name)) is not None]
        if not owners:
            every = [c.name for ref in self.streams for c in ref.columns]
            raise UnknownColumnError(f"no stream of the query has a column '{name}'"
                                     f"{did_you_mean(name, every)}")
        if len(owners) > 1:
            raise AmbiguousColumnError(
                f"column '{name}' is ambiguous: it belongs to "
                + " and ".join(r.name for r, _ in owners)
                + f"; qualify it, e.g. {owners[0][0].name}.{name}")
        return owners[0][0].name, owners[0][1].name

    def column_type(self, ref: ColumnRef) -> Column:
        return self.stream_ref(ref[0]).column(ref[1])

    def stream_ref(self, name: str) -> StreamRef:
        """A bound stream by its catalog name (the catalog name is always bound)."""
        return self.bindings[name.lower()]

    # -- predicates ---------------------------------------------------------
    def conjuncts(self) -> list[exp.Expression]:
        conditions = []
        where = self.select.args.get("where")
        if where is not None:
            conditions.append(where.this)
        for join in self.select.args.get("joins") or []:
            if join.args.get("on") is not None:
                conditions.append(join.args["on"])
        out = []
        for cond in conditions:
            self.check_predicate(cond)
            cnf = cond if normalized(cond, dnf=False) else normalize(cond.copy(), dnf=False)
            out += [c.unnest() for c in cnf.flatten()] if isinstance(cnf, exp.And) \
                else [cnf.unnest()]
        return out

    def check_predicate(self, node: exp.Expression,
                        group: list[ColumnRef] | None = None) -> None:
        """Allow only boolean combinations of comparisons, BETWEEN and IN; type-check them.

        With ``group`` (HAVING), an aggregate is an operand too and a column
        must be one of the grouped columns.
        """
        if isinstance(node, (exp.And, exp.Or)):
            self.check_predicate(node.left, group)
            self.check_predicate(node.right, group)
        elif isinstance(node, (exp.Not, exp.Paren)):
            self.check_predicate(node.this, group)
        elif isinstance(node, (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)):
            self.check_operands(node, [node.left, node.right], group)
        elif isinstance(node, exp.Between):
            self.check_operands(node, [node.this, node.args["low"], node.args["high"]], group)
        elif isinstance(node, exp.In):
            if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
                raise UnsupportedQueryError("IN with a subquery is not supported")
            self.check_operands(node, [node.this, *node.expressions], group)
        elif isinstance(node, exp.Boolean):
            raise UnsupportedQueryError(f"constant predicate {node.sql(dialect=CQL)} is not "
                                        "supported: remove it")
        elif isinstance(node, exp.Is):
            raise UnsupportedQueryError("IS NULL / IS NOT NULL is not supported: streams "
                                        "here carry no NULLs")
        else:
            over = "aggregates, grouped columns" if group is not None else "columns"
            raise UnsupportedQueryError(
                f"unsupported predicate '{node.sql(dialect=CQL)}' ({_construct(node)}): use "
                f"=, <>, <, <=, >, >=, BETWEEN, IN, AND, OR, NOT over {over} and constants")

    def check_operands(self, node: exp.Expression, operands: list[exp.Expression],
                       group: list[ColumnRef] | None = None) -> None:
        having = group is not None

        def typed(operand: exp.Expression) -> bool:  # a column, or an aggregate in HAVING
            return isinstance(operand, exp.Column) or (having and type(operand) in AGGREGATES)

        for operand in operands:  # anything else must be a constant
            if not typed(operand):
                literal_value(operand)
        named = [o for o in operands if typed(o)]
        what = "an aggregate or a grouped column" if having else "a column"
        if not named:
            raise UnsupportedQueryError(f"predicate '{node.sql(dialect=CQL)}' compares "
                                        f"constants only: remove it or name {what}")
        if isinstance(node, (exp.Between, exp.In)) and not typed(node.this):
            raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': the left side of "
                                        f"BETWEEN / IN must be {what}")
        if isinstance(node, (exp.Between, exp.In)) and len(named) > 1:
            raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': BETWEEN / IN take "
                                        "constants on the right")
        types = [self.operand_type(o, group) for o in named]
        first, family = types[0][0], types[0][2]
        for text, type_, fam in types[1:]:
            if fam != family:
                raise QueryTypeError(f"'{node.sql(dialect=CQL)}' compares {first} "
                                     f"({types[0][1]}) with {text} ({type_})")
        for operand in operands:
            if typed(operand):
                continue
            value = literal_value(operand)
            got = "bool" if isinstance(value, bool) else \
                "string" if isinstance(value, str) else "number"
            if got != family:
                column = "column " if isinstance(named[0], exp.Column) else ""
                raise QueryTypeError(
                    f"'{node.sql(dialect=CQL)}': {column}{first} is {types[0][1]} but "
                    f"{operand.sql(dialect=CQL)} is a {got}; compare it with a {family}")

    def operand_type(self, operand: exp.Expression,
                     group: list[ColumnRef] | None) -> tuple[str, str, str]:
        """(text, type, family) of a column or (in HAVING) an aggregate operand.

        COUNT, SUM and AVG are numeric; MIN and MAX have their column's type.
        """
        if isinstance(operand, exp.Column):
            ref = self.resolve(operand)
            if group is not None and ref not in group:
                raise UnsupportedQueryError(f"HAVING uses {'.'.join(ref)}, which is neither "
                                            "grouped nor aggregated")
            col = self.column_type(ref)
            return ".".join(ref), col.type, _family(col)
        agg = self.aggregate(operand)
        if agg.function in ("MIN", "MAX"):
            col = self.column_type(agg.argument)
            return str(agg), col.type, _family(col)
        return str(agg), "numeric", "number"

    def classify(self) -> tuple[dict[str, list[exp.Expression]], list[exp.Expression]]:
        """Split conjuncts into per-stream selections and multi-stream join predicates."""
        single: dict[str, list[exp.Expression]] = {s.name: [] for s in self.streams}
        multi = []
        for conjunct in self.conjuncts():
            conjunct = self.qualify(conjunct)
            streams = {c.table for c in conjunct.find_all(exp.Column)}
            if len(streams) == 1:
                single[streams.pop()].append(conjunct)
            else:
                multi.append(conjunct)
        return single, multi

    def qualify(self, node: exp.Expression) -> exp.Expression:
        """A copy of ``node`` whose columns are qualified with their catalog names."""
        def fix(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column):
                stream, column = self.resolve(n)
                return exp.column(column, stream)
            return n
        return node.copy().transform(fix)

    # -- output -------------------------------------------------------------
    def output(self) -> tuple[list[OutputColumn], list[Aggregate], list[ColumnRef],
                              exp.Expression | None]:
        group = []
        for item in (self.select.args.get("group").expressions
                     if self.select.args.get("group") else []):
            if not isinstance(item, exp.Column):
                raise UnsupportedQueryError(f"GROUP BY '{item.sql(dialect=CQL)}': group by "
                                            "columns only")
            group.append(self.resolve(item))
        group = list(dict.fromkeys(group))  # GROUP BY A.x, A.x groups by A.x once
        aggregates: dict[str, Aggregate] = {}
        projection: list[OutputColumn] = []
        aliased: list[bool] = []  # per output column: was its name given with AS?
        has_plain = []
        for item in self.select.expressions:
            alias = item.alias if isinstance(item, exp.Alias) else None
            node = item.this if isinstance(item, exp.Alias) else item
            if isinstance(node, exp.Star) or (isinstance(node, exp.Column)
                                              and isinstance(node.this, exp.Star)):
                star = node if isinstance(node, exp.Star) else node.this
                if any(star.args.values()):
                    raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}' is not supported: "
                                                "list the columns to keep")
                refs = self.star(node)
                projection += [OutputColumn(c, self.column_type((s, c)).width, (s, c))
                               for s, c in refs]
                aliased += [False] * len(refs)
                has_plain += refs
            elif isinstance(node, exp.Column):
                ref = self.resolve(node)
                projection.append(OutputColumn(alias or ref[1], self.column_type(ref).width,
                                               ref))
                aliased.append(alias is not None)
                has_plain.append(ref)
            elif type(node) in AGGREGATES:
                agg = self.aggregate(node)
                aggregates.setdefault(str(agg), agg)
                # The default name is the aggregate's text as plans and the executor know
                # it, stream and column in the catalog's spelling: SUM(A.x).
                projection.append(OutputColumn(alias or str(agg), agg.width, agg.argument,
                                               agg.function))
                aliased.append(alias is not None)
            else:
                raise UnsupportedQueryError(
                    f"unsupported SELECT item '{node.sql(dialect=CQL)}': select columns, *, "
                    "or COUNT/SUM/AVG/MIN/MAX of a column")
        having = self.select.args.get("having")
        having_expr = None
        if having is not None:
            having_expr = self.qualify(having.this)
            # The same checks as WHERE, an aggregate counting as an operand
            self.check_predicate(having_expr, group)
            for node in having_expr.find_all(*AGGREGATES):
                agg = self.aggregate(node)
                aggregates.setdefault(str(agg), agg)
        if aggregates or group:
            stray = [r for r in has_plain if r not in group]
            if stray:
                raise UnsupportedQueryError(
                    f"column {'.'.join(stray[0])} must appear in GROUP BY or inside an "
                    "aggregate")
        _dedupe_names(projection, aliased)
        return projection, list(aggregates.values()), group, having_expr

    def star(self, node: exp.Expression) -> list[ColumnRef]:
        if isinstance(node, exp.Column) and node.table:
            ref = self.bindings.get(node.table.lower())
            if ref is None:
                raise UnknownStreamError(f"'{node.sql(dialect=CQL)}' names an unknown stream")
            return [(ref.name, c.name) for c in ref.columns]
        return [(s.name, c.name) for s in self.streams for c in s.columns]

    def aggregate(self, node: exp.Expression) -> Aggregate:
        function = AGGREGATES[type(node)]
        arg = node.this
        if isinstance(arg, exp.Distinct):
            raise UnsupportedQueryError(f"{function}(DISTINCT ...) is not supported")
        if isinstance(arg, exp.Star) or (function == "COUNT" and arg is None):
            if function != "COUNT":
                raise UnsupportedQueryError(f"{function}(*) is not defined: name a column")
            return Aggregate("COUNT", None, AGGREGATE_WIDTHS["COUNT"])
        if not isinstance(arg, exp.Column) or node.expressions:
            raise UnsupportedQueryError(f"'{node.sql(dialect=CQL)}': aggregate one column")
        ref = self.resolve(arg)
        col = self.column_type(ref)
        if function in ("SUM", "AVG") and not (col.is_numeric and col.type != "timestamp"):
            raise QueryTypeError(f"{function}({'.'.join(ref)}) needs a numeric column; "
                                 f"{'.'.join(ref)} is {col.type}")
        return Aggregate(function, ref, AGGREGATE_WIDTHS.get(function, col.width))

    # -- all together -------------------------------------------------------
    def build(self, sql: str) -> ContinuousQuery:
        self.reject_unsupported()
        self.bind_streams()
        single, multi = self.classify()
        joins, thetas, implied_selections = close_joins(multi)
        for stream, conjuncts in implied_selections.items():
            single[stream] += conjuncts
        selections = {}
        for stream in self.stream_names():
            if single[stream]:
                sel = group_selections(stream, single[stream])
                if sel.always_true:
                    self.notes.append(f"the selection on {stream} always holds; it is dropped")
                    continue
                selections[stream] = sel
                if sel.always_empty:
                    self.notes.append(f"the selection on {stream} is a contradiction: it "
                                      "never passes a tuple, so the query's result is empty")
        projection, aggregates, group, having = self.output()
        query_win = query_window(self.select)
        return ContinuousQuery(
            sql=sql.strip(),
            streams=tuple(self.streams),
            selections=selections,
            joins=tuple(joins),
            thetas=tuple(thetas),
            projection=tuple(projection),
            aggregates=tuple(aggregates),
            group_by=tuple(group),
            having=having,
            window=self.window(query_win) if query_win is not None else None,
            notes=tuple(self.notes),
        )

    def stream_names(self) -> list[str]:
        return [s.name for s in self.streams]


def _family(col: Column) -> str:
    return "bool" if col.type == "bool" else "string" if col.type == "string" else "number"


def _dedupe_names(projection: list[OutputColumn], aliased: list[bool]) -> None:
    """Qualify colliding output names (``SELECT *`` over a join) with their stream.

    Only names the user did not give: an alias is never replaced, and the same
    alias given twice is an error.
    """
    given = Counter(c.name for c, user in zip(projection, aliased) if user)
    twice = next((name for name, n in given.items() if n > 1), None)
    if twice is not None:
        raise UnsupportedQueryError(f"output name {twice} is used twice: give each output "
                                    "column its own name")
    counts = Counter(c.name for c in projection)
    for i, (col, user) in enumerate(zip(projection, aliased)):
        if counts[col.name] > 1 and not user and col.source and not col.aggregate:
            projection[i] = replace(col, name=f"{col.source[0]}.{col.source[1]}")
