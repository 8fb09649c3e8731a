"""A plan as SQL text in any sqlglot dialect, shaped like the plan.

:func:`plan_sql` turns a :class:`~cqopt.optimizer.plan.Plan` into one SQL
query, built as a sqlglot expression tree and printed by sqlglot's generator
for the dialect asked for (``spark``, ``hive``, ``postgres``, ``duckdb``,
...), so the text is the plan's, not a rewrite of the user's query:

- **each stream's own operators, in the plan's order**: a stream is a
  nested subquery per operator, bottom-up, each aliased with the stream's
  name: the source is the table ``S``; a selection is ``SELECT <its columns>
  FROM (<below>) AS S WHERE <predicate>``; a projection is ``SELECT <kept
  columns> FROM (<below>) AS S``. So σ→π reads ``SELECT ... FROM (SELECT ...
  WHERE ...)`` and π→σ the other way round;
- **the joins in the plan's left-deep order**: ``FROM A JOIN B ON ... JOIN C
  ON ...`` with every predicate the plan's join applies (``CROSS JOIN`` for a
  Cartesian step). SQL joins associate to the left, so this is
  ``(A ⋈ B) ⋈ C``;
- **the aggregate on top**: the outer SELECT with GROUP BY and HAVING, and
  the query's output columns, named as the query names them.

In Spark's dialects each Cartesian step also carries a ``SHUFFLE_REPLICATE_NL``
hint, without which Spark would move it (see :func:`plan_expression`).

**Convention for windows.** Dialects have no common syntax for a stream
window, so the SQL reads one *round*: a table named like a stream holds that
stream's current window (what the reference executor and ``to_spark`` get
as input). The windows are stated in the leading comment, ``/* cqopt plan
<id>; windows: S [RANGE 1 SECONDS], ... */``.

**Output columns.** With the query (``query=``), the result has the query's
output columns in its order and names. Without it, the plan's own top
columns are used, named by their text (``S.a``, ``COUNT(*)``).

A plan the dialect cannot express (sqlglot reports the construct as
unsupported there), an unknown dialect, or a join whose right input is a join
(cqopt's plans are left-deep) is a :class:`PlanSqlError` naming the construct
and the dialect.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.logical import parse_query
>>> from cqopt.optimizer.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int", "c": "double"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]", cat)
>>> print(plan_sql(enumerate_plans(q)[1], "duckdb", query=q, pretty=False))
/* cqopt plan S[πσ]; windows: S [RANGE 1 SECONDS] */ SELECT "S"."a" AS "a" FROM (SELECT "S"."a", "S"."b" FROM (SELECT "S"."a", "S"."b" FROM "S" AS "S") AS "S" WHERE "S"."b" = 1) AS "S"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.spark2 import Spark2
from sqlglot.errors import ErrorLevel, SqlglotError

from cqopt.errors import CqoptError, did_you_mean
from cqopt.optimizer.classify import output_column_ref
from cqopt.optimizer.plan import ColumnRef, Plan, column_text
from cqopt.optimizer.plan_nodes import (
    AggregateNode,
    JoinNode,
    PlanNode,
    ProjectionNode,
    SelectionNode,
    SourceNode,
    consumer,
)

if TYPE_CHECKING:
    from cqopt.optimizer.logical import ContinuousQuery

AGGREGATE_FUNCTIONS: dict[str, type[exp.Expression]] = {
    "COUNT": exp.Count, "SUM": exp.Sum, "AVG": exp.Avg, "MIN": exp.Min, "MAX": exp.Max,
}

# Spark's hint for a Cartesian product (see plan_expression).
CARTESIAN_HINT = "SHUFFLE_REPLICATE_NL"


class PlanSqlError(CqoptError):
    """A plan cannot be written as SQL of the dialect asked for."""


def plan_sql(plan: Plan, dialect: str = "spark", *, query: ContinuousQuery | None = None,
             pretty: bool = True) -> str:
    """The SQL text of ``plan`` in ``dialect`` (see the module docstring).

    Parameters
    ----------
    plan : Plan
        A left-deep candidate plan.
    dialect : str
        A sqlglot dialect name: ``spark``, ``hive``, ``postgres``, ``duckdb``, ...
    query : ContinuousQuery, optional
        The plan's query: gives the result its output columns' names and order.
    pretty : bool
        Indented, one clause per line (default) or one line.

    Returns
    -------
    str
        One SQL query, its first line the comment stating the plan and windows.

    Raises
    ------
    PlanSqlError
        An unknown dialect, a construct the dialect cannot express, or a
        plan that is not left-deep.
    """
    try:
        engine = Dialect.get_or_raise(dialect)
    except (ValueError, SqlglotError):
        known = sorted(d.value for d in sqlglot.Dialects if d.value)
        raise PlanSqlError(f"unknown SQL dialect {dialect!r}{did_you_mean(dialect, known)}; "
                           f"sqlglot knows {', '.join(known)}") from None
    tree = plan_expression(plan, query=query, cartesian_hints=isinstance(engine, Spark2))
    try:
        return tree.sql(dialect=dialect, pretty=pretty, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PlanSqlError(f"plan {plan.id} cannot be written in the {dialect} dialect: "
                           f"{message}") from None


def plan_expression(plan: Plan, *, query: ContinuousQuery | None = None,
                    cartesian_hints: bool = False) -> exp.Select:
    """The sqlglot tree of :func:`plan_sql`, before any dialect prints it.

    ``cartesian_hints`` (Spark's dialects) hints each Cartesian step's right
    input with ``SHUFFLE_REPLICATE_NL``: Spark's ReorderJoin rule, active
    even with cost-based reordering off, moves a Cartesian product above the
    joins that have a condition, and it leaves a hinted join alone. A
    Cartesian step then runs as Spark's Cartesian product, which it is.
    """
    built: dict[str, _Sql] = {}
    for key in plan.operators():
        node = plan.node(key)
        built[key] = node_sql(node, [built[k] for k in node.inputs], plan)
    top = built[plan.root]
    select = top.select if top.select is not None else exp.Select().from_(top.relation)
    for ref, name in plan_outputs(plan, query):
        value = _aggregate_call(ref[1], top.aggregate) if ref[0] is None else _column(*ref)
        select = select.select(exp.alias_(value, name, quoted=True), copy=False)
    if cartesian_hints:
        crossed = [plan.node(node.inputs[1]).stream for node in map(plan.node, plan.operators())
                   if isinstance(node, JoinNode) and node.cartesian]
        if crossed:
            select.set("hint", exp.Hint(expressions=[
                exp.JoinHint(this=CARTESIAN_HINT, expressions=[
                    exp.Table(this=exp.to_identifier(s, quoted=True))]) for s in crossed]))
    windows = ", ".join(f"{s} {plan.node(f'src:{s}').window}" for s in plan.join_order)
    select.add_comments([f" cqopt plan {plan.id}; windows: {windows} "], prepend=True)
    return select


def plan_outputs(plan: Plan, query: ContinuousQuery | None = None
                 ) -> list[tuple[ColumnRef, str]]:
    """The result's columns: (column reference, output name), in order.

    With ``query``, its output columns; else the plan's top columns named by
    their text. An aggregate's reference is ``(None, "SUM(S.a)")``.

    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.logical import parse_query
    >>> from cqopt.optimizer.enumerate import enumerate_plans
    >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
    ...     "columns": {"a": "int", "b": "int"}}}})
    >>> q = parse_query("SELECT S.a AS x, COUNT(*) FROM S GROUP BY S.a WINDOW [1]",
    ...                 cat)
    >>> plan_outputs(enumerate_plans(q)[0], q)
    [(('S', 'a'), 'x'), ((None, 'COUNT(*)'), 'COUNT(*)')]
    """
    if query is not None:
        return [(output_column_ref(c), c.name) for c in query.projection]
    root = plan.node(plan.root)
    refs = root.columns if isinstance(root, ProjectionNode) and root.stream is None \
        else root.emits
    return [(ref, column_text(ref)) for ref in refs]


@dataclass(frozen=True)
class _Sql:
    """What an operator's SQL is so far: a stream's relation (its chain of operators as
    nested subqueries, aliased with the stream's name) or, from the first join up, the
    outer SELECT's FROM and JOINs (with GROUP BY and HAVING once the aggregate is in)."""

    relation: exp.Expression | None = None
    select: exp.Select | None = None
    aggregate: AggregateNode | None = None

    def outer(self) -> exp.Select:
        """The outer SELECT, started from the stream's relation if there is none yet."""
        return self.select if self.select is not None else exp.Select().from_(self.relation)


@consumer("the SQL writer")
def node_sql(node: PlanNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    """One operator's SQL over its inputs' (see the module docstring)."""


@node_sql.register
def _(node: SourceNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    return _Sql(exp.alias_(exp.Table(this=exp.to_identifier(node.stream, quoted=True)),
                           node.stream, table=True, quoted=True))


@node_sql.register
def _(node: SelectionNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    inner = exp.select(*[_column(*c) for c in node.emits]) \
        .from_(_chain_input(node, inputs, plan)).where(_quoted(node.predicate.predicate))
    return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))


@node_sql.register
def _(node: ProjectionNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    if node.stream is None:  # the final projection: the outer SELECT's columns (plan_outputs)
        return inputs[0]
    inner = exp.select(*[_column(*c) for c in dict.fromkeys(node.columns)]) \
        .from_(_chain_input(node, inputs, plan))
    return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))


@node_sql.register
def _(node: JoinNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    left, right = inputs
    if right.relation is None:
        raise PlanSqlError(f"plan {plan.id} joins the result of a join as its right "
                           "input (a bushy plan): only left-deep plans become SQL")
    select = left.outer()
    if node.cartesian or not node.predicate:
        select = select.join(right.relation, join_type="cross", copy=False)
    else:
        condition = exp.and_(*[_quoted(p.expression) for p in node.predicate])
        select = select.join(right.relation, on=condition, join_type="inner", copy=False)
    return _Sql(select=select)


@node_sql.register
def _(node: AggregateNode, inputs: list[_Sql], plan: Plan) -> _Sql:
    select = inputs[0].outer()
    if node.group_by:
        select = select.group_by(*[_column(*c) for c in node.group_by], copy=False)
    if node.having is not None:
        select = select.having(_quoted(node.having), copy=False)
    return _Sql(select=select, aggregate=node)


def _chain_input(node: PlanNode, inputs: list[_Sql], plan: Plan) -> exp.Expression:
    """The relation below a stream's selection or projection."""
    if inputs[0].relation is None:
        raise PlanSqlError(f"plan {plan.id}: a {node.kind} above a join has no SQL form here")
    return inputs[0].relation


def _column(stream: str, name: str) -> exp.Column:
    return exp.column(name, stream, quoted=True)


def _quoted(node: exp.Expression) -> exp.Expression:
    """A copy of a qualified predicate whose columns are quoted identifiers."""
    return node.copy().transform(
        lambda n: _column(n.table, n.name) if isinstance(n, exp.Column) else n)


def _aggregate_call(text: str, aggregate: AggregateNode | None) -> exp.Expression:
    """The call of the plan's aggregate whose text is ``text`` (``SUM(S.a)``)."""
    found = next((a for a in (aggregate.aggregates if aggregate else ()) if str(a) == text),
                 None)
    if found is None:
        raise PlanSqlError(f"the plan computes no aggregate {text}")
    argument = exp.Star() if found.argument is None else _column(*found.argument)
    return AGGREGATE_FUNCTIONS[found.function](this=argument)
