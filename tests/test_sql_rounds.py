"""Rounds as keys. ``plan_sql`` run once on whole tables in DuckDB gives, round by round,
what the reference executor gives on each round's windows; ``cqopt.spark.to_spark`` with a
round column gives over many rounds at once what it gives on each round alone."""

from __future__ import annotations

import math
import re
from collections import Counter

import duckdb
import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import Catalog, load_catalog
from cqopt.charts.workload import load_workload
from cqopt.costmodel.reference_executor import execute, multiset
from cqopt.examples import example
from cqopt.optimizer.plans.sql import ROUND_COLUMN, PlanSqlError, plan_sql
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.replay.rounds import round_of

ROUNDS = 5
START = 100.0


def trace(catalog: Catalog, streams, seed: int, round_s: float) -> dict[str, pd.DataFrame]:
    """A few tuples per stream and round, from small domains (host ids, the example
    queries' status codes), so that selections and joins pass some tuples and not all;
    timestamps stay off the round boundaries, where floor((ts - start) / W) in SQL and
    the rule of round_of could part by a rounding error."""
    rng = np.random.default_rng(seed)
    out = {}
    for stream in streams:
        spec = catalog.stream(stream)
        rows = []
        for r in range(ROUNDS):
            n = int(rng.integers(0, 7))  # a stream may have no tuple in a round
            ts = START + round_s * (r + rng.uniform(0.01, 0.99, n))
            rows.append(pd.DataFrame({"ts": ts}))
        frame = pd.concat(rows, ignore_index=True)
        n = len(frame)
        for col in spec.columns:
            if col.name == "ts":
                continue
            if col.type == "string":
                frame[col.name] = rng.choice(["a", "b", "c"], n)
            elif col.name == "status":
                frame[col.name] = rng.choice([200, 200, 302, 404, 500], n).astype(np.int64)
            else:
                frame[col.name] = rng.integers(0, 4, n).astype(np.int64)
        out[stream] = frame
    return out


def round_windows(query: ContinuousQuery, data: dict[str, pd.DataFrame], r: int,
                  round_s: float) -> dict[str, pd.DataFrame]:
    """Each stream's [RANGE w] window at the end of round ``r``: ``end - w <= ts < end``
    (the round itself when w is the round), as a one-round run hands it over."""
    end = START + (r + 1) * round_s
    out = {}
    for ref in query.streams:
        frame = data[ref.name]
        rounds = frame.ts.map(lambda t: round_of(t, START, round_s))
        lo = end - ref.window.seconds
        keep = (rounds <= r) & ((rounds == r) | (frame.ts >= lo))
        out[ref.name] = frame[keep].reset_index(drop=True)
    return out


def per_round(frame: pd.DataFrame) -> dict[int, object]:
    return {int(r): multiset(g.drop(columns=ROUND_COLUMN))
            for r, g in frame.groupby(ROUND_COLUMN)}


def check_plans(query: ContinuousQuery, data: dict[str, pd.DataFrame], round_s: float,
                name: str, rules=None) -> int:
    """Every plan's SQL on DuckDB against the executor in every round; the rounds checked
    with a result."""
    con = duckdb.connect()
    for stream, frame in data.items():
        con.register(stream, frame)
    nonempty = 0
    expected = {}
    for r in range(ROUNDS):
        result = multiset(execute(enumerate_plans(query)[0], query,
                                  round_windows(query, data, r, round_s)).result)
        if result:
            expected[r] = result
    nonempty = len(expected)
    for plan in enumerate_plans(query, **({} if rules is None else {"rules": rules})):
        text = plan_sql(plan, "duckdb", query=query, start=START, round_s=round_s)
        got = per_round(con.execute(text).df())
        assert {r: m for r, m in got.items() if r < ROUNDS} == expected, \
            f"{name} {plan.id}\n{text}"
    return nonempty


