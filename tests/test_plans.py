"""Tests for plans and their enumeration (optimizer/plans/: plan.py, builder.py,
stream_orders.py; optimizer/rules/: enumerate.py, left_deep.py, join_order_search.py)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cqopt.catalog import Catalog, load_catalog
from cqopt.optimizer.plans.builder import build_plan
from cqopt.optimizer.plans.nodes import CONTRACT_DEFAULTS, node_attributes
from cqopt.optimizer.plans.plan import KINDS, Plan
from cqopt.optimizer.plans.stream_orders import stream_orders
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans
from cqopt.optimizer.rules.join_order_search import intermediate_size_cost
from cqopt.optimizer.rules.left_deep import join_orders

ROOT = Path(__file__).resolve().parent.parent
Q1 = "SELECT TCP.src_host, TCP.dest_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]"
Q2 = ("SELECT * FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
      "AND UDP.dest_host = SF.dest_host WINDOW [1]")
COLUMNS = ["k", "a", "b", "c", "d", "e", "f", "g", "h"]


def stream_catalog(n: int) -> Catalog:
    """Streams S1..Sn, each with int columns k, a..h and a rate range growing with i."""
    return Catalog.from_dict({"streams": {
        f"S{i}": {"rate": [10 * i, 100 * i], "columns": {c: "int" for c in COLUMNS}}
        for i in range(1, n + 1)}})


def query_over(n: int, edges: list[tuple[int, int]], select: str = "*",
               where: list[str] | None = None, group_by: str = ""):
    """A query over S1..Sn with one equi-join per edge, on columns no other edge uses."""
    conjuncts = [f"S{i}.{COLUMNS[j]} = S{j}.{COLUMNS[i]}" for i, j in edges] + (where or [])
    sql = f"SELECT {select} FROM " + ", ".join(f"S{i}" for i in range(1, n + 1))
    if conjuncts:
        sql += " WHERE " + " AND ".join(conjuncts)
    if group_by:
        sql += f" GROUP BY {group_by}"
    return parse_query(sql + " WINDOW [1]", stream_catalog(n))


def chain(n):
    return [(i, i + 1) for i in range(1, n)]


def star(n):
    return [(1, i) for i in range(2, n + 1)]


def clique(n):
    return list(itertools.combinations(range(1, n + 1), 2))


def brute_force_orders(n: int, edges: list[tuple[int, int]]) -> set:
    """Left-deep orders with the fewest Cartesian steps, first pair unordered."""
    adjacent = {frozenset(e) for e in edges}
    names = [f"S{i}" for i in range(1, n + 1)]

    def cartesian(perm):
        return sum(not any(frozenset((int(perm[i][1:]), int(p[1:]))) in adjacent
                           for p in perm[:i]) for i in range(1, len(perm)))

    perms = list(itertools.permutations(names))
    steps = {p: cartesian(p) for p in perms}
    fewest = min(steps.values())
    return {(frozenset(p[:2]), p[2:]) if n > 1 else p for p in perms if steps[p] == fewest}


def canonical(order):
    return (frozenset(order[:2]), tuple(order[2:])) if len(order) > 1 else tuple(order)


# -- counts --------------------------------------------------------------------
@pytest.mark.parametrize("shape", [chain, star, clique])
@pytest.mark.parametrize("n", range(1, 7))
def test_counts_match_brute_force(shape, n):
    edges = shape(n)
    plans = enumerate_plans(query_over(n, edges))
    expected = brute_force_orders(n, edges)
    assert len(plans) == len(expected)
    assert {canonical(p.join_order) for p in plans} == expected
    assert not any(p.cartesian for p in plans)
    assert len({p.id for p in plans}) == len(plans)


def test_known_counts():
    # closed forms, a second opinion on the brute force: n!/2, (n-1)!, and for a
    # chain S1-S2-S3-S4 the orders 12.3.4, 23.1.4, 23.4.1, 34.2.1
    assert len(enumerate_plans(query_over(6, clique(6)))) == 720 // 2
    assert len(enumerate_plans(query_over(6, star(6)))) == 5 * 4 * 3 * 2
    assert len(enumerate_plans(query_over(4, chain(4)))) == 4  # 12, 23, 34 + 2 from 23


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 5).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.sampled_from(clique(n)), unique=True))))
def test_random_join_graphs(case):
    n, edges = case
    plans = enumerate_plans(query_over(n, edges))
    expected = brute_force_orders(n, edges)
    assert {canonical(p.join_order) for p in plans} == expected
    assert len(plans) == len(expected)
    connected = nx.is_connected(nx.Graph(edges)) if len(set(itertools.chain(*edges))) == n \
        else False
    assert all(p.cartesian != connected for p in plans)


def test_om_paper_queries():
    cat = load_catalog(ROOT / "examples/dec-pkt.toml")
    q1 = enumerate_plans(parse_query(Q1, cat))
    assert [p.id for p in q1] == ["TCP[σπ]", "TCP[πσ]"]
    q2 = enumerate_plans(parse_query(Q2, cat))
    assert [p.id for p in q2] == ["TCP⋈UDP⋈SF", "TCP⋈SF⋈UDP", "UDP⋈SF⋈TCP"]
    # SELECT *: no projection anywhere, the plans differ only in join order
    assert all(p.node(k).kind in ("source", "join") for p in q2 for k in p.operators())


def test_sigma_pi_variants_multiply_join_orders():
    q = query_over(3, chain(3), select="S1.k, S3.k",
                   where=["S1.a > 3", "S2.f = 1", "S3.e IN (1, 2)"])
    # S1 and S3 need k plus join columns (a strict subset), also with the selection's
    # column; S2's selection reads f, which is not otherwise needed
    assert [stream_orders(q, s) for s in q.stream_names] == [("σπ", "πσ")] * 3
    plans = enumerate_plans(q)
    assert len(plans) == len(join_orders(q)) * 8
    assert len({p.id for p in plans}) == len(plans)
    assert "S1[σπ]⋈S2[πσ]⋈S3[σπ]" in {p.id for p in plans}


def test_projection_only_when_strict_subset():
    cat = stream_catalog(1)
    # every column needed above: no projection at all
    q = parse_query("SELECT * FROM S1 WHERE S1.a = 1 WINDOW [1]", cat)
    assert stream_orders(q, "S1") == ("σ",)
    # the selection reads the only column not needed above: π below σ would keep all
    q = parse_query("SELECT S1.k, S1.b, S1.c, S1.d, S1.e, S1.f, S1.g, S1.h FROM S1 "
                    "WHERE S1.a = 1 WINDOW [1]", cat)
    assert stream_orders(q, "S1") == ("σπ",)
    assert [p.id for p in enumerate_plans(q)] == ["S1[σπ]"]
    q = parse_query("SELECT S1.k FROM S1 WINDOW [1]", cat)
    assert stream_orders(q, "S1") == ("π",)
    assert enumerate_plans(q)[0].operators() == ("src:S1", "proj:S1")


# -- ids -------------------------------------------------------------------------
ID_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from tests.test_plans import id_workload
print(json.dumps(id_workload()))
"""


