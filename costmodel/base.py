"""What every cost model returns, and the readings both models share.

A model scores one plan over whole grids of statistics in one call: the
statistics are numpy arrays (or scalars) that broadcast against each other,
and every result is an array of the broadcast shape. A scalar is the 0-d case
of the same code.

Shared readings, pinned by tests:

- A stream's window in seconds: ``[RANGE w]`` is w; ``[ROWS c]`` is c / λ,
  as PIPES treats tuple-based windows (seed 002, section 2); ``[NOW]`` is 0;
  ``[UNBOUNDED]`` is infinite, so any state that holds the window costs
  infinitely much. A partitioned ``[PARTITION BY ... ROWS c]`` window is read
  as ``[ROWS c]``: the number of partitions is not a statistic here.
- An operator above several streams (a join, or anything above one) sees the
  mean of its inputs' windows: for equal windows, the OM paper's one W.
- Nothing of an unbounded amount is nothing: a product in which one factor
  is 0 is 0 even when another is infinite (:func:`times`). An
  ``[UNBOUNDED]`` window at rate 0, or after a selection that passes
  nothing, holds no memory; no cost is ever NaN.

Every formula is written once, over an elementwise namespace ``xp``:
:data:`ARRAYS` (numpy, for grids) or :data:`SCALARS` (Python floats, for one
point, where numpy's per-call overhead would cost a hundred times the
arithmetic). Both give the same IEEE double results bit for bit: the
scalar operations mirror numpy's (a division by 0 is ±∞ or NaN, ``maximum``
propagates NaN), and the transcendental functions are numpy's own.
:func:`elementwise` wraps a formula so that a direct call on arrays ignores
floating-point warnings, while the models call the bare formula (``.raw``)
inside one ``np.errstate`` per plan.

>>> with np.errstate(divide="ignore"):
...     float(ARRAYS.divide(np.float64(1.0), np.float64(0.0))), SCALARS.divide(1.0, 0.0)
(inf, inf)
>>> float(times(0.0, np.inf)) == times.raw(0.0, np.inf, xp=SCALARS) == 0.0
True
"""

from __future__ import annotations

import functools
import math
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from cqopt.errors import CqoptError
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans.nodes import PlanNode
from cqopt.optimizer.query.statistics import rate_name

Array = NDArray[np.float64]


class CostModelError(CqoptError, ValueError):
    """A cost model or utility was set up wrongly (unknown model, bad weights, ...).

    A ValueError too, so that callers catching ValueError keep working.
    """


class MissingStatisticError(CqoptError):
    """A cost model was asked to cost a plan without a statistic it needs."""


class OperatorCost(NamedTuple):  # a tuple: cheap to make, one per operator per costing
    rate: Array  # output rate, tuples/s
    memory: Array  # bytes (or tuples, in OM's literal unit)
    cpu: Array  # seconds of processing per second of stream time


@dataclass(frozen=True)
class PlanCost:
    rate: Array  # the root's output rate, tuples/s
    memory: Array  # sum over operators
    cpu: Array  # sum over operators
    operators: dict[str, OperatorCost] = field(default_factory=dict)


# -- the two elementwise namespaces ----------------------------------------------

class _Arrays:
    """numpy's elementwise operations: any shapes that broadcast."""

    where = staticmethod(np.where)
    isinf = staticmethod(np.isinf)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    floor = staticmethod(np.floor)
    ceil = staticmethod(np.ceil)
    clip = staticmethod(np.clip)
    expm1 = staticmethod(np.expm1)
    log1p = staticmethod(np.log1p)
    divide = staticmethod(np.divide)

    @staticmethod
    def value(x) -> Array:
        return np.asarray(x, dtype=np.float64)

    @staticmethod
    def full(like: Array, value: float) -> Array:
        return np.full_like(like, value)

    @staticmethod
    def broadcast(value, like: Array) -> Array:
        return np.broadcast_to(value, np.shape(like))


def _rounding(fn):
    def rounded(x: float) -> float:
        # ±∞ and NaN stay as they are; a zero result keeps x's sign (ceil(-0.5) is -0.0)
        return math.copysign(float(fn(x)), x) if math.isfinite(x) else x
    return rounded


def _divide(a: float, b: float) -> float:
    try:
        return a / b
    except ZeroDivisionError:  # IEEE, as numpy: ±∞, or NaN for 0/0 and NaN/0
        if a != a or a == 0:
            return math.nan
        return math.copysign(math.inf, a) * math.copysign(1.0, b)


