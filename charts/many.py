"""Plans for many queries in one call: a round's statistics, every query's chart at once.

A :class:`Decider` is built once from a chart set (or any mapping of query
names to loaded charts; one chart may serve several names). It stacks the
charts that have the same number of axes into one group and keeps, per query
and axis, the statistic's slot in the round's statistics, the axis's range
and k, and its stride into one index that concatenates every chart's cells.
:meth:`Decider.choose` then reads the round's statistics once (a statistic
such as ``rate.TCP`` is read by every query over TCP), checks each value
once, and finds every query's cell with one numpy expression per group:
:func:`cqopt.charts.spec.axis_cells`, the formula ``Axis.cells`` (and so
``ChartSet.choose_many``) uses, which ``QueryChart.choose`` follows to the
operation. Each query's answer is the one ``ChartSet.choose`` gives for the
same statistics, clamps included: they are named per query in
:attr:`Decisions.clamped`, and a given statistic that no chart has as an
axis (the charts fixed it) is named in :attr:`Decisions.ignored`.

Statistics a query measures for itself (the selectivity of its own
selection, where queries with other predicates read one stream) go in
``own``: query name to its statistics, which override the shared ones for
that query alone.

>>> import pathlib, tempfile
>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.workload import load_workload
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.build import build_local
>>> from cqopt.charts.lookup import load
>>> from cqopt.charts.store import write_chart_set
>>> from cqopt.examples import example
>>> cat = load_catalog(example("dec-pkt.toml"))
>>> specs = [s for s, _ in workload_specs(load_workload(example("workload.toml")), cat,
...                                       {"k": 4})]
>>> out = pathlib.Path(tempfile.mkdtemp()) / "charts"
>>> _ = write_chart_set(out, build_local(specs, cat, progress=False), cat)
>>> decider = Decider(load(out))
>>> decider.statistics
('rate.SF', 'rate.TCP', 'rate.UDP', 'sel.TCP')
>>> d = decider.choose({"rate.TCP": 5000, "rate.UDP": 200, "rate.SF": 100, "sel.TCP": 0.9})
>>> d.plans["Q1"].id, d.clamped
('TCP[πσ]', {'Q1': ('rate.TCP',), 'Q2': ('rate.TCP',)})
>>> d["Q1"]
Choice(plan_id='TCP[πσ]', cell=(3, 3), clamped=('rate.TCP',))
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from cqopt.catalog.catalog import MAX_RATE
from cqopt.charts.lookup import Choice, QueryChart, UnknownQueryError, _missing
from cqopt.charts.spec import axis_cells
from cqopt.charts.store import ChartSetError
from cqopt.errors import CqoptError, did_you_mean
from cqopt.optimizer.plans.plan import Plan
from cqopt.optimizer.query.statistics import check_value, split_name

__all__ = ["Decider", "Decisions", "decide"]


@dataclass(frozen=True)
class _Group:
    """The queries whose charts have ``d`` axes, stacked: one column per query, so that
    numpy's work runs along the queries."""

    rows: np.ndarray  # (n,) the queries' positions in Decider.queries
    slot: np.ndarray  # (d, n) each axis's statistic, into Decider.statistics
    lo: np.ndarray  # (d, n)
    hi: np.ndarray  # (d, n)
    k: np.ndarray  # (d, n)
    stride: np.ndarray  # (d, n) into the chart's C-ordered cells
    offset: np.ndarray  # (n,) the chart's first cell in the concatenated index
    base: np.ndarray  # (n,) the chart's first plan in Decider.plan_table
    layout: np.ndarray  # (n,) which of layouts the query's axes are
    layouts: tuple[tuple[str, ...], ...]  # the distinct statistics of the axes, in order