def id_workload() -> list[list[str]]:
    """The ids of the candidates of several queries (run in subprocesses too)."""
    cat = load_catalog(ROOT / "examples/dec-pkt.toml")
    queries = [parse_query(Q1, cat), parse_query(Q2, cat),
               query_over(4, chain(4), select="S1.k, S4.k", where=["S2.b > 1", "S4.a < 3"]),
               query_over(5, clique(5) [:6], select="COUNT(*)"),
               query_over(8, chain(8) + [(1, 8)], select="S1.k", where=["S3.k = 1"])]
    return [[p.id for p in enumerate_plans(q)] for q in queries]


def test_ids_stable_across_processes_and_hash_seeds():
    here = id_workload()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", ID_SCRIPT.format(root=str(ROOT))],
                             env=env, capture_output=True, text=True, check=True, cwd=ROOT)
        assert json.loads(out.stdout) == here


def test_ids_are_structural():
    q = query_over(4, star(4), select="S1.k, S2.k", where=["S1.k > 1", "S2.k < 5"])
    for plan in enumerate_plans(q):
        again = build_plan(q, plan.join_order,
                           {s: _stream_order(plan, s) for s in plan.join_order})
        assert again.id == plan.id
        assert again.explain() == plan.explain()


def _stream_order(plan: Plan, stream: str) -> str:
    ops = [plan.node(k).kind for k in plan.operators()
           if getattr(plan.node(k), "stream", None) == stream]
    return "".join({"selection": "σ", "projection": "π"}[k] for k in ops if k != "source")