def example_queries():
    for workload, catalog in (("workload.toml", "dec-pkt.toml"),
                              ("epa-workload.toml", "epa-http.toml")):
        cat = load_catalog(example(catalog))
        for q in load_workload(example(workload)).queries:
            yield q.name, cat, parse_query(q.sql, cat)


@pytest.mark.parametrize("name", ["Q1", "Q2", "OK", "RETRY"])
def test_every_example_plan_on_duckdb_matches_the_executor_round_by_round(name):
    (_, cat, query), = [e for e in example_queries() if e[0] == name]
    round_s = query.window.seconds
    streams = query.stream_names
    checked = sum(check_plans(query, trace(cat, streams, seed, round_s), round_s, name)
                  for seed in range(3))
    assert checked >= 3  # the generated traces give results, not only empty rounds


@pytest.mark.parametrize("left_out", [("pushdown",), ("group_selections", "pushdown")])
def test_plans_of_an_ablation_on_duckdb_match_the_executor(left_out):
    # Selections left above the joins become the outer WHERE (they had no SQL form).
    from cqopt.optimizer.rules.enumerate import rules_without

    cat = load_catalog(example("dec-pkt.toml"))
    query = parse_query("SELECT TCP.src_host, UDP.bytes FROM TCP, UDP WHERE TCP.src_host = "
                        "UDP.dest_host AND TCP.bytes >= 0 AND TCP.dest_port >= 0 "
                        "WINDOW [1]", cat)
    rules = rules_without(left_out)
    assert any(p.node(k).kind == "selection" and p.node(k).stream is None
               for p in enumerate_plans(query, rules=rules) for k in p.operators())
    checked = sum(check_plans(query, trace(cat, query.stream_names, seed, 1.0), 1.0, "ablation",
                              rules=rules) for seed in range(3))
    assert checked >= 1


def test_the_whole_table_query_without_rounds_joins_across_them():
    """What the rounds are for: the same join on the whole tables, rounds ignored, has more
    rows than the rounds' results together."""
    (_, cat, query), = [e for e in example_queries() if e[0] == "Q2"]
    data = trace(cat, query.stream_names, 0, 1.0)
    con = duckdb.connect()
    for stream, frame in data.items():
        con.register(stream, frame)
    plan = enumerate_plans(query)[0]
    per_round_rows = len(con.execute(plan_sql(plan, "duckdb", query=query, start=START)).df())
    whole = len(con.execute(plan_sql(plan, "duckdb", query=query, one_round=True)).df())
    assert whole > per_round_rows > 0


DEC = load_catalog(example("dec-pkt.toml"))


@pytest.mark.parametrize("sql", [
    # an aggregate with GROUP BY and HAVING over a join
    "SELECT TCP.src_host, COUNT(*), SUM(UDP.bytes) FROM TCP, UDP "
    "WHERE TCP.src_host = UDP.dest_host AND TCP.bytes > 0 GROUP BY TCP.src_host "
    "HAVING COUNT(*) > 1 WINDOW [1]",
    # a Cartesian step, and sliding windows: 3 rounds, and 1.5 rounds, of 1 s
    "SELECT TCP.src_host, SF.bytes FROM TCP [RANGE 3 SECONDS], SF [RANGE 1.5 SECONDS], "
    "UDP [RANGE 1 SECONDS] WHERE TCP.dest_host = UDP.dest_host AND SF.bytes = 1",
])
def test_aggregates_cartesian_steps_and_sliding_windows(sql):
    query = parse_query(sql, DEC)
    assert check_plans(query, trace(DEC, query.stream_names, 1, 1.0), 1.0, sql) >= 2


def test_a_scalar_aggregate_has_no_row_for_a_round_without_input():
    query = parse_query("SELECT COUNT(*) FROM TCP WHERE TCP.bytes = 9 WINDOW [1]", DEC)
    data = trace(DEC, ["TCP"], 0, 1.0)  # bytes are 0-3: no tuple passes
    con = duckdb.connect()
    con.register("TCP", data["TCP"])
    plan = enumerate_plans(query)[0]
    assert con.execute(plan_sql(plan, "duckdb", query=query, start=START)).df().empty
    assert multiset(execute(plan, query, round_windows(query, data, 0, 1.0)).result) \
        == {(0,): 1}


