"""A plan as SQL text in any sqlglot dialect, shaped like the plan.

:func:`plan_sql` turns a :class:`~cqopt.optimizer.plans.plan.Plan` into one SQL
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

**Rounds.** A continuous query's result is per *round*: round ``r`` of
``W`` seconds ends at ``start + (r + 1) W``, and each stream's ``[RANGE w]``
window then holds the tuples with ``end - w <= ts < end``. The SQL carries
the rounds, so that run once on whole tables (every tuple of a trace, in
Spark, DuckDB or PostgreSQL) it gives every round's result and no pair
across rounds:

- each stream's source computes its tuples' round,
  ``CAST(FLOOR((ts - start) / W) AS BIGINT)``, as the column ``cqopt_round``
  (:data:`ROUND_COLUMN`), which every selection and projection above keeps;
- every join step also equates its two sides' rounds (a Cartesian step is
  then a join on the round: the product within each round);
- the aggregate groups by the round first; the result's first column is the
  round.

A sliding window longer than the round, ``[RANGE w]`` with ``w > W``, puts
a tuple in ``k = ceil(w / W)`` rounds: the source is crossed with ``(VALUES
(0), ..., (k - 1)) AS cqopt_offset(k)`` and a tuple of round ``q`` appears
in rounds ``q .. q + k - 1``; when ``w`` is not ``k W`` (and for a window
shorter than the round), the tuples before ``end - w`` are filtered out,
``WHERE ts >= start + (cqopt_round + 1) * W - w``. So the last ``k - 1``
rounds of the result run past the trace's end, over windows the trace fills
only partly. ``[ROWS n]``, ``[PARTITION BY ... ROWS n]``, ``[NOW]`` and
``[UNBOUNDED]`` windows are no span of time and have no round form: such a
plan is a :class:`PlanSqlError` naming the stream and its window. A tuple's
round is read from its ``ts`` column (seconds, as cqopt's traces hold it),
so every stream needs one; ``W`` defaults to the longest ``[RANGE]`` window
of the plan's streams (the round ``cqopt run`` cuts).

**The round origin** is one rule, the run's: round 0 starts at the first
tuple, the earliest ``ts`` of the plan's streams, as ``cqopt run`` fixes it
from its first micro-batch (and keeps it in its ``state.json``, so a resumed
run keeps its rounds). By default the SQL computes it, ``(SELECT MIN(m) FROM
(SELECT MIN(ts) AS m FROM S UNION ALL ...))``, so on a whole trace it gives
the rounds a run of that trace gives; ``start=`` fixes it instead (a run's
``--start``, or the ``start`` of its ``state.json``).

One difference from the per-round result remains: a query with aggregates
and no GROUP BY has, per round, one row even when nothing reaches the
aggregate (``COUNT(*)`` 0), but ``GROUP BY cqopt_round`` has no group, so no
row, for such a round.

With ``round_column=`` the tables hold each tuple's round already, in that
column (a run's tuples, cut into rounds as the run cuts them, a tuple of a
long window in each round whose window holds it): each source reads it as
``cqopt_round`` and nothing is computed from ``ts``, so any window kind is
written and ``round_s`` and ``start`` are unused.

With ``one_round=True`` the SQL reads one round instead, as it did before
rounds were carried: a table named like a stream holds that stream's current
window (what the reference executor and ``to_spark`` get as input), and
nothing relates tuples to rounds. In Spark's dialects each Cartesian step
then carries a ``SHUFFLE_REPLICATE_NL`` hint, without which Spark would move
it (see :func:`plan_expression`). Both forms state the windows in a leading
comment, ``/* cqopt plan <id>; windows: S [RANGE 1 SECONDS], ... */``.

**Join strategies.** A join whose strategy is hinted
(:mod:`~cqopt.optimizer.plans.strategies`) carries Spark's hint in Spark's
dialects, ``/*+ BROADCAST(UDP), MERGE(SF) */``, naming the input the
strategy names (the right input, or for ``broadcast_left`` the left). A hint
names a table, so a broadcast of the left input is written only at the
first join, whose left input is a stream; further up the left input is a
join's result, which only the DataFrame form
(:func:`cqopt.spark.plan_frame.to_spark`) can hint. Other dialects have no
join hints: a plan with a hinted join is a :class:`PlanSqlError` naming the
plan and the dialect there (a plan that leaves every join to the engine is
written in every dialect).

**Output columns** are named by one rule, the query's (``cqopt explain
--sql-out`` and ``choose --sql-out`` give the query): a column by its alias,
else its column name (``a``, not ``S.a``), qualified by its stream only where
two outputs would share a name (``SELECT *`` over a join), an aggregate by
its text (``COUNT(*)``). With the query (``query=``), the result has the
query's output columns in its order; without it, the plan's own top columns,
named by the same rule.

A plan the dialect cannot express (sqlglot reports the construct as
unsupported there), an unknown dialect, or a join whose right input is a join
(cqopt's plans are left-deep) is a :class:`PlanSqlError` naming the construct
and the dialect.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int", "c": "double"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [1]", cat)
>>> print(plan_sql(enumerate_plans(q)[1], "duckdb", query=q, pretty=False, one_round=True))
/* cqopt plan S[πσ]; windows: S [RANGE 1 SECONDS] */ SELECT "S"."a" AS "a" FROM (SELECT "S"."a", "S"."b" FROM (SELECT "S"."a", "S"."b" FROM "S" AS "S") AS "S" WHERE "S"."b" = 1) AS "S"
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"ts": "double", "a": "int", "b": "int"}}}})
>>> q = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [2]", cat)
>>> print(plan_sql(enumerate_plans(q)[0], "duckdb", query=q, start=10, pretty=False))
/* cqopt plan S[σπ]; windows: S [RANGE 2 SECONDS]; rounds of 2 s from ts 10: cqopt_round */ SELECT "S"."cqopt_round" AS "cqopt_round", "S"."a" AS "a" FROM (SELECT "S"."a", "S"."cqopt_round" FROM (SELECT "S"."ts", "S"."a", "S"."b", "S"."cqopt_round" FROM (SELECT "S"."ts", "S"."a", "S"."b", CAST(FLOOR(("S"."ts" - 10.0) / 2.0) AS BIGINT) AS "cqopt_round" FROM "S" AS "S") AS "S" WHERE "S"."b" = 1) AS "S") AS "S"
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.dialects.spark2 import Spark2
from sqlglot.errors import ErrorLevel, SqlglotError

from cqopt.errors import CqoptError, did_you_mean
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.plan import ColumnRef, Plan, column_text
from cqopt.optimizer.plans.strategies import AUTO, SPARK_HINTS, hinted_side
from cqopt.optimizer.query.classify import output_column_ref

if TYPE_CHECKING:
    from cqopt.optimizer.query.logical import ContinuousQuery

AGGREGATE_FUNCTIONS: dict[str, type[exp.Expression]] = {
    "COUNT": exp.Count, "SUM": exp.Sum, "AVG": exp.Avg, "MIN": exp.Min, "MAX": exp.Max,
}

# Spark's hint for a Cartesian product (see plan_expression).
CARTESIAN_HINT = "SHUFFLE_REPLICATE_NL"
# The column holding a tuple's round, and the one its round is read from (seconds).
ROUND_COLUMN = "cqopt_round"
TIME_COLUMN = "ts"
_OFFSET, _OFFSET_COLUMN = "cqopt_offset", "k"
# What a projection that keeps no column selects (SQL has no empty SELECT list).
_NO_COLUMN = "cqopt_row"
# The one-row table of round 0's start when the SQL computes it (the first tuple's ts).
_START, _START_COLUMN = "cqopt_start", "ts"


class PlanSqlError(CqoptError):
    """A plan cannot be written as SQL of the dialect asked for."""


def plan_sql(plan: Plan, dialect: str = "spark", *, query: ContinuousQuery | None = None,
             pretty: bool = True, round_s: float | None = None,
             start: float | None = None, one_round: bool = False,
             round_column: str | None = None, flat: bool = False) -> str:
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
    round_s : float, optional
        The round's length ``W`` in seconds; default the longest ``[RANGE]``
        window of the plan's streams.
    start : float, optional
        The ``ts`` at which round 0 starts; default the first tuple's, the
        earliest ``ts`` of the plan's streams, computed by the SQL (as
        ``cqopt run`` starts its rounds; see the module docstring).
    one_round : bool
        SQL over tables that hold one round's windows, carrying no round
        (``round_s`` and ``start`` are then unused).
    round_column : str, optional
        Carrying rounds, read each tuple's round from this column of the
        tables instead of computing it from ``ts`` (``round_s`` and ``start``
        are then unused).
    flat : bool
        With ``one_round`` or ``round_column``: one SELECT instead of a
        subquery per operator: the streams joined in the plan's order, every
        selection in one WHERE, the aggregate last. Spark runs it as it runs
        the nested form (its optimizer pushes selections down and prunes
        columns either way; join order and hints are the plan's), and analyses
        it in less time: the form of a workload's joint job.

    Returns
    -------
    str
        One SQL query, its first line the comment stating the plan and windows.

    Raises
    ------
    PlanSqlError
        An unknown dialect, a construct the dialect cannot express, a plan
        that is not left-deep, or (carrying rounds) a window that is no span
        of time, a stream without ``ts``, a round length that is not > 0.
    """
    try:
        engine = Dialect.get_or_raise(dialect)
    except (ValueError, SqlglotError):
        known = sorted(d.value for d in sqlglot.Dialects if d.value)
        raise PlanSqlError(f"unknown SQL dialect {dialect!r}{did_you_mean(dialect, known)}; "
                           f"sqlglot knows {', '.join(known)}") from None
    spark = isinstance(engine, Spark2)
    hinted = [(key, node.strategy) for key, node in _joins(plan) if node.strategy != AUTO]
    if hinted and not spark:
        key, strategy = hinted[0]
        raise PlanSqlError(f"plan {plan.id} cannot be written in the {dialect} dialect: its "
                           f"{key} is hinted {strategy}, a Spark join hint {dialect} has no "
                           "way to state; write it for spark, or plan without the "
                           "join_strategies rule")
    tree = plan_expression(plan, query=query, cartesian_hints=spark, strategy_hints=spark,
                           round_s=round_s, start=start, one_round=one_round,
                           round_column=round_column, flat=flat)
    return tree_sql(tree, plan, dialect, pretty)