# -- Cartesian products ------------------------------------------------------------
def test_disconnected_query_is_cartesian():
    cat = stream_catalog(3)
    plans = enumerate_plans(parse_query("SELECT S1.k, S2.k FROM S1, S2 WINDOW [1]", cat))
    assert [p.id for p in plans] == ["S1×S2"]
    assert plans[0].cartesian and plans[0].node("join:1").selectivity == ()
    assert plans[0].node("join:1").rate_class == "equi-join"
    plans = enumerate_plans(parse_query(
        "SELECT * FROM S1, S2, S3 WHERE S1.a = S2.a WINDOW [1]", cat))
    assert sorted(p.id for p in plans) == ["S1×S3⋈S2", "S1⋈S2×S3", "S2×S3⋈S1"]
    assert all(p.cartesian for p in plans)


def test_theta_over_three_streams_links_the_last_one():
    cat = stream_catalog(3)
    q = parse_query("SELECT * FROM S1, S2, S3 WHERE S1.a = S2.a "
                    "AND (S1.b = S3.b OR S2.c < S3.c) WINDOW [1]", cat)
    plans = enumerate_plans(q)
    assert [p.id for p in plans] == ["S1⋈S2⋈S3"]
    top = plans[0].node("join:2")
    assert top.selectivity == ("jsel.S1.S2.S3",)


def test_redundant_predicates_counted_once():
    cat = stream_catalog(3)
    q = parse_query("SELECT * FROM S1, S2, S3 WHERE S1.k = S2.k AND S2.k = S3.k "
                    "AND S1.a = S3.a AND S1.b < S3.b WINDOW [1]", cat)
    plans = {p.id: p for p in enumerate_plans(q)}
    top = plans["S1⋈S2⋈S3"].node("join:2")
    # S1.k = S3.k (implied) and S2.k = S3.k are one class; S1.a = S3.a another,
    # with the same statistic; the theta too: jsel.S1.S3 once, jsel.S2.S3 for the class
    assert len(top.predicate) == 4
    assert top.selectivity == ("jsel.S1.S3", "jsel.S2.S3")
    q = parse_query("SELECT * FROM S1, S2, S3 WHERE S1.k = S2.k AND S2.k = S3.k WINDOW [1]",
                    cat)
    top = enumerate_plans(q)[0].node("join:2")
    assert [str(p) for p in top.predicate] == ["S1.k = S3.k", "S2.k = S3.k"]
    assert top.selectivity == ("jsel.S2.S3",)  # the written one, not the implied


# -- local search ------------------------------------------------------------------
@pytest.fixture
def plans_built(monkeypatch):
    """How many (partial or full) plans the enumeration builds: its work, counted instead of
    timed (scripts/bench_enumerate.py times it)."""
    from cqopt.optimizer.plans.builder import PlanBuilder

    built = Counter()
    shape = PlanBuilder.build_shape

    def counted(self, *args, **kwargs):
        built["plans"] += 1
        return shape(self, *args, **kwargs)

    monkeypatch.setattr(PlanBuilder, "build_shape", counted)
    return built


