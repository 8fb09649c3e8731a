"""The engine model: a plan's seconds per round on a micro-batch engine (Spark), vectorized.

OM costs a tuple-at-a-time engine (output rate and buffered memory); on
Spark a round is one job over the round's tuples, and what a user waits for
is its wall time. This model predicts it from the tuples into and out of
each operator in one round, the way RTStream (seed 000, section 4.1)
predicts a query instance's time from its input volume and per-operator
costs profiled from execution. With ``n`` the tuples of a round (a source
reads ``λ · W``, its window's tuples; a selection passes ``sel · n``; a join
of ``n_L`` and ``n_R`` tuples emits ``jsel · n_L · n_R``), the seconds of
one round are

    job + Σ_sources scan · n + Σ_selections selection · n_in
        + Σ_projections projection · n_in
        + Σ_joins (join + join_input · (n_L + n_R) + join_output · n_out)
        + aggregate · n_in

with the constants of the catalog's ``[engine]`` table
(:class:`~cqopt.catalog.catalog.EngineConstants`): ``job`` is the engine's
fixed cost of running a plan (a job, its tasks, the result's write),
``join`` one shuffle stage. The seconds are linear in the constants, so
``cqopt calibrate --from-run`` fits them by non-negative least squares to
the plan times a run measured (:func:`work`, :func:`fit_constants`).

What the model returns, as every model does (:class:`PlanCost`):

- ``cpu``: the busy fraction, seconds of engine time per second of stream
  (a round's seconds over its length ``W``, the plan's window): above 1 the
  engine cannot keep up. :func:`round_seconds` gives the seconds;
- ``rate``: output tuples per second, ``n_out / W``, without OM's capacity
  throttle (an engine that falls behind still computes every tuple);
- ``memory``: bytes a round materialises, each operator's output tuples
  times their width.

Its cost is its seconds: a chart built with it weighs the CPU term alone
(``--weights 0,0,1``), which :func:`cqopt.charts.settings.check_together`
asks for.

A join whose strategy a hint fixes (:mod:`cqopt.optimizer.plans.strategies`)
is costed with that strategy's own steps instead of the ``join`` terms
(:func:`strategy_join_seconds`, constants in the catalog's
``[join_strategies]`` table): a broadcast collects, ships and hashes its
built side and leaves the other where it lies; a shuffle moves both sides
and then hashes one or sorts both. So the model prices strategies
(``prices_join_strategies``) and a chart built with it chooses among them.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> from cqopt.examples import example
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> q = parse_query("SELECT TCP.src_host FROM TCP WHERE TCP.dest_host = 2 WINDOW [1]", cat)
>>> plan = enumerate_plans(q)[0]
>>> cost = Engine(cat).cost(plan, {"rate.TCP": 500.0, "sel.TCP": 0.1})
>>> round(float(round_seconds(cost, 1.0)), 7)  # job, 500 scanned and selected, 50 projected
0.3005525
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike

from cqopt.catalog import Catalog
from cqopt.catalog.catalog import EngineConstants, JoinStrategyConstants
from cqopt.costmodel.base import (
    ARRAYS,
    Array,
    Constant,
    CostModelError,
    OperatorCost,
    PlanCost,
    PointCosting,
    catalog_constants,
    plan_operators,
    selectivity,
    statistic,
    sum_arrays,
    times,
    window_seconds,
)
from cqopt.optimizer.plans import nodes as kinds
from cqopt.optimizer.plans import strategies as joins
from cqopt.optimizer.query.statistics import rate_name

# The constants' names, in EngineConstants' order: the columns of work().
CONSTANTS = tuple(f.name for f in dataclasses.fields(EngineConstants))


class Engine(PointCosting):
    """Seconds per round on a micro-batch engine, from each operator's tuples."""

    name = "engine"
    memory_units = ("bytes",)
    weights = (0.0, 0.0, 1.0)  # its cost is its seconds (the CPU term)
    prices_join_strategies = True  # a hinted join costs its strategy's own steps

    def __init__(self, catalog: Catalog, memory_unit: str = "bytes",
                 constants: EngineConstants | None = None,
                 strategies: JoinStrategyConstants | None = None):
        if memory_unit != "bytes":
            raise CostModelError(f"the engine model counts memory in bytes only, not "
                                 f"{memory_unit!r}")
        self.catalog, self.memory_unit = catalog, memory_unit
        self.engine = constants if constants is not None else catalog.engine
        self.strategies = strategies if strategies is not None else catalog.join_strategies

    def constants(self) -> dict[str, Constant]:
        """Each constant (seconds) and where it came from.

        >>> from cqopt.catalog import Catalog
        >>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 2],
        ...     "columns": {"a": "int"}}}})
        >>> Engine(cat).constants()["job"]
        Constant(value=0.3, source='default (of the order of Spark local[2]; calibrate --from-run fits it)')
        """
        return catalog_constants(self.engine, "engine", "default (of the order of Spark "
                                 "local[2]; calibrate --from-run fits it)")

    def _cost(self, plan, stats: Mapping[str, ArrayLike], xp) -> PlanCost:
        tuples, windows, spent = _walk(plan, self.engine, stats, xp, self.strategies)
        window = windows[plan.root]
        operators = {key: OperatorCost(xp.divide(tuples[key], window),
                                       times.raw(tuples[key], plan.node(key).out_width, xp=xp),
                                       xp.divide(seconds, window))
                     for key, seconds in spent.items()}
        # The job's fixed cost belongs to the plan, not to an operator.
        busy = (sum_arrays((op.cpu for op in operators.values()), xp=xp)
                + xp.divide(self.engine.job, window))
        memory = sum_arrays((op.memory for op in operators.values()), xp=xp)
        return PlanCost(operators[plan.root].rate, memory, busy, operators)

    def seconds(self, plan, stats: Mapping[str, ArrayLike]) -> Array:
        """``plan``'s seconds per round over the broadcast grid of ``stats``."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            _, _, spent = _walk(plan, self.engine, stats, ARRAYS, self.strategies)
            return np.asarray(sum_arrays(spent.values()) + self.engine.job)


def _walk(plan, engine: EngineConstants, stats: Mapping[str, ArrayLike], xp,
          strategies: JoinStrategyConstants | None = None
          ) -> tuple[dict[str, Array], dict[str, Array], dict[str, Array]]:
    """Each operator's output tuples per round, window (seconds) and seconds, bottom-up."""
    tuples: dict[str, Array] = {}
    windows: dict[str, Array] = {}
    spent: dict[str, Array] = {}
    for key, node in plan_operators(plan):
        inputs = tuple((tuples[i], windows[i]) for i in node.inputs)
        tuples[key], windows[key], spent[key] = engine_operator(node, engine, stats, inputs, xp)
        if getattr(node, "strategy", joins.AUTO) != joins.AUTO:  # a hint fixes how it runs
            (n_l, _), (n_r, _) = inputs
            spent[key] = strategy_join_seconds(
                node, n_l, n_r, tuples[key], engine,
                strategies if strategies is not None else JoinStrategyConstants(), xp)
    return tuples, windows, spent