class _Scalars:
    """The same operations on Python floats, with numpy's results bit for bit."""

    @staticmethod
    def where(condition, a, b):
        return a if condition else b

    @staticmethod
    def maximum(a, b):
        return a if a > b or a != a else b  # as np.maximum: NaN propagates, ties give b

    @staticmethod
    def minimum(a, b):
        return a if a < b or a != a else b

    @staticmethod
    def clip(x, lo, hi):
        return lo if x < lo else hi if x > hi else x

    # numpy's own implementations (libm's may differ in the last bit), without the
    # warnings of their two poles
    @staticmethod
    def expm1(x):
        if x > 709.0:  # near or past overflow, which is ∞ here
            with np.errstate(over="ignore"):
                return float(np.expm1(x))
        return float(np.expm1(x))

    @staticmethod
    def log1p(x):
        return -math.inf if x == -1.0 else float(np.log1p(x))

    @staticmethod
    def full(like, value):
        return float(value)

    @staticmethod
    def broadcast(value, like):
        return value

    @staticmethod
    def product(factors):
        product, zero = 1.0, False
        for factor in factors:
            product, zero = product * factor, zero or factor == 0
        return 0.0 if zero else product

    isinf = staticmethod(math.isinf)
    floor = staticmethod(_rounding(math.floor))
    ceil = staticmethod(_rounding(math.ceil))
    divide = staticmethod(_divide)
    value = float


ARRAYS = _Arrays()
SCALARS = _Scalars()


# -- the scalar path, generated: a plan's formulas traced into straight-line Python --------

class _Symbol:
    """A value in a traced formula: the name of a local in the generated code."""

    __slots__ = ("trace", "name")
    __hash__ = None

    def __init__(self, trace: _Symbols, name: str):
        self.trace, self.name = trace, name

    def _op(self, other, op: str, swap: bool = False) -> _Symbol:
        a, b = self.trace.code(self), self.trace.code(other)
        return self.trace.emit(f"{b} {op} {a}" if swap else f"{a} {op} {b}")

    def __add__(self, other): return self._op(other, "+")
    def __radd__(self, other): return self._op(other, "+", True)
    def __sub__(self, other): return self._op(other, "-")
    def __rsub__(self, other): return self._op(other, "-", True)
    # x · 1 and x / 1 are x exactly, for every double (-0, ∞ and NaN included)
    def __mul__(self, other): return self if _is_one(other) else self._op(other, "*")
    def __rmul__(self, other): return self if _is_one(other) else self._op(other, "*", True)
    def __truediv__(self, other): return self.trace.divide(self, other)
    def __rtruediv__(self, other): return self.trace.divide(other, self)
    def __lt__(self, other): return self._op(other, "<")
    def __le__(self, other): return self._op(other, "<=")
    def __gt__(self, other): return self._op(other, ">")
    def __ge__(self, other): return self._op(other, ">=")
    def __eq__(self, other): return self._op(other, "==")
    def __or__(self, other): return self._op(other, "or")
    def __ror__(self, other): return self._op(other, "or", True)
    def __neg__(self): return self.trace.emit(f"-{self.name}")

    def __bool__(self):  # pragma: no cover - a formula must not branch on a value
        raise TypeError("a cost formula branched on a value; use xp.where")


def _is_one(x) -> bool:
    return not isinstance(x, _Symbol) and type(x) is not bool and x == 1


