"""Costing at one point: the generated scalar path gives the grid path's floats exactly.

Every plan of the example workloads' queries, and of queries that reach the
other formulas (aggregates, groups, tuple and unbounded windows, a theta
join), is costed at points that include the edge values (no arrivals, a
selection passing nothing, everything passing): once interpreted on floats,
once through the generated code, and as one column of a grid. All three
must be the same doubles, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from cqopt.catalog import load_catalog
from cqopt.charts.workload import load_workload
from cqopt.costmodel import OM, PIPES, Engine, PointUtilities, Utility, plan_utilities
from cqopt.costmodel.base import ARRAYS, SCALARS, compile_point_cost
from cqopt.costmodel.point import compile_point_utilities
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

MORE = [
    "SELECT COUNT(*) FROM TCP [RANGE 10 SECONDS] WHERE TCP.dest_host = 2",
    "SELECT TCP.src_host, COUNT(*) FROM TCP [ROWS 100] GROUP BY TCP.src_host",
    "SELECT TCP.src_host FROM TCP [UNBOUNDED] WHERE TCP.dest_host > 3",
    "SELECT * FROM TCP [NOW], UDP [RANGE 2 SECONDS] WHERE TCP.src_host < UDP.dest_host",
    ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
     "AND UDP.dest_host = SF.dest_host AND TCP.dest_host = 2 WINDOW [1]"),
]


def _queries(examples):
    dec = load_catalog(examples / "dec-pkt.toml")
    epa = load_catalog(examples / "epa-http.toml")
    out = [(dec, q.sql) for q in load_workload(examples / "workload.toml").queries]
    out += [(epa, q.sql) for q in load_workload(examples / "epa-workload.toml").queries]
    return out + [(dec, sql) for sql in MORE]


def _points(query) -> list[dict[str, float]]:
    """Typical and edge values of every statistic of ``query``."""
    values = {"rate": [250.0, 0.0, 1e6, 3.7], "sel": [0.3, 0.0, 1.0, 1e-9],
              "jsel": [0.01, 0.0, 1.0, 0.5]}
    points = []
    for i in range(4):
        for shift in range(2):
            points.append({name: values[name.split(".")[0]][(i + shift * j) % 4]
                           for j, name in enumerate(query.statistics)})
    return points


def _bits(x) -> bytes:
    """The double's bits, every NaN alike."""
    x = np.float64(x)
    return b"nan" if np.isnan(x) else x.tobytes()


@pytest.mark.parametrize("model_class", [OM, PIPES])
def test_point_cost_is_the_grid_cost_bit_for_bit(examples, model_class):
    checked = 0
    for catalog, sql in _queries(examples):
        query = parse_query(sql, catalog)
        points = _points(query)
        grid = {name: np.array([p[name] for p in points]) for name in query.statistics}
        model = model_class(catalog)
        for plan in enumerate_plans(query, catalog=catalog):
            whole = model.cost(plan, grid)
            for i, point in enumerate(points):
                for _ in range(3):  # the first call interprets, later ones run generated code
                    one = model.cost(plan, point)
                    assert isinstance(one.rate, np.float64)
                    for field in ("rate", "memory", "cpu"):
                        expected = np.broadcast_to(getattr(whole, field), (len(points),))[i]
                        assert _bits(getattr(one, field)) == _bits(expected), \
                            (sql, plan.id, point, field)
                    for key, op in one.operators.items():
                        for field in ("rate", "memory", "cpu"):
                            expected = np.broadcast_to(getattr(whole.operators[key], field),
                                                       (len(points),))[i]
                            assert _bits(getattr(op, field)) == _bits(expected), \
                                (sql, plan.id, key, point, field)
                checked += 1
    assert checked > 100


@pytest.mark.parametrize("model_class", [OM, PIPES])
def test_plan_utilities_at_a_point_is_the_grid_column(examples, model_class):
    utility = Utility(0.4, 0.6, 1.0)
    for catalog, sql in _queries(examples):
        query = parse_query(sql, catalog)
        plans = enumerate_plans(query, catalog=catalog)
        points = _points(query)
        grid = {name: np.array([p[name] for p in points]) for name in query.statistics}
        model = model_class(catalog)
        whole = np.broadcast_to(plan_utilities(model, utility, plans, grid),
                                (len(plans), len(points)))
        for i, point in enumerate(points):
            for _ in range(2):
                at_point = plan_utilities(model, utility, plans, point)
                assert at_point.shape == (len(plans),)
                assert [_bits(x) for x in at_point] == [_bits(x) for x in whole[:, i]], sql