class Decisions(Mapping[str, Choice]):
    """:meth:`Decider.choose`'s answer: a read-only mapping of query name to :class:`Choice`.

    ``plan_index`` (into ``plan_table``, in ``queries`` order) and
    ``clamped_counts`` (statistic to the number of queries whose chart it lay
    outside) are made by the lookup; ``plan(query)`` reads one plan, and
    ``clamped`` (query to its clamped statistics, only the queries that had
    one) and each :class:`Choice`, equal to ``ChartSet.choose``'s, are made
    when first asked for.
    """

    def __init__(self, decider: Decider, plan_index: np.ndarray,
                 found: list[tuple[np.ndarray, np.ndarray]], ignored: tuple[str, ...]):
        self.queries = decider.queries
        self.plan_table = decider.plan_table
        self.plan_index = plan_index
        self.ignored = ignored  # given statistics no chart has as an axis: the charts fix them
        self._decider = decider
        self._found = found  # per group: cells (d, n), outside (d, n)
        counts = sum((np.bincount(g.slot[outside], minlength=len(decider.statistics))
                      for g, (_, outside) in zip(decider._groups, found)),
                     np.zeros(len(decider.statistics), dtype=np.intp))
        self.clamped_counts = {decider.statistics[i]: int(counts[i])
                               for i in np.flatnonzero(counts).tolist()}

    def plan(self, query: str) -> Plan:
        """The plan chosen for ``query``."""
        return self.plan_table[self.plan_index[self._where(query)]]

    @cached_property
    def plans(self) -> dict[str, Plan]:
        """Query name to its plan."""
        return dict(zip(self.queries, self.plan_table[self.plan_index].tolist()))

    @cached_property
    def clamped(self) -> dict[str, tuple[str, ...]]:
        """Query name to the statistics that lay outside its chart, for the queries that
        had one, in the chart's axis order (``Choice.clamped``)."""
        out: dict[str, tuple[str, ...]] = {}
        for group, (_, outside) in zip(self._decider._groups, self._found):
            hit = outside.any(axis=0)
            if hit.any():
                names = [self.queries[q] for q in group.rows[hit].tolist()]
                out.update(zip(names, _clamps(group, outside, hit)))
        return out

    def _where(self, query: str) -> int:
        position = self._decider._position.get(query)
        if position is None:
            raise UnknownQueryError(f"no decision for query {query!r}"
                                    f"{did_you_mean(str(query), self.queries)}")
        return position[0]

    def __getitem__(self, query: str) -> Choice:
        position = self._decider._position.get(query)
        if position is None:
            self._where(query)  # raises, naming the closest query
        q, g, column = position
        plan = self.plan_table[self.plan_index[q]]
        cells = tuple(self._found[g][0][:, column].tolist())
        return Choice(plan, plan.id, cells, self.clamped.get(query, ()))

    def __iter__(self) -> Iterator[str]:
        return iter(self.queries)

    def __len__(self) -> int:
        return len(self.queries)

    def __contains__(self, query: object) -> bool:
        return query in self._decider._position

    def __repr__(self) -> str:
        clamped = "; ".join(f"{s} outside {n} quer{'y' if n == 1 else 'ies'}' charts"
                            for s, n in self.clamped_counts.items())
        return (f"<Decisions for {len(self)} queries{'; ' + clamped if clamped else ''}"
                f"{'; ignored ' + ', '.join(self.ignored) if self.ignored else ''}>")


