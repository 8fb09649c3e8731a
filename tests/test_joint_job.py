"""The joint job: many queries' plans over tuples on the driver as one Spark SQL query give,
part by part, the rows and columns each plan's own DataFrame gives."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

QUERIES = {
    "sel": "SELECT TCP.src_host, TCP.bytes FROM TCP WHERE TCP.bytes > 500 WINDOW [1]",
    "count": "SELECT COUNT(*) FROM UDP WHERE UDP.bytes > 900 WINDOW [1]",
    "groups": "SELECT TCP.dest_host, SUM(TCP.bytes), AVG(TCP.bytes), MIN(TCP.src_port) "
              "FROM TCP GROUP BY TCP.dest_host HAVING COUNT(*) > 1 WINDOW [1]",
    "join": "SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]",
    "three": "SELECT TCP.src_host, UDP.bytes, SF.dest_port FROM TCP, UDP, SF "
             "WHERE TCP.src_host = UDP.dest_host AND UDP.src_host = SF.dest_host "
             "AND TCP.bytes > 200 WINDOW [1]",
    "product": "SELECT TCP.src_host, SF.bytes FROM TCP, SF WHERE TCP.bytes > 990 "
               "AND SF.bytes > 990 WINDOW [1]",
}


def _tables(catalog, rounds: int, seed: int) -> dict[str, pa.Table]:
    """Each stream's tuples of ``rounds`` rounds, as a run stages them (ts, _round, columns)."""
    rng = np.random.default_rng(seed)
    out = {}
    for stream in ("TCP", "UDP", "SF"):
        n = int(rng.integers(40, 80))
        columns = {"ts": np.sort(rng.random(n) * rounds),
                   "_round": np.zeros(n, dtype=np.int64)}
        columns["_round"] = np.floor(columns["ts"]).astype(np.int64)
        for c in catalog.stream(stream).columns:
            if c.name != "ts":
                high = 1000 if c.name == "bytes" else 6
                columns[c.name] = rng.integers(0, high, n).astype(np.int32)
        out[stream] = pa.table(columns)
    return out


def _parts(catalog, tables, rounds: int):
    from cqopt.spark.run.joint_job import JointPart

    parts = []
    for name, sql in QUERIES.items():
        query = parse_query(sql, catalog)
        for plan in enumerate_plans(query)[:3]:
            mine = {s: tables[s] for s in query.stream_names}
            parts.append(JointPart(name, plan, query, mine, tuple(range(rounds))))
            parts.append(JointPart(name, plan, query, mine, (1,), lone=True))
    return parts


def _alone(spark, part):
    """The part as the run builds it alone: its plan's DataFrame over its rounds."""
    from pyspark.sql import functions as F

    from cqopt.spark.plan_frame import to_spark
    from cqopt.spark.session import driver_frame

    frames = {s: driver_frame(spark, t) for s, t in part.tables.items()}
    if part.lone:
        r = part.rounds[0]
        alone = {s: df.where(F.col("_round") == r).drop("_round") for s, df in frames.items()}
        frame = to_spark(part.plan, alone, query=part.query)
        return frame.select(F.lit(r).cast("long").alias("_round"), "*")
    mine = {s: df.where(F.col("_round").isin(list(part.rounds))) for s, df in frames.items()}
    return to_spark(part.plan, mine, query=part.query, round_column="_round")


class _Capturing:
    """A session that keeps each joint query it is asked (the rest as the session does)."""

    def __init__(self, spark):
        self._spark, self.joint = spark, []

    def __getattr__(self, name):
        return getattr(self._spark, name)

    def sql(self, text):
        frame = self._spark.sql(text)
        if "UNION ALL" in text:
            self.joint.append(frame)
        return frame


def _sorted(table: pa.Table):
    frame = table.to_pandas()
    frame.columns = [f"c{i}" for i in range(len(frame.columns))]  # names may repeat
    return frame.sort_values(list(frame.columns), ignore_index=True)