def test_local_search_eight_streams_is_fast_and_deterministic(plans_built):
    q = query_over(8, chain(8) + [(2, 6), (3, 8)], select="S1.k, S8.k",
                   where=["S2.k > 3", "S5.k = 1"])
    plans = enumerate_plans(q, catalog=stream_catalog(8))
    # 8! orders times 4 σ/π combinations are 161,280 plans: the search builds under 1%
    assert 0 < plans_built["plans"] < 1613
    assert plans and len({p.join_order for p in plans}) <= 3
    assert len(plans) == len({p.join_order for p in plans}) * 4  # S2, S5 have σπ and πσ
    assert not any(p.cartesian for p in plans)
    assert all(sorted(p.join_order) == sorted(q.stream_names) for p in plans)
    assert [p.id for p in enumerate_plans(q, catalog=stream_catalog(8))] == \
        [p.id for p in plans]
    # the stand-in prefers small streams (S1 has the lowest rates) early
    cost = intermediate_size_cost(stream_catalog(8))
    costs = [cost(p) for p in plans[::4]]
    assert costs == sorted(costs)


def test_plan_budget_bounds_orders_times_combinations(plans_built):
    # A clique of 6 (a chain on one column, closed transitively) with σ and π on every
    # stream: 360 orders × 2^6 σ/π combinations would be 23,040 plans (seconds to build)
    q = query_over(6, [], select="S1.k",
                   where=[f"S{i}.a = S{i + 1}.a" for i in range(1, 6)]
                   + [f"S{i}.b = 1" for i in range(1, 7)])
    assert len(join_orders(q)) == 360
    assert all(stream_orders(q, s) == ("σπ", "πσ") for s in q.stream_names)
    plans = enumerate_plans(q, catalog=stream_catalog(6))
    assert 0 < plans_built["plans"] <= 4096  # never the 23,040, not even to throw away
    assert 0 < len(plans) <= 4096
    orders = {p.join_order for p in plans}
    assert len(plans) == len(orders) * 2 ** 6  # every σ/π combination of each kept order
    for s in q.stream_names:
        assert {_stream_order(p, s) for p in plans} == {"σπ", "πσ"}
    # a smaller budget keeps fewer orders, never none
    assert len(enumerate_plans(q, max_plans=100)) == 64
    assert len(enumerate_plans(query_over(3, chain(3), select="S1.k", where=["S2.b = 1"]),
                               max_plans=1)) >= 1


def test_local_search_follows_the_cost_function():
    n = 8
    q = query_over(n, clique(n))
    target = ("S2", "S7", "S1", "S5", "S8", "S3", "S6", "S4")
    rank = {s: i for i, s in enumerate(target)}

    def inversions(plan: Plan) -> float:  # distance from the target order
        order = plan.join_order
        return sum(rank[a] > rank[b] for a, b in itertools.combinations(order, 2)) \
            + 10 * sum(abs(rank[s] - i) for i, s in enumerate(order))

    plans = enumerate_plans(q, cost=inversions, keep=2)
    assert plans[0].join_order == target
    assert len(plans) == 2


# -- structure ---------------------------------------------------------------------
STRUCTURE_QUERIES = [
    Q1, Q2,
    "SELECT TCP.src_host, COUNT(*) AS n, AVG(UDP.bytes) FROM TCP, UDP "
    "WHERE TCP.src_host = UDP.dest_host AND TCP.bytes > 10 GROUP BY TCP.src_host "
    "HAVING SUM(UDP.bytes) > 3 WINDOW [1]",
    "SELECT COUNT(*) FROM TCP WHERE TCP.bytes BETWEEN 10 AND 20 WINDOW [1]",
    "SELECT MAX(TCP.bytes) FROM TCP [ROWS 10], UDP [RANGE 5 SECONDS] "
    "WHERE TCP.src_port < UDP.src_port AND UDP.bytes IN (1, 2)",
    "SELECT UDP.ts, SF.ts, SF.ts AS again FROM TCP, UDP, SF WHERE TCP.src_host = UDP.dest_host "
    "AND SF.src_port = TCP.dest_port AND TCP.src_port < TCP.dest_port WINDOW [2]",
    "SELECT TCP.bytes FROM TCP, SF WHERE SF.bytes > 100 WINDOW [1]",
]


def structure_cases():
    cat = load_catalog(ROOT / "examples/dec-pkt.toml")
    out = [(sql, parse_query(sql, cat)) for sql in STRUCTURE_QUERIES]
    out.append(("chain-6", query_over(6, chain(6), select="S1.k, SUM(S6.f)",
                                      where=["S3.k > 2"], group_by="S1.k")))
    return out


