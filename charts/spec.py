"""Chart specifications: which statistics are axes, their ranges and k, the rest fixed.

One N-dimensional chart per query. Each axis is a statistic with a range
``[lo, hi]`` and a k-regular partition, boundaries at ``lo + i·(hi − lo)/k``
(the OM paper's Algorithm 1 with the ``lo +`` it omits); every other
statistic of the query is fixed at a recorded value. Defaults follow the OM
paper: a single-stream query gets the sel-λ chart (``sel.S``, ``rate.S``; just
``rate.S`` when S has no selection), a join query the λ-λ chart (one
``rate.S`` axis per stream, selectivities fixed), plus every statistic
whose range the workload gives (so a workload that gives ``jsel.A.B`` a range
charts it). Rate ranges come from the catalog, selectivity ranges default to
(0, 1], fixed values to :func:`cqopt.optimizer.query.statistics.default_source`,
which also says where each came from (``ChartSpec.sources``).

>>> ax = Axis("sel.S", 0.0, 1.0, 4)
>>> ax.edges().tolist(), ax.centroids().tolist()
([0.0, 0.25, 0.5, 0.75, 1.0], [0.125, 0.375, 0.625, 0.875])
>>> ax.cells(np.array([-0.2, 0.3, 1.0, 7.0]))
(array([0, 1, 3, 3]), array([ True, False, False,  True]))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.settings import (
    DEFAULT_K,
    ChartSettings,
    SettingsError,
    check_cells,
    judge_settings,
    max_cells,
    setting_label,
)
from cqopt.charts.workload import Workload
from cqopt.costmodel import Utility, make_model, plan_utilities
from cqopt.errors import printable
from cqopt.costmodel.utility import DEFAULT_WEIGHTS
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.errors import QueryError, WorkloadError
from cqopt.optimizer.query.logical import ContinuousQuery, parse_query
from cqopt.optimizer.query.statistics import (
    SOURCE_WORKLOAD,
    check_value,
    default_source,
    rate_name,
    sel_name,
    split_name,
)
from cqopt.optimizer.rules.enumerate import enumerate_plans

__all__ = ["DEFAULT_K", "Axis", "ChartSpec", "axis_cells", "candidate_plans", "default_axes",
           "make_spec", "workload_specs"]


def axis_cells(values: np.ndarray, lo: Any, hi: Any, k: Any) -> tuple[np.ndarray, np.ndarray]:
    """Region index of each value on axes ``[lo, hi]`` of ``k`` regions, and the clamps.

    ``floor((x − lo) / (hi − lo) · k)``, clamped to ``[0, k − 1]``; ``lo``,
    ``hi`` and ``k`` broadcast against ``values``, so one call serves one axis
    (:meth:`Axis.cells`) or many charts' axes stacked
    (:class:`cqopt.charts.many.Decider`). The top edge belongs to the last
    region; only values beyond the range count as clamped.

    >>> axis_cells(np.array([[0.5, 5.0]]), np.array([0.0, 1.0]), np.array([1.0, 3.0]),
    ...            np.array([4, 2]))
    (array([[2, 1]]), array([[False,  True]]))
    """
    values = np.asarray(values, dtype=np.float64)
    raw = np.floor((values - lo) / (hi - lo) * k)
    outside = (values < lo) | (values > hi)
    return np.clip(raw, 0, k - 1).astype(np.intp), outside

# A fixed statistic observed more than this many times off (either way) is outside the chart.
COVERAGE_FACTOR = 2.0


@dataclass(frozen=True)
class Axis:
    statistic: str
    lo: float
    hi: float
    k: int

    def edges(self) -> np.ndarray:
        """The k + 1 region boundaries ``lo + i·(hi − lo)/k``."""
        return self.lo + np.arange(self.k + 1) * (self.hi - self.lo) / self.k

    def centroids(self, cells: np.ndarray | None = None) -> np.ndarray:
        """The centre of each region (of the given cell indices)."""
        cells = np.arange(self.k) if cells is None else np.asarray(cells)
        return self.lo + (cells + 0.5) * (self.hi - self.lo) / self.k

    def cells(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Region index of each value, clamped to the chart, and where it was clamped."""
        return axis_cells(values, self.lo, self.hi, self.k)

    def to_dict(self) -> dict[str, Any]:
        return {"statistic": self.statistic, "lo": self.lo, "hi": self.hi, "k": self.k}


