"""Babcock's shedders on segments shared by a workload's COUNT and SUM queries, live
(cqopt.spark.run.shared_shedding): the diagram, the placement, the driver's samples, the
settings; and one run of a workload through Spark.
"""

from __future__ import annotations

import dataclasses
import json
import tomllib
import zlib
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest

from cqopt.costmodel import make_model
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.runtime.overload.shedding import error_constant, load
from cqopt.spark.run.driver_rows import sample_rows
from cqopt.spark.run.overload import Due, round_seconds
from cqopt.spark.run.settings import RunSettings, StreamingRunError
from cqopt.spark.run.shared_shedding import (
    Member,
    contributing_constant,
    eligible,
    flow_tree,
    operator_seconds,
    query_rates,
    shed_shared,
    shed_span,
)

SHARED = "TCP.dest_host = 2"
SQL = {"A": f"SELECT COUNT(*) FROM TCP WHERE {SHARED} WINDOW [1]",
       "B": f"SELECT SUM(TCP.bytes) FROM TCP WHERE {SHARED} WINDOW [1]",
       "C": "SELECT COUNT(*) FROM TCP WHERE TCP.dest_host = 3 WINDOW [1]"}


def _members() -> list[Member]:
    """q1 and q2 share a selection of S (selectivity 0.5), q3 has another (0.2)."""
    return [Member("q1", "S", "S.a = 1", 100.0, 0.5, 0.001, 0.004, 0.05),
            Member("q2", "S", "S.a = 1", 100.0, 0.5, 0.001, 0.002, 0.1),
            Member("q3", "S", "S.a = 2", 100.0, 0.2, 0.002, 0.01, 0.08)]


def test_the_shared_selection_is_one_operator_whose_t_is_its_plans_and_each_query_aggregates():
    tree = flow_tree(_members())
    assert tree.parent == {"S: S.a = 1": "S", "q1: aggregate": "S: S.a = 1",
                           "q2: aggregate": "S: S.a = 1", "S: S.a = 2": "S",
                           "q3: aggregate": "S: S.a = 2"}
    assert tree.seconds_per_tuple["S: S.a = 1"] == pytest.approx(0.002)  # both plans select
    assert tree.labels()["S: S.a = 1"] == {"q1", "q2"}
    # work at full rates: 0.2 + 0.2 (selections) + 0.2 + 0.1 + 0.2 (aggregates)
    assert load(tree) == pytest.approx(0.9)


def test_the_shedder_before_the_shared_selection_is_at_the_largest_rate_and_the_load_is_tight():
    """Capacity 0.45: the load at λ is λ · Σ_x w_x · max C over x's label = 0.072 λ, so
    λ = 6.25 and P = C λ = 0.3125, 0.625, 0.5, every error 1/λ = 0.16. The shared
    selection's shedder keeps max(P1, P2) = 0.625, q1's own keeps P1 / P2 = 0.5 of that;
    the load with these rates, worked out by hand, is the capacity."""
    shedding = shed_span(_members(), capacity=0.45)
    assert shedding.multiplier == pytest.approx(6.25)
    assert shedding.placement.effective == pytest.approx({"q1": 0.3125, "q2": 0.625, "q3": 0.5})
    assert shedding.epsilon == pytest.approx({"q1": 0.16, "q2": 0.16, "q3": 0.16})
    assert shedding.placement.shedders() == pytest.approx(
        {"S: S.a = 1": 0.625, "q1: aggregate": 0.5, "S: S.a = 2": 0.5})
    rates = query_rates(_members(), shedding)
    assert {q: pytest.approx(r) for q, r in rates.items()} == {
        "q1": (0.625, 0.5), "q2": (0.625, 1.0), "q3": (0.5, 1.0)}
    by_hand = 0.2 * 0.625 + 0.2 * 0.5 + 0.2 * 0.3125 + 0.1 * 0.625 + 0.2 * 0.5
    assert shedding.load_after == pytest.approx(0.45) == pytest.approx(by_hand)
    assert shedding.met and shed_span(_members(), 0.9).placement.shedders() == {}
    assert shed_span(_members(), 0.0).placement.effective == {"q1": 0.0, "q2": 0.0, "q3": 0.0}


