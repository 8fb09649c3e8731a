"""The run-time API: load a chart set, choose a plan in microseconds.

Nothing here imports Spark or matplotlib. A :class:`ChartSet` is read-only
once loaded, so any number of threads may call :meth:`ChartSet.choose` and
:meth:`ChartSet.choose_many` at once.

``choose`` finds each axis's region, ``floor((x − lo) / (hi − lo) · k)``;
a value outside the chart is clamped to its edge and the clamp reported.
NaN, a negative or infinite rate and a selectivity outside [0, 1] are
errors. Statistics that are not axes of the query's chart are ignored: the
chart was built with them fixed at the values in ``chart.spec.fixed``.

>>> import pathlib, tempfile
>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.workload import load_workload
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.build import build_local
>>> from cqopt.charts.store import write_chart_set
>>> from cqopt.examples import example
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> specs = [s for s, _ in workload_specs(load_workload(example("workload.toml")), cat)]
>>> out = pathlib.Path(tempfile.mkdtemp()) / "charts"
>>> _ = write_chart_set(out, build_local(specs, cat, progress=False), cat)
>>> charts = load(out)
>>> charts.choose("Q1", {"sel.TCP": 0.05, "rate.TCP": 500}).plan.id
'TCP[σπ]'
>>> c = charts.choose("Q1", {"sel.TCP": 0.9, "rate.TCP": 5000})
>>> c.plan_id, c.cell, c.clamped
('TCP[πσ]', (9, 9), ('rate.TCP',))
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike

from cqopt.catalog import Catalog, load_catalog
from cqopt.catalog.catalog import MAX_RATE
from cqopt.charts.kernel import ChartContext, winning_costs
from cqopt.charts.refine import MAX_DEPTH, MAX_INDEX_CELLS, Leaves, fine_spec
from cqopt.charts.spec import Axis, ChartSpec, candidate_plans
from cqopt.charts.store import (
    ChartSetError,
    check_entry,
    open_chart_set,
    plan_dtype,
    read_leaves,
    read_manifest,
    read_plans,
    read_query_costs,
    read_query_data,
)
from cqopt.costmodel.base import plan_statistics
from cqopt.errors import CqoptError, did_you_mean, printable
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.statistic_check import check_given
from cqopt.optimizer.query.statistics import check_value, check_values, split_name
from cqopt.output import DirectorySnapshot


class Choice(NamedTuple):
    """The plan for one set of statistics, the cell it fell in, and what was clamped."""

    plan: Plan
    plan_id: str
    cell: tuple[int, ...]
    clamped: tuple[str, ...]  # the statistics that lay outside the chart

    def __repr__(self) -> str:
        clamped = f", clamped={self.clamped}" if self.clamped else ""
        return f"Choice(plan_id={self.plan_id!r}, cell={self.cell}{clamped})"


@dataclass(frozen=True)
class Choices:
    """``choose_many``'s answer: one plan index per row, and where rows were clamped."""

    plans: tuple[Plan, ...]
    plan_index: np.ndarray  # (n,), into plans
    cells: np.ndarray  # (n, axes)
    clamped: np.ndarray  # (n,) bool: some statistic lay outside the chart

    @property
    def plan_ids(self) -> np.ndarray:
        return np.asarray([p.id for p in self.plans], dtype=object)[self.plan_index]

    def __repr__(self) -> str:
        """Rows, plans and clamps counted, not the arrays (``plan_ids`` has every row's).

        >>> from types import SimpleNamespace
        >>> Choices((SimpleNamespace(id="A"), SimpleNamespace(id="B")), np.array([0, 1, 0]),
        ...         np.zeros((3, 1), int), np.array([False, True, False]))
        Choices(3 rows: A x2, B x1; 1 clamped)
        """
        counts = np.bincount(self.plan_index, minlength=len(self.plans))
        plans = ", ".join(f"{p.id} x{n}" for p, n in zip(self.plans, counts) if n)
        return (f"Choices({len(self.plan_index)} rows: {plans or 'none'}; "
                f"{int(np.count_nonzero(self.clamped))} clamped)")