@dataclass(frozen=True)
class ChartSpec:
    """What one query's chart covers and how its cells are costed."""

    name: str
    sql: str
    axes: tuple[Axis, ...]
    fixed: dict[str, float] = field(default_factory=dict)
    model: str = "om"
    weights: tuple[float, ...] = DEFAULT_WEIGHTS
    memory_unit: str = "bytes"
    # Where each fixed statistic's value came from (workload, catalog distinct values,
    # default, ...), as the build reports it and the manifest records it.
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(a.k for a in self.axes)

    @cached_property
    def utility(self) -> Utility:
        """The utility of the chart's weights, made once per spec for every costing."""
        return Utility.from_weights(self.weights)

    def cost_model(self, catalog: Catalog):
        """The chart's cost model over ``catalog`` (:func:`cqopt.costmodel.make_model`)."""
        return make_model(self.model, catalog, self.memory_unit)

    @property
    def n_cells(self) -> int:
        return math.prod(self.shape)

    def centre(self) -> dict[str, float]:
        """The chart's middle: each axis at the middle of its range, the rest as fixed."""
        return {**self.fixed, **{a.statistic: (a.lo + a.hi) / 2 for a in self.axes}}

    def corner_stats(self) -> dict[str, Any]:
        """Statistics at the corners of the chart's cells and at its centre, one point each.

        Each axis at its first and last region's centroid (every combination:
        ``2 ** len(axes)`` corners), then every axis at its middle; the rest as fixed.

        >>> spec = ChartSpec("Q", "", (Axis("rate.A", 0, 8, 4), Axis("rate.B", 0, 4, 2)))
        >>> spec.corner_stats()["rate.A"].tolist(), spec.corner_stats()["rate.B"].tolist()
        ([1.0, 1.0, 7.0, 7.0, 4.0], [1.0, 3.0, 1.0, 3.0, 2.0])
        """
        ends = [a.centroids(np.array([0, a.k - 1])) for a in self.axes]
        grid = [g.ravel() for g in np.meshgrid(*ends, indexing="ij")] if ends else []
        stats: dict[str, Any] = {a.statistic: np.append(g, (a.lo + a.hi) / 2)
                                 for a, g in zip(self.axes, grid)}
        stats.update(self.fixed)
        return stats

    def coverage(self, factor: float = COVERAGE_FACTOR) -> tuple[tuple[str, float, float, bool],
                                                                  ...]:
        """What the chart covers: ``(statistic, lo, hi, fixed)`` per axis, then per fixed one.

        An axis covers its range; a fixed statistic covers ``factor`` either
        way of its value. The one box the replay's coverage alarms and the
        run-time off-chart choice judge rounds by.

        >>> ChartSpec("Q", "SELECT 1", (Axis("rate.S", 10.0, 90.0, 4),),
        ...           fixed={"jsel.S.T": 0.01}).coverage()
        (('rate.S', 10.0, 90.0, False), ('jsel.S.T', 0.005, 0.02, True))
        """
        return (*((a.statistic, a.lo, a.hi, False) for a in self.axes),
                *((name, value / factor, value * factor, True)
                  for name, value in self.fixed.items()))

    def centroid_stats(self, flat_cells: np.ndarray) -> dict[str, np.ndarray]:
        """Statistics at the centroids of the given flat (C-order) cell indices."""
        per_axis = np.unravel_index(np.asarray(flat_cells, dtype=np.intp), self.shape)
        stats: dict[str, Any] = {a.statistic: a.centroids(i) for a, i in zip(self.axes, per_axis)}
        stats.update(self.fixed)
        return stats

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "sql": self.sql, "axes": [a.to_dict() for a in self.axes],
                "fixed": dict(self.fixed), "model": self.model, "weights": list(self.weights),
                "memory_unit": self.memory_unit, "sources": dict(self.sources)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChartSpec:
        """A spec from :meth:`to_dict`'s form; a ValueError says what is malformed."""
        for a in d["axes"]:  # as a build writes them: no text, truth value or fraction
            if not (isinstance(a["statistic"], str) and type(a["k"]) is int
                    and all(type(a[b]) in (int, float) for b in ("lo", "hi"))):
                raise ValueError(f"axis {printable(a['statistic'])[:60]!r} needs a statistic's "
                                 "name, numbers lo and hi and a whole number k")
        axes = tuple(Axis(a["statistic"], float(a["lo"]), float(a["hi"]), a["k"])
                     for a in d["axes"])
        for a in axes:
            if not (math.isfinite(a.lo) and math.isfinite(a.hi) and a.lo < a.hi and a.k >= 1):
                raise ValueError(f"axis {a.statistic} needs finite lo < hi and k >= 1, got "
                                 f"[{a.lo:g}, {a.hi:g}] with k = {a.k}")
        if len({a.statistic for a in axes}) != len(axes):
            raise ValueError(f"an axis is repeated: {', '.join(a.statistic for a in axes)}")
        if math.prod(a.k for a in axes) > max_cells():
            raise ValueError(f"its axes make {math.prod(a.k for a in axes):.3g} cells, more "
                             f"than the {max_cells():.3g} this machine's memory holds")
        fixed = {str(k): check_value(k, v) for k, v in dict(d["fixed"]).items()}
        # The same judge as a workload's: a model registered here, weights a utility takes.
        costing = ChartSettings(weights=d["weights"], model=d["model"],
                                memory_unit=d["memory_unit"])
        return cls(str(d["name"]), str(d["sql"]), axes, fixed, costing.model,
                   costing.weights, costing.memory_unit,
                   {str(k): str(v) for k, v in dict(d.get("sources", {})).items()})