def _rows(n: int = 600, seed: int = 5) -> pa.Table:
    """Round 0 of TCP on the driver: dest_host 2 for about half the tuples, 3 for a fifth."""
    rng = np.random.default_rng(seed)
    host = rng.choice([2, 3, 7], size=n, p=[0.5, 0.2, 0.3])
    columns = {"_round": np.zeros(n, dtype=np.int64), "_stream": ["TCP"] * n,
               "ts": np.sort(rng.random(n))}
    for c in ("src_host", "src_port", "dest_port"):
        columns[f"TCP__{c}"] = rng.integers(1, 100, n)
    columns["TCP__dest_host"] = host
    columns["TCP__bytes"] = rng.integers(1, 1500, n)
    return pa.table(columns)


def test_a_querys_constant_is_over_its_contributing_tuples(dec_catalog):
    rows = _rows()
    frame = rows.to_pandas()
    passing = frame[frame["TCP__dest_host"] == 2]["TCP__bytes"].to_numpy(dtype=float)
    count = parse_query(SQL["A"], dec_catalog)
    total = parse_query(SQL["B"], dec_catalog)
    assert contributing_constant(count, rows) == pytest.approx(
        float(error_constant(1.0, 0.0, passing.size)))
    assert contributing_constant(total, rows) == pytest.approx(
        float(error_constant(passing.mean(), passing.std(), passing.size)))
    assert contributing_constant(count, rows.slice(0, 0)) == np.inf  # no bound


@pytest.mark.parametrize("sql, why", [
    (SQL["B"], None),
    ("SELECT AVG(TCP.bytes) FROM TCP WINDOW [1]", "is not a COUNT or SUM"),
    ("SELECT TCP.src_host, COUNT(*) FROM TCP GROUP BY TCP.src_host WINDOW [1]",
     "groups its answer"),
    ("SELECT COUNT(*) FROM TCP, UDP WHERE TCP.src_host = UDP.src_host WINDOW [1]",
     "reads 2 streams")])
def test_only_count_and_sum_over_one_stream_are_shed_on_shared_segments(dec_catalog, sql, why):
    assert eligible(parse_query(sql, dec_catalog)) == why


def test_the_plans_seconds_split_into_per_tuple_and_fixed_parts(dec_catalog):
    """The split, put back together, is the engine model's seconds for the round."""
    query = parse_query(SQL["A"], dec_catalog)
    engine = make_model("engine", dec_catalog)
    for plan in enumerate_plans(query):
        stats, predict = round_seconds(engine, plan, {"rate.TCP": 400.0, "sel.TCP": 0.3}, 1.0,
                                       scan=0.0)
        select_s, aggregate_s, fixed = operator_seconds(stats, predict, "TCP", 1.0)
        assert fixed == pytest.approx(dec_catalog.engine.job)
        assert select_s >= (dec_catalog.engine.scan + dec_catalog.engine.selection) * (1 - 1e-6)
        assert fixed + 400 * (select_s + 0.3 * aggregate_s) == pytest.approx(
            float(predict(stats)[0]))


def _runner(name, sql, catalog, settings, lines):
    from cqopt.spark.run.rounds import RoundRunner

    query = parse_query(sql, catalog)
    runner = SimpleNamespace(
        ctx=SimpleNamespace(name=name, query=query, window_s=1.0, settings=settings,
                            catalog=catalog, say=lines.append),
        state=SimpleNamespace(start=0.0), engine=make_model("engine", catalog),
        shared_said=set())
    runner.round_model = lambda *args: RoundRunner.round_model(runner, *args)
    return runner


def _dues(runners, rows) -> dict[str, Due]:
    from cqopt.spark.run.observed import local_statistics

    dues = {}
    for name, runner in runners.items():
        query = runner.ctx.query
        outcome = SimpleNamespace(plan=enumerate_plans(query)[0])
        observed = local_statistics(query, rows, ("TCP",), 0, 1, 1.0)
        dues[name] = Due({0: outcome}, observed, None, rows, 3, {0: 0.0}, 0.0)
    return dues