def tree_sql(tree: exp.Expression, plan: Plan, dialect: str, pretty: bool = False) -> str:
    """``tree`` (:func:`plan_expression`'s, perhaps rewritten) printed in ``dialect``; a
    construct the dialect cannot express is a :class:`PlanSqlError` naming ``plan``."""
    try:
        return tree.sql(dialect=dialect, pretty=pretty, unsupported_level=ErrorLevel.RAISE)
    except SqlglotError as err:
        message = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise PlanSqlError(f"plan {plan.id} cannot be written in the {dialect} dialect: "
                           f"{message}") from None


def plan_expression(plan: Plan, *, query: ContinuousQuery | None = None,
                    cartesian_hints: bool = False, round_s: float | None = None,
                    start: float | None = None, one_round: bool = False,
                    strategy_hints: bool = False,
                    round_column: str | None = None, flat: bool = False) -> exp.Select:
    """The sqlglot tree of :func:`plan_sql`, before any dialect prints it.

    ``cartesian_hints`` (Spark's dialects) hints each Cartesian step's right
    input with ``SHUFFLE_REPLICATE_NL`` in the one-round form: Spark's
    ReorderJoin rule, active even with cost-based reordering off, moves a
    Cartesian product above the joins that have a condition, and it leaves a
    hinted join alone. A Cartesian step then runs as Spark's Cartesian
    product, which it is. Carrying rounds, every step has a condition (the
    rounds' equality), so nothing moves it and it runs as the equi-join on
    the round it is; a nested-loop hint there would pair every round with
    every other.

    ``strategy_hints`` (Spark's dialects) writes each hinted join's strategy
    as Spark's hint on the input it names (see the module docstring).

    ``flat`` writes the plan as one SELECT (see :func:`plan_sql`).
    """
    rounds = (None if one_round else _held_rounds(plan, round_column)
              if round_column is not None else _rounds(plan, round_s, start))
    if flat:
        if rounds is not None and rounds.held is None:
            raise PlanSqlError(f"plan {plan.id}: the flat form reads rounds from a column or "
                               "runs one round; pass round_column= or one_round=True")
        top = _flat(plan, rounds)
        round_ref = None if rounds is None else _column(plan.join_order[0], rounds.held)
    else:
        built: dict[str, _Sql] = {}
        for key in plan.operators():
            node = plan.node(key)
            built[key] = node_sql(node, [built[k] for k in node.inputs], plan, rounds)
        top = built[plan.root]
        round_ref = None if rounds is None else _column(plan.join_order[0], ROUND_COLUMN)
    select = top.outer()
    if round_ref is not None:
        select = select.select(exp.alias_(round_ref, ROUND_COLUMN, quoted=True), copy=False)
    for ref, name in plan_outputs(plan, query):
        value = _aggregate_call(ref[1], top.aggregate) if ref[0] is None else _column(*ref)
        select = select.select(exp.alias_(value, name, quoted=True), copy=False)
    hints = []
    if cartesian_hints and rounds is None:
        hints += [(CARTESIAN_HINT, node.streams[-1]) for _, node in _joins(plan)
                  if node.cartesian]
    if strategy_hints:
        hints += [_strategy_hint(plan, key, node) for key, node in _joins(plan)
                  if node.strategy != AUTO]
    if hints:
        select.set("hint", exp.Hint(expressions=[
            exp.JoinHint(this=name, expressions=[
                exp.Table(this=exp.to_identifier(s, quoted=True))]) for name, s in hints]))
    windows = ", ".join(f"{s} {plan.node(f'src:{s}').window}" for s in plan.join_order)
    comment = f" cqopt plan {plan.id}; windows: {windows}"
    if rounds is not None and rounds.held is not None:
        comment += f"; rounds read from {rounds.held}: {ROUND_COLUMN}"
    elif rounds is not None:
        origin = (f"ts {rounds.start:g}" if rounds.start is not None else
                  "the first tuple (MIN(ts) of " + ", ".join(plan.join_order) + ")")
        comment += f"; rounds of {rounds.seconds:g} s from {origin}: {ROUND_COLUMN}"
    first = None if rounds is None else rounds.first_tuple()
    if first is not None:
        select = select.with_(exp.to_identifier(_START, quoted=True), as_=first, copy=False)
    # The comment leads the text, before any WITH.
    leading = select.args.get("with_", select.args.get("with")) if first is not None else None
    (leading or select).add_comments([comment + " "], prepend=True)
    return select


