"""Rounds the chart does not cover: detected for each reason, costed at their point with
the chart's own kernel, and counted in the replay."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.lookup import QueryChart
from cqopt.charts.spec import workload_specs
from cqopt.charts.workload import load_workload
from cqopt.costmodel import plan_utilities
from cqopt.replay.replay import replay
from cqopt.runtime.adaptive import AdaptiveQuery
from cqopt.runtime.offchart import OffChart

RATES = {"rate.TCP": 300.0, "rate.UDP": 250.0, "rate.SF": 90.0}


@pytest.fixture(scope="module")
def catalog(examples):
    return load_catalog(examples / "dec-pkt.toml")


@pytest.fixture(scope="module")
def charts(examples, catalog):
    specs = [s for s, _ in workload_specs(load_workload(examples / "workload.toml"), catalog)]
    return {c.spec.name: QueryChart(c.spec, list(c.plans), c.plan_index, c.cost)
            for c in build_local(specs, catalog, progress=False)}


def _q2(charts, **jsel) -> dict[str, float]:
    return {**RATES, **charts["Q2"].spec.fixed, **jsel}


def test_inside_the_chart_is_the_charts_plan_and_nothing_is_costed(charts, catalog):
    cache = OffChart(charts["Q2"], catalog)
    stats = _q2(charts, **{"jsel.TCP.UDP": 0.0019, "jsel.SF.UDP": 0.00051})  # within 2x
    decided = cache.choose(stats)
    assert not decided.off_chart and decided.reason == ""
    assert decided.plan is charts["Q2"].choose(RATES).plan
    assert cache.costs._function is None  # the lookup alone decided


@pytest.mark.parametrize("value, words", [(0.0021, "2.1x the 0.001"),
                                          (0.0004, "1/2.5 of the 0.001")])
def test_a_fixed_statistic_more_than_twice_off_either_way_leaves_the_chart(
        charts, catalog, value, words):
    decided = OffChart(charts["Q2"], catalog).choose(_q2(charts, **{"jsel.SF.UDP": value}))
    assert decided.off_chart
    assert decided.reason == f"jsel.SF.UDP = {value:g} is {words} the chart fixes"


@pytest.mark.parametrize("rate, side", [(5000.0, "above"), (1.0, "below")])
def test_an_axis_out_of_its_range_leaves_the_chart(charts, catalog, rate, side):
    axis = next(a for a in charts["Q1"].spec.axes if a.statistic == "rate.TCP")
    decided = OffChart(charts["Q1"], catalog).choose({"sel.TCP": 0.3, "rate.TCP": rate})
    assert decided.off_chart
    assert decided.reason == (f"rate.TCP = {rate:g} is {side} the chart's range "
                              f"[{axis.lo:g}, {axis.hi:g}]")


def test_a_statistic_not_given_or_nan_is_not_judged(charts, catalog):
    cache = OffChart(charts["Q2"], catalog)
    assert cache.outside({**RATES, "jsel.SF.UDP": math.nan}) == ""
    assert cache.outside(RATES) == ""


def test_off_the_chart_the_cheapest_plan_by_the_charts_kernel_runs(charts, catalog):
    chart = charts["Q2"]
    spec = chart.spec
    cache = OffChart(chart, catalog)
    rng = np.random.default_rng(3)
    picked = set()
    for _ in range(200):
        stats = {"rate.TCP": rng.uniform(10, 2000), "rate.UDP": rng.uniform(10, 2000),
                 "rate.SF": rng.uniform(10, 2000), "jsel.TCP.UDP": 10 ** rng.uniform(-2, 0),
                 "jsel.SF.UDP": 10 ** rng.uniform(-2, 0),
                 "jsel.SF.TCP": 10 ** rng.uniform(-2, 0)}
        decided = cache.choose(stats)
        assert decided.off_chart
        # the one formula: the kernel over a grid of one point gives the same doubles
        kernel = plan_utilities(spec.cost_model(catalog), spec.utility, list(chart.plans),
                                {k: np.array([v]) for k, v in stats.items()})[:, 0]
        assert cache.costs(stats).tobytes() == kernel.tobytes()
        best = chart.plans[int(np.argmin(kernel))]
        chart_plan = chart.locate([stats[a.statistic] for a in spec.axes]).plan
        assert decided.plan is best or kernel[chart.plans.index(chart_plan)] == kernel.min()
        picked.add(decided.plan_id)
    assert len(picked) > 1  # the point decides, not the chart's cell


def test_the_adaptive_query_runs_and_reports_the_off_chart_plan(charts, catalog):
    """A statistic the chart fixes leaves its cover once its mean over the last rounds
    does, not on one round's value: a sampled join selectivity of 0.001 reads 0 in most
    rounds, which is sampling, not drift. A jump to 0.2 leaves it at once."""
    query = AdaptiveQuery.costed(charts["Q2"], catalog, estimator="last")
    inside = query.step(_q2(charts), measured=_q2(charts))
    stats = _q2(charts, **{"jsel.TCP.UDP": 0.3, "jsel.SF.UDP": 0.01, "jsel.SF.TCP": 0.2})
    off = query.step(stats, measured=stats)
    assert not inside.off_chart
    assert off.off_chart and "jsel." in off.off_chart_reason
    assert off.plan is OffChart(charts["Q2"], catalog).choose(stats).plan
    assert off.chart_plan_id == charts["Q2"].choose(RATES).plan_id
    assert query.off_chart_rounds == 1
    plain = AdaptiveQuery.costed(charts["Q2"], catalog, estimator="last", off_chart=False)
    plain.step(_q2(charts))
    for _ in range(3):
        assert not plain.step(stats, measured=stats).off_chart
    assert plain.off_chart_rounds == 0


def test_a_sampled_zero_join_selectivity_does_not_leave_the_chart(charts, catalog):
    """Rounds whose sampled join selectivities read 0 or a few times the chart's value, as
    a 10% sample of a 0.001 selectivity does (0.001 on average), stay on the chart."""
    query = AdaptiveQuery.costed(charts["Q2"], catalog, estimator="decay")
    rng = np.random.default_rng(3)
    outcomes = []
    for _ in range(40):
        noisy = {k: float(rng.choice([0.0, 0.0, 0.001, 0.003])) for k in
                 ("jsel.TCP.UDP", "jsel.SF.UDP", "jsel.SF.TCP")}
        outcomes.append(query.step(_q2(charts, **noisy), measured=True))
    assert sum(o.off_chart for o in outcomes) <= 8  # a mean of 20 such rounds still wanders


def _drifting_rounds(charts, n: int = 40) -> pd.DataFrame:
    """Rounds whose join selectivities sit at the chart's value, then drift far from it."""
    rng = np.random.default_rng(7)
    rows = []
    for r in range(n):
        drift = r >= n // 2
        rows.append({"round": r, "start": float(r), "rate.TCP": rng.uniform(150, 950),
                     "rate.UDP": rng.uniform(150, 450), "rate.SF": rng.uniform(60, 450),
                     **{k: (rng.uniform(0.05, 0.5) if drift else v)
                        for k, v in charts["Q2"].spec.fixed.items()}})
    table = pd.DataFrame(rows)
    table.attrs["window_s"] = 1.0
    return table


def test_replay_logs_and_counts_off_chart_rounds(charts, catalog):
    rounds = _drifting_rounds(charts)
    result = replay("Q2", charts["Q2"], catalog, rounds, estimator="sample:1.0")
    off = result.rounds["off_chart"].to_numpy()
    assert result.summary["off_chart_rounds"] == int(off.sum()) == 20
    assert off[20:].all() and not off[:20].any()
    assert all("the chart fixes" in why for why in result.rounds["off_chart_reason"][20:])
    assert (result.rounds["off_chart_reason"][:20] == "").all()
    assert "the chart fixes" in result.summary["off_chart_example"]
    # costed at their own statistics, the drifted rounds run their optimum
    drifted = result.rounds.iloc[20:]
    assert (drifted["plan"] == drifted["optimal"]).mean() >= 0.9
    chart_only = replay("Q2", charts["Q2"], catalog, rounds, estimator="sample:1.0",
                        off_chart=False)
    assert chart_only.summary["off_chart_rounds"] == 0
    assert result.summary["regret"] < chart_only.summary["regret"]
