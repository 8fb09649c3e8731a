"""Plans run on an engine: ``cqopt.spark.to_spark`` and ``plan_sql`` against the reference
executor.

For the example workloads' queries and 20 generated ones (selections with
ranges, IN and OR; projections; 2- to 4-way equi-joins; theta joins;
aggregates with GROUP BY and HAVING), every candidate plan's DataFrame and
its Spark SQL, run over tiny generated windows, return the reference
executor's multiset. Spark keeps each plan's left-deep join order, read off
its optimized logical plan.
"""

from __future__ import annotations

import json
import random
from collections import Counter

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import sqlglot
from sqlglot import exp
from sqlglot.dialects.dialect import Dialect
from sqlglot.generator import Generator

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.workload import load_workload
from cqopt.costmodel.reference_executor import execute, multiset
from cqopt.optimizer.plans.sql import PlanSqlError, plan_sql
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.spark import to_spark

ABCD = Catalog.from_dict({"streams": {s: {"rate": [10, 100], "columns": {
    "k": "int", "a": "int", "b": "int", "x": "double", "tag": "string(4)"}} for s in "ABCD"}})
ROWS = 6


# -- data and queries -----------------------------------------------------------------
def windows(query: ContinuousQuery, seed: int, rows: int = ROWS) -> dict[str, pd.DataFrame]:
    """A few rows per stream of the query (``rows`` and more), drawn from small domains
    that include the query's own constants, so that selections and joins pass some tuples
    and not all."""
    rng = np.random.default_rng(seed)
    literals = [v for node in sqlglot.parse_one(query.sql.split("WINDOW")[0]).find_all(
        exp.Literal) for v in [node.this if node.is_string else float(node.this)]]
    numbers = sorted({int(v) for v in literals if isinstance(v, float) and v.is_integer()})
    strings = sorted({v for v in literals if isinstance(v, str)})
    out = {}
    for i, ref in enumerate(query.streams):
        n = rows + i  # a different size per stream
        data = {}
        for col in ref.columns:
            if col.type == "string":
                data[col.name] = rng.choice(["x", "y", "zz"] + strings, n)
            elif col.type == "double":
                data[col.name] = np.round(rng.normal(0, 2, n), 1)
            elif col.type == "bool":
                data[col.name] = rng.choice([True, False], n)
            else:
                data[col.name] = rng.choice([0, 1, 2, 3] + numbers, n).astype(np.int64)
        out[ref.name] = pd.DataFrame(data)
    return out


def example_queries(examples) -> list[tuple[str, ContinuousQuery]]:
    pairs = [("workload.toml", "dec-pkt.toml"), ("epa-workload.toml", "epa-http.toml")]
    out = []
    for workload, catalog in pairs:
        if (examples / workload).exists():
            cat = load_catalog(examples / catalog)
            out += [(q.name, parse_query(q.sql, cat))
                    for q in load_workload(examples / workload).queries]
    return out


