"""Many plans' rounds over tuples held on the driver, as one Spark SQL query: the joint job.

A workload's micro-batch (:mod:`cqopt.spark.run.workload`) chooses a plan for
each query's rounds. Built as DataFrames and run as separate jobs, every plan
pays Spark's fixed costs: each DataFrame step is analysed as it is built
(some tens of round trips to the JVM per plan) and each job has a floor of
tens of milliseconds. :class:`JointJob` pays them once a micro-batch:

- each stream's tuples are handed to Spark once, as one temporary view of
  its distinct tables (equal tuples, as several queries with one window
  read them, once), each table tagged in :data:`TABLE_COLUMN`;
- each part (a query's plan over its rounds) is the plan's own SQL
  (:func:`cqopt.optimizer.plans.sql.plan_sql`, rounds read from ``_round``,
  or the one-round form for a query's lone round, as a round alone runs) in
  its flat form, which Spark plans as it plans the nested form and analyses
  faster (a ten-query micro-batch's plans: 351 against 380 ms, analysis and
  job), its streams defined as ``WITH`` over its tables and rounds of the
  views, and each join's result that another join reads kept one partition
  (:func:`one_partition_joins`), so nothing is shuffled;
- every part's columns go into typed *slots* (a part's k-th column of a
  type is that type's k-th slot, so no row carries every part's columns),
  tagged with the part (``_part``) and round (``_round``), and the parts are
  one ``UNION ALL``: one analysis, one job, collected to the driver and split
  there into each part's rows, named and typed as the part's own query gives
  them (its schema is asked of Spark once per query and plan and remembered).

Parts whose text and tuples are equal (equal queries) are one part: their
rows are computed once and handed to each (:attr:`JointResult.same`). A
selection or projection that several parts apply to the same tuples is not
materialized once: over tuples handed from the driver Spark evaluates it while
it optimizes the query (its ``ConvertToLocalRelation`` rule folds a filter or
projection of a local relation into the relation), so no Spark operator runs
it at all, and caching it would cost more than it saves. Where plans run as
jobs of their own over tuples Spark holds, :mod:`cqopt.spark.shared_work`
computes such a step once.

A part of more rows than the caller's limit is not split: its rows are
``None`` and it is named in :attr:`JointResult.too_large` (each part reads at
most one row more, so the driver holds at most that many rows a part); the
caller runs its plan as it otherwise would, Spark writing its rows. A plan
with no SQL form is a :class:`~cqopt.optimizer.plans.sql.PlanSqlError` from
:meth:`JointJob.plan_text`, before Spark runs; what Spark raises on the joint
query is raised, and the caller runs each plan alone, which says whose failed.

>>> quoted("a`b")
'`a``b`'
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlglot import exp

from cqopt.optimizer.plans.sql import PlanSqlError, plan_expression, tree_sql
from cqopt.spark.run.sink import slices
from cqopt.spark.session import driver_frame

if TYPE_CHECKING:
    from cqopt.optimizer.plans.plan import Plan
    from cqopt.optimizer.query.logical import ContinuousQuery
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

# Each stream's view tags its distinct tables in this column; the run's tuples hold their
# round in ROUND, and the joint query tags each row with its part in PART.
TABLE_COLUMN, ROUND, PART = "cqopt_table", "_round", "_part"
_ids = itertools.count()


def quoted(name: str) -> str:
    """A Spark SQL identifier, quoted (a backtick in it doubled)."""
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class JointPart:
    """One query's plan over some of its rounds of a micro-batch.

    ``tables`` holds each stream's tuples with their round in ``_round`` (as the
    run's staging gives them); ``lone`` says the rounds are the query's only one
    of the micro-batch, run as a round alone runs (a query with aggregates and
    no GROUP BY then gives its row even when nothing reaches the aggregate).
    """

    name: str
    plan: Plan
    query: ContinuousQuery
    tables: Mapping[str, Any]
    rounds: tuple[int, ...]
    lone: bool = False

    @property
    def key(self) -> tuple[str, str, bool]:
        """What the part's SQL text and columns depend on: its query, plan and form."""
        return self.name, self.plan.id, self.lone


@dataclass
class JointResult:
    """What :meth:`JointJob.run` gave: each part's rows (``_round`` first, then the part's
    columns; None for a part of too many rows), the parts whose rows an earlier equal
    part's are (part -> that part), each part's schema without ``_round``, and the joint
    job's seconds."""

    tables: list[Any]
    same: dict[int, int]
    schemas: list[StructType]
    seconds: float
    parts: int = 0  # distinct parts run
    # what the parts read: "reads" (a part's stream each), "tables" (distinct, handed once)
    info: dict[str, int] = field(default_factory=dict)
    too_large: set[int] = field(default_factory=set)  # parts of more rows than the limit