def test_generated_code_is_straight_line_python_from_the_one_definition(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    plan = enumerate_plans(parse_query(MORE[0], catalog))[0]
    model = PIPES(catalog)
    function = compile_point_cost(lambda stats, xp: model._cost(plan, stats, xp))
    assert "stats['rate.TCP']" in function.source and "np." not in function.source
    rate, memory, cpu, operators = function({"rate.TCP": 400.0, "sel.TCP": 0.2})
    interpreted = model._cost(plan, {"rate.TCP": 400.0, "sel.TCP": 0.2}, SCALARS)
    assert (rate, memory, cpu) == (interpreted.rate, interpreted.memory, interpreted.cpu)
    assert [key for key, *_ in operators] == list(interpreted.operators)


def test_a_missing_statistic_is_named_at_a_point_too(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    plan = enumerate_plans(parse_query(MORE[0], catalog))[0]
    model = OM(catalog)
    for _ in range(3):  # interpreted, then generated code
        with pytest.raises(Exception, match="needs statistic 'sel.TCP'"):
            model.cost(plan, {"rate.TCP": 1.0})


def test_scalar_namespace_mirrors_numpy_on_edge_values():
    values = [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, np.nan, 1e308, 5e-324]
    with np.errstate(all="ignore"):
        for a in values:
            for b in values:
                for op in ("divide", "maximum", "minimum"):
                    got = getattr(SCALARS, op)(a, b)
                    assert _bits(got) == _bits(getattr(ARRAYS, op)(np.float64(a),
                                                                    np.float64(b))), (op, a, b)
            for op in ("floor", "ceil", "isinf"):
                assert _bits(getattr(SCALARS, op)(a)) == _bits(getattr(ARRAYS, op)(a)), (op, a)
            assert _bits(SCALARS.clip(a, 0.0, 1.0)) == _bits(np.clip(a, 0.0, 1.0))
        for x in (-1.0, -0.5, 0.0, 1e-12, 3.0, 709.5, 800.0, -np.inf, np.nan):
            assert _bits(SCALARS.expm1(x)) == _bits(np.expm1(x))
            if x >= -1.0 or np.isnan(x):
                assert _bits(SCALARS.log1p(x)) == _bits(np.log1p(x))


@pytest.mark.parametrize("model_class", [OM, PIPES, Engine])
@pytest.mark.parametrize("utility", [Utility(0.4, 0.6), Utility(0.2, 0.5, 3.0),
                                     Utility(1.0, 0.0, zero_output="infinite")])
def test_one_function_for_all_plans_is_the_grid_column(examples, model_class, utility):
    """The plan set's generated utilities (shared terms computed once, unread ones dropped)
    are the grid kernel's doubles at every point, for every model and weighting."""
    for catalog, sql in _queries(examples):
        query = parse_query(sql, catalog)
        plans = enumerate_plans(query, catalog=catalog)
        points = _points(query)
        grid = {name: np.array([p[name] for p in points]) for name in query.statistics}
        model = model_class(catalog)
        whole = np.broadcast_to(plan_utilities(model, utility, plans, grid),
                                (len(plans), len(points)))
        at = PointUtilities(model, utility, plans)
        for i, point in enumerate(points):
            assert [_bits(x) for x in at(point)] == [_bits(x) for x in whole[:, i]], sql


def test_one_function_shares_terms_and_drops_what_no_utility_reads(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    plans = enumerate_plans(parse_query(MORE[4], catalog))
    model = OM(catalog)
    alone = sum(compile_point_cost(lambda s, xp, p=p: model._cost(p, s, xp)).source.count("\n")
                for p in plans)
    together = compile_point_utilities(model, Utility(0.4, 0.6), plans).source
    assert together.count("float(stats['rate.TCP'])") == 1
    assert together.count("\n") < alone  # fewer lines than the plans' own functions
    with_cpu = compile_point_utilities(model, Utility(0.4, 0.6, 1.0), plans).source
    assert with_cpu.count("\n") > together.count("\n")  # CPU terms only when weighed


def test_the_kernel_at_a_point_keeps_each_plan_sets_code(examples):
    catalog = load_catalog(examples / "dec-pkt.toml")
    plans = enumerate_plans(parse_query(MORE[4], catalog))
    model, utility = OM(catalog), Utility()
    point = {name: 0.3 for name in parse_query(MORE[4], catalog).statistics}
    first = plan_utilities(model, utility, plans, point)  # costed plan by plan
    for _ in range(3):
        assert plan_utilities(model, utility, plans, point).tolist() == first.tolist()
    generated = [e for e in model._point_utilities.values() if isinstance(e, PointUtilities)]
    assert len(generated) == 1 and generated[0].plans == tuple(plans)
    with pytest.raises(Exception, match="needs statistic"):
        plan_utilities(model, utility, plans, {"rate.TCP": 1.0})