def _flat(plan: Plan, rounds: _Rounds | None) -> _Sql:
    """The plan as one SELECT: its streams joined in the plan's order (each join with its
    predicates, and the rounds' equality when rounds are held), every selection in one
    WHERE, the aggregate's GROUP BY (the round first) and HAVING; projections leave no
    trace (the outer SELECT names the columns the result keeps)."""
    def table(stream: str) -> exp.Expression:
        return exp.alias_(exp.Table(this=exp.to_identifier(stream, quoted=True)), stream,
                          table=True, quoted=True)

    select = exp.Select().from_(table(plan.join_order[0]))
    where, aggregate = [], None
    for key in plan.operators():
        node = plan.node(key)
        if isinstance(node, kinds.SelectionNode):
            where.append(_quoted(node.predicate.predicate))
        elif isinstance(node, kinds.JoinNode):
            if len(plan.node(node.inputs[1]).streams) > 1:
                raise PlanSqlError(f"plan {plan.id} joins the result of a join as its right "
                                   "input (a bushy plan): only left-deep plans become SQL")
            conditions = [_quoted(p.expression) for p in node.predicate or ()]
            if rounds is not None:  # the two sides' tuples meet only within a round
                conditions.append(exp.EQ(this=_column(node.streams[0], rounds.held),
                                         expression=_column(node.streams[-1], rounds.held)))
            right = table(node.streams[-1])
            select = (select.join(right, on=exp.and_(*conditions), join_type="inner",
                                  copy=False) if conditions else
                      select.join(right, join_type="cross", copy=False))
        elif isinstance(node, kinds.AggregateNode):
            aggregate = node
    if where:
        select = select.where(exp.and_(*where), copy=False)
    if aggregate is not None:
        keys = [_column(*c) for c in aggregate.group_by]
        if rounds is not None:
            keys.insert(0, _column(aggregate.streams[0], rounds.held))
        if keys:
            select = select.group_by(*keys, copy=False)
        if aggregate.having is not None:
            select = select.having(_quoted(aggregate.having), copy=False)
    return _Sql(select=select, aggregate=aggregate)


