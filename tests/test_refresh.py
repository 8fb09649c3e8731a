"""The background refresh of a running query's chart: swapped in whole while others read it,
and a failing rebuild said once while the old chart goes on."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.runtime.offchart import OffChart
from cqopt.runtime.refresh import ChartRefresher, build_query_chart


@pytest.fixture(scope="module")
def catalog(examples):
    return load_catalog(examples / "dec-pkt.toml")


@pytest.fixture(scope="module")
def q2(examples, catalog):
    spec = next(s for s, _ in workload_specs(load_workload(examples / "workload.toml"), catalog)
                if s.name == "Q2")
    return build_query_chart(spec, catalog)


def _round(rng, jsel: float) -> dict[str, float]:
    return {"rate.TCP": rng.uniform(200, 1500), "rate.UDP": rng.uniform(50, 900),
            "rate.SF": rng.uniform(10, 800), "jsel.TCP.UDP": jsel,
            "jsel.SF.UDP": jsel * 2, "jsel.SF.TCP": jsel / 2}


def test_rebuilds_swap_in_whole_under_a_concurrent_reader(q2, catalog):
    published = {id(q2): q2}

    def build(spec, cat):
        chart = build_query_chart(spec, cat)
        published[id(chart)] = chart  # before the refresher publishes it
        return chart

    refresher = ChartRefresher(q2, catalog, every=10, window=30, build=build,
                               say=pytest.fail)
    stop, seen, problems = threading.Event(), set(), []
    probe = {"rate.TCP": 400.0, "rate.UDP": 300.0, "rate.SF": 100.0}

    def reader():
        last = 0
        while not stop.is_set():
            generation = refresher.generation
            chart = refresher.current()
            try:
                if id(chart) not in published or published[id(chart)] is not chart:
                    problems.append("a chart no rebuild finished")
                if chart.plan_index.shape != chart.spec.shape:
                    problems.append("a plan index of another shape than its axes")
                choice = chart.choose(probe)  # clamped where the axes moved away
                if choice.plan not in chart.plans:
                    problems.append("a plan of another chart")
                if generation < last:
                    problems.append("the generation went back")
                last = generation
                seen.add(id(chart))
            except Exception as err:  # noqa: BLE001 - any failure is a torn chart
                problems.append(repr(err))

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    rng = np.random.default_rng(1)
    try:
        for jsel in (0.05, 0.2, 0.01, 0.3, 0.1):  # each burst leaves the chart it finds
            for _ in range(10):
                refresher.observe(_round(rng, jsel))
            assert refresher.wait(60)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert not problems, problems[:5]
    assert refresher.generation >= 3 and refresher.failures == 0
    assert len(seen) >= 2  # the readers saw swaps happen
    # every published chart is the whole build of its spec: nothing half-written
    for chart in published.values():
        again = build_query_chart(chart.spec, catalog)
        assert np.array_equal(again.plan_index, chart.plan_index)
    # the last chart covers the last burst's rounds' join selectivities (a burst the chart
    # covered already started no rebuild), which the chart it started with did not
    last = refresher.current()
    assert OffChart(q2, catalog).outside({"jsel.SF.UDP": 0.2}) != ""
    assert OffChart(last, catalog).outside({"jsel.TCP.UDP": 0.1, "jsel.SF.UDP": 0.2,
                                            "jsel.SF.TCP": 0.05}) == ""


def test_no_rebuild_while_the_rounds_stay_inside_the_chart(q2, catalog):
    refresher = ChartRefresher(q2, catalog, every=5, say=pytest.fail)
    inside = {"rate.TCP": 400.0, "rate.UDP": 300.0, "rate.SF": 100.0, **q2.spec.fixed}
    assert not any(refresher.observe(inside) for _ in range(20))
    assert refresher.generation == 0 and refresher.current() is q2


def test_a_failing_rebuild_is_said_once_and_the_old_chart_goes_on(q2, catalog):
    said, attempts = [], []

    def broken(spec, cat):
        attempts.append(spec)
        raise OSError("no space left on device")

    refresher = ChartRefresher(q2, catalog, every=5, build=broken, say=said.append)
    rng = np.random.default_rng(2)
    for _ in range(4):
        for _ in range(5):
            refresher.observe(_round(rng, 0.2))
        assert refresher.wait(30)
    assert len(attempts) == 4 and refresher.failures == 4
    assert len(said) == 1
    assert said[0] == ("warning: Q2: rebuilding the chart from the run's rounds failed (no "
                       "space left on device); the run goes on with the chart it has "
                       "(said once)")
    assert refresher.current() is q2 and refresher.generation == 0
    assert refresher.state()["error"] == "no space left on device"


def test_a_rebuild_that_gives_no_chart_fails_too(q2, catalog):
    said = []
    refresher = ChartRefresher(q2, catalog, every=1, build=lambda spec, cat: None,
                               say=said.append)
    refresher.observe(_round(np.random.default_rng(3), 0.2))
    assert refresher.wait(30)
    assert refresher.current() is q2 and refresher.failures == 1 and len(said) == 1


def test_the_runs_rounds_rebuild_the_chart_and_swap_it_in_between_rounds(
        q2, catalog, examples, tmp_path):
    """cqopt run --refresh: rounds whose join selectivities leave the chart start a rebuild;
    the next round is chosen from the rebuilt chart, which covers them."""
    from cqopt.charts.workload import load_workload
    from cqopt.spark.run.roundlog import RoundLog
    from cqopt.spark.run.rounds import RoundRunner
    from cqopt.spark.run.settings import RunContext, RunSettings
    from cqopt.spark.run.staging import Staging
    from cqopt.spark.run.state import RunState

    query = next(q for s, q in workload_specs(load_workload(examples / "workload.toml"),
                                               catalog) if s.name == "Q2")
    said: list[str] = []
    ctx = RunContext(None, "Q2", query, q2, catalog, RunSettings(window_s=1.0, refresh=5),
                     1.0, tmp_path, said.append)
    state = RunState.open(tmp_path, {"query": "Q2"}, None)
    runner = RoundRunner(ctx, state, Staging(ctx, state), RoundLog(ctx))
    rng = np.random.default_rng(1)
    first = [runner.choose(_round(rng, 0.2)) for _ in range(5)]
    assert all(o.off_chart for o in first)  # jsel 0.2 where the chart fixed 0.001
    assert runner.refresher.wait(120) and runner.refresher.generation == 1
    after = runner.choose(_round(rng, 0.2))
    assert runner.generation == 1 and runner.adaptive_chart is not q2
    # the rebuilt chart fixes the join selectivities at what the rounds measure
    assert "jsel" not in after.off_chart_reason
    assert all("jsel" in o.off_chart_reason for o in first)
    assert any("swapped in (generation 1)" in line for line in said)