@pytest.mark.parametrize("window, construct", [
    ("[ROWS 10]", "[ROWS 10]"), ("[NOW]", "[NOW]"), ("[UNBOUNDED]", "[UNBOUNDED]"),
    ("[PARTITION BY TCP.src_host ROWS 2]", "[PARTITION BY src_host ROWS 2]"),
])
def test_windows_rounds_cannot_carry_are_refused_by_name(window, construct):
    query = parse_query(f"SELECT TCP.src_host FROM TCP {window}", DEC)
    plan = enumerate_plans(query)[0]
    with pytest.raises(PlanSqlError, match=f"stream TCP's window {re.escape(construct)} is "
                                           "no span of time.* one_round=True"):
        plan_sql(plan, "duckdb", query=query, round_s=1.0)
    assert plan_sql(plan, "duckdb", query=query, one_round=True)


def test_a_stream_without_ts_is_refused():
    cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    plan = enumerate_plans(parse_query("SELECT S.a FROM S WINDOW [1]", cat))[0]
    with pytest.raises(PlanSqlError, match="stream S has no ts column"):
        plan_sql(plan, "duckdb")


def test_round_length_must_be_positive():
    plan = enumerate_plans(parse_query("SELECT TCP.src_host FROM TCP WINDOW [1]", DEC))[0]
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(PlanSqlError, match="round_s"):
            plan_sql(plan, "duckdb", round_s=bad)


# -- many rounds in one DataFrame ------------------------------------------------------------
ROUND = "_round"


def with_rounds(data: dict[str, pd.DataFrame], round_s: float) -> dict[str, pd.DataFrame]:
    return {s: f.assign(**{ROUND: [round_of(t, START, round_s) for t in f.ts]})
            for s, f in data.items()}


def spark_multiset(df) -> object:
    return multiset(df.toPandas())


@pytest.mark.parametrize("sql", [
    "SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
    "AND UDP.dest_host = SF.dest_host WINDOW [1]",
    "SELECT TCP.src_host, COUNT(*), SUM(UDP.bytes), AVG(UDP.bytes) FROM TCP, UDP "
    "WHERE TCP.src_host = UDP.dest_host AND TCP.bytes > 0 GROUP BY TCP.src_host "
    "HAVING COUNT(*) > 1 WINDOW [1]",
    "SELECT TCP.src_host, SF.bytes FROM TCP, SF WHERE SF.bytes = 1 WINDOW [1]",  # Cartesian
])
def test_one_plan_over_many_rounds_equals_each_round_alone(spark, sql):
    """to_spark(..., round_column=) over every round at once gives, row for row, what the
    plan gives on each round's frames alone, what its round-carrying SQL gives on Spark
    and what the executor gives."""
    import functools

    from pyspark.sql import functions as F

    from cqopt.spark import to_spark

    query = parse_query(sql, DEC)
    data = with_rounds(trace(DEC, query.stream_names, 4, 1.0), 1.0)  # results in 2+ rounds
    frames = {s: spark.createDataFrame(f) for s, f in data.items()}
    for plan in enumerate_plans(query)[:2]:
        together = spark_multiset(to_spark(plan, frames, query=query, round_column=ROUND))
        alone = functools.reduce(lambda a, b: a.unionByName(b), [
            to_spark(plan, {s: f.where(F.col(ROUND) == r) for s, f in frames.items()},
                     query=query).select(F.lit(r).cast("long").alias(ROUND), "*")
            for r in range(ROUNDS)])
        assert together == spark_multiset(alone), plan.id
        for stream, frame in frames.items():  # the SQL that carries the rounds, on Spark
            frame.createOrReplaceTempView(stream)
        assert spark_multiset(spark.sql(plan_sql(plan, "spark", query=query, start=START))) \
            == together, plan.id
        expected = Counter()
        for r in range(ROUNDS):
            windows = {s: f[f[ROUND] == r] for s, f in data.items()}
            for row, n in multiset(execute(plan, query, windows).result).items():
                expected[(r, *row)] += n
        assert together == expected and len({row[0] for row in together}) >= 2, plan.id


