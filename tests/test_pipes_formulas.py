"""PIPES formulas (seed 002, section 3) on hand-computed cases, and the paper's figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqopt.catalog import Catalog, PipesConstants
from cqopt.costmodel import pipes
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

C = PipesConstants()


def test_projection_and_selection():
    assert pipes.projection(2.0, 5.0) == (2.0, 5.0)
    d, l = pipes.selection(np.float64(2.0), np.float64(5.0), np.float64(0.25))
    assert (float(d), float(l)) == (8.0, 5.0)


def test_selection_of_nothing_is_the_empty_stream():
    d, l = pipes.selection(np.float64(2.0), np.float64(5.0), np.float64(0.0))
    assert math.isinf(d) and l == 0.0


def test_union():
    # rates 1/2 + 1/4 = 3/4 -> d' = 4/3; l' = (10/2 + 20/4) / (3/4) = 40/3
    d, l = pipes.union([np.float64(2.0), np.float64(4.0)], [np.float64(10.0), np.float64(20.0)])
    assert float(d) == pytest.approx(4 / 3) and float(l) == pytest.approx(40 / 3)


def test_cartesian_product():
    d, l = pipes.cartesian_product(np.float64(2.0), np.float64(10.0), np.float64(4.0),
                                   np.float64(30.0))
    assert float(d) == pytest.approx(8 / 40) and float(l) == pytest.approx(300 / 40)


def test_scalar_aggregation_branches():
    # d < l: d' = l' = g / (1 - (1 - 1/d)^(2g)); d = 2, g = 1: 1 / (1 - 1/4) = 4/3
    d, l = pipes.scalar_aggregation(np.float64(2.0), np.float64(10.0), np.float64(1.0))
    assert float(d) == pytest.approx(4 / 3) and float(l) == pytest.approx(4 / 3)
    # d >= l: unchanged
    d, l = pipes.scalar_aggregation(np.float64(10.0), np.float64(2.0), np.float64(1.0))
    assert (float(d), float(l)) == (10.0, 2.0)


def test_dense_stream_clamps_cardenas_base():
    # d < 1 time unit: every instant is hit, so d' = l' = g (reading 4)
    d, l = pipes.scalar_aggregation(np.float64(0.01), np.float64(10.0), np.float64(1e-3))
    assert float(d) == pytest.approx(1e-3) and float(l) == pytest.approx(1e-3)


def test_groupby_aggregation():
    # n = 2 groups, d = 1 -> n·d = 2 < l = 10, g = 1: per group 4/3; d' = 4/6, l' = 4/3
    d, l = pipes.groupby_aggregation(np.float64(1.0), np.float64(10.0), np.float64(1.0), 2)
    assert float(d) == pytest.approx(2 / 3) and float(l) == pytest.approx(4 / 3)
    d, l = pipes.groupby_aggregation(np.float64(6.0), np.float64(10.0), np.float64(1.0), 2)
    assert (float(d), float(l)) == (6.0, 10.0)


def test_window():
    # d' = g·d/l = 1·0.5/1; l' = (floor(w/g) + 1)·g = 11 for w = 10, g = 1 (the paper's w+1)
    d, l = pipes.window(np.float64(0.5), np.float64(1.0), np.float64(1.0), np.float64(10.0))
    assert (float(d), float(l)) == (0.5, 11.0)


def test_granularity_three_cases():
    d, l = pipes.granularity(np.float64(2.0), np.float64(10.0), 3.0)  # l >= 2ĝ
    assert (float(d), float(l)) == (2.0, 7.0)
    d, l = pipes.granularity(np.float64(2.0), np.float64(4.0), 3.0)  # ĝ < l < 2ĝ
    assert (float(d), float(l)) == (pytest.approx(6.0), 3.0)
    d, l = pipes.granularity(np.float64(2.0), np.float64(2.0), 3.0)  # l <= ĝ: empty
    assert math.isinf(d) and l == 0.0


def test_join_memory_formula_9():
    # (ceil(10/2) + 4/(2·2))·8 + (ceil(12/4) + 2/(2·4))·16 = 6·8 + 3.25·16 = 100
    m = pipes.join_memory(np.float64(2.0), np.float64(10.0), 8, np.float64(4.0),
                          np.float64(12.0), 16)
    assert float(m) == pytest.approx(100.0)


def test_join_cpu_formulas_10_to_14():
    d1, l1, d2, l2, jsel = 2.0, 10.0, 4.0, 12.0, 0.1
    arrivals = 1 / d1 + 1 / d2
    expected = (arrivals * (C.hash + C.bucket + C.heap)
                + 1 / (d1 * d2) * (l2 / C.hash_buckets + l1 / C.hash_buckets) * C.predicate
                + arrivals * C.hash
                + jsel * (l1 + l2) / (d1 * d2) * C.projection_function
                + arrivals * (2 * C.expire + C.bucket + C.heap))
    got = pipes.join_cpu(np.float64(d1), np.float64(l1), np.float64(d2), np.float64(l2),
                         np.float64(jsel), C)
    assert float(got) == pytest.approx(expected)
    nested = pipes.join_cpu(np.float64(d1), np.float64(l1), np.float64(d2), np.float64(l2),
                            np.float64(jsel), C, hashed=False)
    assert float(nested) > float(got)  # one bucket: every probe scans the whole state


def test_aggregation_memory_and_cpu_15_to_19():
    d, l, g, s = 2.0, 10.0, 1.0, 8
    # (15): ceil(10 · (1 - 1/2)) · 8 = 40
    assert float(pipes.aggregation_memory(np.float64(d), np.float64(l), np.float64(g), s)) == 40
    d_out = 4 / 3
    expected = (l / (d * g) * 0.5 * (C.overlap + C.update_aggregate)  # (17)
                + C.list_op / d + C.init_aggregate / (2 * d)  # (18), d < l
                + (C.overlap + C.list_op) / d_out + C.overlap / d)  # (19)
    got = pipes.aggregation_cpu(np.float64(d), np.float64(l), np.float64(g),
                                np.float64(d_out), C)
    assert float(got) == pytest.approx(expected)
    # d >= l: no updates, every element a new aggregate
    sparse = pipes.aggregation_cpu(np.float64(20.0), np.float64(10.0), np.float64(g),
                                   np.float64(20.0), C)
    assert float(sparse) == pytest.approx((C.list_op + C.init_aggregate) / 20
                                          + (C.overlap + C.list_op) / 20 + C.overlap / 20)


def test_window_granularity_and_stateless_cpu():
    assert float(pipes.window_cpu(np.float64(0.5), C)) == pytest.approx(2 * C.set_timestamp)
    assert float(pipes.window_cpu(np.float64(0.5), C, tuple_based=True)) == pytest.approx(
        2 * (2 * C.queue + C.set_timestamp))
    assert float(pipes.granularity_cpu(np.float64(0.5), C)) == pytest.approx(
        4 * C.round_timestamp)
    assert float(pipes.stateless_cpu(np.float64(0.25), C.predicate)) == pytest.approx(
        4 * C.predicate)


def test_empty_stream_costs_nothing():
    inf = np.float64(np.inf)
    assert float(pipes.join_memory(inf, np.float64(0.0), 8, inf, np.float64(0.0), 8)) == 0
    # one empty input: the other input's window only, no waiting term (reading 7)
    m = pipes.join_memory(inf, np.float64(0.0), 8, np.float64(2.0), np.float64(10.0), 8)
    assert float(m) == 5 * 8
    assert float(pipes.join_cpu(inf, np.float64(0.0), inf, np.float64(0.0),
                                np.float64(1.0), C)) == 0
    d, l = pipes.cartesian_product(inf, np.float64(0.0), np.float64(2.0), np.float64(10.0))
    assert math.isinf(d) and l == 0


def test_paper_join_holds_about_140_kB():
    """Seed 002, section 5: two 100 elements/s streams, 10 s windows, ~140 kB.

    In seconds with a 1 ms granularity, each side holds ⌈10.001/0.01⌉ + 0.5 =
    1001.5 elements; 140 kB over 2003 elements implies elements of about 70
    bytes (a Java object holding a random integer in PIPES).
    """
    g = np.float64(1e-3)
    d, l = pipes.window(np.float64(0.01), g, g, np.float64(10.0))
    element_bytes = 70
    memory = pipes.join_memory(d, l, element_bytes, d, l, element_bytes)
    assert float(memory) == pytest.approx(140_000, rel=0.01)


positive = st.floats(1e-3, 1e3)


@settings(max_examples=200, deadline=None)
@given(positive, positive, positive, positive, st.floats(1e-4, 1.0))
def test_join_memory_and_cpu_nonnegative_finite(d1, d2, l1, l2, jsel):
    m = pipes.join_memory(np.float64(d1), np.float64(l1), 8, np.float64(d2), np.float64(l2), 8)
    c = pipes.join_cpu(np.float64(d1), np.float64(l1), np.float64(d2), np.float64(l2),
                       np.float64(jsel), C)
    assert np.isfinite(m) and m >= 0 and np.isfinite(c) and c >= 0


@settings(max_examples=100, deadline=None)
@given(st.floats(1.0, 1e3), st.floats(1.0, 100.0), st.floats(1.01, 3.0))
def test_join_memory_grows_with_window_and_rate(rate, window_s, factor):
    g = np.float64(1e-3)

    def memory(rate, w):
        d, l = pipes.window(np.float64(1 / rate), g, g, np.float64(w))
        return float(pipes.join_memory(d, l, 8, d, l, 8))

    assert memory(rate, window_s * factor) >= memory(rate, window_s)
    assert memory(rate * factor, window_s) >= memory(rate, window_s)


# -- Cardenas's term in time instants (reading 4) ----------------------------------
@settings(max_examples=100, deadline=None)
@given(st.floats(0.01, 100.0), st.floats(1.0, 1e3), st.floats(0.01, 10.0),
       st.sampled_from([1e-3, 0.5, 4.0]))
def test_cardenas_term_depends_on_instants_not_units(d, l, g, k):
    # the same stream with every length k times longer and an instant of k: the same
    # counts of instants, so the same d', l' and state (times k), the same CPU (over k)
    base = pipes.scalar_aggregation(np.float64(d), np.float64(l), np.float64(g))
    scaled = pipes.scalar_aggregation(np.float64(d * k), np.float64(l * k), np.float64(g * k),
                                      instant=k)
    np.testing.assert_allclose(np.array(scaled) / k, base, rtol=1e-9)
    grouped = pipes.groupby_aggregation(np.float64(d * k), np.float64(l * k),
                                        np.float64(g * k), 3, instant=k)
    np.testing.assert_allclose(np.array(grouped) / k, pipes.groupby_aggregation(
        np.float64(d), np.float64(l), np.float64(g), 3), rtol=1e-9)
    memory = pipes.aggregation_memory(np.float64(d), np.float64(l), np.float64(g), 8)
    scaled_memory = pipes.aggregation_memory(np.float64(d * k), np.float64(l * k),
                                             np.float64(g * k), 8, instant=k)
    assert float(scaled_memory) == pytest.approx(float(memory), abs=8)  # ⌈⌉ at a boundary


def _count_query(time_unit: str, granularity: float, group_by: bool = False):
    cat = Catalog.from_dict({"time_unit": time_unit, "streams": {"S": {
        "rate": [0.1, 10], "granularity": granularity, "columns": {"a": "int"}}}})
    sql = ("SELECT S.a, COUNT(*) FROM S [RANGE 10 SECONDS] GROUP BY S.a" if group_by
           else "SELECT COUNT(*) FROM S [RANGE 10 SECONDS]")
    (plan, *_) = enumerate_plans(parse_query(sql, cat))
    return pipes.PIPES(cat), plan


@pytest.mark.parametrize("group_by", [False, True])
def test_aggregate_is_the_same_in_seconds_and_milliseconds(group_by):
    lam = np.array([0.01, 0.5, 0.99, 1.0, 1.01, 7.0, 300.0, 5e4])
    seconds = _count_query("seconds", 1e-3, group_by)  # g = 1 ms in either unit
    millis = _count_query("milliseconds", 1.0, group_by)
    a, b = (model.cost(plan, {"rate.S": lam}) for model, plan in (seconds, millis))
    np.testing.assert_allclose(a.rate, b.rate, rtol=1e-9)
    np.testing.assert_allclose(a.memory, b.memory, rtol=1e-9)
    np.testing.assert_allclose(a.cpu, b.cpu, rtol=1e-9)


def test_aggregate_rate_is_continuous_at_one_element_per_time_unit():
    # The old reading clamped (1 − 1/d) at d < 1 time unit: at λ = 0.99/s the output rate
    # was 9.2/s, at 1.01/s 1000/s. In instants of 1 µs nothing happens at λ = 1/s.
    model, plan = _count_query("seconds", 1e-3)
    below, at, above = (model.cost(plan, {"rate.S": lam})
                        for lam in (1 - 1e-6, 1.0, 1 + 1e-6))
    assert float(below.rate) == pytest.approx(float(at.rate), rel=1e-5)
    assert float(above.rate) == pytest.approx(float(at.rate), rel=1e-5)
    assert float(below.memory) == float(at.memory) == float(above.memory)
    # each element splits an aggregate at its start and its end: about 2λ results/s
    assert float(at.rate) == pytest.approx(2.0, rel=1e-2)
    rates = [float(model.cost(plan, {"rate.S": lam}).rate) for lam in (0.99, 1.01)]
    assert rates[1] / rates[0] == pytest.approx(1.01 / 0.99, rel=1e-2)