def _joins(plan: Plan) -> list[tuple[str, kinds.JoinNode]]:
    """The plan's joins, bottom-up."""
    return [(key, plan.node(key)) for key in plan.operators()
            if isinstance(plan.node(key), kinds.JoinNode)]


def _strategy_hint(plan: Plan, key: str, node: kinds.JoinNode) -> tuple[str, str]:
    """Spark's hint of a join's strategy and the stream it names."""
    if hinted_side(node.strategy) == "right":
        return SPARK_HINTS[node.strategy], node.streams[-1]
    if len(node.streams) > 2:
        raise PlanSqlError(f"plan {plan.id} cannot be written in Spark's SQL dialects: its "
                           f"{key} broadcasts "
                           "its left input, a join's result, which a SQL hint cannot name "
                           "(hints name tables); run it as a DataFrame (cqopt.spark.to_spark)")
    return SPARK_HINTS[node.strategy], node.streams[0]


_ONE_ROUND = ("plan_sql(..., one_round=True) writes SQL over tables that each hold one "
              "round's windows instead")


@dataclass(frozen=True)
class _Rounds:
    """Round ``r`` holds ``start + r seconds <= ts < start + (r + 1) seconds``; ``start``
    None is the first tuple's ``ts``, computed by the SQL (``origin``); ``held`` the
    column that holds each tuple's round instead (nothing computed)."""

    start: float | None
    seconds: float
    streams: tuple[str, ...]
    held: str | None = None

    def origin(self) -> exp.Expression:
        """Round 0's start: the number given, else the first tuple's ``ts``, read from the
        query's one-row ``cqopt_start`` (:meth:`first_tuple`)."""
        if self.start is not None:
            return _number(self.start)
        return exp.select(exp.column(_START_COLUMN, quoted=True)).from_(
            exp.Table(this=exp.to_identifier(_START, quoted=True))).subquery()

    def first_tuple(self) -> exp.Select | None:
        """The one row of ``cqopt_start``: the earliest ``ts`` of the streams (None when
        ``start`` is given)."""
        if self.start is not None or self.held is not None:
            return None
        firsts = [exp.select(exp.alias_(exp.Min(this=exp.column(TIME_COLUMN, quoted=True)),
                                        _START_COLUMN, quoted=True))
                  .from_(exp.Table(this=exp.to_identifier(s, quoted=True)))
                  for s in self.streams]
        if len(firsts) == 1:
            return firsts[0]
        union = firsts[0]
        for first in firsts[1:]:
            union = exp.union(union, first, distinct=False)
        return exp.select(exp.alias_(exp.Min(this=exp.column(_START_COLUMN, quoted=True)),
                                     _START_COLUMN, quoted=True)).from_(
            union.subquery(exp.to_identifier("cqopt_firsts", quoted=True)))