def test_a_shared_segment_is_sampled_once_and_each_query_then_by_its_own_rate(dec_catalog):
    """A and B share a selection, C has its own, D is an AVG (shed at its own inputs, said
    once). The deadline is half the plans' seconds (no fixed cost): the load is tight,
    the segment's tuples are one sample for A and B at the larger of their rates, and the
    other keeps a subset of it."""
    catalog = dataclasses.replace(dec_catalog, engine=dataclasses.replace(
        dec_catalog.engine, job=0.0))
    rows, lines = _rows(), []
    sqls = {**SQL, "D": "SELECT AVG(TCP.bytes) FROM TCP WINDOW [1]"}
    probe = {n: _runner(n, s, catalog, RunSettings(), lines) for n, s in sqls.items()}
    probed, full = _dues(probe, rows), 0.0
    for n in "ABC":  # the plans' seconds at full input
        stats, predict = probe[n].round_model(probed[n].outcomes[0].plan, probed[n].observed[0],
                                              True)
        full += float(predict(stats)[0])
    settings = RunSettings(deadline=0.5 * full, shared_shedding=True)
    runners = {n: _runner(n, s, catalog, settings, lines) for n, s in sqls.items()}
    dues = _dues(runners, rows)
    shed_shared(runners, dues)
    assert not dues["D"].shares and not dues["D"].kept_rows
    assert sum("D is not a COUNT or SUM" in line for line in lines) == 1
    records = {n: dues[n].shares[0] for n in "ABC"}
    shared = {n: rec["shared"] for n, rec in records.items()}
    assert shared["A"]["load_after"] == pytest.approx(shared["A"]["capacity"])
    assert shared["A"]["capacity"] == pytest.approx(0.5 * shared["A"]["load_before"])
    assert shared["A"]["segment"] == shared["B"]["segment"] == f"TCP: {SHARED}"
    assert shared["A"]["segment_rate"] == pytest.approx(max(records["A"]["kept"],
                                                            records["B"]["kept"]))
    for n in "ABC":
        assert records[n]["kept"] == pytest.approx(
            shared[n]["segment_rate"] * shared[n]["own_rate"]) and 0 < records[n]["kept"] < 1
    high, low = sorted("AB", key=lambda n: -records[n]["kept"])
    segment = sample_rows(rows, shared["A"]["segment_rate"], [0, zlib.crc32(b"TCP")])
    assert dues[high].kept_rows[0].equals(segment)
    assert set(dues[low].kept_rows[0]["ts"].to_pylist()) < set(segment["ts"].to_pylist())
    again = _dues(runners, rows)
    shed_shared(runners, again)
    assert all(again[n].kept_rows[0].equals(dues[n].kept_rows[0]) for n in "ABC")
    assert sum("D is not a COUNT or SUM" in line for line in lines) == 1  # said once


@pytest.mark.parametrize("options, fragment", [
    ({}, "--shed-shared: the shedders are placed to meet a round's deadline"),
    ({"deadline": 1.0, "negotiate": True}, "--shed-shared and --negotiate"),
    ({"deadline": 1.0, "min_kept": 0.2}, "--min-kept 0.2: with --shed-shared")])
