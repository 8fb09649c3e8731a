"""Per-operator profiles: rows and seconds from Spark's SQL metrics, the engine model fitted
per operator on them, and the fits that are refused."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cqopt.catalog import EngineConstants, load_catalog
from cqopt.cli.main import main
from cqopt.costmodel.base import ARRAYS, plan_operators
from cqopt.costmodel.engine import CONSTANTS, engine_operator, work
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.spark.operator_metrics import PIPELINE, OperatorRecord, write_round_profiles

QUERY = ("SELECT TCP.src_host, UDP.src_host FROM TCP, UDP WHERE TCP.dest_host = 2 "
         "AND TCP.src_host = UDP.dest_host WINDOW [1]")
# Per-tuple costs in Spark's task seconds, per handling of a tuple; wall = job + SCALE * task.
TASK = {"scan": 4e-7, "selection": 2e-7, "projection": 1e-7, "join_input": 1.5e-6,
        "join_output": 6e-7}
JOB, SCALE = 0.05, 0.6


@pytest.mark.spark
def test_operator_records_of_a_real_spark_query(spark):
    """A filter, a shuffled hash join and an aggregate over 40 and 30 rows: each operator's
    rows as counted by hand, every time non-negative, caught by the listener from a noop
    write (a new execution) and read from a collected DataFrame's own."""
    from pyspark.sql import functions as F

    from cqopt.spark.operator_metrics import operator_records, profiled

    left = spark.range(40).select((F.col("id") % 10).alias("k"), F.col("id").alias("v"))
    right = spark.range(30).select((F.col("id") % 5).alias("k"), F.col("id").alias("w"))
    # 24 rows pass v < 24, 14 of them with k in 0..4 (3 each, k = 4 twice: 4 and 14);
    # right has 6 rows per k in 0..4.
    query = (left.where(F.col("v") < 24).join(right.hint("shuffle_hash"), "k")
             .groupBy("k").agg(F.count(F.lit(1)).alias("n")))
    with profiled(spark) as profile:
        query.write.format("noop").mode("overwrite").save()
    query.collect()
    for records in (profile.records, operator_records(query)):
        by = {}
        for r in records:
            by.setdefault((r.kind, r.operator), []).append(r)
        assert sorted(r.rows_out for r in by[("scan", "Range")]) == [30, 40]
        (selection,) = [r for r in by[("selection", "Filter")] if r.rows_in == 40]
        assert selection.rows_out == 24
        (join,) = by[("join", "ShuffledHashJoin")]
        assert join.rows_in == 24 + 30 and join.rows_out == 14 * 6
        assert sorted(r.rows_out for r in by[("join", "Exchange")]) == [24, 30]
        aggregates = by[("aggregate", "HashAggregate")]  # partial and final, or one
        assert max(r.rows_in for r in aggregates) == 14 * 6
        assert min(r.rows_out for r in aggregates) == 5
        assert all(r.seconds >= 0 for r in records)
        pipelines = [r for r in records if r.operator == PIPELINE]
        assert pipelines and sum(r.seconds for r in pipelines) > 0
        assert {r.stage for r in records if r.kind == "selection"} <= {
            p.stage for p in pipelines}


@pytest.fixture(scope="module")
def two_way(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    return catalog, enumerate_plans(parse_query(QUERY, catalog))


def _profile(plan, stats, rng, noise):
    """What Spark would record for ``plan`` on a round: a pipeline per source (its scan,
    selection, projection) and per join (the join and what is above it), each input of a
    join shuffled first; every time the known task costs times the rows, with noise."""
    tuples, records, stage_of = {}, [], {}
    for key, node in plan_operators(plan):
        inputs = tuple((tuples[i][0], tuples[i][1]) for i in node.inputs)
        out, window, _ = engine_operator(node, EngineConstants(), stats, inputs, ARRAYS)
        out = float(out)
        tuples[key] = (out, window)
        rows_in = sum(tuples[i][0] for i in node.inputs) or float(out)
        if isinstance(node, kinds.JoinNode):
            stage_of[key] = len(stage_of) + 1
            for i in node.inputs:
                n = tuples[i][0]
                records.append(OperatorRecord("join", "Exchange", round(n), round(n),
                                              TASK["join_input"] * n * noise(), None))
            records.append(OperatorRecord("join", "ShuffledHashJoin", round(rows_in),
                                          round(out), 0.0, stage_of[key]))
            continue
        stage_of[key] = stage_of[node.inputs[0]] if node.inputs else len(stage_of) + 1
        kind = {kinds.SourceNode: "scan", kinds.SelectionNode: "selection",
                kinds.ProjectionNode: "projection"}[type(node)]
        records.append(OperatorRecord(kind, kind, round(rows_in), round(out), 0.0,
                                      stage_of[key]))
    for stage in set(stage_of.values()):
        inside = [r for r in records if r.stage == stage]
        task = sum(TASK["scan"] * r.rows_out if r.kind == "scan" else
                   TASK["join_input"] * r.rows_in + TASK["join_output"] * r.rows_out
                   if r.kind == "join" else TASK[r.kind] * r.rows_in for r in inside)
        records.append(OperatorRecord("", PIPELINE, 0, 0, task * noise(), stage))
    task = sum(r.seconds for r in records if r.operator == PIPELINE or r.stage is None)
    return records, JOB + SCALE * task


def _run(tmp_path, two_way, rounds, *, profiles=True, wall_noise=0.02, seed=3):
    catalog, plans = two_way
    run = tmp_path / "run"
    (run / "log").mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"sql": QUERY, "query": "Q", "window_s": 1.0}))
    rng = np.random.default_rng(seed)
    for r in range(rounds):
        stats = {"rate.TCP": rng.uniform(5e3, 1e5), "rate.UDP": rng.uniform(5e3, 1e5),
                 "sel.TCP": rng.uniform(0.05, 0.9), "jsel.TCP.UDP": 10 ** rng.uniform(-5, -3)}
        made = {p.id: _profile(p, stats, rng, lambda: rng.lognormal(0, 0.01)) for p in plans}
        shadow = {p: wall * rng.lognormal(0, wall_noise) for p, (_, wall) in made.items()}
        (run / "log" / f"round-{r:06d}.json").write_text(json.dumps({
            "round": r, "empty": False, "observed": stats, "plan": plans[0].id,
            "plan_seconds": shadow[plans[0].id], "shadow_seconds": shadow}))
        if profiles:
            write_round_profiles(run, r, {p: records for p, (records, _) in made.items()})
    return run


