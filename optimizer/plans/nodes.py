"""The operators of a plan: one frozen dataclass per kind.

A :class:`~cqopt.optimizer.plans.plan.Plan` is a networkx DiGraph whose nodes each
hold one of these under the attribute ``op`` (``plan.node(key)`` returns it).
Every operator carries the fields of the node contract the cost models read
(:class:`PlanNode`); each kind adds its own:

================ =================================================================
class            its own fields
================ =================================================================
SourceNode       ``stream``, ``window`` (the stream's :class:`~cqopt.optimizer.query.bind.Window`)
SelectionNode    ``stream``, ``predicate`` (the grouped
                 :class:`~cqopt.optimizer.query.selections.Selection`)
ProjectionNode   ``stream`` (None on the query's final projection), ``columns``
                 (the ``(stream, column)`` pairs kept), ``names`` (output text,
                 final projection only)
JoinNode         ``predicate`` (the join and theta predicates applied),
                 ``cartesian`` (it applies none), ``strategy`` (how the
                 engine runs it: :mod:`cqopt.optimizer.plans.strategies`)
AggregateNode    ``aggregates``, ``group_by``, ``having``
================ =================================================================

Whatever reads a plan is one function per kind, dispatched on the node's
class by :func:`functools.singledispatch` (the cost models, the SQL writer,
the DataFrame builder, the reference executor, ``explain``). Each such
consumer registers its functions in :data:`CONSUMERS`, so a kind added here
without a function in some consumer is named by ``tests/test_plan_nodes.py``
rather than found by a user; calling a consumer on a kind it lacks is a
:class:`MissingKindError` naming both. The codec
(:mod:`cqopt.optimizer.plans.codec`) reads a node's dataclass fields, so it
stores a kind once the kind is in :data:`NODE_CLASSES`; it writes a node as
the attribute dict plans were made of before their nodes were typed
(:func:`node_attributes`), so chart sets written before and after read alike.

>>> node = SourceNode(stream="S", streams=("S",), window=None, out_width=8,
...                   emits=(("S", "a"), ("S", "b")))
>>> node.kind, node.inputs, node.selectivity
('source', (), ())
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from cqopt.optimizer.plans.strategies import AUTO, STRATEGIES

if TYPE_CHECKING:
    from sqlglot import exp

    from cqopt.optimizer.query.aggregates import Aggregate
    from cqopt.optimizer.query.bind import Window
    from cqopt.optimizer.query.selections import Selection

ColumnRef = tuple[str | None, str]


@dataclass(frozen=True, kw_only=True)
class PlanNode:
    """What every operator has: the node contract of :mod:`cqopt.optimizer.plans.plan`.

    ``streams`` are the stream names at and below the node in join order,
    ``inputs`` its input node keys (left, right for a join), ``in_widths`` the
    bytes of one input tuple per input, ``out_width`` of one output tuple,
    ``emits`` the columns it outputs in order, ``rate_class`` its processing
    rate class and ``selectivity`` the statistic names whose product is its
    selectivity.
    """

    kind: ClassVar[str]
    streams: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    in_widths: tuple[int, ...] = ()
    out_width: int = 0
    emits: tuple[ColumnRef, ...] = ()
    rate_class: str | None = None
    selectivity: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class SourceNode(PlanNode):
    """A stream's window: where its tuples enter the plan."""

    kind: ClassVar[str] = "source"
    stream: str
    window: Window | None


@dataclass(frozen=True, kw_only=True)
class SelectionNode(PlanNode):
    """A stream's grouped selection (its one condition, ``predicate.predicate``)."""

    kind: ClassVar[str] = "selection"
    stream: str
    predicate: Selection


@dataclass(frozen=True, kw_only=True)
class ProjectionNode(PlanNode):
    """A stream's projection, or (``stream`` None) the query's final projection."""

    kind: ClassVar[str] = "projection"
    stream: str | None
    columns: tuple[ColumnRef, ...]
    names: tuple[str, ...] | None = None


@dataclass(frozen=True, kw_only=True)
class JoinNode(PlanNode):
    """One left-deep join step: the joined streams (left) with one more stream (right)."""

    kind: ClassVar[str] = "join"
    predicate: tuple[Any, ...]  # JoinPredicate and ThetaPredicate
    cartesian: bool = False
    strategy: str = AUTO  # one of strategies.STRATEGIES; AUTO: the engine's choice

    def __post_init__(self):
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown join strategy {self.strategy!r}; known: "
                             f"{', '.join(STRATEGIES)}")


@dataclass(frozen=True, kw_only=True)
class AggregateNode(PlanNode):
    """The query's aggregate, GROUP BY and HAVING, above every stream."""

    kind: ClassVar[str] = "aggregate"
    aggregates: tuple[Aggregate, ...]
    group_by: tuple[ColumnRef, ...]
    having: exp.Expression | None = None


