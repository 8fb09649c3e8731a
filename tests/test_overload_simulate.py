"""Shedding replayed over per-round statistics: worked by hand, and the (ε, δ) promise kept."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cqopt.errors import CqoptError
from cqopt.runtime.overload.shedding import error_constant
from cqopt.runtime.overload.simulate import bound_coverage, relative_errors, simulate_rounds


def linear(stats):
    return 0.005 * stats["rate.S"]


def test_rounds_worked_by_hand():
    """5 ms a tuple, 1 s rounds and deadline: 100, 300, 150 tuples/s need 0.5, 1.5, 0.75 s;
    the second keeps 1/1.5 of its tuples (D/T) and drops 100."""
    stats = {"rate.S": np.array([100.0, 300.0, 150.0])}
    count = np.array([50.0, 150.0, 75.0])
    run = simulate_rounds(stats, linear, deadline=1.0, round_seconds=1.0, delta=0.05,
                          aggregate={"count": count, "mean": np.ones(3), "std": np.zeros(3)})
    assert run.predicted.tolist() == pytest.approx([0.5, 1.5, 0.75])
    assert run.kept.tolist() == pytest.approx([1.0, 2 / 3, 1.0])
    assert run.predicted_after.tolist() == pytest.approx([0.5, 1.0, 0.75])
    assert run.dropped.tolist() == pytest.approx([0.0, 100.0, 0.0])
    assert run.missed_without.tolist() == [False, True, False]
    assert not run.missed_with.any()
    c = math.sqrt(1 / (2 * 150) * math.log(2 / 0.05))  # a COUNT over 150 tuples
    assert run.epsilon.tolist() == pytest.approx([0.0, c * 1.5, 0.0])
    summary = run.summary()
    assert summary["miss_share_without"] == pytest.approx(1 / 3)
    assert summary["miss_share_with"] == 0.0 and summary["tuples_dropped"] == pytest.approx(100)


def test_a_join_keeps_the_square_root():
    stats = {"rate.S": np.array([400.0]), "rate.T": np.array([400.0]), "sel.S": np.array([0.3])}
    run = simulate_rounds(stats, lambda s: 1e-5 * s["rate.S"] * s["rate.T"], deadline=0.4,
                          round_seconds=2.0)
    assert run.kept.tolist() == pytest.approx([0.5])
    assert run.dropped.tolist() == pytest.approx([800.0])  # half of 2 · (400 + 400)


def test_no_overload_drops_nothing():
    stats = {"rate.S": np.array([10.0, 20.0])}
    run = simulate_rounds(stats, linear, deadline=1.0, round_seconds=1.0,
                          aggregate={"count": [10, 20], "mean": [3.0, 3.0], "std": [1.0, 1.0]})
    assert run.kept.tolist() == [1.0, 1.0] and run.dropped.tolist() == [0.0, 0.0]
    assert run.epsilon.tolist() == [0.0, 0.0] and not run.missed_with.any()


def test_an_unreachable_deadline_is_counted():
    """A fixed 0.2 s a round: a 0.1 s deadline is missed even at the least share kept."""
    stats = {"rate.S": np.array([100.0])}
    run = simulate_rounds(stats, lambda s: 0.2 + 0.005 * s["rate.S"], deadline=0.1,
                          round_seconds=1.0, min_kept=0.25)
    assert run.unreachable.tolist() == [True] and run.kept.tolist() == [0.25]
    assert run.missed_with.tolist() == [True]


def test_a_reserve_sheds_to_below_the_deadline():
    """A 20% reserve plans for 0.8 s: 300 tuples/s (1.5 s) keep 0.8/1.5; 150 (0.75 s) keep all."""
    stats = {"rate.S": np.array([300.0, 150.0])}
    run = simulate_rounds(stats, linear, deadline=1.0, round_seconds=1.0, reserve=0.2,
                          actual_seconds=[1.8, 0.75])
    assert run.kept.tolist() == pytest.approx([0.8 / 1.5, 1.0])
    assert run.seconds_with.tolist() == pytest.approx([1.8 * 0.8 / 1.5, 0.75])
    assert run.missed_with.tolist() == [False, False]  # 0.96 s: the reserve absorbed the burst
    assert simulate_rounds(stats, linear, 1.0, 1.0, actual_seconds=[1.8, 0.75]).missed_with[0]


def test_misses_judged_on_measured_seconds():
    stats = {"rate.S": np.array([300.0, 300.0])}
    run = simulate_rounds(stats, linear, deadline=1.0, round_seconds=1.0,
                          actual_seconds=[1.2, 1.8])
    assert run.seconds_with.tolist() == pytest.approx([0.8, 1.2])
    assert run.missed_with.tolist() == [False, True]


def test_scaled_answers_meet_the_promised_bound_in_1_minus_delta_of_rounds():
    """200 rounds of a skewed SUM, 2 to 4 times over capacity (seeded); the sampled sum
    scaled by 1/p is within the promised ε in at least 1 − δ of the rounds."""
    rng = np.random.default_rng(2026)
    rounds, delta = 200, 0.05
    rate = rng.uniform(2000, 4000, rounds)
    values = [rng.lognormal(2.0, 1.0, int(r)) for r in rate]
    aggregate = {"count": rate, "mean": [v.mean() for v in values],
                 "std": [v.std() for v in values]}
    run = simulate_rounds({"rate.S": rate}, lambda s: s["rate.S"] / 1000.0, deadline=1.0,
                          round_seconds=1.0, aggregate=aggregate, delta=delta)
    assert (run.kept < 0.5).all() and not run.missed_with.any()
    kept_sums = [v[rng.random(v.size) < p].sum() for v, p in zip(values, run.kept)]
    errors = relative_errors([v.sum() for v in values], kept_sums, run.kept)
    assert bound_coverage(errors, run.epsilon) >= 1 - delta
    assert np.median(errors) > 0  # the answers really are approximate


def test_relative_errors_and_coverage():
    assert np.isnan(relative_errors([0.0], [1.0], [0.5])).all()  # no relative error of 0
    assert bound_coverage([np.nan, 0.3], [0.1, 0.2]) == 0.0
    assert float(error_constant(1.0, 0.0, 0, 0.1)) == math.inf


@pytest.mark.parametrize("kwargs, message", [
    (dict(stats={"sel.S": [0.5]}), "rate.STREAM"),
    (dict(stats={"rate.S": [1.0, 2.0], "sel.S": [0.5]}), "one length"),
    (dict(round_seconds=0.0), "length"),
    (dict(reserve=1.0), "reserve"),
    (dict(aggregate={"count": [1.0]}), "mean"),
])
def test_bad_input_is_one_cqopt_error(kwargs, message):
    args = dict(stats={"rate.S": [1.0]}, predict_seconds=linear, deadline=1.0, round_seconds=1.0)
    args.update(kwargs)
    with pytest.raises(CqoptError, match=message):
        simulate_rounds(**args)


@pytest.mark.parametrize("values, message", [
    ({"deadline": 0.0}, "--deadline 0.0: needs a number of seconds > 0"),
    ({"deadline": True}, "--deadline True: expected a number"),
    ({"min_kept": 2.0}, "--min_kept 2.0: needs a share in [0, 1]"),
    ({"delta": 1.0}, "--delta 1.0: needs a probability in (0, 1)"),
    ({"memory_budget": -1}, "--memory_budget -1: needs a size in bytes > 0"),
    ({"window_min": 0}, "--window_min 0: needs a share in (0, 1]"),
    ({"error_bound": 1}, "--error_bound 1: needs a relative error in (0, 1)"),
    ({"quality": [[0, 0.5], [0.5, 0.9]]}, "the table is not monotone"),
    ({"deadlines": 1.0}, "--deadlines 1.0: not an overload setting"),
])
def test_overload_settings_are_judged_once_where_they_are_made(values, message):
    """The one judge of deadlines, shares kept, budgets and error bounds: the shedding,
    negotiation and window replays read its values without checking them again."""
    from cqopt.charts.overload_settings import OverloadSettings

    with pytest.raises(CqoptError, match=re.escape(message)):
        OverloadSettings.judged(values, lambda key, value: f"--{key} {value}")
    judged = OverloadSettings.judged({"deadline": 1, "min_kept": None, "window_min": 1})
    assert (judged.deadline, judged.min_kept, judged.window_min) == (1.0, 0.0, 1.0)
