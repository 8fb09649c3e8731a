"""PIPES' adaptive resource manager (seed 002, section 4) on cases worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cqopt.errors import CqoptError
from cqopt.runtime.overload.window_adaptation import (Adaptation, QosRange, adapt,
                                                      granularity_change, schedule, setting,
                                                      window_change)


def memory_linear_in_window(windows, granularities):
    """A toy model: 2 bytes per second of window, no processing cost."""
    return 0.0, 2.0 * float(np.sum(windows))


def test_bisection_worked_by_hand():
    """Window range [10, 110], memory 2·w, M = 150 (so w <= 75, f <= 0.65), p = 4.
    Step 1: f = 1 (220), 0.75 (170) fail, f = 0.5 (120) holds.
    Step 2 on [0.5, 1]: f = 1 fails; 0.75 (170) fails; 0.625 (145) holds; 0.6875 (157.5) fails."""
    ranges = {"q": QosRange(window=(10.0, 110.0))}
    calls = []

    def estimate(w, g):
        calls.append(float(w[0]))
        return memory_linear_in_window(w, g)

    result = adapt(ranges, estimate, memory_bound=150.0, steps=4, iterations=3)
    assert calls == [110.0, 85.0, 60.0, 110.0, 85.0, 72.5, 78.75]
    assert result.granularity_fraction == 0.5
    assert result.window_fraction == 0.625 and result.windows == {"q": 72.5}
    assert result.memory == 145.0 and result.met and result.estimates == 7
    # More halvings approach the largest feasible fraction, 0.65, from the feasible side.
    fine = adapt(ranges, memory_linear_in_window, memory_bound=150.0, steps=4, iterations=30)
    assert fine.window_fraction == pytest.approx(0.65, abs=1e-8)
    assert fine.window_fraction <= 0.65 and fine.memory <= 150.0


def test_granularities_then_windows_with_two_queries():
    """Memory = Σ w / g (an aggregation's state shrinks as the granularity coarsens).
    q1: window [10, 100], granularity [10, 1]; q2: window [20, 20], no granularity.
    f = 1: 100/1 + 20 = 120 > 60; f = 0.5: g = 5.5, w = 55: 10 + 20 = 30 <= 60.
    Windows with g fixed at 5.5: w/5.5 + 20 <= 60 gives w <= 220, so f_w = 1."""
    ranges = {"q1": QosRange(window=(10.0, 100.0), granularity=(10.0, 1.0)),
              "q2": QosRange(window=(20.0, 20.0))}

    def estimate(w, g):
        return 0.0, float(np.sum(w / np.where(np.isnan(g), 1.0, g)))

    result = adapt(ranges, estimate, memory_bound=60.0, steps=2)
    assert result.granularity_fraction == 0.5
    assert result.granularities == {"q1": 5.5}
    assert result.window_fraction == 1.0 and result.windows == {"q1": 100.0, "q2": 20.0}
    assert result.memory == pytest.approx(100 / 5.5 + 20)


def test_bounds_already_met_change_nothing():
    ranges = {"q": QosRange(window=(10.0, 110.0), granularity=(1.0, 0.001))}
    result = adapt(ranges, lambda w, g: (0.5, 2.0 * float(w[0])), cost_bound=1.0,
                   memory_bound=1000.0)
    assert not result.changed and result.met and result.estimates == 1
    assert result.windows == {"q": 110.0} and result.granularities == {"q": 0.001}


def test_unreachable_bounds_run_at_the_minimum_and_say_so():
    ranges = {"q": QosRange(window=(10.0, 110.0), granularity=(1.0, 0.001))}
    result = adapt(ranges, memory_linear_in_window, memory_bound=5.0, steps=3)
    assert not result.met and result.changed
    assert result.windows == {"q": 10.0} and result.granularities == {"q": 1.0}
    assert result.memory == 20.0 and result.estimates == 4


def test_cost_bound_binds_as_well_as_memory():
    ranges = {"q": QosRange(window=(10.0, 110.0))}
    result = adapt(ranges, lambda w, g: (float(w[0]) / 100, 0.0), cost_bound=0.6,
                   steps=4, iterations=30)
    assert result.windows["q"] == pytest.approx(60.0, abs=1e-6) and result.cost <= 0.6


def test_granularity_rounds_to_the_allowed_values():
    assert setting((10.0, 0.001), 0.5, allowed=[0.001, 0.01, 0.1, 1.0, 10.0]) == 1.0
    assert setting((10.0, 0.001), 1.0, allowed=[0.001, 0.01]) == 0.001


def test_delays_of_section_4_2():
    # The paper's Figure 7: a join's windows 60 s -> 30 s at 80 s, back to 60 s at 150 s.
    down, up = window_change("q", 80.0, 60.0, 30.0), window_change("q", 150.0, 30.0, 60.0)
    assert (down.starts, down.full) == (110.0, 140.0)
    assert (up.starts, up.full) == (180.0, 210.0)
    assert [down.realised(t) for t in (100.0, 110.0, 125.0, 140.0, 200.0)] == [0, 0, 0.5, 1, 1]
    # Aggregation: a granularity change starts at once, is full after l when d < l ...
    agg = granularity_change("q", 3600.0, 1 / 60, 10.0, distance=2.0, length=600.0)
    assert (agg.starts, agg.full) == (3600.0, 4200.0)
    # ... and at the next element when d >= l.
    assert granularity_change("q", 0.0, 1.0, 10.0, distance=3.0, length=1.0).full == 3.0


def test_schedule_lists_only_what_changed():
    before = Adaptation(1.0, 1.0, {"a": 60.0, "b": 30.0}, {"a": 1.0}, 0.0, 0.0, True, 1)
    after = Adaptation(0.5, 1.0, {"a": 30.0, "b": 30.0}, {"a": 1.0}, 0.0, 0.0, True, 1)
    changes = schedule(80.0, before, after, {"a": 0.1, "b": 0.1})
    assert [(c.query, c.what, c.starts, c.full) for c in changes] == [("a", "window", 110.0,
                                                                       140.0)]


@pytest.mark.parametrize("build, message", [
    (lambda: QosRange(window=(20.0, 10.0)), "window"),
    (lambda: QosRange(window=(0.0, 10.0)), "window"),
    (lambda: QosRange(window=(1.0, 10.0), granularity=(0.001, 1.0)), "coarsest"),
    (lambda: adapt({"q": QosRange((1.0, 2.0))}, memory_linear_in_window, steps=0), "steps"),
    (lambda: adapt({}, memory_linear_in_window), "at least one"),
    (lambda: adapt({"q": QosRange((1.0, 2.0))}, lambda w, g: 1.0), "cost, memory"),
])
def test_bad_input_is_one_cqopt_error(build, message):
    with pytest.raises(CqoptError, match=message):
        build()


def test_infinite_bounds_keep_full_qos():
    result = adapt({"q": QosRange((1.0, 2.0))}, lambda w, g: (math.inf, math.inf))
    assert result.met and not result.changed


def test_the_pipes_join_model_halves_the_window_for_half_the_memory():
    """Seed 002, section 5.3: a join of two 100 elements/s streams with 10 s windows holds
    about 140 kB; saving 50% of the memory means windows of about 5 s. With the project's
    PIPES formulas (7) and (9) (70-byte elements, 1 ms granularity) as the estimate, the
    bisection lands just under 5 s: memory is linear in the window, within one element."""
    from cqopt.costmodel import pipes

    g = np.float64(1e-3)

    def join_estimate(windows, granularities):
        d, l = pipes.window(np.float64(0.01), g, g, np.float64(windows[0]))
        return 0.0, float(pipes.join_memory(d, l, 70, d, l, 70))

    ranges = {"join": QosRange(window=(1.0, 10.0))}
    assert join_estimate(np.array([10.0]), None)[1] == pytest.approx(140_000, rel=0.01)
    result = adapt(ranges, join_estimate, memory_bound=70_000, steps=4, iterations=30)
    assert 4.95 <= result.windows["join"] <= 5.0
    assert 69_000 <= result.memory <= 70_000 and result.met