def test_shed_shared_needs_a_deadline_alone(options, fragment):
    with pytest.raises(StreamingRunError) as err:
        RunSettings(shared_shedding=True, **options)
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_shed_shared_without_a_deadline_is_one_line_before_spark(examples, tmp_path, capsys,
                                                                 monkeypatch):
    import cqopt.spark.session as session
    from cqopt.cli.main import main

    def no_spark(*args, **kwargs):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(session, "spark_session", no_spark)
    argv = ["run", "--catalog", str(examples / "dec-pkt.toml"), "--workload",
            str(examples / "workload.toml"), "--charts", str(tmp_path / "charts"),
            "--out", str(tmp_path / "run"), "--source", f"TCP={tmp_path}", "--shed-shared"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("cqopt: error: --shed-shared:") and "\n" not in err
    assert main([*argv, "--deadline", "1", "--negotiate"]) == 2
    assert "--shed-shared and --negotiate" in capsys.readouterr().err


SPARK_WORKLOAD = """
[[query]]
name = "A"
k = 2
sql = "SELECT COUNT(*) FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"

[[query]]
name = "B"
k = 2
sql = "SELECT COUNT(TCP.bytes) FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"

[[query]]
name = "C"
k = 2
sql = "SELECT SUM(TCP.bytes) FROM TCP WHERE TCP.dest_host = 3 WINDOW [1]"
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_workload_run_hands_spark_the_shared_sample_and_scales_answers(
        spark, examples, tmp_path, monkeypatch):
    """A and B count one selection of TCP, C sums another; 2 s of 300 tuples/s, a deadline
    far below the plans' seconds (no fixed cost). Each round, A and B are handed one
    table, the shared segment's sample (their constants, hence rates, are equal), C its
    own; each answer is its kept tuples' COUNT or SUM over P; the report sums it up."""
    import pandas as pd
    import pyarrow.compute as pc

    from cqopt.catalog import load_catalog
    import cqopt.charts as cqopt_charts
    from cqopt.charts.build import build_local
    from cqopt.charts.store import write_chart_set
    from cqopt.charts.spec import workload_specs
    from cqopt.charts.workload import workload_from_dict
    from cqopt.replay.trace_generate import generate_trace
    from cqopt.replay.trace_write import write_trace_per_round
    from cqopt.spark.run import RunSettings as Settings
    from cqopt.spark.run import Source, read_round_log
    from cqopt.spark.run.staging import Staging
    from cqopt.spark.run.workload import WorkloadRun

    base = load_catalog(examples / "dec-pkt.toml")
    catalog = dataclasses.replace(base, engine=dataclasses.replace(base.engine, job=0.0))
    specs = workload_specs(workload_from_dict(tomllib.loads(SPARK_WORKLOAD)), base)
    write_chart_set(tmp_path / "charts", build_local([s for s, _ in specs], base,
                                                     progress=False), base)
    charts = cqopt_charts.load(tmp_path / "charts")
    queries = {s.name: (q, charts[s.name]) for s, q in specs}
    trace = generate_trace(catalog.stream("TCP"), 2.0, seed=4, mean_rate=300.0,
                           steady={"dest_host": 4})
    write_trace_per_round(trace, tmp_path / "TCP", 1.0, start=0.0)
    handed: dict[tuple[str, int], pa.Table] = {}
    made = Staging.frames_from

    def frames_from(self, rows):
        for r in set(rows["_round"].to_pylist()):
            handed[self.ctx.name, r] = rows.filter(pc.equal(rows["_round"], r))
        return made(self, rows)
    monkeypatch.setattr(Staging, "frames_from", frames_from)
    lines: list[str] = []
    settings = Settings(deadline=2e-4, shared_shedding=True, max_rounds=2, start=0.0)
    WorkloadRun(spark, queries, catalog, {"TCP": Source.files("TCP", tmp_path / "TCP")},
                tmp_path / "w", settings, progress=lines.append).run()
    records = {n: read_round_log(tmp_path / "w" / n) for n in queries}
    assert [len(recs) for recs in records.values()] == [2, 2, 2]
    for r in range(2):
        d = {n: records[n][r]["deadline"] for n in queries}
        assert {n: d[n]["shared"]["segment"] for n in queries} == {
            "A": "TCP: TCP.dest_host = 2", "B": "TCP: TCP.dest_host = 2",
            "C": "TCP: TCP.dest_host = 3"}
        assert d["A"]["kept"] == d["B"]["kept"] == d["A"]["shared"]["segment_rate"] < 1.0
        assert handed["A", r].equals(handed["B", r])  # the segment's one sample
        for n, column, host in (("A", None, 2), ("C", "bytes", 3)):
            rows = handed[n, r].to_pandas()
            assert len(rows) == d[n]["tuples_kept"] < records[n][r]["rows_in"]["TCP"]
            mine = rows[rows["TCP__dest_host"] == host]
            kept = len(mine) if column is None else mine[f"TCP__{column}"].sum()
            answer = pd.read_parquet(tmp_path / "w" / n / "results" /
                                     f"round-{r:06d}.parquet").iloc[0, 0]
            assert answer == pytest.approx(kept / d[n]["kept"])
    summary = json.loads((tmp_path / "w" / "A" / "report.json").read_text())
    assert summary["deadline"]["shared_shedding"]["shed_rounds"] == 2
    assert "shedders on shared segments" in (tmp_path / "w" / "report.md").read_text()
    assert sum("shed by Babcock's shedders" in line for line in lines) == 3  # once each
