"""Exact common subexpressions of several plans: built once, and (Spark's metrics say) run once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from cqopt.catalog import load_catalog
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.spark.shared_work import SharedWork


class _Frame:  # a stand-in DataFrame: the memo only keeps and hands back objects
    def coalesce(self, partitions):  # a driver frame is one partition (session.driver_frame)
        return self


class _Spark:
    def __init__(self):
        self.made = 0

    def createDataFrame(self, table):  # noqa: N802 (Spark's name)
        self.made += 1
        return _Frame()


def test_equal_tables_and_equal_steps_are_one_frame_and_counted_per_plan():
    spark, shared = _Spark(), SharedWork()
    table = pa.table({"ts": [0.1, 0.2], "a": [1, 2]})
    shared.begin_part("Q1")
    base = shared.table_frame(spark, "S", table)
    sel = shared.derive(base, "a > 1", _Frame)
    shared.begin_part("Q2")
    assert shared.table_frame(spark, "S", pa.table({"ts": [0.1, 0.2], "a": [1, 2]})) is base
    assert shared.derive(base, "a > 1", _Frame) is sel  # the same step: one frame
    assert shared.derive(base, "a > 2", _Frame) is not sel  # another selection
    other = shared.table_frame(spark, "S", pa.table({"ts": [0.1, 0.2], "a": [1, 3]}))
    assert other is not base and spark.made == 2  # unequal tuples are never shared
    foreign = _Frame()  # a frame the memo did not make: built as usual, never shared
    assert shared.derive(foreign, "a > 1", _Frame) is not shared.derive(foreign, "a > 1",
                                                                         _Frame)
    assert shared.summary() == {"shared_steps": 1, "uses": 2, "saved": 1,
                                "shared_results": 0}


def test_equal_plans_give_one_result_and_its_steps_count_as_one_use():
    """Two parts whose whole plan is one chain of steps over equal tuples give one result:
    the second is the first's (same_results), and the steps below count one use, not
    two, so nothing is persisted for them; a third part with another step shares below."""
    spark, shared = _Spark(), SharedWork()
    table = pa.table({"ts": [0.1, 0.2], "a": [1, 2]})
    results = {}
    for part, condition in (("Q1", "a > 1"), ("Q2", "a > 1"), ("Q3", "a > 2")):
        shared.begin_part(part)
        base = shared.table_frame(spark, "S", table)
        left = shared.derive(base, condition, _Frame)
        joined = shared.derive((left, base), "join", _Frame)  # a step over two frames
        shared.end_part(joined)
        results[part] = joined
    assert results["Q1"] is results["Q2"] and results["Q3"] is not results["Q1"]
    assert shared.same_results() == {"Q2": "Q1"}
    # Only the table frame is used by two results (Q1-and-Q2's, Q3's); it is no step.
    assert shared.shared() == []
    assert shared.summary() == {"shared_steps": 0, "uses": 0, "saved": 0,
                                "shared_results": 1}
    assert spark.made == 1


def _cached_plans(executions) -> list:
    """Each InMemoryTableScan's cached plan in the executed plans (AQE's final plans)."""
    from cqopt.spark.operator_metrics import _children, _class_name

    def walk(node):
        cls = _class_name(node)
        if cls == "AdaptiveSparkPlanExec":
            yield from walk(node.executedPlan())
        elif cls.endswith("QueryStageExec"):
            yield from walk(node.plan())
        else:
            yield node
            for child in _children(node):
                yield from walk(child)
    return [node.relation().cacheBuilder().cachedPlan() for ex in executions
            for node in walk(ex.executedPlan())
            if _class_name(node) == "InMemoryTableScanExec"]


@pytest.mark.spark
def test_a_selection_two_plans_share_runs_once_by_sparks_metrics(spark, examples):
    """A selection of TCP that two queries' plans both make is one DataFrame, persisted
    before the plans run, side by side as a workload runs them: both plans read it, and the
    Filter in it ran once over the tuples (Spark's own rows-in metric is the tuples, not
    twice them); each plan's rows are those it gives on its own."""
    from cqopt.spark.operator_metrics import operator_records, profiled
    from cqopt.spark.plan_frame import to_spark
    from cqopt.spark.run.concurrent import run_all
    from cqopt.spark.run.sink import collect

    catalog = load_catalog(examples / "dec-pkt.toml")
    rows = parse_query("SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 "
                       "WINDOW [1]", catalog)
    counts = parse_query("SELECT TCP.src_host, COUNT(*) FROM TCP WHERE TCP.dest_host = 2 "
                         "GROUP BY TCP.src_host WINDOW [1]", catalog)
    plans = [next(p for p in enumerate_plans(q) if p.id.endswith("[σπ]"))
             for q in (rows, counts)]
    rng = np.random.default_rng(3)
    n = 2000
    columns = {c.name: rng.integers(0, 5, n) for c in catalog.stream("TCP").columns}
    columns["ts"] = np.sort(rng.random(n))
    table = pa.table(columns)

    shared = SharedWork()
    frames = []
    for name, plan, query in zip(("rows", "counts"), plans, (rows, counts)):
        shared.begin_part(name)
        frame = to_spark(plan, {"TCP": shared.table_frame(spark, "TCP", table)}, query=query,
                         shared=shared)
        frames.append(frame.selectExpr("0 AS _round", "*"))
    assert shared.summary()["saved"] >= 1  # the source and its selection: one each
    try:
        assert shared.compute_once() >= 1
        together: dict[int, pa.Table] = {}
        with profiled(spark) as profile:
            assert run_all([lambda i=i, f=f: together.update({i: collect(f, 10_000)})
                            for i, f in enumerate(frames)]) == [None, None]
        cached = _cached_plans(profile.executions)
        assert len(cached) >= 2  # both plans read the shared selection
        for plan in cached:
            filters = [r for r in operator_records(plan) if r.operator == "Filter"]
            assert [(f.rows_in, f.rows_out) for f in filters] == [
                (n, int((columns["dest_host"] == 2).sum()))]  # once over the n tuples
    finally:
        shared.release()
    alone = [collect(to_spark(p, {"TCP": spark.createDataFrame(table)}, query=q), 10_000)
             for p, q in zip(plans, (rows, counts))]
    for got, want in zip((together[0], together[1]), alone):
        got = got.drop(["_round"]).to_pandas()
        want = want.to_pandas()
        got.columns = want.columns
        key = list(want.columns)
        assert got.sort_values(key, ignore_index=True).equals(
            want.sort_values(key, ignore_index=True))