@dataclass(frozen=True)
class Staleness:
    stale: bool
    built_with: str  # the catalog fingerprint the charts were built with
    catalog: str  # the given catalog's fingerprint

    def __str__(self) -> str:
        if self.stale:
            return (f"stale: built with catalog {self.built_with}, the catalog is now "
                    f"{self.catalog}; rebuild with cqopt build --force")
        return f"fresh: built with catalog {self.catalog}"


class QueryChart:
    """One query's loaded chart: its spec, plans (sorted by id) and cell table."""

    def __init__(self, spec: ChartSpec, plans: list[Plan], plan_index: np.ndarray,
                 cost: np.ndarray | None, leaves: Leaves | None = None,
                 reduction: dict[str, Any] | None = None,
                 read_cost: Callable[[], np.ndarray] | None = None):
        # A refined chart comes as the uniform index at its finest level (spec's axes
        # have that k, plan_index that shape) and its leaves: choose is a grid's.
        self.spec = spec
        self.plans = tuple(plans)
        # One byte per cell (two past 256 plans), and choose reads it through a memoryview
        # of the same memory: indexing one beats numpy's scalar indexing, and a list once
        # the index outgrows the caches (a refined chart's finest level): ~4x at 2^18.
        narrow = plan_dtype(len(self.plans))
        self.plan_index = np.ascontiguousarray(plan_index, dtype=narrow)
        self._flat = memoryview(self.plan_index.reshape(-1))
        self._cost = cost
        self._read_cost = read_cost  # per-cell costs are read from disk only when asked
        self.leaves = leaves
        self.reduction = reduction
        strides = [math.prod(spec.shape[i + 1:]) for i in range(len(spec.axes))]
        # Per axis, everything the hot path needs, precomputed once.
        # The cell arithmetic is Axis.cells' to the operation, so choose and choose_many agree.
        self._axes = tuple((a.statistic, a.lo, a.hi, a.hi - a.lo, a.k, stride,
                            split_name(a.statistic)[0] == "rate")
                           for a, stride in zip(spec.axes, strides))

    def __repr__(self) -> str:
        axes = " x ".join(f"{a.statistic}[{a.lo:g}, {a.hi:g}]/{a.k}" for a in self.spec.axes)
        used = len(np.unique(self.plan_index))
        cells = (f"{self.spec.n_cells} cells" if self.leaves is None else
                 f"refined: {self.cells_stored} leaves, finest index {self.spec.n_cells} cells")
        return (f"<QueryChart {self.spec.name}: {axes}, {cells}, "
                f"{used} of {len(self.plans)} plans used>")

    @property
    def axes(self) -> tuple[Axis, ...]:
        return self.spec.axes

    @property
    def layout(self) -> str:
        """``"grid"`` (k-regular) or ``"refined"`` (adaptive; see cqopt.charts.refine)."""
        return "grid" if self.leaves is None else "refined"

    @property
    def cells_stored(self) -> int:
        """Regions stored: the grid's cells, or the refined chart's leaves."""
        return self.spec.n_cells if self.leaves is None else len(self.leaves.plan)

    @property
    def cost(self) -> np.ndarray:
        """The winning utility at every grid cell's centroid (grid charts only).

        A loaded chart works it out from its plan index with the model it was
        built with (:func:`cqopt.charts.kernel.winning_costs`; a chart set of
        format 3 or before reads it from its costs file) the first time it is
        asked for: a lookup never pays for it.
        """
        self.require_grid("per-cell costs")
        if self._cost is None and self._read_cost is not None:
            self._cost = self._read_cost()
        return self._cost

    @cost.setter
    def cost(self, value: np.ndarray) -> None:
        self._cost = value

    def require_grid(self, purpose: str) -> QueryChart:
        """This chart if it is a k-regular grid; else a ChartSetError naming ``purpose``."""
        if self.leaves is not None:
            raise ChartSetError(f"query {self.spec.name}: its chart is refined "
                                f"({len(self.leaves.plan)} leaf regions), not a k-regular "
                                f"grid, which {purpose} need; use its leaves, or rebuild it "
                                "without --refine")
        return self

    @property
    def plan_ids(self) -> tuple[str, ...]:
        return tuple(p.id for p in self.plans)

    def check_statistics(self, stats: Mapping[str, Any]) -> tuple[str, ...]:
        """Refuse statistics this query does not have; return the given ones the chart fixes.

        See :func:`cqopt.optimizer.query.statistic_check.check_given`.
        """
        axes = [a.statistic for a in self.spec.axes]
        return check_given(stats, [*axes, *self.spec.fixed], axes,
                           where=f"query {self.spec.name}")

    def choose(self, stats: Mapping[str, float]) -> Choice:
        if len(stats) > len(self._axes):  # more than the axes: some may be no statistic here
            self.check_statistics(stats)
        values = []
        for name, _, _, _, _, _, is_rate in self._axes:
            try:
                x = stats[name]
                x = x if type(x) is float else check_value(name, x)  # no "1_0", b"1", True
            except KeyError:
                raise _missing(self, name, stats) from None
            except (TypeError, ValueError, OverflowError):
                check_value(name, stats[name])  # raises the message naming the statistic
                raise
            if not 0.0 <= x <= (MAX_RATE if is_rate else 1.0):
                check_value(name, x)  # raises the message for NaN, negative, > 1, inf
            values.append(x)
        return self.locate(values)

    def locate(self, values: Sequence[float]) -> Choice:
        """The plan at valid statistic values given in axis order, unchecked.

        :meth:`choose` without its checks, for a caller whose values are
        valid already (a run-time step's estimates); a value outside an axis
        is clamped to its end region and named in the answer.
        """
        flat, cell, clamped = 0, [], []
        for (name, lo, hi, width, k, stride, _), x in zip(self._axes, values):
            if x < lo:
                i = 0
                clamped.append(name)
            elif x > hi:
                i = k - 1
                clamped.append(name)
            else:
                i = int((x - lo) / width * k)
                if i == k:  # x == hi belongs to the last region
                    i = k - 1
            cell.append(i)
            flat += i * stride
        plan = self.plans[self._flat[flat]]
        return Choice._make((plan, plan.id, tuple(cell), tuple(clamped)))  # tuple.__new__

    def choose_many(self, stats: Mapping[str, ArrayLike]) -> Choices:
        for axis in self.spec.axes:
            if axis.statistic not in stats:
                raise _missing(self, axis.statistic, stats)
        self.check_statistics(stats)
        # The statistics broadcast against each other; rows are their flattened broadcast.
        arrays = []
        for axis in self.spec.axes:
            try:
                if np.asarray(stats[axis.statistic]).dtype.kind not in "iuf":
                    check_values(axis.statistic, stats[axis.statistic])  # no text, no bools
                arrays.append(np.asarray(stats[axis.statistic], dtype=np.float64))
            except (TypeError, ValueError, OverflowError):
                check_values(axis.statistic, stats[axis.statistic])  # raises, naming it
                raise
        try:
            values = np.broadcast_arrays(*arrays)
        except ValueError:
            shapes = ", ".join(f"{a.statistic} {x.shape}" for a, x in zip(self.spec.axes, arrays))
            raise ChartSetError(f"query {self.spec.name}: the statistics' arrays do not "
                                f"broadcast together ({shapes})") from None
        per_axis, clamped = [], np.zeros(values[0].size, dtype=bool)
        for axis, x in zip(self.spec.axes, values):
            x = x.ravel()
            check_values(axis.statistic, x)
            idx, outside = axis.cells(x)
            per_axis.append(idx)
            clamped |= outside
        flat = np.ravel_multi_index(per_axis, self.spec.shape)
        return Choices(self.plans, self.plan_index.ravel()[flat], np.stack(per_axis, axis=-1),
                       clamped)