def strategy_join_seconds(node: kinds.JoinNode, n_l: Array, n_r: Array, n_out: Array,
                          engine: EngineConstants, c: JoinStrategyConstants, xp=ARRAYS
                          ) -> Array:
    """The seconds of a join whose strategy a hint fixes, from its inputs' and output's tuples.

    With ``b`` the built side's tuples and ``p`` the other's (the left for
    ``broadcast_left``, else the right is built):

    - broadcast: ``broadcast + b · (collect + executors · ship + build) + p · probe``,
      infinite past ``broadcast_limit`` bytes of the built side (Spark refuses);
    - shuffle-hash: ``stage + exchange · (b + p) + b · build + p · probe``;
    - sort-merge: ``stage + exchange · (b + p) + sort · Σ n log2 n + probe · (b + p)``
      (each side sorted, then both merged);

    each plus ``join_output`` (:class:`EngineConstants`) per tuple emitted,
    as every join. Constants: :class:`~cqopt.catalog.catalog.JoinStrategyConstants`.

    >>> from cqopt.catalog import Catalog
    >>> from cqopt.optimizer.plans.nodes import JoinNode
    >>> node = JoinNode(streams=("A", "B"), predicate=(), in_widths=(8, 8),
    ...                 strategy="broadcast_right")
    >>> c, e = JoinStrategyConstants(), EngineConstants()
    >>> round(float(strategy_join_seconds(node, 1e6, 1e3, 1e3, e, c)), 4)  # tiny side built
    0.1329
    >>> shuffled = JoinNode(streams=("A", "B"), predicate=(), strategy="shuffle_hash")
    >>> round(float(strategy_join_seconds(shuffled, 1e6, 1e3, 1e3, e, c)), 4)  # both moved
    1.2017
    """
    strategy = node.strategy
    left_built = strategy == joins.BROADCAST_LEFT
    b, p = (n_l, n_r) if left_built else (n_r, n_l)
    out = engine.join_output * n_out
    if strategy in (joins.BROADCAST_LEFT, joins.BROADCAST_RIGHT):
        width = node.in_widths[0 if left_built else 1] if node.in_widths else 0
        seconds = (c.broadcast + b * (c.collect + c.executors * c.ship + c.build)
                   + p * c.probe)
        return xp.where(b * width > c.broadcast_limit, np.inf, seconds) + out
    moved = c.stage + c.exchange * (b + p)
    if strategy == joins.SHUFFLE_HASH:
        return moved + b * c.build + p * c.probe + out
    if strategy == joins.SORT_MERGE:
        return moved + c.sort * (_n_log_n(b, xp) + _n_log_n(p, xp)) + c.probe * (b + p) + out
    raise CostModelError(f"the engine model has no cost for join strategy {strategy!r}")