def generated_sql(seed: int) -> str:
    """One random query over A, B, C, D: the shapes the optimizer plans."""
    rnd = random.Random(seed)
    n = rnd.choice([1, 2, 2, 3, 3, 4])
    streams = rnd.sample("ABCD", n)
    where = []
    for i in range(1, n):  # connect each stream to an earlier one
        left, right = rnd.choice(streams[:i]), streams[i]
        if rnd.random() < 0.25:
            where.append(f"{left}.a < {right}.b")  # a theta join
        else:
            c1, c2 = rnd.choice("kab"), rnd.choice("kab")
            where.append(f"{left}.{c1} = {right}.{c2}")
    if n >= 3 and rnd.random() < 0.3:
        where.append(f"({streams[0]}.b = {streams[-1]}.a OR {streams[1]}.x < {streams[-1]}.x)")
    atoms = ["{s}.a = {v}", "{s}.b BETWEEN 1 AND 2", "{s}.x > 0", "{s}.tag IN ('x', 'zz')",
             "({s}.a = 1 OR {s}.b > 2)", "{s}.k <> 1", "{s}.a IN (0, 2)",
             "{s}.x >= -1 AND {s}.x < 1.5"]
    for s in streams:
        if rnd.random() < (0.6 if n <= 2 else 0.3):
            where.append(rnd.choice(atoms).format(s=s, v=rnd.randint(0, 3)))
    if rnd.random() < 0.4:
        first = streams[0]
        group = rnd.choice([[], [f"{first}.k"], [f"{first}.k", f"{streams[-1]}.a"]])
        aggs = rnd.sample(["COUNT(*)", f"SUM({streams[-1]}.b)", f"AVG({first}.x)",
                           f"MIN({streams[-1]}.tag)", f"MAX({first}.a)"], rnd.randint(1, 3))
        select = group + [a + (" AS n" if a == "COUNT(*)" else "") for a in aggs]
        tail = f" GROUP BY {', '.join(group)}" if group else ""
        if group and rnd.random() < 0.6:
            tail += " HAVING COUNT(*) > 1" + (f" OR MAX({first}.b) IN (2, 3)"
                                              if rnd.random() < 0.5 else "")
    else:
        columns = [f"{s}.{c}" for s in streams for c in ("k", "a", "b", "x", "tag")]
        select = rnd.sample(columns, rnd.randint(1, 3))
        select[0] += " AS first" if rnd.random() < 0.3 else ""
        tail = ""
    sql = f"SELECT {', '.join(select)} FROM {', '.join(streams)}"
    return sql + (f" WHERE {' AND '.join(where)}" if where else "") + tail + " WINDOW [1]"


def generated_queries(count: int = 20, max_plans: int = 12) -> list[str]:
    """The first ``count`` generated queries with at most ``max_plans`` plans each (the
    σ/π orders of 4 streams multiply to dozens, which only slows the test down)."""
    out, seed = [], 0
    while len(out) < count:
        sql = generated_sql(seed)
        if len(enumerate_plans(parse_query(sql, ABCD))) <= max_plans:
            out.append(sql)
        seed += 1
    return out


GENERATED = generated_queries()


def all_queries(examples) -> list[tuple[str, ContinuousQuery]]:
    return example_queries(examples) + [(f"gen{i}", parse_query(sql, ABCD))
                                        for i, sql in enumerate(GENERATED)]


# -- Spark helpers ----------------------------------------------------------------------
def _seq(scala_seq) -> list:
    return [scala_seq.apply(i) for i in range(scala_seq.size())]


def spark_join_order(df) -> list[str]:
    """The streams in the order Spark's optimized plan joins them, left-deep.

    A stream is recognised by its columns' ids: every relation named after a
    stream (the DataFrame's ``alias``, the SQL's ``AS S``) in the analyzed
    plan tells which ids belong to that stream.
    """
    execution = df._jdf.queryExecution()
    ids: dict[int, str] = {}

    def collect(node) -> None:
        if node.nodeName() == "SubqueryAlias":
            for attribute in _seq(node.output()):
                ids.setdefault(attribute.exprId().id(), node.alias())
        for child in _seq(node.children()):
            collect(child)

    def order(node) -> list[str]:
        children = _seq(node.children())
        if node.nodeName() == "Join":
            return order(children[0]) + order(children[1])
        if len(children) == 1:
            return order(children[0])
        owners = {ids[a.exprId().id()] for a in _seq(node.output())
                  if a.exprId().id() in ids}
        assert len(owners) == 1, f"cannot tell which stream {node.nodeName()} reads: {owners}"
        return list(owners)

    collect(execution.analyzed())
    return order(execution.optimizedPlan())


def run_all(spark, frames: list) -> list[Counter]:
    """Collect many results of one schema in one Spark job (tagged, unioned, split)."""
    from pyspark.sql import functions as F

    tagged = [df.toDF(*[f"_c{j}" for j in range(len(df.columns))]).withColumn("_plan", F.lit(i))
              for i, df in enumerate(frames)]
    union = tagged[0]
    for df in tagged[1:]:
        union = union.union(df)
    table = union.toPandas()
    return [multiset(table[table["_plan"] == i].drop(columns="_plan"))
            for i in range(len(frames))]