@pytest.mark.spark
def test_every_part_of_one_joint_job_gives_its_plans_own_rows_and_schema(spark, dec_catalog):
    """Three candidate plans of six queries (selections, COUNT(*) without GROUP BY, groups
    with HAVING, two- and three-way joins, a Cartesian product), each over three rounds
    and over its lone round 1: one Spark SQL query, and each part's rows, names, types
    and nullability are those of its plan's own DataFrame; its views are gone after. No
    selection of a stream is left for Spark to run: it folded them into the tuples while
    it optimized the query (the only filters left are HAVING's, over an aggregate). No
    join's result is shuffled."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from cqopt.spark.run.joint_job import JointJob
    from cqopt.spark.session import driver_data_conf

    tables = _tables(dec_catalog, 3, seed=5)
    parts = _parts(dec_catalog, tables, 3)
    session = _Capturing(spark)
    job = JointJob(session)
    with driver_data_conf(spark, True):
        result = job.run(parts, 100_000)
        lines = session.joint[0]._jdf.queryExecution().executedPlan().toString().splitlines()
        filters = [(line, below) for line, below in zip(lines, lines[1:]) if "Filter" in line]
        assert filters and all("HashAggregate" in below for _, below in filters), filters
        # Every input is one partition, and so is every join's result a join reads
        # (one_partition_joins): nothing is shuffled, three-way joins included.
        assert not [line for line in lines if "Exchange hashpartitioning" in line], lines
        assert result is not None and result.seconds > 0
        assert result.info == {"reads": sum(len(p.plan.join_order) for p in parts),
                               "tables": 3}  # each stream's tuples handed once
        for part, got, schema in zip(parts, result.tables, result.schemas):
            frame = _alone(spark, part)
            want = frame.toArrow()
            assert got.schema.names == want.schema.names, part.plan.id
            assert to_arrow_schema(schema) == to_arrow_schema(frame.drop("_round").schema)
            assert [f.type for f in got.schema][1:] == [f.type for f in want.schema][1:]
            assert _sorted(got).equals(_sorted(want.cast(got.schema))), (part.name,
                                                                         part.plan.id)
    # A lone round's COUNT(*) without GROUP BY gives its one row, as a round alone does.
    counts = [t for p, t in zip(parts, result.tables) if p.name == "count" and p.lone]
    assert counts and all(t.num_rows == 1 for t in counts)
    assert not [t for t in spark.catalog.listTables() if t.name.startswith("cqopt_joint")]


@pytest.mark.spark
def test_equal_parts_run_once_and_a_result_too_large_is_not_split(spark, dec_catalog):
    """Two queries' equal plans over equal tuples are one part (rows computed once and handed
    to both); a part of more rows than the limit is not split (the caller runs its plan as
    it otherwise would), the others are."""
    from cqopt.spark.run.joint_job import JointJob, JointPart
    from cqopt.spark.session import driver_data_conf

    tables = _tables(dec_catalog, 2, seed=8)
    query = parse_query(QUERIES["sel"], dec_catalog)
    plan = enumerate_plans(query)[0]
    copy = {"TCP": pa.table({c: tables["TCP"][c] for c in tables["TCP"].column_names})}
    parts = [JointPart("A", plan, query, {"TCP": tables["TCP"]}, (0, 1)),
             JointPart("B", plan, query, copy, (0, 1)),  # equal tuples, another table
             JointPart("C", plan, query, copy, (1,))]  # other rounds: another part
    job = JointJob(spark)
    with driver_data_conf(spark, True):
        result = job.run(parts, 100_000)
        assert result.same == {1: 0} and result.parts == 2
        assert result.tables[1] is result.tables[0] and result.tables[0].num_rows > 0
        assert result.info["tables"] == 1
        small = job.run(parts, result.tables[0].num_rows - 1)
        assert small.too_large == {0, 1} and small.tables[0] is small.tables[1] is None
        assert small.tables[2].equals(result.tables[2])  # fewer rows: split as before
        assert result.tables[2].num_rows < result.tables[0].num_rows


@pytest.mark.spark
def test_the_flat_sql_of_a_plan_is_the_nested_sqls_physical_plan(spark, dec_catalog):
    """Every part's flat SQL, the form the joint job runs, is planned by Spark as the plan's
    nested SQL is (the same physical operators, joins in the same order and on the same
    keys; only projections may differ, as the nested form renames the round), over three
    rounds and over one round, for three candidate plans of each query."""
    import re

    from cqopt.optimizer.plans.sql import plan_sql
    from cqopt.spark.session import driver_data_conf, driver_frame

    tables = _tables(dec_catalog, 3, seed=2)

    def physical(text: str) -> list[str]:
        """The physical operators, top-down, but the projections (the nested form renames
        the round in one), without expression ids or codegen stage numbers."""
        plan = spark.sql(text)._jdf.queryExecution().executedPlan().toString()
        plan = re.sub(r"#\d+L?|plan_id=\d+|cqopt_round|_round|\*\(\d+\) ", "", plan)
        operators = [re.sub(r"^[\s:+-]*", "", line) for line in plan.splitlines()]
        return [op for op in operators if op and not op.startswith("Project")]

    with driver_data_conf(spark, True):
        for stream, table in tables.items():
            driver_frame(spark, table).createOrReplaceTempView(stream)
        try:
            for part in _parts(dec_catalog, tables, 3):
                forms = [plan_sql(part.plan, "spark", query=part.query, flat=flat,
                                  one_round=part.lone,
                                  round_column=None if part.lone else "_round")
                         for flat in (False, True)]
                nested, flat = (physical(text) for text in forms)
                assert flat == nested, (part.name, part.plan.id, nested, flat)
        finally:
            for stream in tables:
                spark.catalog.dropTempView(stream)


@pytest.mark.spark
def test_a_joint_job_over_few_tuples_runs_interpreted_and_gives_the_compiled_rows(
        spark, dec_catalog):
    """Over at most INTERPRETED_TUPLES tuples the joint job compiles no code (no stage of
    whole-stage code generation in its physical plan; Spark still knows the setting), over
    more it does, and both give every part the same rows."""
    from cqopt.spark.run.joint_job import JointJob
    from cqopt.spark.session import INTERPRETED_TUPLES, driver_data_conf

    tables = _tables(dec_catalog, 3, seed=11)
    parts = _parts(dec_catalog, tables, 3)
    results, stages = {}, {}
    for tuples in (INTERPRETED_TUPLES, INTERPRETED_TUPLES + 1):
        session = _Capturing(spark)
        with driver_data_conf(spark, True, tuples):
            assert spark.conf.get("spark.sql.codegen.factoryMode") == (
                "NO_CODEGEN" if tuples <= INTERPRETED_TUPLES else "FALLBACK")
            results[tuples] = JointJob(session).run(parts, 100_000)
            plan = session.joint[0]._jdf.queryExecution().executedPlan().toString()
            stages[tuples] = plan.count("*(")
    assert stages[INTERPRETED_TUPLES] == 0 and stages[INTERPRETED_TUPLES + 1] > 0, stages
    interpreted, compiled = results[INTERPRETED_TUPLES], results[INTERPRETED_TUPLES + 1]
    for part, a, b in zip(parts, interpreted.tables, compiled.tables):
        assert a.num_rows == b.num_rows and _sorted(a).equals(_sorted(b)), part.plan.id
    assert sum(t.num_rows for t in compiled.tables) > 0
    assert spark.conf.get("spark.sql.codegen.wholeStage") == "true"  # restored after