def _n_log_n(n: Array, xp) -> Array:
    """``n · log2 n`` for ``n >= 1`` (0 below: sorting one tuple or none costs nothing)."""
    m = xp.maximum(n, 1.0)
    return m * (xp.log1p(m - 1.0) / math.log(2.0))


def round_seconds(cost: PlanCost, window_s: ArrayLike) -> Array:
    """A plan's seconds per round of ``window_s`` seconds, from its :class:`PlanCost`."""
    return np.asarray(cost.cpu, dtype=np.float64) * np.asarray(window_s, dtype=np.float64)


@kinds.consumer("the engine model")
def engine_operator(node: kinds.PlanNode, engine: EngineConstants,
                    stats: Mapping[str, ArrayLike], inputs: tuple[tuple[Array, Array], ...],
                    xp) -> tuple[Array, Array, Array]:
    """One operator's output tuples per round, its window (seconds) and its seconds, given
    its inputs' (tuples, window) pairs in order."""


@engine_operator.register
def _(node: kinds.SourceNode, engine, stats, inputs, xp):
    lam = statistic(stats, rate_name(node.stream), xp=xp)
    window = window_seconds.raw(node.window, lam, xp=xp)
    n = times.raw(lam, window, xp=xp)
    return n, window, engine.scan * n


def _unary(node: kinds.PlanNode, cost: float, stats, inputs, xp):
    (n, window), = inputs
    out = times.raw(selectivity(stats, node.selectivity, xp=xp), n, xp=xp)
    return out, window, cost * n


@engine_operator.register
def _(node: kinds.SelectionNode, engine, stats, inputs, xp):
    return _unary(node, engine.selection, stats, inputs, xp)


@engine_operator.register
def _(node: kinds.ProjectionNode, engine, stats, inputs, xp):
    return _unary(node, engine.projection, stats, inputs, xp)


@engine_operator.register
def _(node: kinds.AggregateNode, engine, stats, inputs, xp):
    (n, window), = inputs
    # One result per group; the groups are not a statistic: one row per round with input.
    out = xp.where(n > 0, 1.0, 0.0)
    return out, window, engine.aggregate * n


@engine_operator.register
def _(node: kinds.JoinNode, engine, stats, inputs, xp):
    (n_l, w_l), (n_r, w_r) = inputs
    out = times.raw(selectivity(stats, node.selectivity, xp=xp), n_l, n_r, xp=xp)
    spent = engine.join + engine.join_input * (n_l + n_r) + engine.join_output * out
    return out, (w_l + w_r) / 2, spent