NODE_CLASSES: tuple[type[PlanNode], ...] = (SourceNode, SelectionNode, ProjectionNode,
                                            JoinNode, AggregateNode)
KINDS = tuple(cls.kind for cls in NODE_CLASSES)
BY_KIND: dict[str, type[PlanNode]] = {cls.kind: cls for cls in NODE_CLASSES}

# Every consumer of plan nodes, by name: its singledispatch function. Filled as the
# consuming modules are imported (see consumer); tests/test_plan_nodes.py imports them all.
CONSUMERS: dict[str, Callable[..., Any]] = {}


class MissingKindError(TypeError):
    """A consumer of plan nodes was given a kind it has no function for."""


def consumer(name: str, registry: dict[str, Callable[..., Any]] | None = None
             ) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make ``function`` a per-kind consumer named ``name``: a singledispatch function on
    its first argument's class whose fallback names the consumer and the kind it lacks.
    It is listed in ``registry`` (default :data:`CONSUMERS`).

    >>> @consumer("doctest width", registry={})
    ... def width(node: PlanNode) -> int: ...
    >>> @width.register
    ... def _(node: SourceNode) -> int:
    ...     return node.out_width
    >>> width(SourceNode(stream="S", streams=("S",), window=None, out_width=8))
    8
    >>> try:
    ...     width(JoinNode(streams=("S", "T"), predicate=()))
    ... except MissingKindError as err:
    ...     print(err)
    doctest width has no function for plan node kind 'join' (JoinNode)
    """

    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        @functools.singledispatch
        @functools.wraps(function)
        def dispatch(node: Any, *args: Any, **kwargs: Any) -> Any:
            kind = getattr(node, "kind", None)
            raise MissingKindError(f"{name} has no function for plan node kind {kind!r} "
                                   f"({type(node).__name__})")

        (CONSUMERS if registry is None else registry)[name] = dispatch
        return dispatch

    return decorate


def handled_kinds(dispatch: Any) -> set[type[PlanNode]]:
    """The node classes ``dispatch`` (a :func:`consumer`) has its own function for."""
    return {cls for cls in dispatch.registry if cls is not object}


# -- nodes as attribute dicts: what explain's JSON shows and what chart sets store ------
# The contract's attributes in the order plans have always listed them, with the value a
# kind that lacks one shows (a source has no predicate, a join no stream).
CONTRACT_DEFAULTS: dict[str, Any] = {
    "streams": (), "inputs": (), "rate_class": None, "selectivity": (), "in_widths": (),
    "out_width": 0, "window": None, "stream": None, "predicate": None, "columns": None}


def node_attributes(node: PlanNode) -> dict[str, Any]:
    """``node`` as the attribute dict plans were made of before nodes were typed: ``kind``,
    every contract attribute (a kind's missing ones at their default), then the kind's own.

    >>> attrs = node_attributes(SourceNode(stream="S", streams=("S",), window=None))
    >>> attrs["kind"], attrs["predicate"], attrs["stream"]
    ('source', None, 'S')
    """
    attrs: dict[str, Any] = {"kind": node.kind}
    for name, default in CONTRACT_DEFAULTS.items():
        attrs[name] = getattr(node, name, default)
    # the kind's own, then emits and names last, in the order plans have always listed them;
    # a join's strategy only when it is not the engine's choice, so that such plans are
    # stored as they were before strategies were planned
    for field in dataclasses.fields(node):
        if field.name not in ("emits", "names") and not (field.name == "strategy"
                                                        and node.strategy == AUTO):
            attrs.setdefault(field.name, getattr(node, field.name))
    attrs["emits"] = node.emits
    if getattr(node, "names", None) is not None:  # the final projection's alone
        attrs["names"] = node.names
    return attrs


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def node_from_attributes(attrs: dict[str, Any]) -> PlanNode:
    """The node of :func:`node_attributes`' dict (or of a chart set written before nodes were
    typed, whose dicts are the same).

    Raises
    ------
    ValueError
        An unknown kind, or an attribute the kind does not have set to a value.

    Examples
    --------
    >>> node = JoinNode(streams=("A", "B"), inputs=("src:A", "src:B"), predicate=(),
    ...                 cartesian=True)
    >>> node_from_attributes(node_attributes(node)) == node
    True
    """
    cls = BY_KIND.get(attrs.get("kind"))
    if cls is None:
        raise ValueError(f"unknown plan node kind {attrs.get('kind')!r}; known: "
                         f"{', '.join(KINDS)}")
    names = _field_names(cls)
    fields, extra = {}, []
    for name, value in attrs.items():
        if name in names:
            fields[name] = value
        elif name != "kind" and not (name in CONTRACT_DEFAULTS
                                     and value == CONTRACT_DEFAULTS[name]):
            extra.append(name)
    if extra:
        raise ValueError(f"a {cls.kind} node has no attribute {', '.join(extra)}")
    return cls(**fields)