# -- tests --------------------------------------------------------------------------------
def test_generated_queries_cover_the_shapes():
    queries = [parse_query(sql, ABCD) for sql in GENERATED]
    assert {len(q.streams) for q in queries} >= {1, 2, 3, 4}
    assert any(q.thetas for q in queries) and any(q.having is not None for q in queries)
    assert any(q.group_by for q in queries) and any(q.joins for q in queries)
    assert sum(len(enumerate_plans(q)) for q in queries) > 40
    assert any(len(enumerate_plans(q)) > 4 for q in queries if len(q.streams) == 4)


@pytest.mark.spark
def test_every_plan_on_spark_returns_the_reference_multiset(spark, examples):
    """to_spark and to_sql (through spark.sql on temp views) against the executor."""
    assert spark.conf.get("spark.sql.cbo.joinReorder.enabled") == "false"
    for seed, (name, query) in enumerate(all_queries(examples)):
        plans = enumerate_plans(query)
        data = windows(query, seed)
        frames = {s: spark.createDataFrame(w) for s, w in data.items()}
        for stream, frame in frames.items():
            frame.createOrReplaceTempView(stream)
        expected = [multiset(execute(p, query, data).result) for p in plans]
        assert len(set(map(frozenset, (e.items() for e in expected)))) == 1, name
        built = [to_spark(p, frames, query=query) for p in plans]
        sql = [spark.sql(plan_sql(p, "spark", query=query, one_round=True)) for p in plans]
        got = run_all(spark, built + sql)
        for i, plan in enumerate(plans):
            assert got[i] == expected[i], f"{name} {plan.id} to_spark\n{query.sql}"
            assert got[len(plans) + i] == expected[i], f"{name} {plan.id} to_sql\n{query.sql}"


@pytest.mark.spark
def test_spark_keeps_the_plans_join_order(spark, examples):
    """Spark's cost-based join reordering (spark.sql.cbo.joinReorder.enabled) is off by
    default and cqopt relies on it: the optimized plan joins in the plan's left-deep
    order, for the DataFrame and for the SQL, Cartesian steps included (they are
    hinted, or Spark's ReorderJoin rule would move them)."""
    assert spark.conf.get("spark.sql.cbo.joinReorder.enabled") == "false"
    assert spark.conf.get("spark.sql.cbo.enabled") == "false"
    cartesian = parse_query("SELECT A.k, B.k, C.k FROM A, B, C WHERE A.a = C.a WINDOW [1]", ABCD)
    checked = 0
    for seed, (name, query) in enumerate(all_queries(examples) + [("cartesian", cartesian)]):
        if len(query.streams) < 2:
            continue
        data = windows(query, seed)
        frames = {s: spark.createDataFrame(w) for s, w in data.items()}
        for stream, frame in frames.items():
            frame.createOrReplaceTempView(stream)
        # One plan per join order: the σ/π orders under the joins do not change it.
        for plan in {p.join_order: p for p in enumerate_plans(query)}.values():
            order = list(plan.join_order)
            assert spark_join_order(to_spark(plan, frames, query=query)) == order, plan.id
            assert spark_join_order(spark.sql(plan_sql(plan, query=query, one_round=True))) == order, plan.id
            checked += 1
    assert checked > 20
    ids = {p.id for p in enumerate_plans(cartesian)}
    assert "A×B⋈C" in ids  # the order ReorderJoin would turn into A⋈C×B


DIALECTS = ("spark", "hive", "postgres", "duckdb")


def test_sql_parses_back_in_each_dialect(examples):
    for name, query in all_queries(examples):
        for plan in enumerate_plans(query):
            for dialect in DIALECTS:
                text = plan_sql(plan, dialect, query=query, one_round=True)
                assert text.startswith(f"/* cqopt plan {plan.id}; windows: ")
                tree = sqlglot.parse_one(text, read=dialect)
                joins = tree.args.get("joins") or []
                assert len(joins) == len(query.streams) - 1, (plan.id, dialect)
                # The FROM and JOIN items are the streams, in the plan's order.
                items = [tree.args["from_"].this] + [j.this for j in joins]
                assert [i.alias_or_name for i in items] == list(plan.join_order)