class _Symbols:
    """The elementwise namespace that records: each operation becomes one line of code,
    which mirrors :data:`SCALARS` exactly (same operations, same order)."""

    def __init__(self):
        self.lines: list[str] = []
        self.known: dict[str, _Symbol] = {}
        self.statistics: dict[str, _Symbol] = {}

    def code(self, x) -> str:
        if isinstance(x, _Symbol):
            return x.name
        if isinstance(x, (bool, np.bool_)):
            return repr(bool(x))
        if isinstance(x, (int, np.integer)):
            return repr(int(x))
        return repr(float(x))  # round-trips exactly; 'inf' and 'nan' are names in the code

    def emit(self, expression: str) -> _Symbol:
        # Every operation is pure: one computed twice (1/d in several formulas) is reused.
        if expression not in self.known:
            name = f"t{len(self.lines)}"
            self.lines.append(f"{name} = {expression}")
            self.known[expression] = _Symbol(self, name)
        return self.known[expression]

    def statistic(self, name: str) -> _Symbol:
        if name not in self.statistics:
            self.statistics[name] = self.emit(f"float(stats[{name!r}])")
        return self.statistics[name]

    def divide(self, a, b):
        if isinstance(b, _Symbol):
            return self.emit(f"{self.code(a)} / {b.name} if {b.name} else "
                             f"_divide({self.code(a)}, {b.name})")
        if not isinstance(a, _Symbol):
            return SCALARS.divide(a, b)
        if _is_one(b):
            return a
        return self.emit(f"{a.name} / {self.code(b)}" if b else f"_divide({a.name}, {self.code(b)})")

    def where(self, condition, a, b):
        if not isinstance(condition, _Symbol):
            return a if condition else b
        return self.emit(f"{self.code(a)} if {condition.name} else {self.code(b)}")

    def _call(self, function: str, *args):
        if not any(isinstance(a, _Symbol) for a in args):
            return getattr(SCALARS, function)(*args)
        return self.emit(f"_{function}({', '.join(self.code(a) for a in args)})")

    def isinf(self, x):
        if not isinstance(x, _Symbol):
            return SCALARS.isinf(x)
        return self.emit(f"{x.name} == inf or {x.name} == -inf")

    def maximum(self, a, b):
        return self._call("maximum", a, b)

    def minimum(self, a, b):
        return self._call("minimum", a, b)

    def floor(self, x):
        return self._call("floor", x)

    def ceil(self, x):
        return self._call("ceil", x)

    def clip(self, x, lo, hi):
        return self._call("clip", x, lo, hi)

    def expm1(self, x):
        return self._call("expm1", x)

    def log1p(self, x):
        return self._call("log1p", x)

    def product(self, factors):
        factors = list(factors)
        if not any(isinstance(f, _Symbol) for f in factors):
            return SCALARS.product(factors)
        if any(not isinstance(f, _Symbol) and f == 0 for f in factors):
            return 0.0  # a constant 0 makes the product 0, whatever the others
        # x · 1 is x exactly, and a constant other than 0 never makes the product 0
        factors = [f for f in factors if isinstance(f, _Symbol) or not _is_one(f)]
        names = [self.code(f) for f in factors]
        # SCALARS.product's order, ((1.0 · f1) · f2) ..., where 1.0 · f1 is f1 exactly
        product = " * ".join(names if isinstance(factors[0], (float, _Symbol)) else
                             ["1.0", *names])
        zero = " or ".join(f"{self.code(f)} == 0" for f in factors if isinstance(f, _Symbol))
        return self.emit(f"0.0 if {zero} else {product}")

    @staticmethod
    def value(x):
        return x if isinstance(x, _Symbol) else float(x)

    @staticmethod
    def full(like, value):
        return float(value)

    @staticmethod
    def broadcast(value, like):
        return value


class _TracedStatistics(Mapping):
    """The statistics as seen while tracing: every name is a symbol read from ``stats``."""

    def __init__(self, trace: _Symbols):
        self.trace = trace

    def __getitem__(self, name: str) -> _Symbol:
        return self.trace.statistic(name)

    def __iter__(self):
        return iter(self.trace.statistics)

    def __len__(self) -> int:
        return len(self.trace.statistics)


_CODE_GLOBALS = {"inf": math.inf, "nan": math.nan, "_divide": _divide,
                 **{f"_{f}": getattr(SCALARS, f) for f in
                    ("isinf", "maximum", "minimum", "floor", "ceil", "clip", "expm1", "log1p")}}


def compile_point_cost(cost_of: Callable[[Mapping, object], PlanCost]):
    """The scalar path of a model's costing, generated from its one definition.

    ``cost_of(stats, xp)`` is the model's costing of one plan; it is traced
    once with symbols and becomes a Python function ``f(stats) -> (rate,
    memory, cpu, operators)`` over floats, with the operators as a tuple of
    (key, rate, memory, cpu). Every operation is the one :data:`SCALARS`
    would perform, in the same order, so the floats are those of the grid path.
    """
    trace = _Symbols()
    traced = cost_of(_TracedStatistics(trace), trace)
    code = trace.code
    operators = ", ".join(f"({key!r}, {code(op.rate)}, {code(op.memory)}, {code(op.cpu)})"
                          for key, op in traced.operators.items())
    body = "\n    ".join(trace.lines) or "pass"
    source = (f"def point_cost(stats):\n    {body}\n    return ({code(traced.rate)}, "
              f"{code(traced.memory)}, {code(traced.cpu)}, ({operators},))\n")
    namespace = dict(_CODE_GLOBALS)
    exec(compile(source, "<cost at a point>", "exec"), namespace)  # noqa: S102 - our own code
    point_cost = namespace["point_cost"]
    point_cost.source = source
    return point_cost