class JointJob:
    """Runs a micro-batch's parts as one Spark SQL query; see the module docstring.

    Parameters
    ----------
    spark : SparkSession

    Examples
    --------
    >>> job = JointJob.__new__(JointJob)  # no Spark needed to name a part's inputs
    >>> job._prefix = "cqopt_joint_0"
    >>> job._input_sql("S", 2, (3, 4))
    'SELECT * FROM `cqopt_joint_0_S` WHERE `cqopt_table` = 2 AND `_round` IN (3, 4)'
    """

    def __init__(self, spark: SparkSession):
        self.spark = spark
        self._schemas: dict[tuple, StructType] = {}  # (query, plan, lone) -> its columns
        self._texts: dict[tuple, str] = {}  # (query, plan, lone) -> its plan's SQL
        self._prefix = f"cqopt_joint_{next(_ids)}"

    def _view(self, stream: str) -> str:
        return f"{self._prefix}_{stream}"

    def _input_sql(self, stream: str, table: int, rounds: tuple[int, ...]) -> str:
        which = (f"= {rounds[0]}" if len(rounds) == 1 else
                 f"IN ({', '.join(str(int(r)) for r in rounds)})")
        return (f"SELECT * FROM {quoted(self._view(stream))} WHERE {quoted(TABLE_COLUMN)} = "
                f"{table} AND {quoted(ROUND)} {which}")

    def run(self, parts: Sequence[JointPart], limit: int) -> JointResult:
        """Run every part in one Spark job; a part that gives more than ``limit`` rows is
        not split (its rows ``None``, the part in :attr:`JointResult.too_large`).

        Parameters
        ----------
        parts : sequence of JointPart
        limit : int
            The most rows of a part brought to the driver (one more is read).

        Returns
        -------
        JointResult

        Raises
        ------
        PlanSqlError
            A part's plan has no SQL form (before Spark runs).
        Exception
            What Spark raised on the joint query.
        """
        texts = [self.plan_text(part) for part in parts]  # PlanSqlError before Spark
        views, ids = self._tables(parts)
        try:
            bodies = [self._body(part, text, ids[i]) for i, (part, text) in
                      enumerate(zip(parts, texts))]
            first: dict[tuple, int] = {}
            same = {}
            for i, part in enumerate(parts):
                key = (bodies[i], part.lone)
                if key in first:
                    same[i] = first[key]
                else:
                    first[key] = i
            runs = list(first.values())
            schemas = [self._schema(part, bodies[i]) for i, part in enumerate(parts)]
            columns, kinds = _slots({i: schemas[i] for i in runs})
            # Each part limited on its own: a part is one partition, so its limit needs no
            # exchange, where a limit of the union would gather every row in one more stage.
            branches = [f"({self._branch(i, parts[i], bodies[i], columns[i], kinds)} "
                        f"LIMIT {int(limit) + 1})" for i in runs]
            began = time.perf_counter()
            table = self.spark.sql("\nUNION ALL\n".join(branches)).toArrow()
            seconds = time.perf_counter() - began
        finally:
            for view in views:
                self.spark.catalog.dropTempView(view)
        counts = np.bincount(table[PART].to_numpy(), minlength=len(parts))
        too_large = {i for i in range(len(parts)) if counts[same.get(i, i)] > limit}
        handed = {(stream, k) for mine in ids for stream, k in mine.items()}
        return JointResult(
            _split(table, [i for i in runs if i not in too_large], columns, schemas,
                   len(parts), same), same, schemas, seconds, len(runs),
            {"reads": sum(len(mine) for mine in ids), "tables": len(handed)}, too_large)

    def plan_text(self, part: JointPart) -> str:
        """The part's plan as SQL over its streams' names (its rounds are its inputs'):
        written once per query and plan, then remembered (sqlglot takes milliseconds)."""
        key = part.key
        if key not in self._texts:
            plan = part.plan
            tree = plan_expression(plan, query=part.query, cartesian_hints=True,
                                   strategy_hints=True, one_round=part.lone, flat=True,
                                   round_column=None if part.lone else ROUND)
            columns = {s: [c for _, c in plan.node(f"src:{s}").emits]
                       + ([] if part.lone else [ROUND]) for s in plan.join_order}
            self._texts[key] = tree_sql(one_partition_joins(tree, plan.join_order, columns),
                                        plan, "spark")
        return self._texts[key]

    def _tables(self, parts: Sequence[JointPart]) -> tuple[list[str], list[dict[str, int]]]:
        """One view per stream of its distinct tables, each tagged; each part's table ids."""
        import pyarrow as pa

        distinct: dict[str, list[Any]] = {}
        ids: list[dict[str, int]] = []
        for part in parts:
            mine = {}
            for stream in part.plan.join_order:
                table = part.tables[stream]
                if TABLE_COLUMN in table.column_names:
                    raise PlanSqlError(f"stream {stream} has a column named {TABLE_COLUMN}, "
                                       "the name the joint job tags tuples with")
                seen = distinct.setdefault(stream, [])
                index = next((k for k, t in enumerate(seen) if t is table or t.equals(table)),
                             None)
                if index is None:
                    index = len(seen)
                    seen.append(table)
                mine[stream] = index
            ids.append(mine)
        views = []
        for stream, tables in distinct.items():
            tagged = pa.concat_tables([t.append_column(TABLE_COLUMN, pa.array(
                [k] * t.num_rows, pa.int32())) for k, t in enumerate(tables)])
            driver_frame(self.spark, tagged).createOrReplaceTempView(self._view(stream))
            views.append(self._view(stream))
        return views, ids

    def _body(self, part: JointPart, text: str, ids: Mapping[str, int]) -> str:
        inputs = ", ".join(f"{quoted(s)} AS ({self._input_sql(s, ids[s], part.rounds)})"
                           for s in part.plan.join_order)
        return f"WITH {inputs} {text}"

    def _schema(self, part: JointPart, body: str) -> StructType:
        """The part's columns without its round: asked of Spark once per query and plan."""
        from pyspark.sql.types import StructType

        key = part.key
        if key not in self._schemas:
            fields = self.spark.sql(body).schema.fields
            self._schemas[key] = StructType(fields if part.lone else fields[1:])
        return self._schemas[key]

    def _branch(self, index: int, part: JointPart, body: str, columns: list[int],
                kinds: Mapping[int, str]) -> str:
        names = [f"c{k}" for k in range(len(columns) + (0 if part.lone else 1))]
        first = 0 if part.lone else 1
        at = {slot: f"`p`.`c{first + k}`" for k, slot in enumerate(columns)}
        values = [at.get(j, f"CAST(NULL AS {kinds[j]})") + f" AS `s{j}`"
                  for j in range(len(kinds))]
        round_value = (f"CAST({part.rounds[0]} AS BIGINT)" if part.lone else "`p`.`c0`")
        return (f"SELECT {index} AS {quoted(PART)}, {round_value} AS {quoted(ROUND)}"
                f"{''.join(', ' + v for v in values)} FROM ({body}) AS `p`"
                f"({', '.join(names)})")