def test_sql_nests_each_streams_selection_and_projection_in_the_plans_order():
    query = parse_query("SELECT S.a FROM S WHERE S.b = 1 WINDOW [2]", Catalog.from_dict(
        {"streams": {"S": {"rate": [1, 10], "columns": {"a": "int", "b": "int", "c": "int"}}}}))
    select_project, project_select = enumerate_plans(query)

    def chain(plan) -> list[str]:
        """Operators of the stream's subqueries, bottom-up."""
        node, ops = sqlglot.parse_one(plan_sql(plan, "postgres", query=query, one_round=True)).args["from_"].this, []
        while isinstance(node, exp.Subquery):
            inner = node.this
            ops.append("σ" if inner.args.get("where") else "π")
            node = inner.args["from_"].this
        return ops[::-1]

    assert chain(select_project) == ["σ", "π"]
    assert chain(project_select) == ["π", "σ"]
    assert "windows: S [RANGE 2 SECONDS]" in plan_sql(select_project, "duckdb", query=query, one_round=True)


def test_sql_without_the_query_names_columns_by_the_query_rule():
    """A column by its name, not its stream's (``k``, as the query names ``SELECT A.k``);
    the query's alias where the query is given."""
    query = parse_query("SELECT A.k AS key, COUNT(*) FROM A, B WHERE A.a = B.a GROUP BY A.k "
                        "WINDOW [1]", ABCD)
    tree = sqlglot.parse_one(plan_sql(enumerate_plans(query)[0], "duckdb", one_round=True),
                           read="duckdb")
    assert [e.alias for e in tree.expressions] == ["k", "COUNT(*)"]
    tree = sqlglot.parse_one(plan_sql(enumerate_plans(query)[0], "duckdb", query=query,
                                                                      one_round=True))
    assert [e.alias for e in tree.expressions] == ["key", "COUNT(*)"]


class NoCross(Dialect):
    """A dialect without CROSS JOIN, to see a construct a dialect cannot express."""

    class Generator(Generator):
        def join_sql(self, expression: exp.Join) -> str:
            if (expression.kind or "").upper() == "CROSS":
                self.unsupported("CROSS JOIN")
            return super().join_sql(expression)


def test_sql_errors_name_the_construct_and_the_dialect():
    plan = enumerate_plans(parse_query("SELECT A.k, B.k FROM A, B WINDOW [1]", ABCD))[0]
    with pytest.raises(PlanSqlError, match=r"A×B cannot be written in the nocross dialect: "
                                           r"CROSS JOIN"):
        plan_sql(plan, "nocross", one_round=True)
    with pytest.raises(PlanSqlError, match=r"unknown SQL dialect 'postgress'; did you mean "
                                           r"'postgres'"):
        plan_sql(plan, "postgress", one_round=True)


def test_importing_the_optimizer_does_not_import_pyspark():
    import subprocess
    import sys

    code = ("import sys, cqopt.optimizer.plans.plan, cqopt.optimizer.plans.sql; "
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


# -- the command line -------------------------------------------------------------------
def test_explain_prints_each_plans_sql(dec_toml, workload_toml, capsys):
    from cqopt.cli.main import main

    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q2",
                 "--sql-out", "postgres"]) == 0
    out = capsys.readouterr().out
    assert out.count("SQL (postgres):") == 3
    assert '/* cqopt plan TCP⋈UDP⋈SF; windows: TCP [RANGE 1 SECONDS]' in out
    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml, "--query", "Q1",
                 "--sql-out", "duckdb", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert all(sqlglot.parse_one(p["sql"], read="duckdb") for p in plans)