def _rounds(plan: Plan, round_s: float | None, start: float | None) -> _Rounds:
    """The plan's rounds, once every stream's window and ``ts`` are checked."""
    sources = [plan.node(f"src:{s}") for s in plan.join_order]
    for node in sources:
        window = node.window
        if window is None or window.kind != "range" or window.partition_by:
            raise PlanSqlError(
                f"plan {plan.id}: stream {node.stream}'s window {window} is no span of time, "
                "so the SQL cannot carry its rounds (only [RANGE w] windows can); "
                f"{_ONE_ROUND}")
        if (node.stream, TIME_COLUMN) not in node.emits:
            raise PlanSqlError(
                f"plan {plan.id}: stream {node.stream} has no {TIME_COLUMN} column, from which "
                f"the SQL reads a tuple's round; add it to the catalog, or: {_ONE_ROUND}")
        if start is None and node.stream.lower() == _START:
            raise PlanSqlError(f"plan {plan.id}: a stream is named {_START}, the name the SQL "
                               "gives round 0's start; pass start=, or rename the stream")
        if (node.stream, ROUND_COLUMN) in node.emits:
            raise PlanSqlError(f"plan {plan.id}: stream {node.stream} has a column named "
                               f"{ROUND_COLUMN}, the name the SQL gives a tuple's round; "
                               "rename it in the catalog")
    if round_s is None:
        round_s = max(node.window.seconds for node in sources)
    if not (isinstance(round_s, (int, float)) and math.isfinite(round_s) and round_s > 0):
        raise PlanSqlError(f"round_s must be a number of seconds > 0, got {round_s!r}")
    if start is not None and not (isinstance(start, (int, float)) and math.isfinite(start)):
        raise PlanSqlError(f"start must be a finite ts, got {start!r}")
    return _Rounds(None if start is None else float(start), float(round_s), plan.join_order)