class Decider:
    """Chooses many queries' plans per round, with one numpy lookup per shape of chart.

    Parameters
    ----------
    charts : Mapping[str, QueryChart]
        Query name to loaded chart: a :class:`~cqopt.charts.lookup.ChartSet`,
        or a dict (one chart may appear under several names).
    queries : Sequence[str], optional
        The queries to decide, in order; default every query of ``charts``.

    Notes
    -----
    Queries are grouped by their charts' number of axes; within a group each
    query keeps its own statistics, ranges and k. The decider holds a copy of
    every distinct chart's plan index (one or two bytes a cell) and is
    read-only once built: threads may share it.
    """

    def __init__(self, charts: Mapping[str, QueryChart], queries: Sequence[str] | None = None):
        names = tuple(charts) if queries is None else tuple(queries)
        self.queries = names
        self.charts = {name: charts[name] for name in names}  # unknown names: one line
        self.statistics = tuple(sorted({a.statistic for c in self.charts.values()
                                        for a in c.spec.axes}))
        self._slot = {name: i for i, name in enumerate(self.statistics)}
        self._upper = np.array([MAX_RATE if split_name(s)[0] == "rate" else 1.0
                                for s in self.statistics])
        self._known = set(self.statistics).union(*(c.spec.fixed for c in self.charts.values()))
        self._first: dict[str, str] = {}  # statistic -> the first query with it as an axis
        for name, chart in self.charts.items():
            for axis in chart.spec.axes:
                self._first.setdefault(axis.statistic, name)
        offsets: dict[int, tuple[int, int]] = {}  # chart -> its first cell, its first plan
        indexes, plans = [], []
        cells = 0
        for chart in self.charts.values():
            if id(chart) not in offsets:
                offsets[id(chart)] = (cells, len(plans))
                indexes.append(chart.plan_index.reshape(-1))
                plans.extend(chart.plans)
                cells += chart.plan_index.size
        self.plan_table = np.empty(len(plans), dtype=object)
        self.plan_table[:] = plans
        self._index = np.concatenate(indexes) if indexes else np.zeros(0, np.uint8)
        self._groups = self._stack(offsets)
        self._position: dict[str, tuple[int, int, int]] = {}  # query -> (q, group, column)
        for g, group in enumerate(self._groups):
            for column, q in enumerate(group.rows.tolist()):
                self._position[names[q]] = (q, g, column)

    def _stack(self, offsets: dict[int, tuple[int, int]]) -> tuple[_Group, ...]:
        """One group per number of axes d; each holds its queries' axes as (d, n) arrays."""
        charts = list(self.charts.values())
        by_d: dict[int, list[int]] = {}
        for q, chart in enumerate(charts):
            by_d.setdefault(len(chart.spec.axes), []).append(q)
        groups = []
        for d, rows in sorted(by_d.items()):
            axes = [charts[q].spec.axes for q in rows]

            def table(f, dtype, axes=axes, shape=(d, len(rows))):
                return np.array([[f(ax, i) for ax in axes] for i in range(shape[0])],
                                dtype=dtype).reshape(shape)

            slot = table(lambda ax, i: self._slot[ax[i].statistic], np.intp)
            distinct, layout = np.unique(slot, axis=1, return_inverse=True)
            start = np.array([offsets[id(charts[q])] for q in rows], dtype=np.intp).reshape(-1, 2)
            groups.append(_Group(
                rows=np.array(rows, dtype=np.intp), slot=slot,
                lo=table(lambda ax, i: ax[i].lo, np.float64),
                hi=table(lambda ax, i: ax[i].hi, np.float64),
                k=table(lambda ax, i: ax[i].k, np.intp),
                stride=table(lambda ax, i: math.prod(a.k for a in ax[i + 1:]), np.intp),
                offset=start[:, 0], base=start[:, 1],
                layout=layout.reshape(-1),
                layouts=tuple(tuple(self.statistics[i] for i in column)
                              for column in distinct.T.tolist())))
        return tuple(groups)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{g.slot.shape[1]} with {g.slot.shape[0]} axes"
                           for g in self._groups)
        return (f"<Decider: {len(self.queries)} queries ({shapes}), "
                f"{len(self.statistics)} statistics>")

    def choose(self, stats: Mapping[str, Any],
               own: Mapping[str, Mapping[str, Any]] | None = None) -> Decisions:
        """Every query's plan at one round's statistics.

        Parameters
        ----------
        stats : Mapping[str, Any]
            Statistic name (``rate.S``, ``sel.S``, ``jsel.A.B``) to value,
            shared by every query that has the statistic.
        own : Mapping[str, Mapping[str, Any]], optional
            Query name to statistics of that query alone; they override
            ``stats`` for it.

        Returns
        -------
        Decisions
            Per query its plan, cell and clamped statistics, as
            ``ChartSet.choose`` gives them.

        Raises
        ------
        CqoptError
            As ``ChartSet.choose`` raises them, in its words: a statistic that
            no query has, a missing one, a value that is no number, NaN,
            negative, infinite, or a selectivity above 1; or a query in ``own``
            that is not decided here.
        """
        unknown = stats.keys() - self._known
        if unknown:
            raise self._unknown(stats, unknown)
        try:
            values = np.array([stats[s] for s in self.statistics], dtype=np.float64)
            missing = None
        except (KeyError, TypeError, ValueError, OverflowError):
            values, missing = self._read_slowly(stats)
        bad = ~((values >= 0.0) & (values <= self._upper))  # NaN included
        if bad.any():
            for s in np.flatnonzero(bad).tolist():
                if missing is None or s not in missing:
                    check_value(self.statistics[s], values[s])  # raises, in choose's words
        return self._decide(values, stats, own or {}, missing)

    def _read_slowly(self, stats: Mapping[str, Any]) -> tuple[np.ndarray, set[int] | None]:
        """The statistics one by one: a value that is no number is refused in
        ``choose``'s words; a missing one is NaN, its slot in the returned set."""
        values, missing = np.full(len(self.statistics), np.nan), set()
        for s, name in enumerate(self.statistics):
            if name not in stats:
                missing.add(s)
                continue
            try:
                values[s] = float(stats[name])
            except (TypeError, ValueError, OverflowError):
                check_value(name, stats[name])  # raises the message naming the statistic
                raise
        return values, missing or None

    def _unknown(self, stats: Mapping[str, Any], unknown: set[str]) -> Exception:
        """The error for a name no query has, as ``choose`` gives it for the query the
        name was probably meant for (its statistics, its words)."""
        given = list(stats)
        first = min(unknown, key=given.index)
        near = did_you_mean(first, self._known).removeprefix("; did you mean '").strip("'?")
        query = self._first.get(near) or next(
            (q for q, c in self.charts.items() if near in c.spec.fixed), self.queries[0])
        chart = self.charts[query]
        mine = {a.statistic for a in chart.spec.axes} | set(chart.spec.fixed)
        try:
            chart.check_statistics([g for g in given if g in mine or g in unknown])
        except CqoptError as err:
            return err
        raise AssertionError("check_statistics took a statistic no query has")

    def _decide(self, values: np.ndarray, stats: Mapping[str, Any],
                own: Mapping[str, Mapping[str, Any]], missing: set[int] | None) -> Decisions:
        """The lookup proper: per group, gather, patch in ``own``, find cells, index."""
        plan_index = np.empty(len(self.queries), dtype=np.intp)
        patches = self._own_values(own) if own else {}
        found = []
        for g, group in enumerate(self._groups):
            x = values[group.slot]
            if g in patches:
                axes, columns, given = patches[g]
                x[axes, columns] = given
            if missing is not None:
                self._check_present(group, x)
            cell, outside = axis_cells(x, group.lo, group.hi, group.k)
            flat = (cell * group.stride).sum(axis=0) + group.offset
            plan_index[group.rows] = self._index[flat] + group.base
            found.append((cell, outside))
        return Decisions(self, plan_index, found,
                         tuple(s for s in stats if s not in self._slot))

    def _own_values(self, own: Mapping[str, Mapping[str, Any]]
                    ) -> dict[int, tuple[list[int], list[int], list[float]]]:
        """Per group, the axes, columns and values of queries' own statistics, checked
        as ``choose`` checks them."""
        patches: dict[int, tuple[list[int], list[int], list[float]]] = {}
        for query, given in own.items():
            position = self._position.get(query)
            if position is None:
                raise UnknownQueryError(
                    f"own statistics for query {query!r}, which is not decided here"
                    f"{did_you_mean(str(query), self.queries)}; the queries are "
                    f"{', '.join(self.queries[:10])}{', ...' if len(self.queries) > 10 else ''}")
            chart = self.charts[query]
            chart.check_statistics(given)
            axes, columns, values = patches.setdefault(position[1], ([], [], []))
            for i, axis in enumerate(chart.spec.axes):
                if axis.statistic in given:
                    axes.append(i)
                    columns.append(position[2])
                    values.append(check_value(axis.statistic, given[axis.statistic]))
        return patches

    def _check_present(self, group: _Group, x: np.ndarray) -> None:
        """Refuse a statistic some query of ``group`` needs and nobody gave (NaN marks it:
        every given value is checked to be a number)."""
        holes = np.isnan(x)
        if holes.any():
            i, column = (int(a[0]) for a in np.nonzero(holes.T)[::-1])
            chart = self.charts[self.queries[group.rows[column]]]
            raise _missing(chart, chart.spec.axes[i].statistic, {})