def one_partition_joins(select: exp.Select, streams: Sequence[str],
                        columns: Mapping[str, Sequence[str]]) -> exp.Select:
    """``select``, a plan's flat form joining ``streams`` in order, with each join's result
    that another join reads kept one partition, as every input of the joint job is.

    Spark does not know that a join of one-partition inputs is one partition, and
    shuffles it before the next join (two stages more for a three-way join). So the
    streams joined so far become a subquery hinted ``COALESCE(1)``, each of their
    ``columns`` named ``STREAM.column``, and the query reads them under the
    subquery's name; each selection goes where its streams are joined. A query of
    fewer than three streams, or with join hints (they name tables), is returned as
    it is.

    >>> import sqlglot
    >>> flat = sqlglot.parse_one("SELECT A.x, C.y FROM A AS A JOIN B AS B ON A.x = B.x "
    ...                          "JOIN C AS C ON B.x = C.x WHERE A.y > 1 AND C.y < 2")
    >>> print(one_partition_joins(flat, "ABC", {"A": ["x", "y"], "B": ["x"], "C": ["x", "y"]}
    ...       ).sql(dialect="spark"))  # doctest: +NORMALIZE_WHITESPACE
    SELECT `cqopt_joined_1`.`A.x`, C.y FROM (SELECT /*+ COALESCE(1) */ `A`.`x` AS `A.x`,
    `A`.`y` AS `A.y`, `B`.`x` AS `B.x` FROM A AS A JOIN B AS B ON A.x = B.x WHERE A.y > 1)
    AS `cqopt_joined_1` JOIN C AS C ON `cqopt_joined_1`.`B.x` = C.x WHERE C.y < 2
    """
    joins = select.args.get("joins") or []
    if len(joins) < 2 or select.args.get("hint") is not None:
        return select
    select = select.copy()
    joins = list(select.args["joins"])
    where = select.args.get("where")
    conditions = [] if where is None else (list(where.this.flatten())
                                           if isinstance(where.this, exp.And) else [where.this])
    # Each selection at the first level that has joined every stream it reads.
    level_of = [max(0, *(list(streams).index(c.table) - 1 for c in cond.find_all(exp.Column)
                         if c.table in streams)) for cond in conditions]
    at: dict[tuple[str, str], tuple[str, str]] = {}  # (stream, column) -> where read now

    def renamed(node: exp.Expression) -> exp.Expression:
        def one(n: exp.Expression) -> exp.Expression:
            if isinstance(n, exp.Column) and (n.table, n.name) in at:
                table, name = at[(n.table, n.name)]
                return exp.column(name, table, quoted=True)
            return n
        return node.transform(one)

    relation = select.args["from_"].this
    for k in range(len(joins) - 1):
        joined = list(streams[:k + 2])
        inner = exp.Select(hint=exp.Hint(expressions=[exp.Coalesce(
            this=exp.Literal.number(1))])).from_(relation).join(renamed(joins[k]), copy=False)
        inner = inner.select(*(exp.alias_(renamed(exp.column(c, s, quoted=True)), f"{s}.{c}",
                                          quoted=True) for s in joined for c in columns[s]),
                             copy=False)
        mine = [renamed(c) for c, level in zip(conditions, level_of) if level == k]
        if mine:
            inner = inner.where(exp.and_(*mine), copy=False)
        alias = f"cqopt_joined_{k + 1}"
        relation = inner.subquery(exp.to_identifier(alias, quoted=True))
        at.update({(s, c): (alias, f"{s}.{c}") for s in joined for c in columns[s]})
    select.set("from_", exp.From(this=relation))
    select.set("joins", [renamed(joins[-1])])
    rest = [renamed(c) for c, level in zip(conditions, level_of) if level >= len(joins) - 1]
    select.set("where", exp.Where(this=exp.and_(*rest)) if rest else None)
    select.set("expressions", [renamed(e) for e in select.expressions])
    for key in ("group", "having"):
        if select.args.get(key) is not None:
            select.set(key, renamed(select.args[key]))
    return select


