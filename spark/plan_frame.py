"""A plan as a PySpark DataFrame pipeline, in the plan's order.

:func:`to_spark` builds the DataFrame of one round of a plan: ``frames``
holds each stream's current window (a DataFrame with the stream's catalog
columns, any case, extra columns ignored), and every operator of the plan
becomes one DataFrame step, bottom-up as the reference executor
(:mod:`cqopt.costmodel.reference_executor`) runs it:

- a source selects the stream's catalog columns and names the frame after
  the stream (``DataFrame.alias``), so ``S.a`` names a column from then on;
- a selection is ``where`` with the grouped selection's condition, a
  projection a ``select`` of the columns it keeps;
- joins follow the plan's left-deep order, each ``join`` applying every
  predicate of the plan's join (``crossJoin`` for a Cartesian step); a join
  whose strategy is hinted (:mod:`cqopt.optimizer.plans.strategies`) hints
  the input the strategy names with ``DataFrame.hint`` (``broadcast``,
  ``shuffle_hash``, ``merge``), the left input too where it is a join's result;
- the aggregate (COUNT/SUM/AVG/MIN/MAX, GROUP BY, HAVING) comes last, then
  the output columns, named as the query names them (with ``query=``; else by
  their text ``S.a``, ``COUNT(*)``).

With ``round_column=`` the frames may hold many rounds, each tuple's round
in that column: every operator keeps it, every join also equates it (a
Cartesian step becomes the join on the round alone), the aggregate groups
by it first and the result has it as its first column, so one DataFrame
gives every round's result, each what the plan gives on that round's frames
alone. As in :mod:`cqopt.optimizer.plans.sql`, a query with aggregates and no
GROUP BY then has no row for a round in which nothing reaches the aggregate.

Predicates become Spark conditions through
:func:`cqopt.spark.round_stats.spark_condition` and
:func:`~cqopt.spark.round_stats.predicate_condition`, the walker of
:mod:`cqopt.optimizer.query.predicates` that the pandas executor uses too.

Spark's optimizer keeps the plan's join order: its cost-based join
reordering (``spark.sql.cbo.joinReorder.enabled``) is off by default, and
cqopt relies on that; a Cartesian step is hinted ``shuffle_replicate_nl``,
which keeps Spark's ReorderJoin rule from moving it. It does move commuting steps that cost nothing to move:
a selection may be pushed below a projection and unread columns pruned, so
σ→π and π→σ can run alike on Spark.

With a session, ``to_spark(plan, {"S": spark.createDataFrame(window)}, query=q)``
is the plan's DataFrame; a stream without a frame is refused before Spark runs:

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
>>> plan = enumerate_plans(parse_query("SELECT S.a FROM S WHERE S.a > 1 WINDOW [1]", cat))[0]
>>> try:
...     to_spark(plan, {})
... except PlanFrameError as err:
...     print(err)
plan S reads stream S, but no frame is given for it; frames given: none
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sqlglot import exp

from cqopt.errors import CqoptError
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.plans.sql import CARTESIAN_HINT, plan_outputs
from cqopt.optimizer.plans.strategies import SPARK_HINTS, hinted_side
from cqopt.optimizer.query.logical import AGGREGATES
from cqopt.spark.round_stats import predicate_condition, spark_condition
from cqopt.spark.session import spark_errors

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cqopt.optimizer.query.logical import ContinuousQuery
    from cqopt.spark.shared_work import SharedWork


class PlanFrameError(CqoptError):
    """A plan cannot be built over the frames given (a stream or column is missing)."""


def to_spark(plan: Plan, frames: Mapping[str, DataFrame], *,
             query: ContinuousQuery | None = None,
             round_column: str | None = None,
             shared: SharedWork | None = None,
             one_partition: bool = False) -> DataFrame:
    """The DataFrame computing ``plan`` over one window per stream, or over many rounds at once.

    Parameters
    ----------
    plan : Plan
        A candidate plan.
    frames : Mapping[str, DataFrame]
        Each stream of the plan (any case) -> its window, with the stream's
        catalog columns (any case).
    query : ContinuousQuery, optional
        The plan's query: gives the result its output names and order.
    round_column : str, optional
        A column every frame has that holds each tuple's round (any
        integers; :func:`cqopt.spark.round_stats.assign_round` gives
        ``floor((ts - start) / W)``). With it, each frame may hold many
        rounds: the round is kept by every operator, is part of every join
        key (a Cartesian step joins on it alone) and every grouping, and is
        the result's first column, under this name. Each round's rows are
        then those the plan gives on that round's frames alone.
    shared : SharedWork, optional
        The memo of several plans built for one micro-batch: a step (a source,
        selection, projection, join, aggregate, or the result's columns) that
        an earlier plan built over the same frames is that plan's DataFrame, so
        equal plans over equal frames give one result (:mod:`cqopt.spark.shared_work`).
    one_partition : bool, default False
        Every frame is one partition (tuples handed from the driver,
        :func:`cqopt.spark.session.driver_frame`): each join's result is kept one
        partition too. Spark does not know a join of one-partition inputs is one
        partition, and would shuffle it before the next join or an aggregate
        (two stages more for a three-way join: 0.30 against 0.26 s for the README's
        Q2 over a one-second round). Over frames of many partitions this would put
        the join's rows in one task: leave it off there.

    Returns
    -------
    DataFrame
        Lazy: nothing runs until an action (``count``, ``toPandas``, a write).

    Raises
    ------
    PlanFrameError
        A stream of the plan has no frame, or its frame lacks a column (the
        round column too), or the round column's name is a catalog column's.

    Examples
    --------
    See the module docstring.
    """
    with spark_errors(f"Spark cannot build plan {plan.id}", PlanFrameError):
        return _build(plan, frames, query, round_column, shared, one_partition)


def _build(plan: Plan, frames: Mapping[str, DataFrame], query: ContinuousQuery | None,
           round_column: str | None, shared: SharedWork | None = None,
           one_partition: bool = False) -> DataFrame:
    from pyspark.sql import functions as F

    given = _Inputs({name.lower(): df for name, df in frames.items()}, round_column,
                    one_partition)
    built: dict[str, _Frame] = {}
    for key in plan.operators():
        node = plan.node(key)
        inputs = [built[k] for k in node.inputs]
        built[key] = (node_frame(node, inputs, plan, given) if shared is None else
                      _shared_step(shared, node, inputs, plan, given))
    top = built[plan.root]

    def output(ref: tuple) -> Column:
        return F.col(top.aggregated[ref]) if top.aggregated else _column(*ref)

    outputs = plan_outputs(plan, query)

    def select() -> DataFrame:
        columns = [output(ref).alias(name) for ref, name in outputs]
        if round_column is not None:
            first = F.col(top.aggregated[_ROUND]) if top.aggregated \
                else _column(plan.join_order[0], round_column)
            columns.insert(0, first.alias(round_column))
        return top.df.select(*columns)
    if shared is None:
        return select()
    # The result's columns, by what they read and how they are named: equal over equal
    # steps below is one result (equal queries).
    signature = ("output", tuple(outputs), tuple(top.aggregated.items()),
                 plan.join_order[0], round_column)
    return shared.derive(top.df, signature, select)


_ROUND = (None, "round")  # the round's key among an aggregate's internal names


def _shared_step(shared: SharedWork, node: kinds.PlanNode, inputs: list[_Frame], plan: Plan,
                 given: _Inputs) -> _Frame:
    """``node``'s step through the memo: one DataFrame for equal steps over equal inputs
    (a source over its stream's frame; any other step over its inputs' frames), whatever
    plan-local keys the inputs have."""
    parents = ((given.frames.get(node.stream.lower()),) if isinstance(node, kinds.SourceNode)
               else tuple(i.df for i in inputs))
    if any(p is None for p in parents):  # no frame for the stream: node_frame says so
        return node_frame(node, inputs, plan, given)
    signature = (repr(dataclasses.replace(node, inputs=())), given.round_column)
    built: list[_Frame] = []

    def build() -> DataFrame:
        built.append(node_frame(node, inputs, plan, given))
        return built[0].df
    df = shared.derive(parents if len(parents) > 1 else parents[0], signature, build)
    if built:  # built now (new to the memo, or over a frame it does not know)
        return built[0]
    if isinstance(node, kinds.AggregateNode):
        return _Frame(df, _aggregate_names(node, given.round_column))
    return _Frame(df, inputs[0].aggregated if inputs else {})


@dataclass(frozen=True)
class _Frame:
    """An operator's DataFrame and, after the aggregate, its columns' internal names."""

    df: DataFrame
    aggregated: dict[tuple, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Inputs:
    """What every operator's step may read: the frames by lower-case stream name, the
    round column when the frames hold many rounds, and whether each frame is one
    partition."""

    frames: dict[str, DataFrame]
    round_column: str | None
    one_partition: bool = False


@kinds.consumer("the DataFrame builder")
def node_frame(node: kinds.PlanNode, inputs: list[_Frame], plan: Plan, given: _Inputs) -> _Frame:
    """One operator's DataFrame step over its inputs' frames (see the module docstring)."""


@node_frame.register
def _(node: kinds.SourceNode, inputs, plan, given):
    return _Frame(_source(plan, node, given))


@node_frame.register
def _(node: kinds.SelectionNode, inputs, plan, given):
    df = inputs[0].df.where(spark_condition(node.predicate.predicate, _column))
    # A selection left above the joins (pushdown switched off) filters the joined rows.
    return _Frame(df if node.stream is None else df.alias(node.stream), inputs[0].aggregated)


@node_frame.register
def _(node: kinds.ProjectionNode, inputs, plan, given):
    if node.stream is None:  # the final projection: the output columns, in _build
        return inputs[0]
    columns = [_column(*c) for c in dict.fromkeys(node.columns)]
    if given.round_column is not None:
        columns.append(_column(node.stream, given.round_column))
    return _Frame(inputs[0].df.select(*columns).alias(node.stream))


@node_frame.register
def _(node: kinds.JoinNode, inputs, plan, given):
    joined = _join(inputs[0].df, inputs[1].df, node, given.round_column)
    return _Frame(joined.coalesce(1) if given.one_partition else joined)


@node_frame.register
def _(node: kinds.AggregateNode, inputs, plan, given):
    return _Frame(*_aggregate(inputs[0].df, node, given.round_column))


def _source(plan: Plan, node: kinds.SourceNode, given: _Inputs) -> DataFrame:
    from pyspark.sql import functions as F

    stream, by_lower, round_column = node.stream, given.frames, given.round_column
    df = by_lower.get(stream.lower())
    if df is None:
        raise PlanFrameError(f"plan {plan.id} reads stream {stream}, but no frame is given for "
                             f"it; frames given: {', '.join(by_lower) or 'none'}")
    have = {c.lower(): c for c in df.columns}
    wanted = [c for _, c in node.emits]
    if round_column is not None:
        if round_column.lower() in {c.lower() for c in wanted}:
            raise PlanFrameError(f"round_column {round_column!r} is a column of stream "
                                 f"{stream}; name the round column otherwise")
        wanted.append(round_column)
    missing = [c for c in wanted if c.lower() not in have]
    if missing:
        raise PlanFrameError(f"the frame of stream {stream} has no column "
                             f"{', '.join(missing)}; its columns are {', '.join(df.columns)}")
    return df.select(*[F.col(f"`{have[c.lower()]}`").alias(c) for c in wanted]).alias(stream)


def _column(stream: str, name: str) -> Column:
    from pyspark.sql import functions as F

    return F.col(f"`{stream}`.`{name}`")


def _join(left: DataFrame, right: DataFrame, node: kinds.JoinNode,
          round_column: str | None = None) -> DataFrame:
    conditions = [predicate_condition(p, _column) for p in node.predicate or ()]
    if round_column is not None:  # the two sides' tuples meet only within a round
        conditions.append(_column(node.streams[0], round_column)
                          == _column(node.streams[-1], round_column))
    if not conditions:
        # Hinted, or Spark's ReorderJoin would move the product above the joins with a
        # condition (see cqopt.optimizer.plans.sql.plan_expression).
        return left.crossJoin(right.hint(CARTESIAN_HINT.lower()))
    side = hinted_side(node.strategy)
    if side == "left":
        left = left.hint(SPARK_HINTS[node.strategy].lower())
    elif side == "right":
        right = right.hint(SPARK_HINTS[node.strategy].lower())
    return left.join(right, functools.reduce(lambda a, b: a & b, conditions), "inner")


_SPARK_AGGREGATES = {"COUNT": "count", "SUM": "sum", "AVG": "avg", "MIN": "min", "MAX": "max"}


def _aggregate(df: DataFrame, node: kinds.AggregateNode, round_column: str | None = None
               ) -> tuple[DataFrame, dict[tuple, str]]:
    """GROUP BY (the round first, with ``round_column``) and aggregates under internal
    names, then HAVING over them."""
    from pyspark.sql import functions as F

    names = _aggregate_names(node, round_column)
    keys = []
    if round_column is not None:
        keys.append(_column(node.streams[0], round_column).alias("_r"))
    for i, ref in enumerate(node.group_by):
        keys.append(_column(*ref).alias(f"_g{i}"))
    calls = []
    for i, agg in enumerate(node.aggregates):
        argument = F.lit(1) if agg.argument is None else _column(*agg.argument)
        calls.append(getattr(F, _SPARK_AGGREGATES[agg.function])(argument).alias(f"_a{i}"))
    out = df.groupBy(*keys).agg(*calls) if calls else df.groupBy(*keys).agg(F.count(F.lit(1)))
    if node.having is not None:
        def resolve(stream: str, column: str) -> Column:
            return F.col(names[(stream, column)])

        having = node.having.transform(
            lambda n: exp.column(names[_aggregate_ref(n)]) if type(n) in AGGREGATES else n)
        out = out.where(spark_condition(having, lambda s, c: F.col(c) if not s else resolve(s, c)))
    return out, names


def _aggregate_names(node: kinds.AggregateNode, round_column: str | None) -> dict[tuple, str]:
    """The internal names of an aggregate's columns: the round ``_r``, the groups ``_gI``,
    the aggregates ``_aI``, by reference."""
    names: dict[tuple, str] = {_ROUND: "_r"} if round_column is not None else {}
    names.update((tuple(ref), f"_g{i}") for i, ref in enumerate(node.group_by))
    names.update(((None, str(agg)), f"_a{i}") for i, agg in enumerate(node.aggregates))
    return names


def _aggregate_ref(node: exp.Expression) -> tuple[None, str]:
    """The reference of an aggregate call in HAVING: ``(None, "SUM(S.a)")``."""
    from cqopt.optimizer.query.logical import aggregate_text

    arg = node.this
    argument = None if arg is None or isinstance(arg, exp.Star) else (arg.table, arg.name)
    return None, aggregate_text(AGGREGATES[type(node)], argument)


def scaled_answers(frame: DataFrame, plan: Plan, query: ContinuousQuery | None,
                   kept: float) -> DataFrame:
    """``frame``, a plan's result over inputs each sampled at ``kept``, with every COUNT and
    SUM scaled to an unbiased estimate of the answer over every tuple: by ``1 / kept`` over
    one stream (Babcock, Datar and Motwani's shedders scale so), by ``1 / kept^m`` over a
    join of m streams, whose result tuple survives only when all m of its input tuples do.
    AVG needs no scaling; MIN and MAX cannot be corrected and are left as sampled."""
    from pyspark.sql import functions as F

    if not 0 < kept <= 1:
        raise ValueError(f"kept must lie in (0, 1], got {kept}")
    survives = kept ** len(plan.join_order)
    scaled = {name for ref, name in plan_outputs(plan, query)
              if ref[0] is None and ref[1].upper().startswith(("COUNT(", "SUM("))}
    return frame.select(*[(F.col(f"`{c}`") / F.lit(survives)).alias(c) if c in scaled
                          else F.col(f"`{c}`") for c in frame.columns])
