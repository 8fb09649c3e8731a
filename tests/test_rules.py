"""The enumeration as a list of rules (optimizer/rules/: enumerate.py, one module per rule,
contract.py): ablations, a rule added from outside, and the contract checked after each rule."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, fields, replace
from typing import ClassVar

import networkx as nx
import pytest

from cqopt.catalog import Catalog
from cqopt.cli.main import main
from cqopt.errors import CqoptError
from cqopt.optimizer.plans.builder import build_plan, shape_of
from cqopt.optimizer.plans.nodes import PlanNode
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.context import RuleContext
from cqopt.optimizer.rules.contract import contract_violation
from cqopt.optimizer.rules.enumerate import (
    HEURISTICS,
    PlanContractError,
    enumerate_plans,
    rule_names,
    rules_without,
)
from cqopt.optimizer.rules.left_deep import join_orders

HOST = {"rate": [10, 100], "columns": {"k": "int", "a": "int", "b": "int", "c": "int"}}
CATALOG = Catalog.from_dict({"streams": {s: HOST for s in ("A", "B", "C", "D")}})
# σ and π on every stream, a chain of joins, an aggregate with HAVING
SQL = ("SELECT A.a, COUNT(*) FROM A, B, C WHERE A.k = B.k AND B.c = C.c AND A.b > 1 "
       "AND A.b < 9 AND B.a = 2 AND C.b IN (1, 2) GROUP BY A.a HAVING COUNT(*) > 1 WINDOW [1]")


@pytest.fixture(scope="module")
def query():
    return parse_query(SQL, CATALOG)


def _below(plan: Plan, key: str) -> set[str]:
    return {plan.node(k).stream for k in nx.ancestors(plan.graph, key)
            if plan.node(k).kind == "source"}


def test_all_rules_are_the_default_and_run_in_the_listed_order(query):
    builtin = ("group_selections", "aggregate_last", "pushdown", "join_orders",
               "join_strategies")
    assert tuple(n for n in rule_names() if n in builtin) == builtin  # in this order
    assert [p.to_dict() for p in enumerate_plans(query, rules=HEURISTICS)] == \
        [p.to_dict() for p in enumerate_plans(query)]


def test_without_pushdown_gives_the_unpushed_plans_only(query):
    pushed = enumerate_plans(query)
    unpushed = enumerate_plans(query, rules=rules_without(["pushdown"]))
    # One plan per join order: no σ/π choices left
    assert [p.join_order for p in unpushed] == join_orders(query)
    assert len(pushed) > len(unpushed)
    for plan in unpushed:
        kinds = [plan.node(k).kind for k in plan.operators()]
        assert kinds.count("selection") == 3
        for key in plan.operators():
            node = plan.node(key)
            if node.kind == "selection":  # above every join, reading all three streams
                assert node.stream is None and _below(plan, key) == {"A", "B", "C"}
            if node.kind == "projection":  # only the query's own, on top
                assert key == "proj:out"
    # ...and every plan of the full run pushes every selection down to its stream
    for plan in pushed:
        for key in plan.operators():
            if plan.node(key).kind == "selection":
                assert _below(plan, key) == {plan.node(key).stream}


def test_without_group_selections_applies_one_filter_per_conjunct(query):
    (plan, *_) = enumerate_plans(query, rules=rules_without(["group_selections"]))
    a_filters = [k for k in plan.operators() if k.startswith("sel:A.")]
    assert [plan.node(k).predicate.predicate_sql for k in a_filters] == ["A.b > 1", "A.b < 9"]
    # The stream's selectivity is counted once, on the last filter of the chain
    assert [plan.node(k).selectivity for k in a_filters] == [(), ("sel.A",)]
    assert plan.id.startswith("A[σσπ]")


def test_without_join_orders_keeps_the_from_order(query):
    plans = enumerate_plans(query, rules=rules_without(["join_orders"]))
    assert {p.join_order for p in plans} == {("A", "B", "C")}


def test_without_aggregate_last_is_refused_as_incomplete(query):
    with pytest.raises(CqoptError, match="keep aggregate_last"):
        enumerate_plans(query, rules=rules_without(["aggregate_last"]))


def test_local_search_plans_are_built_like_the_earlier_rules_left_them(query):
    plans = enumerate_plans(query, rules=rules_without(["pushdown"]), max_exhaustive=2,
                            catalog=CATALOG, keep=2)
    assert len(plans) == 2
    assert all(shape_of(p).orders == {"A": "", "B": "", "C": ""} for p in plans)


QUERIES = [
    SQL,
    "SELECT * FROM A WHERE A.a = 1 AND (A.b > 2 AND A.b < 5) WINDOW [1]",
    "SELECT A.a, B.b FROM A, B, C, D WHERE A.k = B.k AND B.k = C.k AND D.a IN (1, 2) "
    "AND A.c < D.c WINDOW [1]",
    "SELECT SUM(B.c) FROM A, B WHERE A.b = 3 WINDOW [2]",  # a Cartesian product
]


@pytest.mark.parametrize("sql", QUERIES)
@pytest.mark.parametrize("left_out", [c for n in range(4) for c in itertools.combinations(
    ("group_selections", "pushdown", "join_orders"), n)])
def test_every_ablation_keeps_the_contract(sql, left_out):
    query = parse_query(sql, CATALOG)
    full = {p.id for p in enumerate_plans(query)}
    plans = enumerate_plans(query, rules=rules_without(left_out))  # checked after each rule
    if "join_orders" in left_out:
        assert {p.join_order for p in plans} == {query.stream_names}
    if not left_out:
        assert {p.id for p in plans} == full
    for plan in plans:
        nodes = [plan.node(k) for k in plan.operators()]
        selections = [n for n in nodes if n.kind == "selection"]
        if "group_selections" not in left_out:
            assert len(selections) == len(query.selections)
        if "pushdown" in left_out:
            assert all(n.stream is None for n in selections)
            assert not any(n.kind == "projection" and n.stream for n in nodes)


def test_unknown_rule_names_are_refused_with_a_suggestion():
    with pytest.raises(CqoptError, match=r"--without join_order: no such rule .*"
                                         r"did you mean 'join_orders'\?"):
        rules_without(["pushdown", "join_order"])


# -- a rule added from outside -------------------------------------------------------
def select_before_project(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """A toy rule: keep the plans that select before they project on every stream."""
    return [p for p in plans if all(order != "πσ" for order in shape_of(p).orders.values())]


def test_a_rule_added_to_the_list_is_run_by_the_driver(query):
    full = enumerate_plans(query)
    assert any("[πσ]" in p.id for p in full)
    rules = (*HEURISTICS, select_before_project)
    plans = enumerate_plans(query, rules=rules)
    assert [p.id for p in plans] == [p.id for p in full if "[πσ]" not in p.id]
    assert "select_before_project" in rule_names(rules)
    assert rules_without(["select_before_project"], rules) == HEURISTICS


def apply_twice(plans: list[Plan], context: RuleContext) -> list[Plan]:
    """A broken toy rule: applies the first plan's selection on A a second time, on top."""
    graph = plans[0].graph.copy()
    root, selection = plans[0].root, graph.nodes["sel:A"]["op"]
    graph.add_node("sel:A:again", op=replace(selection, inputs=(root,)))
    graph.add_edge(root, "sel:A:again")
    return [Plan(graph, "sel:A:again"), *plans[1:]]