def test_the_round_column_must_be_in_every_frame_and_no_catalog_column(spark):
    from cqopt.spark import to_spark
    from cqopt.spark.plan_frame import PlanFrameError

    query = parse_query("SELECT TCP.src_host FROM TCP WINDOW [1]", DEC)
    plan = enumerate_plans(query)[0]
    frame = spark.createDataFrame(trace(DEC, ["TCP"], 0, 1.0)["TCP"])
    with pytest.raises(PlanFrameError, match="stream TCP has no column _round"):
        to_spark(plan, {"TCP": frame}, round_column=ROUND)
    with pytest.raises(PlanFrameError, match="round_column 'bytes' is a column of stream TCP"):
        to_spark(plan, {"TCP": frame}, round_column="bytes")


@pytest.mark.parametrize("name", ["Q1", "Q2"])
def test_columns_are_named_alike_with_and_without_the_query(name):
    """One naming rule: ``plan_sql(plan)`` names its columns as ``--sql-out`` (which passes
    the query) does: ``src_host``, qualified only where two outputs share a name."""
    (_, cat, query), = [e for e in example_queries() if e[0] == name]
    con = duckdb.connect()
    for stream, frame in trace(cat, query.stream_names, 0, 1.0).items():
        con.register(stream, frame)
    for plan in enumerate_plans(query):
        # the same names (in the plan's join order without the query, the query's with it)
        named = [sorted(con.execute(plan_sql(plan, "duckdb", **given)).df().columns)
                 for given in ({}, {"query": query})]
        assert named[0] == named[1], plan.id
    assert ("src_host" if name == "Q1" else "TCP.src_host") in named[0]


def test_rounds_start_at_the_first_tuple_unless_given():
    """Round 0 starts at the earliest ts of the plan's streams (the SQL computes it, as
    cqopt run fixes it from its first tuples): the rounds of the executor from that time."""
    (_, cat, query), = [e for e in example_queries() if e[0] == "Q2"]
    data = trace(cat, query.stream_names, 2, 1.0)
    first = min(float(f.ts.min()) for f in data.values())
    shifted = {s: f.assign(ts=f.ts - first + START + 0.37) for s, f in data.items()}
    con = duckdb.connect()
    for stream, frame in shifted.items():
        con.register(stream, frame)
    plan = enumerate_plans(query)[0]
    given = per_round(con.execute(plan_sql(plan, "duckdb", query=query,
                                           start=START + 0.37)).df())
    computed = per_round(con.execute(plan_sql(plan, "duckdb", query=query)).df())
    assert computed == given and given
    assert per_round(con.execute(plan_sql(plan, "duckdb", query=query, start=0.0)).df()) \
        != given


@pytest.mark.slow
def test_the_duckdb_script_runs_as_the_readme_lists_it(repo_root, tmp_path):
    """The README lists ``scripts/sql_rounds_duckdb.py`` without arguments: it generates
    its own trace, and the rounds SQL gives every plan the reference executor's rows."""
    import subprocess
    import sys

    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    (listed,) = re.findall(r"^\| `(scripts/sql_rounds_duckdb\.py[^`]*)` \|", readme, re.M)
    done = subprocess.run([sys.executable, *listed.split()], cwd=repo_root, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    counts = [int(n) for n in re.findall(r"rounds SQL (\d+) rows", done.stdout)]
    reference = int(re.search(r"one by one: (\d+) rows", done.stdout).group(1))
    assert len(counts) >= 2 and set(counts) == {reference} and reference > 0, done.stdout