def _held_rounds(plan: Plan, column: str) -> _Rounds:
    """Rounds read from ``column`` of every stream's table."""
    for stream in plan.join_order:
        emits = {name.lower() for _, name in plan.node(f"src:{stream}").emits}
        for name in (column, ROUND_COLUMN):
            if name.lower() in emits:
                raise PlanSqlError(f"plan {plan.id}: stream {stream} has a column named "
                                   f"{name}, the name the SQL gives a tuple's round; "
                                   "rename it in the catalog")
    return _Rounds(None, math.nan, plan.join_order, held=column)


def plan_outputs(plan: Plan, query: ContinuousQuery | None = None
                 ) -> list[tuple[ColumnRef, str]]:
    """The result's columns: (column reference, output name), in order.

    With ``query``, its output columns; else the plan's top columns named by
    their text. An aggregate's reference is ``(None, "SUM(S.a)")``.

    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.query.logical import parse_query
    >>> from cqopt.optimizer.rules.enumerate import enumerate_plans
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
    refs = root.columns if isinstance(root, kinds.ProjectionNode) and root.stream is None \
        else root.emits
    # The query's rule (cqopt.optimizer.query.classify): the column's name, qualified only
    # where two outputs share it.
    shared = Counter(name for stream, name in refs if stream is not None)
    return [(ref, column_text(ref) if ref[0] is None or shared[ref[1]] > 1 else ref[1])
            for ref in refs]


@dataclass(frozen=True)
class _Sql:
    """What an operator's SQL is so far: a stream's relation (its chain of operators as
    nested subqueries, aliased with the stream's name) or, from the first join up, the
    outer SELECT's FROM and JOINs (with GROUP BY and HAVING once the aggregate is in)."""

    relation: exp.Expression | None = None
    select: exp.Select | None = None
    aggregate: kinds.AggregateNode | None = None

    def outer(self) -> exp.Select:
        """The outer SELECT, started from the stream's relation if there is none yet."""
        return self.select if self.select is not None else exp.Select().from_(self.relation)


@kinds.consumer("the SQL writer")
def node_sql(node: kinds.PlanNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    """One operator's SQL over its inputs' (see the module docstring)."""


@node_sql.register
def _(node: kinds.SourceNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    table = exp.alias_(exp.Table(this=exp.to_identifier(node.stream, quoted=True)),
                       node.stream, table=True, quoted=True)
    if rounds is None:
        return _Sql(table)
    columns = [_column(*c) for c in node.emits]
    if rounds.held is not None:  # each tuple's round is in the table already
        inner = exp.select(*columns, exp.alias_(_column(node.stream, rounds.held),
                                                ROUND_COLUMN, quoted=True)).from_(table)
        return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))
    ts = _column(node.stream, TIME_COLUMN)
    w, width = node.window.seconds, rounds.seconds
    round_of = exp.cast(exp.Floor(this=exp.Div(
        this=exp.paren(exp.Sub(this=ts, expression=rounds.origin()), copy=False),
        expression=_number(width))), "BIGINT")
    copies = max(1, math.ceil(w / width - 1e-9))  # the rounds whose window holds a tuple
    if copies == 1:
        inner = exp.select(*columns, exp.alias_(round_of, ROUND_COLUMN, quoted=True)).from_(table)
    else:
        offsets = exp.values([(i,) for i in range(copies)], alias=_OFFSET,
                             columns=[_OFFSET_COLUMN])
        shifted = exp.Add(this=round_of, expression=exp.column(_OFFSET_COLUMN, _OFFSET))
        inner = exp.select(*columns, exp.alias_(shifted, ROUND_COLUMN, quoted=True)) \
            .from_(table).join(offsets, join_type="cross")
    relation = inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False)
    if math.isclose(copies * width, w, rel_tol=1e-12):
        return _Sql(relation)
    # w is not a whole number of rounds: drop what fell out of the window by the round's end
    end = exp.Add(this=rounds.origin(), expression=exp.Mul(
        this=exp.paren(exp.Add(this=_column(node.stream, ROUND_COLUMN),
                               expression=exp.Literal.number(1)), copy=False),
        expression=_number(width)))
    lower = exp.Sub(this=end, expression=_number(w))
    inner = exp.select(*columns, _column(node.stream, ROUND_COLUMN)).from_(relation) \
        .where(exp.GTE(this=ts, expression=lower))
    return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))


