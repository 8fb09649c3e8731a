"""Babcock, Datar and Motwani's load shedding (seed 004) on cases worked by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cqopt.errors import CqoptError
from cqopt.runtime.overload.shedding import (FlowTree, Placement, effective_rates,
                                             error_constant, hoeffding_bound, load,
                                             place_shedders, scale_answer, solve_load)


def example_3_1(rate: float = 100.0) -> FlowTree:
    """Figure 2: operator A on stream S feeds B (query q1) and C (query q2)."""
    return FlowTree(parent={"A": "S", "B": "A", "C": "A"}, rate={"S": rate},
                    selectivity={"A": 0.5, "B": 0.0, "C": 0.0},
                    seconds_per_tuple={"A": 0.002, "B": 0.02, "C": 0.002},
                    answer={"q1": "B", "q2": "C"})


def test_example_3_1_sheds_before_a_and_b_only():
    placement = place_shedders(example_3_1(), {"q1": 0.5, "q2": 0.8})
    assert placement.before["A"] == pytest.approx(0.8)
    assert placement.before["B"] == pytest.approx(0.625)
    assert placement.before["C"] == 1.0  # Observation 3.4: q_max's child sheds nothing
    assert placement.prefix == pytest.approx({"A": 0.8, "B": 0.5, "C": 0.8})
    assert placement.answers == {}


def test_algorithm_1_beats_every_other_placement_with_the_same_rates():
    """Theorem 3.6 on Example 3.1: shedders before A, B and C with p1·p2 = 0.5 and
    p1·p3 = 0.8 (the paper's family) never cost less than Algorithm 1's."""
    tree = example_3_1()
    best = load(tree, place_shedders(tree, {"q1": 0.5, "q2": 0.8}))
    for p1 in np.linspace(0.8, 1.0, 9):
        other = Placement(before={"A": p1, "B": 0.5 / p1, "C": 0.8 / p1}, answers={},
                          prefix={}, effective={"q1": 0.5, "q2": 0.8})
        assert load(tree, other) >= best - 1e-12
    assert load(tree, Placement({"A": 1.0, "B": 0.5, "C": 0.8}, {}, {}, {})) > best


def test_error_constant_and_proposition_3_1_by_hand():
    # μ = 2, σ = 2, N = 100, δ = 0.01: C = sqrt(8 / (2·100·4) · ln 200)
    assert float(error_constant(2.0, 2.0, 100, 0.01)) == pytest.approx(math.sqrt(0.0529832),
                                                                       rel=1e-6)
    # A COUNT: μ = 1, σ = 0
    assert float(error_constant(1.0, 0.0, 50, 0.05)) == pytest.approx(
        math.sqrt(math.log(40) / 100))
    # With P·ε = C the Hoeffding bound is exactly δ (A = N·μ, SS = N·(σ² + μ²)).
    c = float(error_constant(3.0, 1.0, 40, 0.02))
    assert float(hoeffding_bound(0.25, c / 0.25, 40 * 3.0, 40 * 10.0)) == pytest.approx(0.02)


def test_load_equation_solved_by_hand():
    """Work per second at full rate: A 0.2, B 1.0, C 0.1 (1.3 > 1). With C1 = 0.05 and
    C2 = 0.06 the prefixes are 0.06λ (A), 0.05λ (B), 0.06λ (C): the load is
    0.2·0.06λ + 1.0·0.05λ + 0.1·0.06λ = 0.068λ = 1, so λ = 1/0.068."""
    tree = example_3_1()
    result = solve_load(tree, {"q1": 0.05, "q2": 0.06})
    assert result.load_before == pytest.approx(1.3)
    assert result.multiplier == pytest.approx(1 / 0.068)
    assert result.placement.effective == pytest.approx({"q1": 0.05 / 0.068, "q2": 0.06 / 0.068})
    assert result.placement.shedders() == pytest.approx({"A": 0.06 / 0.068, "B": 0.05 / 0.06})
    assert result.load_after == pytest.approx(1.0)
    assert result.met and result.overloaded
    # Observation 3.2: every shed query has the same error, ε_max = 1/λ.
    assert result.epsilon == pytest.approx({"q1": 0.068, "q2": 0.068})


def test_load_equation_past_the_discontinuity_at_one():
    """C2 = 0.5: q2's prefix reaches 1 at λ = 2, where the load is 0.2 + 0.1 + 1.0·0.1 = 0.4;
    past it only B's term grows: 0.3 + 0.05λ = 1 gives λ = 14, P1 = 0.7, q2 exact."""
    result = solve_load(example_3_1(), {"q1": 0.05, "q2": 0.5})
    assert result.multiplier == pytest.approx(14.0)
    assert result.placement.effective == pytest.approx({"q1": 0.7, "q2": 1.0})
    assert result.placement.shedders() == pytest.approx({"B": 0.7})
    assert result.epsilon == pytest.approx({"q1": 0.05 / 0.7, "q2": 0.0})
    assert result.load_after == pytest.approx(1.0)


def test_no_overload_sheds_nothing():
    result = solve_load(example_3_1(rate=50.0), {"q1": 0.05, "q2": 0.5})  # load 0.65
    assert math.isinf(result.multiplier)
    assert set(result.placement.before.values()) == {1.0}
    assert result.placement.effective == {"q1": 1.0, "q2": 1.0}
    assert result.epsilon == {"q1": 0.0, "q2": 0.0}
    assert not result.overloaded and result.load_after == result.load_before


def test_a_query_without_a_bound_is_never_shed():
    constants = dict(zip(["q1", "q2"], error_constant([5.0, 1.0], [1.0, 0.0], [400, 0])))
    result = solve_load(example_3_1(), constants)
    assert math.isinf(constants["q2"])
    assert result.placement.effective["q2"] == 1.0 and result.placement.prefix["A"] == 1.0
    assert 0 < result.placement.effective["q1"] < 1 and result.met


def test_a_capacity_no_shedding_can_meet_is_reported():
    """q2 has no bound (empty window) and its own operators need 0.3 s/s: capacity 0.2 fails."""
    result = solve_load(example_3_1(), {"q1": 0.05, "q2": math.inf}, capacity=0.2)
    assert not result.met
    assert result.placement.effective == {"q1": 0.0, "q2": 1.0}


def test_a_query_continuing_another_sheds_before_its_answer():
    tree = FlowTree(parent={"A": "S", "B": "A"}, rate={"S": 10.0},
                    selectivity={"A": 1.0, "B": 0.0}, seconds_per_tuple={"A": 0.1, "B": 0.1},
                    answer={"q1": "A", "q2": "B"})
    placement = place_shedders(tree, {"q1": 0.3, "q2": 0.6})
    assert placement.shedders() == {"A": 0.6}
    assert placement.answers == pytest.approx({"q1": 0.5})


def test_scaled_sum_meets_the_promised_bound():
    """End to end on Example 3.1: tuples pass the placed shedders and filter A; q1 sums a
    skewed value over B, q2 counts over C; the scaled answers' relative errors exceed
    the promised ε_i in at most δ of the trials (seeded)."""
    rng = np.random.default_rng(22)
    n, delta, trials = 4000, 0.05, 400
    values = rng.lognormal(mean=3.0, sigma=1.0, size=n)
    passes_a = rng.random(n) < 0.5
    contributing = values[passes_a]
    constants = {"q1": float(error_constant(contributing.mean(), contributing.std(),
                                            contributing.size, delta)),
                 "q2": float(error_constant(1.0, 0.0, contributing.size, delta))}
    result = solve_load(example_3_1(rate=300.0), constants)
    assert result.overloaded and result.met
    p = result.placement
    exact = {"q1": contributing.sum(), "q2": float(contributing.size)}
    misses = {"q1": 0, "q2": 0}
    unscaled_misses = 0
    for _ in range(trials):
        kept_a = passes_a & (rng.random(n) < p.before["A"])
        at_b = kept_a & (rng.random(n) < p.before["B"])
        at_c = kept_a & (rng.random(n) < p.before["C"])
        answers = {"q1": float(scale_answer(values[at_b].sum(), p.effective["q1"])),
                   "q2": float(scale_answer(at_c.sum(), p.effective["q2"]))}
        for q in misses:
            misses[q] += abs(answers[q] - exact[q]) > result.epsilon[q] * exact[q]
        unscaled = values[at_b].sum()
        unscaled_misses += abs(unscaled - exact["q1"]) > result.epsilon["q1"] * exact["q1"]
    assert all(0 < result.epsilon[q] < 1 for q in misses)
    assert misses["q1"] <= delta * trials and misses["q2"] <= delta * trials
    assert unscaled_misses == trials  # the scaling is what makes the answer unbiased


def test_an_operator_no_query_reads_gets_nothing():
    tree = FlowTree(parent={"A": "S", "B": "A", "D": "A"}, rate={"S": 10.0},
                    selectivity={"A": 1.0, "B": 0.0, "D": 0.0},
                    seconds_per_tuple={"A": 0.05, "B": 0.02, "D": 0.1}, answer={"q": "B"})
    result = solve_load(tree, {"q": 0.1})  # 0.5 + 0.2 + 1.0 = 1.7 s/s, 0.7 without D
    assert result.load_before == pytest.approx(1.7)
    assert result.placement.shedders() == {"D": 0.0} and result.load_after == pytest.approx(0.7)
    assert result.overloaded and result.placement.effective == {"q": 1.0}


def test_effective_rates_clamp_at_one():
    assert effective_rates([0.1, 0.3], 5.0).tolist() == [0.5, 1.0]
    assert effective_rates([0.0, 2.0], math.inf).tolist() == [1.0, 1.0]


@pytest.mark.parametrize("build, message", [
    (lambda: error_constant(1.0, 0.0, 10, delta=1.5), "delta"),
    (lambda: FlowTree({"A": "T"}, {"S": 1.0}, {"A": 1.0}, {"A": 0.1}, {"q": "A"}), "'T'"),
    (lambda: FlowTree({"A": "B", "B": "A"}, {"S": 1.0}, {"A": 1.0, "B": 1.0},
                      {"A": 0.1, "B": 0.1}, {"q": "A"}), "cycle"),
    (lambda: FlowTree({"A": "S"}, {"S": 1.0}, {"A": -1.0}, {"A": 0.1}, {"q": "A"}),
     "selectivity"),
    (lambda: FlowTree({"A": "S"}, {"S": 1.0}, {"A": 1.0}, {"A": 0.1}, {"q": "Z"}), "'Z'"),
    (lambda: place_shedders(example_3_1(), {"q1": 1.5, "q2": 0.5}), "'q1'"),
    (lambda: solve_load(example_3_1(), {"q1": 0.1}), "'q2'"),
    (lambda: scale_answer(1.0, 0.0), "(0, 1]"),
])
def test_bad_input_is_one_cqopt_error(build, message):
    with pytest.raises(CqoptError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]")):
        build()
