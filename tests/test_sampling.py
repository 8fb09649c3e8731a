"""The simulated sampler: exact rates, unbiased selectivities, and choices at the round's own
statistics that close the gap between the chart as run and the oracle chart."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.build import build_local
from cqopt.charts.kernel import ChartContext
from cqopt.charts.lookup import QueryChart
from cqopt.charts.spec import Axis, ChartSpec
from cqopt.errors import CqoptError
from cqopt.replay.replay import replay
from cqopt.replay.sampling import parse_sample_ratio, sampled_statistics

ROUNDS = 4000


def _observed(sel=0.3, jsel=0.002, rate_a=800.0, rate_b=500.0):
    return pd.DataFrame({"rate.A": np.full(ROUNDS, rate_a), "rate.B": np.full(ROUNDS, rate_b),
                         "sel.A": np.full(ROUNDS, sel), "jsel.A.B": np.full(ROUNDS, jsel)})


def test_rates_are_exact_and_selectivities_unbiased():
    observed = _observed(rate_a=20000.0)
    s = sampled_statistics(observed, list(observed), 0.1, window_s=1.0, seed=3)
    assert np.array_equal(s["rate.A"], observed["rate.A"].to_numpy())
    # 2,000 of 20,000 tuples drawn: the mean over 4,000 rounds is within a few standard errors.
    se = np.sqrt(0.3 * 0.7 / 2000 * (20000 - 2000) / (20000 - 1) / ROUNDS)
    assert abs(s["sel.A"].mean() - 0.3) < 4 * se
    assert s["sel.A"].std() > 0  # a sample, not the exact value
    se_j = np.sqrt(0.002 / (2000 * 50) / ROUNDS)  # binomial over the sampled pairs
    assert abs(s["jsel.A.B"].mean() - 0.002) < 4 * se_j


def test_the_whole_round_sampled_is_the_exact_round_and_empty_rounds_are_nan():
    observed = pd.DataFrame({"rate.A": [300.0, 0.0, 50.0], "sel.A": [0.1, np.nan, 0.5],
                             "rate.B": [10.0, 10.0, 0.0], "jsel.A.B": [0.2, np.nan, np.nan]})
    s = sampled_statistics(observed, list(observed), 1.0, window_s=1.0)
    assert s["sel.A"][[0, 2]].tolist() == pytest.approx([0.1, 0.5])
    assert s["jsel.A.B"][0] == pytest.approx(0.2)
    assert np.isnan(s["sel.A"][1]) and np.isnan(s["jsel.A.B"][1:]).all()


def test_a_join_of_tiny_samples_never_estimates_above_one():
    # Two tuples a side, every pair matching: a binomial draw over the pairs could exceed
    # the sampled pairs (1 x 1) and give a selectivity above 1, which a step refuses.
    observed = pd.DataFrame({"rate.A": np.full(500, 2.0), "rate.B": np.full(500, 3.0),
                             "jsel.A.B": np.full(500, 1.0)})
    s = sampled_statistics(observed, ["jsel.A.B"], 0.1, window_s=1.0)
    assert (s["jsel.A.B"] <= 1.0).all() and (s["jsel.A.B"] >= 0.0).all()


def test_a_selection_samples_at_least_its_floor_and_a_join_its_ratio():
    # 800 tuples: below the selection's floor, so the selection is counted exactly, while
    # the join still samples 10% of each side.
    observed = _observed()
    s = sampled_statistics(observed, list(observed), 0.1, window_s=1.0)
    assert np.all(s["sel.A"] == 0.3) and s["jsel.A.B"].std() > 0


def test_a_smaller_sample_varies_more():
    observed = _observed(rate_a=200000.0)
    spread = [sampled_statistics(observed, ["sel.A"], r, window_s=1.0)["sel.A"].std()
              for r in (0.02, 0.1, 0.5)]
    assert spread[0] > spread[1] > spread[2] > 0


@pytest.mark.parametrize("bad", ["sample:0", "sample:1.5", "sample:x", "sample:nan"])
def test_a_ratio_outside_zero_one_is_refused(bad):
    with pytest.raises(CqoptError, match="sample ratio"):
        parse_sample_ratio(bad)


def test_deciding_on_the_round_beats_predicting_it_on_jumpy_rounds(examples):
    # Q1's boundary near sel 0.29 at rate 500: selectivity jumps between 0.1 and 0.9 at
    # random, so the previous rounds say nothing about the next one.
    catalog = load_catalog(examples / "dec-pkt.toml")
    sql = "SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
    spec = ChartSpec("Q1", sql, (Axis("sel.TCP", 0.0, 1.0, 20),), {"rate.TCP": 500.0})
    built = build_local([spec], catalog, progress=False)[0]
    chart = QueryChart(spec, ChartContext(spec, catalog).plans, built.plan_index, built.cost)
    rng = np.random.default_rng(1)
    n = 200
    observed = pd.DataFrame({"round": range(n), "start": np.arange(n, dtype=float),
                             "rate.TCP": np.full(n, 500.0),
                             "sel.TCP": rng.choice([0.1, 0.9], n)})
    predicted = replay("Q1", chart, catalog, observed, estimator="decay").summary
    sampled = replay("Q1", chart, catalog, observed, estimator="sample:0.1").summary
    oracle = sampled["baselines"]["oracle_chart"]
    assert predicted["regret"] > 0.01
    assert sampled["regret"] <= 1.5 * oracle["regret"] + 1e-3
    assert sampled["fidelity"] > predicted["fidelity"]