def test_choose_prints_the_chosen_plans_sql(dec_toml, workload_toml, tmp_path, capsys):
    from cqopt.cli.main import main

    charts = str(tmp_path / "charts")
    assert main(["build", "--catalog", dec_toml, "--workload", workload_toml, "--out", charts,
                 "--engine", "local", "--k", "2", "--quiet"]) == 0
    capsys.readouterr()
    stats = ["--stat", "rate.TCP=500", "--stat", "rate.UDP=300", "--stat", "rate.SF=100"]
    assert main(["choose", "--charts", charts, "--query", "Q2", *stats, "--sql", "spark"]) == 0
    out = capsys.readouterr().out
    plan_id = out.split("plan ", 1)[1].split(",")[0]
    assert f"/* cqopt plan {plan_id}; windows:" in out and "INNER JOIN" in out
    assert main(["choose", "--charts", charts, "--query", "Q2", *stats, "--sql", "hive",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sql"].startswith(f"/* cqopt plan {data['plan']}")


def test_an_unknown_dialect_is_one_line_and_exit_2(dec_toml, workload_toml, capsys):
    from cqopt.cli.main import main

    assert main(["explain", "--catalog", dec_toml, "--workload", workload_toml,
                 "--sql-out", "sparkk"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: unknown SQL dialect 'sparkk'; did you mean 'spark'")
    assert len(err.strip().splitlines()) == 1


def test_shed_answers_are_scaled_by_the_chance_a_result_survives(spark, examples):
    """issue 22: a COUNT or SUM over one stream sampled at p is scaled by 1/p; over a join
    of two streams each sampled at p, a pair survives with p^2, so by 1/p^2. AVG stays."""
    from cqopt.spark.plan_frame import scaled_answers

    catalog = load_catalog(examples / "dec-pkt.toml")
    row = {"ts": 0.5, "src_host": 1, "dest_host": 1, "src_port": 1, "dest_port": 1,
           "bytes": 10}
    frames = {s: spark.createDataFrame(pd.DataFrame([row] * 3)) for s in ("TCP", "UDP")}
    for sql, factor in (
            ("SELECT COUNT(*), SUM(TCP.bytes), AVG(TCP.bytes) FROM TCP WINDOW [1]", 2.0),
            ("SELECT COUNT(*), SUM(TCP.bytes), AVG(TCP.bytes) FROM TCP, UDP "
             "WHERE TCP.src_host = UDP.dest_host WINDOW [1]", 4.0)):
        query = parse_query(sql, catalog)
        plan = enumerate_plans(query)[0]
        exact = to_spark(plan, frames, query=query).toPandas().iloc[0].tolist()
        scaled = scaled_answers(to_spark(plan, frames, query=query), plan, query,
                                0.5).toPandas().iloc[0].tolist()
        assert scaled == pytest.approx([exact[0] * factor, exact[1] * factor, exact[2]])


@pytest.mark.spark
def test_joins_over_one_partition_frames_need_no_shuffle(spark, examples):
    """With ``one_partition`` (frames handed from the driver, one partition each) a join's
    result stays one partition, so no join or aggregate above it shuffles, and the rows
    are the reference executor's."""
    import re

    from cqopt.spark.session import driver_data_conf, driver_frame

    shuffle = re.compile(r"(?<!Broadcast)Exchange ")
    checked = 0
    with driver_data_conf(spark, True):
        for seed, (name, query) in enumerate(all_queries(examples)):
            if len(query.streams) < 2:
                continue
            data = windows(query, seed)
            frames = {s: driver_frame(spark, pa.Table.from_pandas(w, preserve_index=False))
                      for s, w in data.items()}
            plans = enumerate_plans(query)
            built = [to_spark(p, frames, query=query, one_partition=True) for p in plans]
            expected = multiset(execute(plans[0], query, data).result)
            for plan, frame in zip(plans, built):
                text = frame._jdf.queryExecution().executedPlan().toString()
                assert not shuffle.search(text), f"{name} {plan.id}\n{text}"
            assert all(got == expected for got in run_all(spark, built)), name
            # Thousands of tuples a stream: Spark's size of a join is the product of its
            # inputs', past spark.sql.maxSinglePartitionBytes for a three-way join, which
            # then shuffled though every input is one partition (planned only, not run).
            many = {s: driver_frame(spark, pa.Table.from_pandas(w, preserve_index=False))
                    for s, w in windows(query, seed, rows=3000).items()}
            for plan in plans:
                text = (to_spark(plan, many, query=query, one_partition=True)
                        ._jdf.queryExecution().executedPlan().toString())
                assert not shuffle.search(text), f"{name} {plan.id}, 3000 tuples\n{text}"
            checked += len(query.streams) > 2
    assert checked >= 3  # three-way joins and more, where the shuffle was