class PointCosting:
    """What both models share: costing over a grid or at one point (the generated scalar path).

    A model mixing this in has ``_cost(plan, stats, xp)``, its one definition.
    """

    def cost(self, plan, stats: Mapping[str, ArrayLike]) -> PlanCost:
        """Output rate, memory and CPU of ``plan`` over the broadcast grid of ``stats``.

        At one point (every statistic a number) the same formulas run on
        Python floats: the results are numpy float64 scalars, equal bit for
        bit to the grid's value at that point.
        """
        if is_point(stats):
            return self._point_plan_cost(plan, stats)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return self._cost(plan, stats, ARRAYS)

    def point_cost(self, plan, stats: Mapping[str, ArrayLike]):
        """``(rate, memory, cpu, operators)`` of ``plan`` at one point, as floats.

        ``operators`` is a tuple of (key, rate, memory, cpu). The first call
        per plan runs the formulas on :data:`SCALARS`; the second generates
        the plan's code (:func:`compile_point_cost`), which later calls run.
        """
        compiled = self.__dict__.setdefault("_point_costs", weakref.WeakKeyDictionary())
        function = compiled.get(plan)
        if function is None:
            if plan not in compiled:  # the first time, interpreted: many plans are costed once
                compiled[plan] = None
                cost = self._cost(plan, stats, SCALARS)
                return (cost.rate, cost.memory, cost.cpu,
                        tuple((key, op.rate, op.memory, op.cpu)
                              for key, op in cost.operators.items()))
            function = compiled[plan] = compile_point_cost(
                lambda traced, xp: self._cost(plan, traced, xp))
        try:
            return function(stats)
        except KeyError:  # a statistic is missing: the interpreted path names it
            self._cost(plan, stats, SCALARS)
            raise  # pragma: no cover - _cost raised MissingStatisticError

    def statistics(self, plan) -> tuple[str, ...]:
        """The statistics costing ``plan`` reads: its streams' rates and its selectivities."""
        return plan_statistics(plan)

    def __repr__(self) -> str:
        catalog = getattr(getattr(self, "catalog", None), "source", "?")
        return (f"<{getattr(self, 'name', type(self).__name__).upper()} model over "
                f"{catalog}, memory in {getattr(self, 'memory_unit', '?')}>")

    def _point_plan_cost(self, plan, stats: Mapping[str, ArrayLike]) -> PlanCost:
        rate, memory, cpu, operators = self.point_cost(plan, stats)
        return PlanCost(np.float64(rate), np.float64(memory), np.float64(cpu),
                        {op[0]: OperatorCost(op[1], op[2], op[3]) for op in operators})


_NUMBERS = frozenset({float, int, np.float64, np.float32, np.int64, np.int32})


def is_point(stats: Mapping[str, ArrayLike]) -> bool:
    """Whether every statistic is one number (not an array), so the scalar path applies."""
    return {type(v) for v in stats.values()} <= _NUMBERS


def elementwise(formula):
    """``formula`` (which takes ``xp=``) callable on arrays without floating-point warnings.

    The bare formula stays reachable as ``.raw``, for callers that ignore the
    warnings once around many formulas, or that pass ``xp=SCALARS``.
    """
    @functools.wraps(formula)
    def quiet(*args, **kwargs):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return formula(*args, **kwargs)
    quiet.raw = formula
    return quiet


_OPERATORS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Constant:
    """One constant a cost model costs with, and where its value came from."""

    value: float
    source: str  # e.g. "catalog [operators]" or "default (the OM paper's measurement)"


def catalog_constants(table, section: str, default_source: str) -> dict[str, Constant]:
    """The fields of a catalog table of constants (a dataclass), each with its source:
    the catalog's ``[section]`` where it differs from the default, else ``default_source``.
    """
    return {f.name: Constant(float(getattr(table, f.name)),
                             default_source if getattr(table, f.name) == f.default
                             else f"catalog [{section}]")
            for f in fields(table)}


