"""Refreshing a running query's chart in the background, swapped in whole between rounds.

A chart covers the statistics it was built for. When a run's rounds leave
it, :class:`ChartRefresher` rebuilds the chart from the rounds themselves,
as ``cqopt build --ranges-from`` does from a trace: each axis over the
observed 5th to 95th percentiles, and each fixed statistic the rounds put
more than 2x off re-fixed at its observed median
(:func:`cqopt.charts.ranges.spec_from_rounds`). The build runs on a
background thread with the in-process engine
(:func:`cqopt.charts.build.build_local`), so rounds go on meanwhile.

- :meth:`ChartRefresher.observe` records a round's statistics; once
  ``every`` rounds have been observed since the last rebuild and more than
  ``share`` of them left the chart, a rebuild starts (at most one at a time).
- :meth:`ChartRefresher.current` returns the latest chart. A new chart is
  built completely, then published by one reference assignment, so a caller
  sees the old chart or the new one, never a mix; the run loop reads it once
  per round, so a swap falls between rounds.
- A rebuild that fails leaves the chart as it was; the first failure is said
  (``say``), later ones are counted in ``failures``.

>>> from cqopt.catalog import load_catalog
>>> from cqopt.charts.build import build_local
>>> from cqopt.charts.lookup import QueryChart
>>> from cqopt.charts.spec import workload_specs
>>> from cqopt.charts.workload import load_workload
>>> from cqopt.examples import example
>>> catalog = load_catalog(example("dec-pkt.toml"))
>>> spec = [s for s, _ in workload_specs(load_workload(example("workload.toml")), catalog)
...         if s.name == "Q2"][0]
>>> built = build_local([spec], catalog, progress=False)[0]
>>> refresher = ChartRefresher(QueryChart(spec, built.plans, built.plan_index, built.cost),
...                            catalog, every=20, say=print)
>>> for r in range(20):  # join keys that match far more often than the chart assumes
...     _ = refresher.observe({"rate.TCP": 300.0 + r, "rate.UDP": 250.0, "rate.SF": 90.0,
...                            "jsel.TCP.UDP": 0.12, "jsel.SF.UDP": 0.3, "jsel.SF.TCP": 0.1})
>>> refresher.wait(60)
True
>>> refresher.generation, refresher.current().spec.fixed["jsel.SF.UDP"]
(1, 0.3)
"""

from __future__ import annotations

import sys
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from cqopt.catalog import Catalog
from cqopt.charts.build import build_local
from cqopt.charts.lookup import QueryChart
from cqopt.charts.ranges import spec_from_rounds
from cqopt.charts.spec import COVERAGE_FACTOR, ChartSpec

SHARE = 0.10  # rebuild when more than this share of the rounds since the last left the chart


def _stderr(text: str) -> None:
    print(f"cqopt: {text}", file=sys.stderr, flush=True)


def build_query_chart(spec: ChartSpec, catalog: Catalog) -> QueryChart:
    """``spec``'s chart built in this process, ready for lookups."""
    [chart] = build_local([spec], catalog, progress=False)
    return QueryChart(chart.spec, list(chart.plans), chart.plan_index, chart.cost)