def candidate_plans(spec: ChartSpec, catalog: Catalog) -> list[Plan]:
    """A chart's candidate plans, sorted by id: the same in every process.

    Past the exhaustive limit the local search orders joins by the chart's own
    model and weights at the chart's centre, so builds and loads agree on the
    candidates. A model that prices join strategies (``prices_join_strategies``,
    the engine model) has its charts choose among them: the strategies no
    better anywhere on the chart's corners and centre (:meth:`ChartSpec.corner_stats`)
    are dropped (:mod:`cqopt.optimizer.rules.join_strategies`).
    """
    query = parse_query(spec.sql, catalog)
    model, utility = spec.cost_model(catalog), spec.utility
    centre = spec.centre()

    def cost(plan: Plan) -> float:
        return float(utility(model.cost(plan, centre)))

    strategy_cost = None
    if getattr(model, "prices_join_strategies", False):
        corners = spec.corner_stats()

        def strategy_cost(plans: Sequence[Plan]) -> np.ndarray:
            scores = plan_utilities(model, utility, plans, corners)
            return np.asarray(scores, dtype=np.float64).reshape(len(plans), -1)

    return sorted(enumerate_plans(query, catalog=catalog, cost=cost,
                                  strategy_cost=strategy_cost), key=lambda p: p.id)


def default_axes(query: ContinuousQuery) -> list[str]:
    """sel-λ for one stream (λ alone without a selection), λ-λ for a join."""
    if len(query.streams) == 1:
        s = query.streams[0].name
        return [sel_name(s), rate_name(s)] if s in query.selections else [rate_name(s)]
    return [rate_name(s) for s in query.stream_names]