def plan_statistics(plan) -> tuple[str, ...]:
    """The statistics a plan's cost depends on, in plan order: each source's rate and
    each operator's selectivities.

    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.rules.enumerate import enumerate_plans
    >>> from cqopt.optimizer.query.logical import parse_query
    >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
    >>> plan_statistics(enumerate_plans(parse_query("SELECT S.a FROM S WHERE S.a = 1 "
    ...                                             "WINDOW [1]", cat))[0])
    ('rate.S', 'sel.S')
    """
    names: dict[str, None] = {}
    for _, node in plan_operators(plan):
        names.update(dict.fromkeys(node_statistics(node)))
    return tuple(names)


@kinds.consumer("the plan's statistics")
def node_statistics(node: PlanNode) -> tuple[str, ...]:
    """The statistics one operator's cost depends on: a source's rate, then the
    operator's selectivities."""


@node_statistics.register
def _(node: kinds.SourceNode) -> tuple[str, ...]:
    return (rate_name(node.stream), *(node.selectivity or ()))


@node_statistics.register(kinds.SelectionNode)
@node_statistics.register(kinds.ProjectionNode)
@node_statistics.register(kinds.JoinNode)
@node_statistics.register(kinds.AggregateNode)
def _(node: PlanNode) -> tuple[str, ...]:
    return tuple(node.selectivity or ())


def plan_operators(plan) -> tuple[tuple[str, PlanNode], ...]:
    """``plan``'s (key, node) pairs bottom-up, walked once per plan and then remembered."""
    try:
        return _OPERATORS[plan]
    except KeyError:
        walked = _OPERATORS[plan] = tuple((key, plan.node(key)) for key in plan.operators())
        return walked


def plan_cost(rate, operators: dict[str, OperatorCost], xp) -> PlanCost:
    """The plan's cost from its root's rate and its operators' costs (memory and CPU summed)."""
    memory = sum_arrays((op.memory for op in operators.values()), xp=xp)
    cpu = sum_arrays((op.cpu for op in operators.values()), xp=xp)
    if xp is SCALARS:  # numpy scalars: .shape, .tolist() and float() work as on 0-d arrays
        return PlanCost(np.float64(rate), np.float64(memory), np.float64(cpu), operators)
    return PlanCost(rate, memory, cpu, operators)


# -- readings shared by the models --------------------------------------------------

def statistic(stats: Mapping[str, ArrayLike], name: str, *, xp=ARRAYS) -> Array:
    """``stats[name]`` as a float array, or a clear error naming what is missing."""
    try:
        value = stats[name]
    except KeyError:
        raise MissingStatisticError(
            f"the cost model needs statistic {name!r}; given: {', '.join(sorted(stats)) or 'none'}"
        ) from None
    return xp.value(value)


def selectivity(stats: Mapping[str, ArrayLike], names: tuple[str, ...], *, xp=ARRAYS) -> Array:
    """The product of the named selectivities (1 for none: a Cartesian product)."""
    out = xp.value(1.0)
    for name in names:
        out = out * statistic(stats, name, xp=xp)
    return xp.value(out)


@elementwise
def window_seconds(window, rate: Array, *, xp=ARRAYS) -> Array:
    """A source window's length in seconds at arrival rate ``rate`` (tuples/s)."""
    if window is None or window.kind == "unbounded":
        return xp.full(rate, np.inf)
    if window.kind == "range":
        return xp.full(rate, window.seconds)
    if window.kind == "rows":
        return xp.divide(window.rows, rate)
    return xp.full(rate, 0.0)  # [NOW]


@elementwise
def times(*factors: ArrayLike, xp=ARRAYS) -> Array:
    """The product of ``factors``, 0 wherever one of them is 0 (even if another is ∞).

    >>> float(times(0.0, np.inf, 3.0)), float(times(2.0, np.inf))
    (0.0, inf)
    """
    if xp is not ARRAYS:
        return xp.product(factors)
    product, zero = np.float64(1.0), np.False_
    for factor in factors:
        factor = np.asarray(factor, dtype=np.float64)
        product, zero = product * factor, zero | (factor == 0)
    return np.asarray(np.where(zero, 0.0, product))


def sum_arrays(arrays, *, xp=ARRAYS) -> Array:
    total = xp.value(0.0)
    for a in arrays:
        total = total + a
    return xp.value(total)