@node_sql.register
def _(node: kinds.SelectionNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    if node.stream is None:  # left above the joins (pushdown switched off): a WHERE there
        return _Sql(select=inputs[0].outer().where(_quoted(node.predicate.predicate),
                                                   copy=False))
    inner = exp.select(*_with_round([_column(*c) for c in node.emits], node.stream, rounds)) \
        .from_(_chain_input(node, inputs, plan)).where(_quoted(node.predicate.predicate))
    return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))


@node_sql.register
def _(node: kinds.ProjectionNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    if node.stream is None:  # the final projection: the outer SELECT's columns (plan_outputs)
        return inputs[0]
    kept = [_column(*c) for c in dict.fromkeys(node.columns)]
    if not kept and rounds is None:  # nothing read above (COUNT(*)): a row per tuple stays
        kept = [exp.alias_(exp.Literal.number(1), _NO_COLUMN, quoted=True)]
    inner = exp.select(*_with_round(kept, node.stream, rounds)) \
        .from_(_chain_input(node, inputs, plan))
    return _Sql(inner.subquery(exp.to_identifier(node.stream, quoted=True), copy=False))


@node_sql.register
def _(node: kinds.JoinNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    left, right = inputs
    if right.relation is None:
        raise PlanSqlError(f"plan {plan.id} joins the result of a join as its right "
                           "input (a bushy plan): only left-deep plans become SQL")
    select = left.outer()
    conditions = [_quoted(p.expression) for p in node.predicate or ()]
    if rounds is not None:  # the two sides' tuples meet only within a round
        conditions.append(exp.EQ(this=_column(node.streams[0], ROUND_COLUMN),
                                 expression=_column(node.streams[-1], ROUND_COLUMN)))
    if not conditions:
        select = select.join(right.relation, join_type="cross", copy=False)
    else:
        select = select.join(right.relation, on=exp.and_(*conditions), join_type="inner",
                             copy=False)
    return _Sql(select=select)


@node_sql.register
def _(node: kinds.AggregateNode, inputs: list[_Sql], plan: Plan, rounds: _Rounds | None) -> _Sql:
    select = inputs[0].outer()
    keys = [_column(*c) for c in node.group_by]
    if rounds is not None:  # one group per round and key
        keys.insert(0, _column(node.streams[0], ROUND_COLUMN))
    if keys:
        select = select.group_by(*keys, copy=False)
    if node.having is not None:
        select = select.having(_quoted(node.having), copy=False)
    return _Sql(select=select, aggregate=node)


def _with_round(columns: list[exp.Expression], stream: str,
                rounds: _Rounds | None) -> list[exp.Expression]:
    """A stream operator's columns, and its tuples' round when the SQL carries rounds."""
    return columns if rounds is None else [*columns, _column(stream, ROUND_COLUMN)]


def _number(value: float) -> exp.Literal:
    return exp.Literal.number(repr(float(value)))


def _chain_input(node: kinds.PlanNode, inputs: list[_Sql], plan: Plan) -> exp.Expression:
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


def _aggregate_call(text: str, aggregate: kinds.AggregateNode | None) -> exp.Expression:
    """The call of the plan's aggregate whose text is ``text`` (``SUM(S.a)``)."""
    found = next((a for a in (aggregate.aggregates if aggregate else ()) if str(a) == text),
                 None)
    if found is None:
        raise PlanSqlError(f"the plan computes no aggregate {text}")
    argument = exp.Star() if found.argument is None else _column(*found.argument)
    return AGGREGATE_FUNCTIONS[found.function](this=argument)
