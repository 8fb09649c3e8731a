"""The engine model: seconds per round from each operator's tuples, fitted to measured times."""

from __future__ import annotations

import json

import numpy as np
import pytest

from cqopt.catalog import EngineConstants, load_catalog
from cqopt.charts.settings import ChartSettings, SettingsError
from cqopt.cli.main import main
from cqopt.costmodel import Engine, make_model
from cqopt.costmodel.engine import CONSTANTS, fit_constants, plan_window, round_seconds, smoothed
from cqopt.costmodel.engine import work
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")
TRUTH = EngineConstants(job=0.25, scan=2e-6, selection=3e-7, projection=1e-7, join=0.08,
                        join_input=3e-6, join_output=8e-7, aggregate=4e-7)


@pytest.fixture(scope="module")
def q2(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    return catalog, enumerate_plans(parse_query(Q2, catalog))


def _run_folder(tmp_path):
    """An empty run folder of Q2, as cqopt run starts one: its state and a log folder."""
    run = tmp_path / "run"
    (run / "log").mkdir(parents=True)
    (run / "state.json").write_text(json.dumps({"sql": Q2, "query": "Q2", "window_s": 1.0}))
    return run


def _stats(rng, n):
    return [{"rate.TCP": rng.uniform(100, 1000), "rate.UDP": rng.uniform(100, 500),
             "rate.SF": rng.uniform(50, 500), "jsel.TCP.UDP": 10 ** rng.uniform(-3, -1),
             "jsel.SF.UDP": 10 ** rng.uniform(-3, -1),
             "jsel.SF.TCP": 10 ** rng.uniform(-3, -1)} for _ in range(n)]


def test_the_seconds_are_the_work_times_the_constants(q2):
    catalog, plans = q2
    stats = _stats(np.random.default_rng(0), 1)[0]
    model = Engine(catalog, constants=TRUTH)
    vector = np.array([getattr(TRUTH, n) for n in CONSTANTS])
    for plan in plans:
        seconds = float(round_seconds(model.cost(plan, stats), plan_window(plan, stats)))
        assert seconds == pytest.approx(work(plan, stats, catalog) @ vector, rel=1e-12)
        # a join plan pays two joins, the job, and every tuple it reads and emits
        assert seconds > TRUTH.job + 2 * TRUTH.join


def test_the_grid_and_the_point_give_the_same_seconds(q2):
    catalog, plans = q2
    grid = {"rate.TCP": np.array([100.0, 600.0]), "rate.UDP": 300.0, "rate.SF": 200.0,
            "jsel.TCP.UDP": 0.001, "jsel.SF.UDP": 0.01, "jsel.SF.TCP": 0.01}
    model = make_model("engine", catalog)
    for plan in plans:
        cpu = model.cost(plan, grid).cpu
        for i, rate in enumerate((100.0, 600.0)):
            point = {**grid, "rate.TCP": rate}
            assert float(model.cost(plan, point).cpu) == pytest.approx(cpu[i], rel=1e-12)


def test_the_fit_recovers_the_seconds_of_known_constants_from_noisy_timings(q2):
    """The profiler: timings made from known per-tuple costs, with 5% noise, give back
    constants whose predictions are within a few per cent of the truth on new rounds."""
    catalog, plans = q2
    rng = np.random.default_rng(1)
    vector = np.array([getattr(TRUTH, n) for n in CONSTANTS])
    rows = np.array([work(p, s, catalog) for s in _stats(rng, 60) for p in plans])
    seconds = rows @ vector * rng.lognormal(0, 0.05, len(rows))
    fitted = fit_constants(rows, seconds)
    new = np.array([work(p, s, catalog) for s in _stats(rng, 20) for p in plans])
    predicted = new @ np.array([getattr(fitted, n) for n in CONSTANTS])
    error = np.abs(predicted - new @ vector) / (new @ vector)
    assert np.median(error) < 0.03 and error.max() < 0.15


def test_smoothing_moves_a_fraction_toward_the_new_fit():
    old, new = EngineConstants(job=0.2, scan=1e-6), EngineConstants(job=0.6, scan=3e-6)
    half = smoothed(old, new, 0.5)
    assert (half.job, half.scan) == pytest.approx((0.4, 2e-6))
    assert smoothed(old, new, 1.0) == new


def test_the_smoothed_profile_converges_to_the_true_per_tuple_costs(q2):
    """RTStream's profiler (seed 000, §4.1): each run's fit smoothed into the last. Starting
    from the defaults, runs timed from known costs (10% noise each) bring the predicted
    seconds within a few per cent of the truth, and the error falls run by run."""
    catalog, plans = q2
    rng = np.random.default_rng(3)
    vector = np.array([getattr(TRUTH, n) for n in CONSTANTS])
    held = np.array([work(p, s, catalog) for s in _stats(rng, 20) for p in plans])
    profile, errors = EngineConstants(), []
    for _ in range(8):  # eight runs of 12 rounds, every plan timed (--shadow)
        rows = np.array([work(p, s, catalog) for s in _stats(rng, 12) for p in plans])
        fitted = fit_constants(rows, rows @ vector * rng.lognormal(0, 0.10, len(rows)))
        profile = smoothed(profile, fitted, 0.5)
        predicted = held @ np.array([getattr(profile, n) for n in CONSTANTS])
        errors.append(float(np.median(np.abs(predicted - held @ vector) / (held @ vector))))
    assert errors[-1] < 0.05 and errors[-1] < errors[0] / 4


def test_a_chart_of_the_engine_model_must_weigh_its_seconds():
    with pytest.raises(SettingsError, match=r"the ENGINE model's cost is its CPU term.*"
                                            r"--weights 0,0,1"):
        ChartSettings(model="engine")
    assert ChartSettings(model="engine", weights=(0, 0, 1)).model == "engine"


def test_calibrate_from_a_run_fits_writes_and_reports_the_held_out_error(
        examples, tmp_path, capsys, q2):
    """A run folder (as cqopt run writes it, with --shadow) whose times come from known
    constants: the catalog written holds constants that predict them."""
    catalog, plans = q2
    run = _run_folder(tmp_path)
    vector = np.array([getattr(TRUTH, n) for n in CONSTANTS])
    rng = np.random.default_rng(2)
    for r, stats in enumerate(_stats(rng, 16)):
        shadow = {p.id: float(work(p, stats, catalog) @ vector * rng.lognormal(0, 0.03))
                  for p in plans}
        (run / "log" / f"round-{r:06d}.json").write_text(json.dumps({
            "round": r, "empty": False, "observed": stats, "plan": plans[0].id,
            "plan_seconds": shadow[plans[0].id], "shadow_seconds": shadow}))
    out = tmp_path / "engine.toml"
    assert main(["calibrate", "--catalog", str(examples / "dec-pkt.toml"), "--from-run",
                 str(run), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{16 * len(plans)} plan times of {len(plans)} plans" in printed
    assert "on rounds left out of the fit" in printed
    fitted = load_catalog(out)
    assert fitted.engine != catalog.engine and fitted.operators == catalog.operators
    held = float(printed.split("median absolute error ")[1].split("%")[0]) / 100
    assert held < 0.10
    # The fitted catalog builds a chart in the engine's seconds.
    assert main(["build", "--catalog", str(out), "--workload", str(examples / "workload.toml"),
                 "--out", str(tmp_path / "charts"), "--engine", "local", "--model", "engine",
                 "--weights", "0,0,1"]) == 0


def test_a_backlogs_grouped_jobs_are_read_as_one_timing_each(tmp_path, q2):
    """A run that caught up on a backlog ran each plan once over several rounds and logged
    each round's share: one timing per job, its work summed, the job's fixed cost once."""
    from cqopt.spark.engine_fit import read_timings

    catalog, plans = q2
    run = _run_folder(tmp_path)
    vector = np.array([getattr(TRUTH, n) for n in CONSTANTS])
    rng = np.random.default_rng(5)
    stats = _stats(rng, 6)
    jobs = {plans[0].id: [0, 1, 2], plans[1].id: [3, 4, 5]}  # two jobs in batch 7
    expected = {}
    for plan_id, rounds in jobs.items():
        plan = next(p for p in plans if p.id == plan_id)
        rows = np.sum([work(plan, stats[r], catalog) for r in rounds], axis=0)
        rows[CONSTANTS.index("job")] = 1.0
        expected[plan_id] = (rows, float(rows @ vector))
        for r in rounds:
            (run / "log" / f"round-{r:06d}.json").write_text(json.dumps({
                "round": r, "empty": False, "observed": stats[r], "plan": plan_id,
                "plan_seconds": expected[plan_id][1] / 3, "grouped_rounds": 3, "batch": 7,
                "shadow_seconds": {}}))
    timings = read_timings(run, catalog)
    assert sorted((t.plan, t.round) for t in timings) == sorted(
        (p, rounds[0]) for p, rounds in jobs.items())
    for t in timings:
        rows, seconds = expected[t.plan]
        assert t.seconds == pytest.approx(seconds)
        assert t.work == pytest.approx(rows)
        assert float(t.work @ vector) == pytest.approx(t.seconds)  # the model's own time


def test_calibrate_from_a_folder_that_is_not_a_run(examples, tmp_path, capsys):
    assert main(["calibrate", "--catalog", str(examples / "dec-pkt.toml"), "--from-run",
                 str(tmp_path), "--out", str(tmp_path / "x.toml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: --from-run ") and "not a cqopt run folder" in err


def test_a_run_of_an_engine_chart_is_read_with_its_hinted_plans(tmp_path, q2):
    """An engine chart's plans carry join strategies (ids tagged ``⋈{br}``); the run's
    timings of them are read with the strategy's own work, not skipped."""
    from cqopt.optimizer.plans.builder import PlanBuilder, shape_of
    from cqopt.spark.engine_fit import read_timings

    catalog, plans = q2
    base = next(p for p in plans if "⋈" in p.id)
    hinted = PlanBuilder(parse_query(Q2, catalog)).build_shape(
        shape_of(base).with_(strategies=("broadcast_right", "shuffle_hash")))
    assert hinted.id != base.id and "{br}" in hinted.id
    run = _run_folder(tmp_path)
    stats = _stats(np.random.default_rng(2), 1)[0]
    (run / "log" / "round-000000.json").write_text(json.dumps({
        "round": 0, "empty": False, "observed": stats, "plan": hinted.id,
        "plan_seconds": 0.5, "shadow_seconds": {hinted.id: 0.5, base.id: 0.7}}))
    timings = {t.plan: t for t in read_timings(run, catalog)}
    assert set(timings) == {hinted.id, base.id}
    assert timings[hinted.id].work == pytest.approx(work(hinted, stats, catalog))