def _clamps(group: _Group, outside: np.ndarray, hit: np.ndarray) -> list[tuple[str, ...]]:
    """The clamped statistics of each query of ``group`` that ``hit`` marks, in axis order:
    one tuple made per distinct (axes, clamped axes) pair, however many queries share it."""
    d = outside.shape[0]
    bits = (np.int64(1) << np.arange(d, dtype=np.int64)) @ outside[:, hit].astype(np.int64)
    key = group.layout[hit].astype(np.int64) * (1 << d) + bits
    distinct, inverse = np.unique(key, return_inverse=True)
    made = np.empty(len(distinct), dtype=object)
    for j, value in enumerate(distinct.tolist()):
        layout, mask = divmod(value, 1 << d)
        made[j] = tuple(s for i, s in enumerate(group.layouts[layout]) if mask >> i & 1)
    return made[inverse.reshape(-1)].tolist()


def decide(charts: Mapping[str, QueryChart], stats: Mapping[str, Any],
           own: Mapping[str, Mapping[str, Any]] | None = None) -> Decisions:
    """Every query's plan at ``stats`` in one call: a :class:`Decider` built and used once.

    Build the :class:`Decider` once and call its ``choose`` per round where
    rounds repeat: building stacks every chart.
    """
    return Decider(charts).choose(stats, own)
