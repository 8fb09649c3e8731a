"""Every plan's utility at one point, generated as one straight-line function.

The scalar path of :mod:`cqopt.costmodel.base` generates one function per
plan that returns its rate, memory, CPU and every operator's costs; a
utility is then worked out from them in Python floats, plan by plan. Where
all that is wanted is each plan's utility (the off-chart choice, the
fallback's scoring, ``explain``'s ranking), :func:`compile_point_utilities`
traces every plan *and the utility* through one trace of the same symbolic
namespace:

- what several plans compute alike (each statistic read, a join two plans
  start with, a window) is computed once;
- what no utility reads (the CPU terms under a zero CPU weight, the
  operators' own rates) is dropped from the code.

Every line is still the operation :data:`~cqopt.costmodel.base.SCALARS`
performs, in the same order, so the utilities are the grid path's doubles
bit for bit (tests/test_point_cost.py).

>>> from cqopt.catalog import Catalog
>>> from cqopt.costmodel import OM, Utility, plan_utilities
>>> from cqopt.optimizer.query.logical import parse_query
>>> from cqopt.optimizer.rules.enumerate import enumerate_plans
>>> cat = Catalog.from_dict({"streams": {"S": {"rate": [1, 10], "columns": {"a": "int"}}}})
>>> plans = enumerate_plans(parse_query("SELECT S.a FROM S WHERE S.a = 1 WINDOW [1]", cat))
>>> at = PointUtilities(OM(cat), Utility(), plans)
>>> point = {"rate.S": 5.0, "sel.S": 0.2}
>>> at(point).tolist() == plan_utilities(OM(cat), Utility(), plans, point).tolist()
True
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from cqopt.costmodel.base import (
    _CODE_GLOBALS,
    SCALARS,
    PointCosting,
    _Symbols,
    _TracedStatistics,
)

_NAME = re.compile(r"\bt\d+\b")
CACHE_SIZE = 128  # plan sets whose generated code plan_utilities keeps per model


def compile_point_utilities(model, utility, plans: Sequence) -> Callable[[Mapping], tuple]:
    """``f(stats) -> (utility of plan 0, utility of plan 1, ...)`` at one point, as floats.

    Parameters
    ----------
    model : PointCosting
        A model with the one definition ``_cost(plan, stats, xp)``.
    utility : Utility
        The weights that turn a plan's costs into one number.
    plans : sequence of Plan

    Returns
    -------
    callable
        Takes a mapping of statistic name to float; its ``source`` is the code.
        A statistic the mapping lacks raises ``KeyError``.
    """
    trace = _Symbols()
    stats = _TracedStatistics(trace)
    results = []
    for plan in plans:
        cost = model._cost(plan, stats, trace)
        results.append(trace.code(utility.of(cost.rate, cost.memory, cost.cpu, xp=trace)))
    body = "\n    ".join(_live(trace.lines, results)) or "pass"
    source = (f"def point_utilities(stats):\n    {body}\n"
              f"    return ({''.join(r + ', ' for r in results)})\n")
    namespace = dict(_CODE_GLOBALS)
    exec(compile(source, "<utilities at a point>", "exec"), namespace)  # noqa: S102 - ours
    function = namespace["point_utilities"]
    function.source = source
    return function


def _live(lines: list[str], results: list[str]) -> list[str]:
    """The lines some result depends on, in their order (each line is ``tN = ...``)."""
    needed = {name for r in results for name in _NAME.findall(r)}
    kept = []
    for line in reversed(lines):
        name, expression = line.split(" = ", 1)
        if name in needed:
            kept.append(line)
            needed.update(_NAME.findall(expression))
    return kept[::-1]


class PointUtilities:
    """Every plan's utility at one point, from code generated once for the plan set.

    Parameters
    ----------
    model : CostModel
        The chart's model; one without the generated scalar path (no
        ``_cost``) is costed plan by plan.
    utility : Utility
    plans : sequence of Plan
    """

    def __init__(self, model, utility, plans: Sequence):
        self.model, self.utility, self.plans = model, utility, tuple(plans)
        self._function = None

    def __repr__(self) -> str:
        state = "generated" if self._function is not None else "not generated yet"
        return f"<PointUtilities of {len(self.plans)} plans under {self.model!r}: {state}>"

    def __call__(self, stats: Mapping[str, float]) -> np.ndarray:
        """``(plans,)`` utilities at ``stats`` (every statistic one number)."""
        function = self._function
        if function is None:
            if not isinstance(self.model, PointCosting):
                return _one_by_one(self.model, self.utility, self.plans, stats)
            function = self._function = compile_point_utilities(self.model, self.utility,
                                                                 self.plans)
        try:
            return np.array(function(stats), dtype=np.float64)
        except KeyError:  # a statistic is missing: the interpreted path names it
            _one_by_one(self.model, self.utility, self.plans, stats)
            raise  # pragma: no cover - the model raised MissingStatisticError


def _one_by_one(model, utility, plans: Sequence, stats: Mapping[str, float]) -> np.ndarray:
    """Each plan's costs on its own, then its utility in floats (the per-plan path)."""
    if hasattr(model, "point_cost"):
        point_cost, of = model.point_cost, utility.of
        return np.array([of(*point_cost(plan, stats)[:3], xp=SCALARS) for plan in plans],
                        dtype=np.float64)
    return np.array([float(utility(model.cost(plan, stats))) for plan in plans],
                    dtype=np.float64)


def point_utilities(model, utility, plans: Sequence, stats: Mapping[str, float]) -> np.ndarray:
    """Every plan's utility at one point, through code generated for the plan set.

    The first call for a plan set costs plan by plan (many sets are costed
    once); the second generates the set's code (:class:`PointUtilities`),
    which later calls run. The code is kept per model for the last
    :data:`CACHE_SIZE` plan sets, keyed by the identity of the utility and
    the plans, which each entry holds (so no identity is reused meanwhile).
    """
    if not isinstance(model, PointCosting):
        return _one_by_one(model, utility, plans, stats)
    cache = model.__dict__.setdefault("_point_utilities", {})
    key = (id(utility), *map(id, plans))
    entry = cache.get(key)
    if entry is None:
        if len(cache) >= CACHE_SIZE:
            try:  # the oldest set goes; another thread may be at it too
                cache.pop(next(iter(cache)), None)
            except (RuntimeError, StopIteration):
                pass
        # What the key names, held: the first call is costed plan by plan.
        cache[key] = (utility, tuple(plans))
        return _one_by_one(model, utility, plans, stats)
    if type(entry) is tuple:  # the second call: generate the set's code
        entry = cache[key] = PointUtilities(model, utility, plans)
    return entry(stats)