def work(plan, stats: Mapping[str, ArrayLike], catalog: Catalog) -> np.ndarray:
    """Each constant's share of ``plan``'s seconds per round, per unit of the constant.

    The seconds are ``work(...) @ constants`` (in :data:`CONSTANTS` order),
    since they are linear in the constants: each column is the model's
    seconds with that constant 1 and the others 0. One formula, the model's.
    A hinted join's own steps (the catalog's ``[join_strategies]``) are not
    among these constants and are left out: only its ``join_output`` term
    counts here.

    Returns
    -------
    numpy.ndarray
        Shape ``(*grid, len(CONSTANTS))``.
    """
    columns = []
    for name in CONSTANTS:
        unit = EngineConstants(**{n: (1.0 if n == name else 0.0) for n in CONSTANTS})
        columns.append(Engine(catalog, constants=unit, strategies=_NO_STRATEGY_COSTS)
                       .seconds(plan, stats))
    return np.stack(np.broadcast_arrays(*columns), axis=-1)


# work()'s strategy constants: a hinted join's own steps cost nothing there.
_NO_STRATEGY_COSTS = JoinStrategyConstants(**{
    f.name: 0 for f in dataclasses.fields(JoinStrategyConstants)
    if f.name not in ("executors", "broadcast_limit")})


def plan_window(plan, stats: Mapping[str, ArrayLike]) -> Array:
    """The plan's window in seconds (its root's: the mean of its inputs')."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _walk(plan, EngineConstants(), stats, ARRAYS)[1][plan.root]


def fit_constants(work_rows: np.ndarray, seconds: Sequence[float], *,
                  floor: float = 1e-12) -> EngineConstants:
    """The constants whose predictions best match measured seconds, in relative terms.

    Non-negative least squares (``scipy.optimize.nnls``) of ``work_rows @ c``
    against ``seconds``, each row divided by its seconds so that a 10% miss
    on a short round counts as much as on a long one. A constant the data
    cannot tell from the others (a work column that is zero, or a multiple of
    another) may come out 0; it is kept at ``floor`` so the catalog stays valid.

    Parameters
    ----------
    work_rows : ndarray, shape (n, len(CONSTANTS))
        :func:`work` of each measured (plan, round).
    seconds : sequence of float
        The measured seconds of each.

    Returns
    -------
    EngineConstants

    Raises
    ------
    CostModelError
        Fewer measurements than two, or none with a positive time.

    Examples
    --------
    >>> truth = np.array([0.2, 1e-6, 0, 0, 0.05, 2e-6, 0, 0])
    >>> rows = np.array([[1, n, 0, 0, 1, 2 * n, 0, 0] for n in (1e4, 5e4, 1e5, 4e5)], float)
    >>> fitted = fit_constants(rows, rows @ truth)
    >>> round(fitted.job + fitted.join, 3), round(fitted.scan + 2 * fitted.join_input, 9)
    (0.25, 5e-06)
    """
    from scipy.optimize import nnls

    rows = np.asarray(work_rows, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    good = np.isfinite(seconds) & (seconds > 0) & np.isfinite(rows).all(axis=1)
    if good.sum() < 2:
        raise CostModelError(f"the engine model needs at least 2 measured plan times to "
                             f"fit its constants, got {int(good.sum())}")
    rows, seconds = rows[good], seconds[good]
    scale = np.where(rows.max(axis=0) > 0, rows.max(axis=0), 1.0)  # columns of like size
    solution, _ = nnls(rows / seconds[:, None] / scale, np.ones(len(seconds)))
    values = solution / scale
    return EngineConstants(**{n: max(float(v), floor) for n, v in zip(CONSTANTS, values)})


def smoothed(previous: EngineConstants, fitted: EngineConstants,
             alpha: float) -> EngineConstants:
    """``alpha · fitted + (1 - alpha) · previous``, constant by constant (RTStream's
    exponential smoothing of profiled costs, seed 000 section 4.1).

    >>> a, b = EngineConstants(job=0.2), EngineConstants(job=0.4)
    >>> smoothed(a, b, 0.5).job
    0.30000000000000004
    """
    if not 0.0 < alpha <= 1.0:
        raise CostModelError(f"the smoothing factor must be in (0, 1], got {alpha!r}")
    return EngineConstants(**{n: alpha * getattr(fitted, n) + (1 - alpha) * getattr(previous, n)
                              for n in CONSTANTS})