class ChartSet(Mapping[str, QueryChart]):
    """A loaded chart set: a read-only mapping of query names to :class:`QueryChart`.

    ``"Q1" in charts``, ``charts["Q1"]``, ``len(charts)`` and iteration over
    the query names behave as for any mapping; a name it lacks is a
    :class:`ChartSetError` (a ``KeyError`` too) that suggests the closest one.
    """

    def __init__(self, path: Path, manifest: dict[str, Any], charts: dict[str, QueryChart]):
        self.path = path
        self.manifest = manifest
        self.charts = charts

    @property
    def fingerprint(self) -> str:
        """The fingerprint of the catalog the charts were built with."""
        return self.manifest["catalog_fingerprint"]

    def __getitem__(self, query: str) -> QueryChart:
        try:
            return self.charts[query]
        except (KeyError, TypeError):
            raise UnknownQueryError(f"{self.path}: no chart for query {query!r}"
                                    f"{did_you_mean(str(query), self.charts)}; it has "
                                    f"{', '.join(self.charts)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.charts)

    def __len__(self) -> int:
        return len(self.charts)

    def __contains__(self, query: object) -> bool:
        return query in self.charts

    def __repr__(self) -> str:
        queries = ", ".join(f"{name} ({chart.cells_stored} "
                            f"{'cells' if chart.leaves is None else 'leaves'})"
                            for name, chart in self.charts.items())
        return (f"<ChartSet {str(self.path)!r}: {len(self)} "
                f"quer{'y' if len(self) == 1 else 'ies'}: {queries}>")

    def choose(self, query: str, stats: Mapping[str, float]) -> Choice:
        """The chart's plan for ``query`` at ``stats``.

        Parameters
        ----------
        query : str
            A query name of the workload the charts were built from.
        stats : Mapping[str, float]
            Statistic name (``rate.S``, ``sel.S``, ``jsel.A.B``) to value; it
            must hold every axis of the query's chart.

        Returns
        -------
        Choice
            The plan, its id, the cell, and the statistics clamped to the chart.

        Raises
        ------
        ChartSetError
            An unknown query, a missing statistic, or a value that is no
            number, NaN, negative, infinite, or a selectivity above 1.
        """
        chart = self.charts.get(query)
        if chart is None:
            chart = self[query]
        return chart.choose(stats)

    def choose_many(self, query: str, stats: Mapping[str, ArrayLike]) -> Choices:
        """``choose`` for arrays of statistics (broadcast together), at numpy speed."""
        return self[query].choose_many(stats)

    def check(self, catalog: Catalog | str | Path) -> Staleness:
        """Whether the charts were built from a catalog with other costs than ``catalog``.

        Parameters
        ----------
        catalog : Catalog, str or Path
            A loaded catalog, or the path of a catalog TOML file.

        Returns
        -------
        Staleness
            ``.stale`` is true when the fingerprints differ; ``str()`` says
            what to do.

        Raises
        ------
        CatalogError
            ``catalog`` is a path that does not load.
        ChartSetError
            ``catalog`` is neither a catalog nor a path.
        """
        if isinstance(catalog, (str, Path)):
            catalog = load_catalog(catalog)
        elif not isinstance(catalog, Catalog):
            raise ChartSetError(f"check needs a Catalog or the path of a catalog file, "
                                f"got {type(catalog).__name__}")
        now = catalog.fingerprint()
        return Staleness(now != self.fingerprint, self.fingerprint, now)

    def require_fresh(self, catalog: Catalog | str | Path, where: str, *,
                      allow_stale: str | None = None,
                      warn: Callable[[str], None] | None = None) -> Staleness:
        """Refuse charts built from another catalog than ``catalog``, in one line that
        names both fingerprints (:meth:`check`).

        Parameters
        ----------
        catalog : Catalog, str or Path
            As :meth:`check`.
        where : str
            How the message names the chart set (``--charts DIR``).
        allow_stale : str, optional
            How the caller lets stale charts through, said in the message
            (``"pass --allow-stale to look up anyway"``).
        warn : callable, optional
            Given, stale charts are not refused: ``warn`` says they are stale.

        Raises
        ------
        ChartSetError
            The charts are stale and no ``warn`` is given.
        """
        fresh = self.check(catalog)
        if fresh.stale and warn is None:
            raise ChartSetError(f"{where} is {fresh}" + (f", or {allow_stale}" if allow_stale
                                                         else ""))
        if fresh.stale:
            warn(f"{where} is {fresh}")
        return fresh


class UnknownQueryError(ChartSetError, KeyError):
    """A chart set has no chart for the query asked for."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


MAX_READS = 20  # reads of a set that rebuilds keep replacing before load gives up


def load(path: str | Path) -> ChartSet:
    """Read a chart set, checking its format, version, checksums and values.

    Every file is read once, through one snapshot of the directory, and the
    bytes hashed are the bytes parsed: a ``cqopt build --force`` that replaces
    the set meanwhile gives the old set or the new one, never a mix of the two
    and never a false "damaged" (a read the rebuild retired is read again, from
    the new set).

    Parameters
    ----------
    path : str or Path
        The chart set's directory, as ``cqopt build --out`` wrote it.

    Returns
    -------
    ChartSet
        A read-only mapping of query names to their charts.

    Raises
    ------
    ChartSetError
        The directory is missing, not a chart set, damaged, holds values out
        of their domains, or was written by another version of cqopt.
    """
    path = Path(path)
    for _ in range(MAX_READS):
        with open_chart_set(path) as snapshot:
            try:
                return _load(snapshot)
            except ChartSetError:
                if snapshot.is_current():
                    raise  # damage of the set itself, not a rebuild under the read
    raise ChartSetError(f"{path}: replaced {MAX_READS} times while it was being read; stop "
                        "rebuilding it, then load it again")


def _load(snapshot: DirectorySnapshot) -> ChartSet:
    """A chart set read through one snapshot of its directory."""
    path = snapshot.path
    manifest = read_manifest(snapshot)
    try:
        catalog = Catalog.from_dict(manifest["catalog"], f"{path}/manifest.json catalog")
    except Exception as err:  # a damaged manifest must never surface as a bare error
        raise ChartSetError(f"{path}: damaged: its catalog does not load ({err})") from None
    if not isinstance(manifest["queries"], dict):
        raise ChartSetError(f"{path}: damaged: the manifest's queries are not a table")
    charts = {}
    for name, entry in manifest["queries"].items():
        check_entry(path, name, entry, catalog)  # every value in its domain, or one line
        try:
            spec = ChartSpec.from_dict(entry)
            stored_ids = [p["id"] for p in entry["plans"]]
        except (KeyError, TypeError, ValueError, CqoptError) as err:
            raise ChartSetError(f"{path}: damaged: the manifest entry of query {name} is "
                                f"malformed ({err})") from None
        leaves = None
        layout = entry.get("layout", "grid")
        read_cost = None
        if layout == "grid":
            plan_index, cost = read_query_data(snapshot, name, entry, spec.shape, costs=False)
        else:  # "refined": check_entry refuses any layout this cqopt does not read
            leaves, plan_index, cost = _read_refined(snapshot, name, entry, spec)
            spec = fine_spec(spec, leaves)
        plans = read_plans(snapshot, name, entry)  # stored with the chart: nothing re-plans
        if plans is None:  # a chart set from before plans were stored
            try:
                plans = candidate_plans(spec, catalog)
            except CqoptError as err:
                raise ChartSetError(f"{path}: query {name} no longer plans ({err}); it was "
                                    "built by another version of cqopt: rebuild it") from None
        unknown = set(a.statistic for a in spec.axes).difference(
            *(plan_statistics(p) for p in plans))
        if unknown:
            raise ChartSetError(f"{path}: query {name}'s manifest field 'axes' names "
                                f"{printable(sorted(unknown))[:80]}, no statistic its plans "
                                "depend on; rebuild the chart set with cqopt build")
        if [p.id for p in plans] != stored_ids:
            raise ChartSetError(f"{path}: query {name}'s plans are now "
                                f"{[p.id for p in plans]}, the chart set has {stored_ids}: it "
                                "was built by another version of cqopt; rebuild it")
        if layout == "grid":
            read_cost = functools.partial(_grid_costs, path, snapshot.identity, name, entry,
                                          spec, catalog, plans, plan_index)
        charts[name] = QueryChart(spec, plans, plan_index, cost, leaves, entry.get("reduce"),
                                  read_cost)
    return ChartSet(path, manifest, charts)


def _grid_costs(path: Path, identity: tuple[int, int], name: str, entry: dict[str, Any],
                spec: ChartSpec, catalog: Catalog, plans: list[Plan],
                plan_index: np.ndarray) -> np.ndarray:
    """A loaded grid's per-cell costs: from its costs file (format 3 and before), read
    from the set that was loaded, or worked out from its plan index with the model it
    was built with."""
    if entry.get("costs") == "derived":
        return winning_costs(ChartContext(spec, catalog).with_plans(plans), plan_index)
    with open_chart_set(path) as snapshot:
        if snapshot.identity != identity:
            raise ChartSetError(f"{path}: rebuilt since it was loaded, so the costs of query "
                                f"{name} are no longer there; load it again")
        cost = read_query_costs(snapshot, name, entry, spec.shape)
    if cost is None:
        cost = winning_costs(ChartContext(spec, catalog).with_plans(plans), plan_index)
    return cost


def _read_refined(snapshot: DirectorySnapshot, name: str, entry: dict[str, Any],
                  spec: ChartSpec) -> tuple[Leaves, np.ndarray, None]:
    """A refined chart's leaves and its uniform index at the finest level."""
    path = snapshot.path
    columns = read_leaves(snapshot, name, entry)
    try:
        refine = entry["refine"]
        leaves = Leaves(tuple(int(k) for k in refine["k0"]), int(refine["depth"]),
                        columns["level"], columns["cell"], columns["plan"], columns["cost"])
        if leaves.k0 != spec.shape or not 0 <= leaves.depth <= MAX_DEPTH \
                or (len(leaves.level) and int(leaves.level.max()) > leaves.depth):
            raise ValueError(f"k0 {leaves.k0} against axes {spec.shape}, depth {leaves.depth}")
        if math.prod(leaves.fine_shape) > MAX_INDEX_CELLS:
            raise ValueError(f"a finest index of {math.prod(leaves.fine_shape)} cells")
        for level in np.unique(leaves.level):
            size = math.prod(k << int(level) for k in leaves.k0)
            if int(leaves.cell[leaves.level == level].max()) >= size:
                raise ValueError(f"a leaf of level {level} beyond its {size} cells")
        fine = leaves.expand()
    except (KeyError, TypeError, ValueError, CqoptError) as err:
        raise ChartSetError(f"{path}: damaged: query {name}'s refined chart is malformed "
                            f"({err}); rebuild it") from None
    return leaves, fine.astype(np.intp), None


def _missing(chart: QueryChart, name: str, stats: Mapping[str, Any]) -> ChartSetError:
    """A missing axis statistic; the suggestion names the chart's statistic that a given,
    unknown name was probably meant to be (``sel.tcp`` for ``sel.TCP``), not the reverse."""
    axes = [a.statistic for a in chart.spec.axes]
    known = set(axes) | set(chart.spec.fixed)
    given = [str(g) for g in stats if g not in known]
    near = next((g for g in given if did_you_mean(g, [name])), None)
    hint = f"; was {near!r} meant to be {name!r}?" if near else ""
    return ChartSetError(f"query {chart.spec.name}: statistic {name} is missing{hint}; "
                         f"its chart needs {', '.join(axes)}")