@pytest.mark.parametrize("name,query", structure_cases(), ids=lambda x: str(x)[:30])
def test_plan_structure(name, query):
    plans = enumerate_plans(query)
    assert plans and len({p.id for p in plans}) == len(plans)
    for plan in plans:
        check_structure(plan, query)
        json.dumps(plan.to_dict())  # serialisable


def check_structure(plan: Plan, query) -> None:
    g = plan.graph
    assert nx.is_directed_acyclic_graph(g)
    assert [n for n in g if g.out_degree(n) == 0] == [plan.root]
    ops = plan.operators()
    assert sorted(ops) == sorted(g.nodes) and len(set(ops)) == len(ops)
    assert plan.join_order == plan.node(plan.root).streams
    assert sorted(plan.join_order) == sorted(query.stream_names)
    widths = {(s.name, c.name): c.width for s in query.streams for c in s.columns}
    seen = set()
    for key in ops:
        node = node_attributes(plan.node(key))  # the contract, as attributes
        assert {"kind", *CONTRACT_DEFAULTS} <= set(node), key
        assert node["kind"] in KINDS
        assert all(i in seen for i in node["inputs"])  # inputs come first
        seen.add(key)
        assert set(g.predecessors(key)) == set(node["inputs"])
        assert node["in_widths"] == tuple(plan.node(i).out_width for i in node["inputs"])
        inputs = [node_attributes(plan.node(i)) for i in node["inputs"]]
        below = set().union(*(i["emits"] for i in inputs)) if inputs else set()
        kind = node["kind"]
        if kind == "source":
            s = query.stream(node["stream"])
            assert node["out_width"] == s.width and node["window"] == s.window
            assert node["rate_class"] is None and node["selectivity"] == () and not inputs
        else:
            assert node["window"] is None
        if kind == "selection":
            sel = node["predicate"]
            assert node["selectivity"] == (f"sel.{node['stream']}",)
            assert node["rate_class"] == sel.rate_class
            assert node["out_width"] == node["in_widths"][0]
            assert {(sel.stream, c) for c in sel.columns_used} <= below
        if kind == "projection":
            assert node["rate_class"] == "projection" and node["selectivity"] == ()
            assert set(node["columns"]) <= below | {c for c in node["columns"] if c[0] is None}
            if node["stream"] is not None:
                stream = node["stream"]
                kept = {c for _, c in node["columns"]}
                assert set(query.required_columns(stream)) <= kept
                assert kept < {c.name for c in query.stream(stream).columns}
                assert node["out_width"] == sum(widths[c] for c in node["columns"])
                consumers = list(g.successors(key))
                if consumers and plan.node(consumers[0]).kind == "selection":
                    assert set(query.selections[stream].columns_used) <= kept
            else:
                assert key == plan.root and node["out_width"] == query.output_width
        if kind == "join":
            assert node["rate_class"] == "equi-join" and len(inputs) == 2
            assert node["out_width"] == sum(node["in_widths"])
            assert node["streams"] == inputs[0]["streams"] + inputs[1]["streams"]
            assert node["cartesian"] == (not node["predicate"])
            for p in node["predicate"]:
                assert set(p.columns) <= below
            assert set(node["selectivity"]) <= {p.statistic for p in node["predicate"]}
            assert bool(node["selectivity"]) == bool(node["predicate"])
        if kind == "aggregate":
            assert key in (plan.root, plan.node(plan.root).inputs[0])
            assert node["aggregates"] == query.aggregates and node["having"] is query.having
            assert set(query.group_by) <= below
            assert {a.argument for a in query.aggregates if a.argument} <= below
    assert Counter(plan.node(plan.root).emits) == Counter(
        (None, f"{c.aggregate}({'.'.join(c.source) if c.source else '*'})")
        if c.aggregate else c.source for c in query.projection)
    assert query.is_aggregate == any(plan.node(k).kind == "aggregate" for k in ops)
