"""Typed plan nodes: every consumer has a function for every kind, a kind it lacks is named,
and the stored form of a plan is the one chart sets have always held."""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import pytest

from cqopt.catalog import load_catalog
from cqopt.examples import example
from cqopt.optimizer.plans.codec import PlanCodecError, plan_from_data, plans_from_json, plans_json
from cqopt.optimizer.plans.nodes import (
    CONSUMERS,
    NODE_CLASSES,
    MissingKindError,
    PlanNode,
    handled_kinds,
    node_attributes,
    node_from_attributes,
)
from cqopt.optimizer.query.logical import parse_query
from cqopt.optimizer.rules.enumerate import enumerate_plans

# The modules holding a consumer of plan nodes; importing them registers it. The DataFrame
# builder imports pyspark only when it builds, so it registers without a JVM.
CONSUMER_MODULES = ("cqopt.optimizer.plans.plan", "cqopt.optimizer.plans.sql",
                    "cqopt.optimizer.rules.contract", "cqopt.costmodel.base", "cqopt.costmodel.om",
                    "cqopt.costmodel.pipes", "cqopt.costmodel.engine", "cqopt.costmodel.reference_executor",
                    "cqopt.spark.plan_frame")
EXPECTED = {"the plan id", "explain", "the SQL writer", "the plan contract",
            "the plan's statistics", "the OM model", "the PIPES model", "the engine model",
            "the reference executor", "the DataFrame builder"}
STORED = Path(__file__).parent / "data" / "plans_before_typed_nodes.json"
AGGREGATE_JOIN = ("SELECT TCP.src_host, COUNT(*) FROM TCP, UDP WHERE TCP.src_host = "
                  "UDP.dest_host AND TCP.bytes > 100 GROUP BY TCP.src_host "
                  "HAVING COUNT(*) > 2 WINDOW [1]")


@dataclass(frozen=True, kw_only=True)
class ShedderNode(PlanNode):
    """A kind no consumer knows: what adding a load shedder without its functions gives."""

    kind: ClassVar[str] = "shedder"
    stream: str
    keep: float


def _consumers() -> dict:
    for module in CONSUMER_MODULES:
        importlib.import_module(module)
    return CONSUMERS


def missing_functions(classes) -> list[str]:
    """``consumer: Kind`` for each consumer lacking its own function for a node class."""
    return [f"{name}: {cls.__name__}" for name, dispatch in sorted(_consumers().items())
            for cls in classes if cls not in handled_kinds(dispatch)]


def test_every_consumer_has_a_function_for_every_kind():
    assert EXPECTED <= set(_consumers())
    assert missing_functions(NODE_CLASSES) == []


def test_a_kind_without_its_functions_is_named_per_consumer():
    missing = missing_functions((*NODE_CLASSES, ShedderNode))
    assert len(missing) == len(_consumers())
    assert "the OM model: ShedderNode" in missing and "the SQL writer: ShedderNode" in missing
    node = ShedderNode(streams=("TCP",), stream="TCP", keep=0.5)
    with pytest.raises(MissingKindError, match="the PIPES model has no function for plan node "
                                               "kind 'shedder' \\(ShedderNode\\)"):
        _consumers()["the PIPES model"](node, None, {}, (), None)


def test_the_codec_knows_every_kind_and_refuses_others():
    cat = load_catalog(example("dec-pkt.toml"))
    plans = enumerate_plans(parse_query(AGGREGATE_JOIN, cat))
    seen = {type(p.node(k)) for p in plans for k in p.operators()}
    seen |= {type(p.node(k)) for p in enumerate_plans(parse_query(
        "SELECT TCP.src_host AS h FROM TCP WINDOW [1]", cat)) for k in p.operators()}
    assert seen == set(NODE_CLASSES)  # the queries above hold every kind
    for plan in plans:
        for key in plan.operators():
            assert node_from_attributes(node_attributes(plan.node(key))) == plan.node(key)
    with pytest.raises(ValueError, match="unknown plan node kind 'shedder'"):
        node_from_attributes({"kind": "shedder", "streams": ("TCP",)})
    with pytest.raises(ValueError, match="a join node has no attribute stream"):
        node_from_attributes({**node_attributes(plans[0].node("join:1")), "stream": "TCP"})
    data = plans_from_json(plans_json(plans))
    assert [p.id for p in data] == [p.id for p in plans]
    bad = plans_json(plans[:1]).replace('"kind":"join"', '"kind":"shedder"')
    with pytest.raises(PlanCodecError, match="unknown plan node kind 'shedder'"):
        plan_from_data(json.loads(bad)[0])


def test_plans_stored_before_nodes_were_typed_read_back_and_store_the_same():
    """Chart sets keep plan format 1: the attribute dicts of untyped nodes, byte for byte."""
    text = STORED.read_text(encoding="utf-8").strip()
    plans = plans_from_json(text)
    cat = load_catalog(example("dec-pkt.toml"))
    fresh = enumerate_plans(parse_query(AGGREGATE_JOIN, cat))
    assert [p.id for p in plans] == [p.id for p in fresh]
    assert [p.explain() for p in plans] == [p.explain() for p in fresh]
    assert plans_json(plans) == text == plans_json(fresh)
