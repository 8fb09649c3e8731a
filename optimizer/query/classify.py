"""Classify a bound, type-checked query's parts: what each operator of a plan needs.

:func:`classify_predicates` takes WHERE and every JOIN's ON as one conjunction
in conjunctive normal form, qualifies it (:func:`cqopt.optimizer.query.bind.qualify`)
and sorts each conjunct by the streams it reads: one stream makes a selection
(grouped per stream, heuristic 1 of the OM paper, see
:mod:`cqopt.optimizer.query.selections`), two or more an equi-join (closed
transitively, see :mod:`cqopt.optimizer.query.join_closure`) or a theta predicate.
A selection that always holds is dropped and one that never holds is kept,
each with a note.

:func:`classify_output` reads the SELECT list (columns, ``*``, ``S.*`` and
aggregates), GROUP BY and HAVING. An output column is named by its alias, else
its column name, else (an aggregate) its text ``SUM(S.a)``; colliding names
without an alias are qualified (``S.a``), and one alias given twice is an error.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.bind import bind
>>> from cqopt.optimizer.query.dialect import parse
>>> host = {"rate": [1, 10], "columns": {"x": "int", "y": "int"}}
>>> cat = Catalog.from_dict({"streams": {"A": host, "B": host}})
>>> select = parse("SELECT A.x, B.x, COUNT(*) FROM A JOIN B ON A.x = B.y "
...                "WHERE A.y > 2 AND A.x < B.x GROUP BY A.x, B.x WINDOW [1]")
>>> scope = bind(select, cat)
>>> predicates = classify_predicates(select, scope)
>>> {s: sel.predicate_sql for s, sel in predicates.selections.items()}
{'A': 'A.y > 2'}
>>> [str(p) for p in (*predicates.joins, *predicates.thetas)]
['A.x = B.y', 'A.x < B.x']
>>> [c.name for c in classify_output(select, scope).projection]
['A.x', 'B.x', 'COUNT(*)']
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from sqlglot import exp
from sqlglot.optimizer.normalize import normalize, normalized

from cqopt.optimizer.query.aggregates import AGGREGATES, Aggregate, aggregate, aggregate_text
from cqopt.optimizer.query.bind import ColumnRef, Scope, group_by, qualify, resolve
from cqopt.optimizer.query.check_types import conditions
from cqopt.optimizer.query.dialect import CQL
from cqopt.optimizer.query.errors import UnknownStreamError, UnsupportedQueryError
from cqopt.optimizer.query.join_closure import JoinPredicate, ThetaPredicate, close_joins
from cqopt.optimizer.query.selections import Selection, group_selections


@dataclass(frozen=True)
class Predicates:
    """A query's conditions, classified: what selections and joins apply."""

    selections: dict[str, Selection]  # per stream, only streams with one
    joins: tuple[JoinPredicate, ...]  # with their transitive closure
    thetas: tuple[ThetaPredicate, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class OutputColumn:
    """One column of the query's result."""

    name: str
    width: int
    source: ColumnRef | None = None  # the stream column it comes from
    aggregate: str | None = None  # COUNT, SUM, AVG, MIN or MAX


def output_column_ref(column: OutputColumn) -> tuple[str | None, str]:
    """The pair an output column is in plans: ``(stream, column)`` or ``(None, "SUM(S.a)")``.

    >>> output_column_ref(OutputColumn("total", 8, ("S", "a"), "SUM"))
    (None, 'SUM(S.a)')
    """
    if column.aggregate:
        return None, aggregate_text(column.aggregate, column.source)
    return column.source


@dataclass(frozen=True)
class Output:
    """What a query's result is made of."""

    projection: tuple[OutputColumn, ...]
    aggregates: tuple[Aggregate, ...]  # of SELECT and HAVING, each once
    group_by: tuple[ColumnRef, ...]
    having: exp.Expression | None  # qualified


def classify_predicates(select: exp.Select, scope: Scope) -> Predicates:
    """Selections per stream, closed equi-joins and theta predicates of ``select``.

    Parameters
    ----------
    select
        A query that passed :func:`~cqopt.optimizer.query.check_types.check_types`.
    scope
        Its binding (:func:`~cqopt.optimizer.query.bind.bind`).
    """
    single, multi = split_conjuncts(conjuncts(select), scope)
    joins, thetas, implied_selections = close_joins(multi)
    for stream, implied in implied_selections.items():
        single[stream] += implied
    selections, notes = {}, []
    for stream in scope.stream_names:
        if not single[stream]:
            continue
        selection = group_selections(stream, single[stream])
        if selection.always_true:
            notes.append(f"the selection on {stream} always holds; it is dropped")
            continue
        selections[stream] = selection
        if selection.always_empty:
            notes.append(f"the selection on {stream} is a contradiction: it never passes "
                         "a tuple, so the query's result is empty")
    return Predicates(selections, tuple(joins), tuple(thetas), tuple(notes))


def conjuncts(select: exp.Select) -> list[exp.Expression]:
    """The conjuncts of WHERE and each ON, in conjunctive normal form, as written."""
    out = []
    for condition in conditions(select):
        cnf = condition if normalized(condition, dnf=False) \
            else normalize(condition.copy(), dnf=False)
        out += [c.unnest() for c in cnf.flatten()] if isinstance(cnf, exp.And) \
            else [cnf.unnest()]
    return out


def split_conjuncts(conjuncts: list[exp.Expression], scope: Scope) -> tuple[
        dict[str, list[exp.Expression]], list[exp.Expression]]:
    """Qualified conjuncts of one stream (per stream) and of several streams."""
    single: dict[str, list[exp.Expression]] = {s: [] for s in scope.stream_names}
    multi = []
    for conjunct in conjuncts:
        conjunct = qualify(conjunct, scope)
        streams = {c.table for c in conjunct.find_all(exp.Column)}
        if len(streams) == 1:
            single[streams.pop()].append(conjunct)
        else:
            multi.append(conjunct)
    return single, multi


def classify_output(select: exp.Select, scope: Scope) -> Output:
    """The projection, aggregates, GROUP BY and HAVING of ``select`` (type-checked).

    Raises
    ------
    UnsupportedQueryError
        A SELECT item other than a column, ``*``, ``S.*`` or an aggregate of
        one column; a plain column neither grouped nor aggregated in an
        aggregate query; or one output name given twice.
    """
    group = group_by(select, scope)
    aggregates: dict[str, Aggregate] = {}
    projection: list[OutputColumn] = []
    aliased: list[bool] = []  # per output column: was its name given with AS?
    plain: list[ColumnRef] = []  # columns selected outside an aggregate
    for item in select.expressions:
        alias = item.alias if isinstance(item, exp.Alias) else None
        node = item.this if isinstance(item, exp.Alias) else item
        if isinstance(node, exp.Star) or (isinstance(node, exp.Column)
                                          and isinstance(node.this, exp.Star)):
            refs = _star(node, scope)
            projection += [OutputColumn(c, scope.column((s, c)).width, (s, c)) for s, c in refs]
            aliased += [False] * len(refs)
            plain += refs
        elif isinstance(node, exp.Column):
            ref = resolve(node, scope)
            projection.append(OutputColumn(alias or ref[1], scope.column(ref).width, ref))
            aliased.append(alias is not None)
            plain.append(ref)
        elif type(node) in AGGREGATES:
            agg = aggregate(node, scope)
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
    having = select.args.get("having")
    having_expr = None
    if having is not None:
        having_expr = qualify(having.this, scope)  # check_types checked it
        for node in having_expr.find_all(*AGGREGATES):
            agg = aggregate(node, scope)
            aggregates.setdefault(str(agg), agg)
    if aggregates or group:
        stray = [r for r in plain if r not in group]
        if stray:
            raise UnsupportedQueryError(
                f"column {'.'.join(stray[0])} must appear in GROUP BY or inside an aggregate")
    return Output(tuple(_dedupe_names(projection, aliased)), tuple(aggregates.values()),
                  group, having_expr)


def _star(node: exp.Expression, scope: Scope) -> list[ColumnRef]:
    """The columns ``*`` or ``S.*`` selects."""
    if isinstance(node, exp.Column) and node.table:
        ref = scope.names.get(node.table.lower())
        if ref is None:
            raise UnknownStreamError(f"'{node.sql(dialect=CQL)}' names an unknown stream")
        return [(ref.name, c.name) for c in ref.columns]
    return [(s.name, c.name) for s in scope.streams for c in s.columns]


def _dedupe_names(projection: list[OutputColumn], aliased: list[bool]) -> list[OutputColumn]:
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
    return [replace(col, name=f"{col.source[0]}.{col.source[1]}")
            if counts[col.name] > 1 and not user and col.source and not col.aggregate else col
            for col, user in zip(projection, aliased)]
