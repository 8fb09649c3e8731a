"""The OM cost model: the paper's numbers, its open readings, and vectorization."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqopt.catalog import Catalog, load_catalog
from cqopt.costmodel import OM, PIPES, Utility, plan_utilities
from cqopt.optimizer.plans.nodes import SelectionNode, SourceNode
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.logical import Window, parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans


Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")


@pytest.fixture(scope="module")
def dec(examples) -> Catalog:
    return load_catalog(examples / "dec-pkt.toml")


def chain_plan(selections: list[tuple[str, str]], window_s: float = 1.0) -> Plan:
    """source S -> σ -> σ ...: each (statistic, rate class) in order, bottom-up."""
    g = nx.DiGraph()
    g.add_node("src:S", op=SourceNode(streams=("S",), stream="S", out_width=10,
                                      window=Window("range", seconds=window_s)))
    below = "src:S"
    for i, (stat, rate_class) in enumerate(selections):
        key = f"sel:{i}"
        # the models read no predicate: a selection's statistic stands for it
        g.add_node(key, op=SelectionNode(streams=("S",), stream="S", predicate=None,
                                         inputs=(below,), in_widths=(10,), out_width=10,
                                         rate_class=rate_class, selectivity=(stat,)))
        g.add_edge(below, key)
        below = key
    return Plan(g, below)


FIG2 = Catalog.from_dict({"operators": {"selection_equality": 500, "selection_range": 50},
                          "streams": {"S": {"rate": [1, 1000], "columns": {"a": "int"}}}})


@pytest.mark.parametrize("source_rate", [100.0, 250.0, 1000.0])
def test_figure_2_rates_under_capacity(source_rate):
    """o1: sel 0.5, 500 tps; o2: sel 0.1, 50 tps. C_r = 5.0 (o1 first) and 2.5 (o2 first)."""
    stats = {"rate.S": source_rate, "sel.o1": 0.5, "sel.o2": 0.1}
    o1, o2 = ("sel.o1", "selection-equality"), ("sel.o2", "selection-range")
    model = OM(FIG2)
    assert float(model.cost(chain_plan([o1, o2]), stats).rate) == pytest.approx(5.0)
    assert float(model.cost(chain_plan([o2, o1]), stats).rate) == pytest.approx(2.5)


def test_literal_rates_make_orders_equal():
    """Without the capacity reading, any order of selections has the same rate."""
    stats = {"rate.S": 100.0, "sel.o1": 0.5, "sel.o2": 0.1}
    o1, o2 = ("sel.o1", "selection-equality"), ("sel.o2", "selection-range")
    model = OM(FIG2, capacity=False)
    rates = [float(model.cost(chain_plan(order), stats).rate) for order in ([o1, o2], [o2, o1])]
    assert rates == pytest.approx([5.0, 5.0])


def test_utility_example_of_the_paper():
    assign1, assign2 = Utility(0.1, 0.9), Utility(20000, 2)
    assert float(assign1.of(5.0, 775)) == pytest.approx(697.52)
    assert float(assign1.of(2.5, 575)) == pytest.approx(517.54)
    assert float(assign2.of(5.0, 775)) == pytest.approx(5550)
    assert float(assign2.of(2.5, 575)) == pytest.approx(9150)


def test_utility_rejects_bad_weights_and_handles_zero_rate():
    with pytest.raises(ValueError):
        Utility(-1, 1)
    assert np.isinf(Utility(zero_output="infinite").of(0.0, 10.0))  # the paper's reading
    assert float(Utility(0.0, 1.0).of(0.0, 10.0)) == 10.0
    with pytest.raises(ValueError):
        Utility(zero_output="zero")


def test_a_round_without_output_is_scored_by_memory():
    # Every plan emits nothing: the rate term is left out, memory picks the plan,
    # and no score is infinite, so the round has an optimum.
    scores = Utility(0.4, 0.6).of(np.zeros(3), np.array([30.0, 10.0, 20.0]))
    assert np.isfinite(scores).all() and int(np.argmin(scores)) == 1
    # With output, the rate term still counts.
    assert float(Utility(0.4, 0.6).of(2.0, 10.0)) == pytest.approx(0.2 + 6.0)


def test_literal_memory_formulas_in_tuples():
    """c_inp = λ·(λW/tpr), c_int = c_r·W, per operator, in tuples."""
    lam, sel, w = 400.0, 0.5, 2.0
    plan = chain_plan([("sel.o1", "selection-equality")], window_s=w)
    cost = OM(FIG2, memory_unit="tuples").cost(plan, {"rate.S": lam, "sel.o1": sel})
    tpr = 500.0
    assert float(cost.memory) == pytest.approx(lam * lam * w / tpr + sel * lam * w)
    bytes_cost = OM(FIG2).cost(plan, {"rate.S": lam, "sel.o1": sel})
    assert float(bytes_cost.memory) == pytest.approx(10 * float(cost.memory))
    assert float(cost.cpu) == pytest.approx(lam / tpr)


def q1_memory_difference(sel: np.ndarray, lam: float) -> np.ndarray:
    """C_m(σ→π) − C_m(π→σ) for Q1, from the formulas by hand (W = 1, bytes).

    Tuples are 28 B, projected ones 8 B; tpr σ = 400,000, π = 500,000.
    """
    s_eq, p = 400_000.0, 500_000.0
    sigma_first = 28 * lam**2 / s_eq + 28 * sel * lam + 28 * (sel * lam) ** 2 / p + 8 * sel * lam
    pi_first = 28 * lam**2 / p + 8 * lam + 8 * lam**2 / s_eq + 8 * sel * lam
    return sigma_first - pi_first


def test_q1_selection_first_at_low_selectivity_projection_first_at_high(dec):
    q = parse_query(Q1, dec)
    plans = enumerate_plans(q)
    ids = [p.id for p in plans]
    sigma_pi, pi_sigma = ids.index("TCP[σπ]"), ids.index("TCP[πσ]")
    sel = np.linspace(0.01, 1.0, 400)
    lam = 500.0
    scores = plan_utilities(OM(dec), Utility(), plans, {"rate.TCP": lam, "sel.TCP": sel})
    sigma_wins = scores[sigma_pi] < scores[pi_sigma]
    assert sigma_wins[0] and not sigma_wins[-1]
    # one boundary, where the hand-written formulas put it (the rate terms are equal)
    boundary = sel[np.argmax(~sigma_wins)]
    expected = sel[np.argmax(q1_memory_difference(sel, lam) >= 0)]
    assert boundary == pytest.approx(expected)
    assert np.all(sigma_wins[sel < boundary]) and not np.any(sigma_wins[sel >= boundary])
    assert 0.25 < boundary < 0.32  # about 8/28, where 28·sel·λ passes 8·λ


def test_q1_memory_matches_hand_formulas(dec):
    plans = {p.id: p for p in enumerate_plans(parse_query(Q1, dec))}
    sel = np.array([0.1, 0.5, 0.9])
    stats = {"rate.TCP": 500.0, "sel.TCP": sel}
    m = {k: OM(dec).cost(p, stats).memory for k, p in plans.items()}
    np.testing.assert_allclose(m["TCP[σπ]"] - m["TCP[πσ]"], q1_memory_difference(sel, 500.0))


def test_join_reading_each_input_buffers_its_own_arrivals(dec):
    """Reading 3: c_inp = (λ_L·s_L + λ_R·s_R)·(λ_L + λ_R)·W / tpr."""
    q = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [2]", dec)
    (plan,) = enumerate_plans(q)
    lam_l, lam_r, jsel = 300.0, 200.0, 0.01
    cost = OM(dec).cost(plan, {"rate.TCP": lam_l, "rate.UDP": lam_r, "jsel.TCP.UDP": jsel})
    join = next(k for k in plan.operators() if plan.node(k).kind == "join")
    tpr, w = 3000.0, 2.0
    busy = (lam_l + lam_r) / tpr
    out = jsel * lam_l * lam_r * w  # busy < 1 s: not throttled
    expected = (lam_l * 28 + lam_r * 28) * busy * w + out * w * 56
    assert float(cost.operators[join].rate) == pytest.approx(out)
    assert float(cost.operators[join].memory) == pytest.approx(expected)


def test_join_is_throttled_past_capacity(dec):
    q = parse_query("SELECT * FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host WINDOW [1]", dec)
    (plan,) = enumerate_plans(q)
    stats = {"rate.TCP": 4000.0, "rate.UDP": 2000.0, "jsel.TCP.UDP": 0.001}
    capped = OM(dec).cost(plan, stats).rate
    literal = OM(dec, capacity=False).cost(plan, stats).rate
    # (λ_L + λ_R) / tpr = 2 s of work per second: the capacity reading halves the rate
    assert float(capped) == pytest.approx(0.001 * 4000 * 2000 / 2)
    assert float(literal) == pytest.approx(float(capped))
    light = {"rate.TCP": 100.0, "rate.UDP": 100.0, "jsel.TCP.UDP": 0.01}
    assert float(OM(dec, capacity=False).cost(plan, light).rate) > float(
        OM(dec).cost(plan, light).rate)


def test_q2_grid_shapes_and_three_plans(dec):
    plans = enumerate_plans(parse_query(Q2, dec))
    assert len(plans) == 3
    r = np.linspace(100, 500, 7)
    stats = {"rate.TCP": r[:, None, None], "rate.UDP": r[None, :, None],
             "rate.SF": r[None, None, :], "jsel.TCP.UDP": 0.01, "jsel.SF.UDP": 0.01,
             "jsel.SF.TCP": 0.01}
    for model in (OM(dec), PIPES(dec)):
        scores = plan_utilities(model, Utility(), plans, stats)
        assert scores.shape == (3, 7, 7, 7) and np.all(np.isfinite(scores))


rates = st.floats(1.0, 5000.0)
sels = st.floats(1e-4, 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(rates, rates, rates, sels, sels, sels), min_size=1, max_size=6))
def test_vectorized_equals_scalar_cell_by_cell(examples, cells):
    dec = load_catalog(examples / "dec-pkt.toml")
    cols = np.array(cells).T
    names = ["rate.TCP", "rate.UDP", "rate.SF", "jsel.TCP.UDP", "jsel.SF.UDP", "jsel.SF.TCP"]
    grid = dict(zip(names, cols))
    for query in (Q1, Q2):
        q = parse_query(query, dec)
        stats = {**grid, "sel.TCP": grid["jsel.SF.TCP"]}
        for model in (OM(dec), PIPES(dec)):
            for plan in enumerate_plans(q):
                whole = model.cost(plan, stats)
                for i in range(len(cells)):
                    one = model.cost(plan, {k: v[i] for k, v in stats.items()})
                    for field in ("rate", "memory", "cpu"):
                        a = np.broadcast_to(getattr(whole, field), cols.shape[1:])[i]
                        b = getattr(one, field)
                        assert np.isfinite(b) and b >= 0
                        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_missing_statistic_is_named(dec):
    from cqopt.costmodel import MissingStatisticError
    (plan, *_) = enumerate_plans(parse_query(Q1, dec))
    with pytest.raises(MissingStatisticError, match="sel.TCP"):
        OM(dec).cost(plan, {"rate.TCP": 1.0})


# -- errors at set-up, and no NaN costs -----------------------------------------------
def test_set_up_errors_are_project_errors(dec):
    from cqopt.costmodel import CostModelError, make_model
    from cqopt.errors import CqoptError

    bad = [lambda: Utility(0, 0), lambda: Utility(np.inf, 1), lambda: Utility(-1, 1),
           lambda: Utility.from_weights(["a", 1]), lambda: Utility.from_weights([1]),
           lambda: make_model("nope", dec), lambda: make_model("pipes", dec, "tuples"),
           lambda: make_model("om", dec, "kilos"), lambda: PIPES(dec, groups=0)]
    for make in bad:
        with pytest.raises(CostModelError) as info:
            make()
        assert isinstance(info.value, CqoptError) and isinstance(info.value, ValueError)
        assert str(info.value)
    assert isinstance(make_model("pipes", dec), PIPES)
    assert make_model("om", dec, "tuples").memory_unit == "tuples"


def test_zero_weight_drops_an_infinite_term():
    # w_m = 0 beside infinite memory (an [UNBOUNDED] window): the rate term only, not NaN
    assert float(Utility(1.0, 0.0).of(2.0, np.inf)) == 0.5
    assert float(Utility(0.0, 1.0, 0.0).of(2.0, 3.0, np.inf)) == 3.0
    assert np.isinf(Utility(1.0, 1.0).of(2.0, np.inf))
    assert Utility(1.0, 0.0).of(2.0, np.zeros((2, 3))).shape == (2, 3)


WINDOWS = ["[UNBOUNDED]", "[NOW]", "[ROWS 5]", "[RANGE 2 SECONDS]",
           "[PARTITION BY {s}.src_host ROWS 3]"]
SHAPES = [
    "SELECT TCP.src_host FROM TCP {w} WHERE TCP.dest_host = 2",
    "SELECT COUNT(*) FROM TCP {w} WHERE TCP.dest_host = 2",
    "SELECT TCP.src_host, SUM(TCP.bytes) FROM TCP {w} WHERE TCP.bytes > 3 "
    "GROUP BY TCP.src_host HAVING COUNT(*) > 1",
    "SELECT * FROM TCP {w}, UDP {v} WHERE TCP.src_host = UDP.dest_host AND TCP.dest_host = 2",
    "SELECT COUNT(*) FROM TCP {w}, UDP {v} WHERE TCP.src_host < UDP.dest_host",
    "SELECT TCP.src_host FROM TCP {w}, UDP {v}",
]
EDGE_VALUES = [0.0, 0.5, 1.0, 250.0]  # rates, selectivities and join selectivities


@pytest.mark.parametrize("shape", SHAPES)
def test_no_plan_costs_nan(dec, shape):
    """[UNBOUNDED], [NOW], [ROWS c], rate 0 and sel 0: costs may be ∞, never NaN.

    OM computed 0 · ∞ (no tuples of an unbounded window) as NaN, and NaN won argmin.
    """
    utilities = [Utility(), Utility(1, 0), Utility(0, 1), Utility(0, 0, 1), Utility(1, 1, 1)]
    models = [OM(dec), OM(dec, memory_unit="tuples"), OM(dec, capacity=False), PIPES(dec)]
    seen = 0
    for w, v in itertools.product(WINDOWS, WINDOWS if "{v}" in shape else WINDOWS[:1]):
        q = parse_query(shape.format(w=w.format(s="TCP"), v=v.format(s="UDP")), dec)
        grid = np.array(list(itertools.product(EDGE_VALUES, repeat=len(q.statistics)))).T
        stats = dict(zip(q.statistics, grid))
        for model, plan in itertools.product(models, enumerate_plans(q)):
            cost = model.cost(plan, stats)
            for field in ("rate", "memory", "cpu"):
                values = getattr(cost, field)
                assert not np.isnan(values).any(), (model.name, field, plan.id, q.sql)
                assert (values >= 0).all()
            for utility in utilities:
                assert not np.isnan(utility(cost)).any(), (model.name, utility, q.sql)
            seen += 1
    assert seen


def test_aggregate_over_unbounded_window_has_finite_utility_ranking(dec):
    # `cqopt explain` printed "memory nan ... utility nan <- cheapest" for this query
    q = parse_query("SELECT COUNT(*) FROM TCP [UNBOUNDED] WHERE TCP.dest_host = 2", dec)
    stats = {"rate.TCP": 500.0, "sel.TCP": 0.0}
    for plan in enumerate_plans(q):
        cost = OM(dec).cost(plan, stats)
        assert not np.isnan(cost.memory) and not np.isnan(Utility()(cost))


def test_an_aggregate_over_an_empty_window_is_costed_not_infinite(dec):
    # Read literally, 1 / (C_Ω · λ · W) is ∞ at λ = 0: every plan of an aggregate query
    # cost ∞ in a round without tuples, and the replay dropped those rounds from the score.
    q = parse_query("SELECT TCP.src_host, COUNT(*) FROM TCP WHERE TCP.dest_host = 2 "
                    "GROUP BY TCP.src_host WINDOW [1]", dec)
    for stats in ({"rate.TCP": 0.0, "sel.TCP": 0.5}, {"rate.TCP": 500.0, "sel.TCP": 0.0}):
        for plan in enumerate_plans(q):
            cost = OM(dec).cost(plan, stats)
            assert float(cost.rate) == 0.0 and np.isfinite(cost.memory), (plan.id, stats)
            assert np.isfinite(Utility()(cost))
    # Elsewhere the formula is untouched: λ = 500, W = 1 s, sel 0.5, tpr_Ω = 100,000.
    cost = OM(dec).cost(enumerate_plans(q)[0], {"rate.TCP": 500.0, "sel.TCP": 0.5})
    assert float(cost.rate) == pytest.approx(dec.operators.rate("aggregate") / 250.0)