class ChartRefresher:
    """One query's chart, rebuilt in the background from its rounds and swapped in whole.

    Parameters
    ----------
    chart : QueryChart
        The chart the run starts with.
    catalog : Catalog
        The catalog the chart was built with.
    every : int
        Rounds observed since the last rebuild before another may start.
    window : int
        The most recent rounds a rebuild takes its ranges from.
    share : float
        The share of those rounds that must have left the chart for a rebuild.
    percentiles : (float, float)
        The new axes' ranges (as ``cqopt build --ranges-from``).
    say : callable, optional
        Takes one line for the user (default: stderr).
    build : callable, optional
        ``build(spec, catalog) -> QueryChart`` (default :func:`build_query_chart`).
    """

    def __init__(self, chart: QueryChart, catalog: Catalog, *, every: int = 50,
                 window: int = 1000, share: float = SHARE,
                 percentiles: tuple[float, float] = (5.0, 95.0),
                 say: Callable[[str], None] | None = None,
                 build: Callable[[ChartSpec, Catalog], QueryChart] | None = None):
        if every < 1 or window < 1:
            raise ValueError(f"every and window must be >= 1 round, got {every}, {window}")
        self.catalog, self.every, self.share, self.percentiles = catalog, every, share, percentiles
        self.say = say or _stderr
        self.build = build or build_query_chart
        self._published = (chart, 0)  # (chart, generation): one reference, swapped whole
        self.statistics = tuple(a.statistic for a in chart.spec.axes) + tuple(chart.spec.fixed)
        self._rounds: deque[tuple[float, ...]] = deque(maxlen=window)
        self._since = self._outside = 0  # rounds since the last rebuild, and those off it
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.failures = 0
        self.error: BaseException | None = None
        self.changes: list[str] = []  # what the last rebuild changed, in words

    def __repr__(self) -> str:
        chart, generation = self._published
        busy = ", rebuilding" if self.rebuilding else ""
        return (f"<ChartRefresher {chart.spec.name}: generation {generation}, "
                f"{len(self._rounds)} rounds kept{busy}, {self.failures} failures>")

    def current(self) -> QueryChart:
        """The latest chart: built completely before it was published."""
        return self._published[0]

    def latest(self) -> tuple[QueryChart, int]:
        """The latest chart and its generation, read together (one reference)."""
        return self._published

    @property
    def generation(self) -> int:
        """How many rebuilds have been swapped in."""
        return self._published[1]

    @property
    def rebuilding(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def observe(self, stats: Mapping[str, float]) -> bool:
        """Record one round's statistics; True when this started a rebuild."""
        nan = float("nan")
        values = tuple(float(stats.get(n, nan)) for n in self.statistics)
        at = dict(zip(self.statistics, values))
        outside = any(at.get(name, nan) < lo or at.get(name, nan) > hi  # NaN: not judged
                      for name, lo, hi, _ in self.current().spec.coverage(COVERAGE_FACTOR))
        with self._lock:
            self._rounds.append(values)
            self._since += 1
            self._outside += outside
            due = self._since >= self.every and self._outside > self.share * self._since
        return self.refresh() if due else False

    def refresh(self) -> bool:
        """Start a rebuild from the rounds kept, unless one runs; True when one started."""
        with self._lock:
            if self.rebuilding or not self._rounds:
                return False
            rounds = np.array(self._rounds, dtype=np.float64)
            self._since = self._outside = 0
            chart, generation = self._published
            self._thread = threading.Thread(
                target=self._rebuild, args=(chart, generation, rounds),
                name=f"cqopt-refresh-{chart.spec.name}", daemon=True)
            self._thread.start()
        return True

    def _rebuild(self, chart: QueryChart, generation: int, rounds: np.ndarray) -> None:
        """Build the new chart off the lock, then publish it in one assignment."""
        name = chart.spec.name
        try:
            observed = dict(zip(self.statistics, rounds.T))
            spec, changes = spec_from_rounds(chart.spec, observed, self.percentiles)
            new = self.build(spec, self.catalog)
            if not isinstance(new, QueryChart) or new.spec.name != name:
                raise TypeError(f"the rebuild gave {type(new).__name__}, not query {name}'s "
                                "chart")
        except Exception as err:  # noqa: BLE001 - the run must go on with the chart it has
            with self._lock:
                self.failures += 1
                first, self.error = self.failures == 1, err
            if first:
                self.say(f"warning: {name}: rebuilding the chart from the run's rounds failed "
                         f"({err}); the run goes on with the chart it has (said once)")
            return
        with self._lock:
            self.changes = changes
            self._published = (new, generation + 1)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for a running rebuild; True when none runs any more."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        return not self.rebuilding

    def state(self) -> dict[str, Any]:
        """What a run's report says of the refresh."""
        return {"generation": self.generation, "failures": self.failures,
                "error": None if self.error is None else str(self.error),
                "changes": list(self.changes)}