def test_a_rule_that_breaks_the_plan_contract_is_named(query):
    rules = (HEURISTICS[0], apply_twice, *HEURISTICS[1:])
    with pytest.raises(PlanContractError, match=r"^rule apply_twice broke the plan contract: "
                                                r"plan .*: it applies the selection A: A.b > 1"):
        enumerate_plans(query, rules=rules)


# -- the contract ------------------------------------------------------------------------
def _plan(graph: nx.DiGraph, root: str) -> Plan:
    plan = Plan.__new__(Plan)  # no id: a broken graph may have none
    plan.graph, plan.root, plan.id = graph, root, "broken"
    return plan


@dataclass(frozen=True, kw_only=True)
class WindowNode(PlanNode):
    """A kind the contract does not know."""

    kind: ClassVar[str] = "window"


def node_fields(node: PlanNode) -> dict:
    """The fields every operator has (PlanNode's), of ``node``."""
    return {f.name: getattr(node, f.name) for f in fields(PlanNode)}


def _change(graph: nx.DiGraph, key: str, **changes) -> None:
    graph.nodes[key]["op"] = replace(graph.nodes[key]["op"], **changes)


@pytest.mark.parametrize("change, message", [
    (lambda g: g.add_edge("agg", "src:A"), "node src:A's inputs|reached twice|edges"),
    (lambda g: (_change(g, "join:2", inputs=("join:1", "src:A")),
                g.add_edge("src:A", "join:2")), "reached twice"),
    (lambda g: _change(g, "join:2", predicate=()), "never applies the join predicate"),
    (lambda g: g.nodes["sel:B"].pop("op"), "node sel:B holds no operator"),
    (lambda g: g.nodes["agg"].update(op=WindowNode(**node_fields(g.nodes["agg"]["op"]))),
     "unknown kind 'window'"),
    (lambda g: g.add_node("src:D", op=g.nodes["src:C"]["op"]), "not every node reaches the root"),
])
def test_the_contract_catches_each_kind_of_break(query, change, message):
    plan = build_plan(query, ("A", "B", "C"))
    assert contract_violation([plan], query) is None
    graph = plan.graph.copy()
    change(graph)
    broken = contract_violation([_plan(graph, plan.root)], query)
    assert broken is not None and any(m in broken for m in message.split("|")), broken


