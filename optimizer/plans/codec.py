"""Plans as JSON data: what a chart set stores so that loading it never re-plans.

:func:`plan_to_data` turns a :class:`~cqopt.optimizer.plans.plan.Plan` into JSON-able
data and :func:`plan_from_data` turns it back into an equal plan (the same
id, nodes, edges and attributes), without parsing SQL or enumerating. A node
is stored as its attribute dict (:func:`~cqopt.optimizer.plans.nodes.node_attributes`:
``kind``, the contract's attributes, the kind's own), the form plans had
before their nodes were typed, so chart sets written then and now read the
same. Node attributes are plain values, tuples, dicts, the optimizer's frozen dataclasses
(windows, selections and their interval sets, join and theta predicates,
aggregates) and sqlglot expressions, which travel as sqlglot's own
serialisation (:mod:`sqlglot.serde`). Decoding builds only those: a class
name outside them, or an expression class outside ``sqlglot.expressions``,
is refused, so reading a plan never imports or calls anything else. Nothing
is pickled.

>>> from cqopt.catalog import Catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10],
...     "columns": {"a": "int", "b": "int"}}}})
>>> plan = enumerate_plans(parse_query("SELECT S.a FROM S WHERE S.b > 1 WINDOW [1]", cat))[0]
>>> copy = plan_from_data(json.loads(json.dumps(plan_to_data(plan))))
>>> copy.id == plan.id, copy.explain() == plan.explain()
(True, True)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import networkx as nx
from sqlglot import exp, serde

from cqopt.errors import CqoptError, parse_json
from cqopt.optimizer.plans.nodes import node_attributes, node_from_attributes
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.aggregates import Aggregate
from cqopt.optimizer.query.bind import Window
from cqopt.optimizer.query.intervals import Interval, IntervalSet
from cqopt.optimizer.query.join_closure import JoinPredicate, ThetaPredicate
from cqopt.optimizer.query.selections import Selection

PLAN_FORMAT = 1  # what plan_to_data writes; plan_from_data reads only this
_CLASSES = {cls.__name__: cls for cls in (Aggregate, Window, Selection, Interval, IntervalSet,
                                          JoinPredicate, ThetaPredicate)}
_EXPRESSIONS = "sqlglot.expressions."


class PlanCodecError(CqoptError):
    """A plan cannot be written as data, or stored plan data does not read back."""


def plan_to_data(plan: Plan) -> dict[str, Any]:
    """A plan as JSON-able data (see the module docstring).

    Raises
    ------
    PlanCodecError
        A node attribute holds a value the codec does not know.
    """
    return {"format": PLAN_FORMAT, "id": plan.id, "root": plan.root,
            "nodes": [[key, {name: _encode(value, f"{key}.{name}")
                             for name, value in node_attributes(op).items()}]
                      for key, op in plan.graph.nodes(data="op")],
            "edges": [list(edge) for edge in plan.graph.edges]}


def plan_from_data(data: Any, seen: dict[str, list] | None = None) -> Plan:
    """The plan of :func:`plan_to_data`'s data.

    ``seen`` (node key to the stored attributes and node already read) lets the
    plans of one query share the nodes they have in common: a node whose key
    and stored attributes equal one read before is that node (nodes are frozen).

    Raises
    ------
    PlanCodecError
        The data is not a plan of this format, or names a class outside the codec's.
    """
    try:
        if data.get("format") != PLAN_FORMAT:
            raise PlanCodecError(f"plan data of format {data.get('format')!r}; this cqopt "
                                 f"reads format {PLAN_FORMAT}")
        graph = nx.DiGraph()
        for key, attrs in data["nodes"]:
            graph.add_node(str(key), op=_node(str(key), attrs, seen))
        graph.add_edges_from((str(a), str(b)) for a, b in data["edges"])
        plan = Plan(graph, str(data["root"]))
    except PlanCodecError:
        raise
    except Exception as err:  # malformed data must not surface as a bare error
        raise PlanCodecError(f"plan data does not read back ({type(err).__name__}: "
                             f"{err})") from None
    if plan.id != data.get("id"):
        raise PlanCodecError(f"plan data reads back as plan {plan.id}, but was written as "
                             f"{data.get('id')}")
    return plan


def _node(key: str, attrs: dict[str, Any], seen: dict[str, list] | None) -> Any:
    """The node of stored attributes ``attrs``: one read before under ``key`` with equal
    attributes, or a new one."""
    earlier = seen.setdefault(key, []) if seen is not None else []
    for stored, node in earlier:
        if stored == attrs:
            return node
    node = node_from_attributes({name: value if type(value) in _PLAIN else _decode(value)
                                 for name, value in attrs.items()})
    earlier.append((attrs, node))
    return node


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):  # a JSON array is a tuple: plans hold no lists
        return [_encode(v, where) for v in value]
    if isinstance(value, dict):
        return {"dict": [[_encode(k, where), _encode(v, where)] for k, v in value.items()]}
    if isinstance(value, exp.Expression):
        return {"sql": serde.dump(value)}
    cls = type(value)
    if _CLASSES.get(cls.__name__) is cls:
        return {"class": cls.__name__,
                "fields": {f.name: _encode(getattr(value, f.name), where)
                           for f in dataclasses.fields(value)}}
    raise PlanCodecError(f"plan attribute {where} holds a {cls.__module__}.{cls.__name__}, "
                         "which plans cannot store")


_PLAIN = frozenset({str, int, float, bool, type(None)})  # what JSON gives that stays as it is
_LIST = {list}


def _decode(value: Any) -> Any:
    kind = type(value)
    if kind is list:
        types = set(map(type, value))
        if types <= _PLAIN:  # plain values (a column reference): a tuple as it is
            return tuple(value)
        if types == _LIST and _PLAIN.issuperset(map(type, itertools.chain(*value))):
            return tuple(map(tuple, value))  # lists of plain values (the columns a node emits)
        return tuple([v if type(v) in _PLAIN else _decode(v) for v in value])
    if kind is not dict:
        return value
    if "dict" in value:
        return {_decode(k): _decode(v) for k, v in value["dict"]}
    if "sql" in value:
        _check_classes(value["sql"])
        return serde.load(value["sql"])
    cls = _CLASSES.get(value.get("class"))
    if cls is None:
        raise PlanCodecError(f"plan data names the class {value.get('class')!r}, which "
                             "plans do not hold")
    return cls(**{name: _decode(v) for name, v in value["fields"].items()})


def _check_classes(payload: Any) -> None:
    """Refuse serde data naming any class but sqlglot's expressions, at any depth."""
    if isinstance(payload, list):
        for item in payload:
            _check_classes(item)
    elif isinstance(payload, dict):
        name = payload.get(serde.CLASS)
        if name is not None and not (isinstance(name, str) and _is_expression_class(name)):
            raise PlanCodecError(f"plan data names the class {name!r}, which is no sqlglot "
                                 "expression")
        for item in payload.values():
            _check_classes(item)


def _is_expression_class(name: str) -> bool:
    """Whether ``name`` is sqlglot's data-type marker or an Expression class in sqlglot."""
    if name == serde.DATA_TYPE:
        return True
    if not name.startswith(_EXPRESSIONS):
        return False
    cls = getattr(exp, name.rsplit(".", 1)[1], None)
    return isinstance(cls, type) and issubclass(cls, exp.Expression) \
        and cls.__module__ + "." + cls.__name__ == name


def plans_json(plans: list[Plan]) -> str:
    """A query's candidate plans as one JSON text."""
    return json.dumps([plan_to_data(p) for p in plans], ensure_ascii=False,
                      separators=(",", ":"))


def plans_from_json(text: str) -> list[Plan]:
    """The plans of :func:`plans_json`."""
    try:
        data = parse_json(text)
    except ValueError as err:
        raise PlanCodecError(f"stored plans are not JSON ({err})") from None
    if not isinstance(data, list):
        raise PlanCodecError("stored plans are not a list")
    seen: dict[str, list] = {}  # the plans share the nodes they have in common
    return [plan_from_data(d, seen) for d in data]
