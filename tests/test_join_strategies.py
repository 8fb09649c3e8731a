"""Join strategies: Spark's hints in SQL and in DataFrames, the rule that plans them, the
engine model's prices, and plans stored with and without them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from cqopt.catalog import Catalog
from cqopt.charts.spec import ChartSpec, candidate_plans, make_spec
from cqopt.costmodel.engine import Engine
from cqopt.optimizer.plans.builder import PlanBuilder, PlanShape
from cqopt.optimizer.plans.codec import plan_from_data, plan_to_data, plans_from_json
from cqopt.optimizer.plans.sql import PlanSqlError, plan_sql
from cqopt.optimizer.plans.strategies import AUTO, HINTED
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans, rules_without

HOST = {"rate": [100, 1_000_000], "columns": {"k": "int", "v": "int"}}
CATALOG = Catalog.from_dict({"streams": {"A": HOST, "B": HOST, "C": HOST}})
SQL = "SELECT A.v, B.v, C.v FROM A, B, C WHERE A.k = B.k AND B.k = C.k WINDOW [1]"
STORED = Path(__file__).parent / "data" / "plans_before_typed_nodes.json"


@pytest.fixture(scope="module")
def query():
    return parse_query(SQL, CATALOG)


def _plan(query, *strategies, order=("A", "B", "C")):
    return PlanBuilder(query).build_shape(PlanShape(order, strategies=strategies))


def _spec(query, model: str) -> ChartSpec:
    weights = [0, 0, 1] if model == "engine" else [0.4, 0.6]
    return make_spec("Q", SQL, query, CATALOG, {"model": model, "weights": weights, "k": 2,
                                                "fixed": {"jsel.A.B": 0.001,
                                                          "jsel.B.C": 0.001}})


def test_spark_sql_carries_the_hints_and_duckdb_refuses_them_in_one_line(query):
    plan = _plan(query, "broadcast_left", "sort_merge")
    assert plan.id == "A⋈{bl}B⋈{sm}C"
    text = plan_sql(plan, "spark", query=query, pretty=False, one_round=True)
    assert "SELECT /*+ BROADCAST(`A`), MERGE(`C`) */" in text
    right = plan_sql(_plan(query, "broadcast_right", "shuffle_hash"), "spark", query=query,
                     pretty=False, one_round=True)
    assert "BROADCAST(`B`), SHUFFLE_HASH(`C`)" in right
    with pytest.raises(PlanSqlError) as err:
        plan_sql(plan, "duckdb", query=query)
    message = str(err.value)
    assert "\n" not in message and "A⋈{bl}B⋈{sm}C" in message and "duckdb" in message
    # the engine's choice is no hint: every dialect writes it
    assert "/*+" not in plan_sql(_plan(query), "duckdb", query=query, one_round=True)
    # a join's result is no table a hint can name: one line, in Spark's dialects too
    with pytest.raises(PlanSqlError, match=r"^plan A⋈B⋈\{bl\}C .*join:2 broadcasts its left "
                                           r"input, a join's result[^\n]*$"):
        plan_sql(_plan(query, AUTO, "broadcast_left"), "spark", query=query, one_round=True)


def test_the_rule_expands_only_for_a_model_that_prices_strategies_and_without_drops_it(query):
    engine_plans = candidate_plans(_spec(query, "engine"), CATALOG)
    om_plans = candidate_plans(_spec(query, "om"), CATALOG)
    orders = {p.join_order for p in om_plans}
    # OM costs every strategy alike: its chart keeps one plan per order, all left to Spark
    assert len(om_plans) == len(orders)
    assert all(p.node(k).strategy == AUTO for p in om_plans for k in p.operators()
               if k.startswith("join:"))
    # the engine model's chart chooses among strategies, within every order, bounded
    assert {p.join_order for p in engine_plans} == orders
    assert len(orders) < len(engine_plans) <= len(orders) * len(HINTED) ** 2
    assert all(p.node(k).strategy != AUTO for p in engine_plans for k in p.operators()
               if k.startswith("join:"))
    # --without join_strategies: the same model, every join left to the engine
    model, spec = Engine(CATALOG), _spec(query, "engine")
    corners = spec.corner_stats()

    def score(plans):
        return np.stack([model.seconds(p, corners) for p in plans])

    with_rule = enumerate_plans(query, strategy_cost=score)
    without = enumerate_plans(query, strategy_cost=score,
                              rules=rules_without(["join_strategies"]))
    assert sorted(p.id for p in with_rule) == sorted(p.id for p in engine_plans)
    assert [p.id for p in without] == [p.id for p in enumerate_plans(query)]
    # the plan budget holds: one plan per order at most once max_plans is reached
    assert len(enumerate_plans(query, strategy_cost=score, max_plans=3)) == 3


def test_the_engine_model_broadcasts_a_tiny_side_and_shuffles_a_huge_one(query):
    model = Engine(CATALOG)

    def seconds(strategy, rate_a, rate_b):
        stats = {"rate.A": rate_a, "rate.B": rate_b, "rate.C": 100.0,
                 "jsel.A.B": 1e-6, "jsel.B.C": 1e-6}
        return float(model.seconds(_plan(query, strategy, "shuffle_hash"), stats))

    big, tiny, huge = 2e6, 500.0, 5e7
    # B tiny, A big: broadcasting B beats shuffling both, and beats broadcasting A
    assert seconds("broadcast_right", big, tiny) < seconds("shuffle_hash", big, tiny)
    assert seconds("broadcast_right", big, tiny) < seconds("sort_merge", big, tiny)
    assert seconds("broadcast_right", big, tiny) < seconds("broadcast_left", big, tiny)
    # B huge: shuffling both beats collecting B on the driver
    assert seconds("shuffle_hash", big, huge) < seconds("broadcast_right", big, huge)
    # both moved either way: a hash table costs less than sorting both sides
    assert seconds("shuffle_hash", big, big) < seconds("sort_merge", big, big)
    # past Spark's 8 GiB a side cannot be broadcast at all
    assert seconds("broadcast_right", big, 1e12) == np.inf
    # the generated point path costs a hinted plan as the grid path does, bit for bit
    plan = _plan(query, "broadcast_left", "sort_merge")
    point = {"rate.A": 3e4, "rate.B": 7e5, "rate.C": 2e3, "jsel.A.B": 1e-4, "jsel.B.C": 1e-5}
    grid = {k: np.array([v]) for k, v in point.items()}
    for _ in range(2):  # interpreted, then generated
        assert float(model.cost(plan, point).cpu) == float(model.cost(plan, grid).cpu[0])


def test_plans_store_their_strategies_and_old_plans_load_as_the_engines_choice(query):
    hinted = _plan(query, "broadcast_right", "sort_merge")
    copy = plan_from_data(json.loads(json.dumps(plan_to_data(hinted))))
    assert copy.id == hinted.id
    assert [copy.node(f"join:{i}").strategy for i in (1, 2)] == ["broadcast_right",
                                                                  "sort_merge"]
    # a plan left to the engine is stored as plans were before strategies existed
    assert "strategy" not in json.dumps(plan_to_data(_plan(query)))
    # plans written before strategies: every join reads back as the engine's choice
    old = plans_from_json(STORED.read_text(encoding="utf-8"))
    joins = [p.node(k) for p in old for k in p.operators() if k.startswith("join:")]
    assert joins and all(j.strategy == AUTO for j in joins)
    assert all("{" not in p.id for p in old)


@pytest.mark.parametrize("strategy, operator", [
    ("broadcast_left", "BroadcastHashJoin [k#"),
    ("broadcast_right", "BroadcastHashJoin [k#"),
    ("shuffle_hash", "ShuffledHashJoin [k#"),
    ("sort_merge", "SortMergeJoin [k#"),
])
def test_dataframes_run_the_hinted_strategy(spark, query, strategy, operator):
    from cqopt.spark.plan_frame import to_spark

    two = parse_query("SELECT A.v, B.v FROM A, B WHERE A.k = B.k WINDOW [1]", CATALOG)
    plan = PlanBuilder(two).build_shape(PlanShape(("A", "B"), strategies=(strategy,)))
    frames = {s: spark.createDataFrame([(i % 5, i) for i in range(20)], "k int, v int")
              for s in "AB"}
    df = to_spark(plan, frames, query=two)
    assert len(df.collect()) == 80  # 20 x 20 pairs, 1 in 5 on one key; runs df's own plan
    executed = df._jdf.queryExecution().executedPlan().toString()
    final = executed.split("== Initial Plan ==")[0]  # AQE's plan as it ran
    joins = [line for line in final.splitlines() if "Join [" in line]
    assert len(joins) == 1 and operator in joins[0], executed
    if strategy.startswith("broadcast"):
        assert ("BuildLeft" if strategy == "broadcast_left" else "BuildRight") in joins[0]