def test_the_contract_wants_the_aggregate_at_the_top(query):
    plan = build_plan(query, ("A", "B", "C"))
    graph = plan.graph.copy()
    # a stream's projection above the final one: the aggregate is no longer last
    assert plan.root == "agg"  # it emits the output columns: no final projection
    graph.add_node("proj:top", op=replace(graph.nodes["proj:A"]["op"], inputs=("agg",)))
    graph.add_edge("agg", "proj:top")
    assert "other than the final projection sit above agg" in \
        contract_violation([_plan(graph, "proj:top")], query)


def test_the_contract_wants_distinct_ids_and_some_plan(query):
    plan = build_plan(query, ("A", "B", "C"))
    assert contract_violation([], query) == "no plan is left"
    assert "given twice" in contract_violation([plan, plan], query)


# -- the command line ----------------------------------------------------------------
def test_explain_without_pushdown(dec_toml, capsys):
    sql = ("SELECT TCP.src_host FROM TCP, UDP WHERE TCP.src_host = UDP.dest_host AND "
           "TCP.bytes > 100 WINDOW [1]")
    assert main(["explain", "--catalog", dec_toml, "--sql", sql, "--json"]) == 0
    full = json.loads(capsys.readouterr().out)
    assert main(["explain", "--catalog", dec_toml, "--sql", sql, "--json",
                 "--without", "pushdown", "--without", "group_selections"]) == 0
    ablated = json.loads(capsys.readouterr().out)
    assert ablated["rules"] == ["aggregate_last", "join_orders", "join_strategies"]
    assert len(full["plans"]) > len(ablated["plans"]) == 1
    tree = ablated["plans"][0]["tree"].splitlines()
    select = next(i for i, line in enumerate(tree) if "Select TCP.bytes > 100" in line)
    join = next(i for i, line in enumerate(tree) if "Join " in line)
    assert select < join  # the selection is printed above (applied after) the join


def test_explain_refuses_an_unknown_rule(dec_toml, capsys):
    assert main(["explain", "--catalog", dec_toml, "--sql", "SELECT * FROM TCP WINDOW [1]",
                 "--without", "pushdwn"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("cqopt: error: --without pushdwn: no such rule")
    assert "did you mean 'pushdown'?" in err and len(err.strip().splitlines()) == 1