def test_the_per_operator_fit_recovers_known_constants(tmp_path, two_way):
    """Spark's task costs times how often Spark handles a tuple per the model's (a join's
    input twice: shuffled, then built or probed), times the task-to-wall scale."""
    from cqopt.spark.engine_fit import fit_runs

    catalog, plans = two_way
    fit = fit_runs([_run(tmp_path, two_way, 16)], catalog)
    assert fit.method == "per operator" and fit.held_out_error < 0.05
    expected = {name: SCALE * cost * (2 if name == "join_input" else 1)
                for name, cost in TASK.items()}
    for name, value in expected.items():
        # the projection's cost is the smallest share of its pipelines' seconds: 10%
        tolerance = 0.10 if name == "projection" else 0.05
        assert getattr(fit.constants, name) == pytest.approx(value, rel=tolerance), name
    assert fit.constants.job == pytest.approx(JOB, abs=0.01)  # the join's folded into it
    assert any("folded into job" in note for note in fit.notes)
    assert any(note.startswith("aggregate: no operator") for note in fit.notes)
    assert fit.constants.aggregate == catalog.engine.aggregate
    # The model, with these constants, gives each plan's wall seconds.
    t = fit.timings[0]
    predicted = work(next(p for p in plans if p.id == t.plan),
                     {k: v for k, v in json.loads((tmp_path / "run" / "log" /
                      f"round-{t.round:06d}.json").read_text())["observed"].items()}, catalog)
    vector = np.array([getattr(fit.constants, n) for n in CONSTANTS])
    assert float(predicted @ vector) == pytest.approx(t.seconds, rel=0.06)


@pytest.mark.parametrize("case, message", [
    ("few", "calibrate --from-run needs at least 8 timed rounds to fit the engine model's "
            "8 constants, got 4: run more rounds, or with --shadow"),
    ("noisy", "the fitted engine model misses the rounds left out of the fit by "),
])
def test_an_untrusted_fit_is_refused_in_one_line_and_writes_nothing(
        tmp_path, two_way, examples, capsys, case, message):
    run = (_run(tmp_path, two_way, 2) if case == "few" else
           _run(tmp_path, two_way, 12, wall_noise=1.5))
    out = tmp_path / "engine.toml"
    assert main(["calibrate", "--catalog", str(examples / "dec-pkt.toml"), "--from-run",
                 str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and "nothing written" in err
    if case == "noisy":
        assert "run with --shadow for more rounds" in err
    assert not out.exists()


def test_a_negative_constant_is_refused(tmp_path, two_way, examples, capsys, monkeypatch):
    """The micro-benchmarks' line with a negative fixed cost per job (timings that are not a
    line, as 8M rows in 2.98 s and 16M in 2.06 s), and a fit from a run with one."""
    from cqopt.spark import calibrate as cal
    from cqopt.spark import engine_fit

    with pytest.raises(cal.CalibrationError, match=r"negative value \(-0\.\d+ s.*nothing "
                                                   r"written: run again with --repeats 5"):
        cal.fit_rate([2e6, 4e6, 8e6, 16e6], [0.05, 0.4, 0.9, 2.3])
    # A fitting step that gives the job a negative cost (no least squares of cqopt's
    # should; the refusal guards whatever step does).
    monkeypatch.setattr(engine_fit, "_fit_profiled", lambda *args: (
        EngineConstants(job=-0.039), []))
    out = tmp_path / "engine.toml"
    assert main(["calibrate", "--catalog", str(examples / "dec-pkt.toml"), "--from-run",
                 str(_run(tmp_path, two_way, 12)), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "job a negative cost (-0.039 s)" in err
    assert "nothing written; run with --shadow for more rounds" in err and not out.exists()


def test_calibrate_refuses_a_line_that_misses_the_size_left_out(
        no_spark_measure, dec_toml, tmp_path, capsys):
    out = tmp_path / "calibrated.toml"
    assert main(["calibrate", "--catalog", dec_toml, "--out", str(out), "--rows", "800000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("cqopt: error: selection_equality: the fitted line misses each "
                              "size, fitted without it, by ")
    assert "nothing written" in err[-1] and not out.exists()


@pytest.fixture
def no_spark_measure(monkeypatch):
    """Timings that grow with the rows but not along a line (a busy machine's)."""
    import contextlib

    from cqopt.spark import calibrate as cal

    def measure(spark, catalog, max_rows, sizes, repeats, say):
        rows = [max_rows >> i for i in reversed(range(sizes))]
        return {kind: list(zip(rows, [0.2, 0.21, 0.9, 1.0])) for kind in cal.KINDS}

    monkeypatch.setattr(cal, "measure", measure)
    monkeypatch.setattr(cal, "describe_spark", lambda spark: "Spark test")
    monkeypatch.setattr("cqopt.spark.session.running_session",
                        lambda master, progress, conf=None: contextlib.nullcontext(None))