def make_spec(name: str, sql: str, query: ContinuousQuery, catalog: Catalog,
              settings: ChartSettings | Mapping[str, Any], where: str = "",
              k_label: str = "k") -> ChartSpec:
    """The chart of one query from its settings (a workload's, merged with its defaults).

    Parameters
    ----------
    name, sql : str
        The query's name and text.
    query : ContinuousQuery
        The query parsed over ``catalog``.
    catalog : Catalog
    settings : ChartSettings or mapping
        Its chart settings; a mapping is judged (:class:`ChartSettings`) first.
    where : str
        Prefix of messages (``"w.toml: "``).
    k_label : str
        How a message about the chart's size names k (``"--k"`` when the command line gave it).

    Returns
    -------
    ChartSpec

    Raises
    ------
    WorkloadError
        A statistic the query does not have, an axis twice or both an axis
        and fixed, a range outside a selectivity's [0, 1], a fixed value out of
        range, or more cells than this machine's memory holds.
    """
    def fail(problem: str) -> WorkloadError:
        return WorkloadError(f"{where}query {name}: {problem}")

    if not isinstance(settings, ChartSettings):
        try:
            settings = ChartSettings(**settings)
        except (SettingsError, TypeError) as err:
            raise fail(str(err)) from None
    known = query.statistics
    ranges = settings.ranges
    # A statistic whose range the workload gives moves: by default it is an axis too.
    axes_names = list(settings.axes or [*default_axes(query),
                                        *(s for s in known if s in ranges
                                          and s not in default_axes(query))])
    fixed_given = settings.fixed
    for stat in [*axes_names, *ranges, *fixed_given]:
        if stat not in known:
            raise fail(f"statistic {stat!r} is not one this query depends on "
                       f"({', '.join(known)})")
    if len(set(axes_names)) != len(axes_names):
        raise fail(f"an axis is named twice in {axes_names}")
    for stat in ranges:
        if stat not in axes_names:
            raise fail(f"ranges gives {stat!r}, which is not an axis ({', '.join(axes_names)})")
    for stat in fixed_given:
        if stat in axes_names:
            raise fail(f"{stat!r} is both an axis and fixed; drop one")
    k = settings.k
    if settings.refine is None:  # a refined chart's size is its budget, judged already
        try:
            check_cells(name, k, len(axes_names), k_label)
        except SettingsError as err:
            raise WorkloadError(f"{where}{err}") from None
    axes = []
    for stat in axes_names:
        kind, streams = split_name(stat)
        if stat in ranges:
            lo, hi = ranges[stat]
        elif kind == "rate":
            lo, hi = catalog.stream(streams[0]).rate
        else:
            lo, hi = 0.0, 1.0
        if kind != "rate" and hi > 1:
            raise fail(f"range of selectivity {stat} must lie in [0, 1], got [{lo:g}, {hi:g}]")
        axes.append(Axis(stat, float(lo), float(hi), k))
    fixed, sources = {}, {}
    try:
        for s in known:
            if s in axes_names:
                continue
            if s in fixed_given:
                fixed[s], sources[s] = check_value(s, fixed_given[s]), SOURCE_WORKLOAD
            else:
                value, sources[s] = default_source(s, catalog, query)
                fixed[s] = check_value(s, value)
    except QueryError as err:
        raise fail(f"fixed: {err}") from None
    return ChartSpec(name, sql.strip(), tuple(axes), fixed, settings.model, settings.weights,
                     settings.memory_unit, sources)


def workload_specs(workload: Workload, catalog: Catalog,
                   overrides: Mapping[str, Any] | None = None,
                   labels: Mapping[str, str] | None = None
                   ) -> list[tuple[ChartSpec, ContinuousQuery]]:
    """Every query's chart spec; ``overrides`` (from the command line, say) beat the file.

    Parameters
    ----------
    workload : Workload
    catalog : Catalog
    overrides : mapping, optional
        Settings for every query; ``None`` values are left out. They are judged
        here unless judged already.
    labels : mapping of str to str, optional
        How a message names an override (``{"k": "--k 5"}``); default ``k = 5``.

    Returns
    -------
    list of (ChartSpec, ContinuousQuery)

    Raises
    ------
    WorkloadError
        A query that does not parse, or settings that do not make a chart.
    """
    from cqopt.errors import CqoptError

    labels = dict(labels or {})
    overrides = judge_settings(overrides or {},
                               lambda path, value: labels.get(path, setting_label(path, value)))
    k_label = labels.get("k", "k").split(" ")[0]
    out = []
    for wq in workload.queries:
        try:
            query = parse_query(wq.sql, catalog)
        except CqoptError as err:
            raise WorkloadError(f"{workload.source}: query {wq.name}: {err}") from None
        if "error_bound" in wq.options and not query.aggregates:
            raise WorkloadError(f"{workload.source}: query {wq.name}: error_bound = "
                                f"{wq.options['error_bound']!r}: only an aggregate's answer "
                                "has a relative error; this query has no aggregate (bound its "
                                "loss with min_kept instead)")
        settings = workload.settings(wq, overrides)
        out.append((make_spec(wq.name, wq.sql, query, catalog, settings,
                              f"{workload.source}: ",
                              k_label if "k" in overrides else "k"), query))
    return out