def _slots(schemas: Mapping[int, StructType]) -> tuple[dict[int, list[int]], dict[int, str]]:
    """Each part's slot of each of its columns (a part's k-th column of a type is that
    type's k-th slot), and each slot's type.

    >>> from pyspark.sql.types import LongType, StringType, StructField, StructType
    >>> a = StructType([StructField("x", LongType()), StructField("y", LongType())])
    >>> b = StructType([StructField("s", StringType()), StructField("z", LongType())])
    >>> _slots({0: a, 1: b})
    ({0: [0, 1], 1: [2, 0]}, {0: 'bigint', 1: 'bigint', 2: 'string'})
    """
    slots: dict[tuple[str, int], int] = {}
    columns: dict[int, list[int]] = {}
    for i, schema in schemas.items():
        seen: dict[str, int] = {}
        mine = []
        for f in schema.fields:
            kind = f.dataType.simpleString()
            seen[kind] = seen.get(kind, -1) + 1
            mine.append(slots.setdefault((kind, seen[kind]), len(slots)))
        columns[i] = mine
    return columns, {j: kind for (kind, _), j in slots.items()}


def _split(table, runs: list[int], columns: Mapping[int, list[int]],
           schemas: Sequence[StructType], count: int, same: Mapping[int, int]) -> list[Any]:
    """Each part's rows of the joint result: its slots, named and typed as its schema."""
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    by_part = slices(table, PART)
    out: list[Any] = [None] * count
    for i in runs:
        rows = by_part.get(i, table.slice(0, 0))
        schema = to_arrow_schema(schemas[i])
        arrays = [rows[ROUND].cast(pa.int64())] + [
            rows[f"s{slot}"].cast(f.type) for slot, f in zip(columns[i], schema)]
        out[i] = pa.Table.from_arrays(
            arrays, schema=pa.schema([pa.field(ROUND, pa.int64(), nullable=False), *schema]))
    for i, j in same.items():
        out[i] = out[j]
    return out
