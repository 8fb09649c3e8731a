"""Run-time plan switching for one query: OM's Algorithm 2.

An :class:`AdaptiveQuery` runs one query round by round: estimate the
round's statistics, look the estimate up in the chart, run the plan, observe
the round's actual statistics, update the estimators. By default
(``estimator="sample"``, :data:`~cqopt.runtime.estimators.DEFAULT_ESTIMATOR`, as
``cqopt fidelity`` and ``cqopt run``) the estimate of a statistic a round gives is
that round's own value, so :meth:`~AdaptiveQuery.step` picks the plan
``charts.choose`` picks at the same statistics; OM's Algorithm 2 predicts it
from the rounds observed so far (``estimator="decay"`` and the others). It counts **moves** (the estimate entered another region than
the previous round's) and **switches** (the plan run differs from the
previous round's). Before the first observation a statistic is estimated at
the middle of its chart axis (or its fixed value).

An optional :class:`Hysteresis` (off by default) keeps the current plan
until the chart's new plan is cheaper by ``margin`` (relative utility at the
estimate) for ``rounds`` rounds in a row; a
:class:`~cqopt.runtime.choice.PricedSwitch` instead switches when the saving
over the next rounds pays for handing over the new plan's join state.
``choice="expected"`` and ``fallback=ROUNDS`` add uncertainty-aware choice and
regret-aware fallback (see :mod:`cqopt.runtime.choice`). With an
:class:`~cqopt.runtime.offchart.OffChart` (:meth:`AdaptiveQuery.costed`'s
default), a round whose statistics the chart does not cover runs the plan
costed cheapest at them, and is counted in ``off_chart_rounds``.

>>> from types import SimpleNamespace as Plan
>>> from cqopt.charts.spec import Axis, ChartSpec
>>> from cqopt.charts.lookup import QueryChart
>>> import numpy as np
>>> spec = ChartSpec("q", "SELECT 1", (Axis("sel.S", 0.0, 1.0, 2),))
>>> chart = QueryChart(spec, [Plan(id="A"), Plan(id="B")], np.array([0, 1]), np.zeros(2))
>>> aq = AdaptiveQuery(chart, estimator="last")  # starts at sel.S = 0.5, the axis middle
>>> [aq.step({"sel.S": s}).plan_id for s in (0.2, 0.9, 0.8, 0.1)]
['B', 'A', 'B', 'B']
>>> aq.moves, aq.switches
(2, 2)
"""

from __future__ import annotations

import collections

import math
import operator
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from cqopt.catalog.catalog import MAX_RATE
from cqopt.charts.lookup import ChartSet, QueryChart
from cqopt.errors import CqoptError
from cqopt.optimizer.query.errors import QueryError
from cqopt.optimizer.query.statistic_check import check_given
from cqopt.optimizer.query.statistics import check_value, split_name
from cqopt.runtime.choice import ExpectedChoice, PricedSwitch, RegretFallback
from cqopt.runtime.estimators import (
    DEFAULT_ESTIMATOR,
    ESTIMATORS,
    DecayMeans,
    ThresholdHistograms,
    make_estimator,
)
from cqopt.runtime.offchart import OffChart, OffChartChoice


@dataclass(frozen=True)
class Hysteresis:
    """Switch only when the new plan is cheaper by ``margin`` for ``rounds`` rounds."""

    margin: float = 0.05
    rounds: int = 3


# Rounds whose mean judges whether a statistic the chart fixes has left its cover.
LEVEL_ROUNDS = 20


class RoundOutcome(NamedTuple):
    """What one round of :meth:`AdaptiveQuery.step` did (a tuple: cheap to make every round)."""

    round: int
    estimate: dict[str, float]  # the statistics the plan was chosen for
    cell: tuple[int, ...]
    plan: Any  # the plan run this round (a Plan, or whatever the chart holds)
    plan_id: str
    chart_plan_id: str  # what the chart said; differs from plan_id under hysteresis
    move: bool
    switch: bool
    dropped: tuple[str, ...] = ()  # invalid observations left out (on_invalid="drop")
    off_chart: bool = False  # the chart did not cover the estimate: the plans were costed
    off_chart_reason: str = ""  # what left the chart, when off_chart


class AdaptiveQuery:
    """One continuous query switching plans at chart region boundaries."""

    def __init__(self, chart: QueryChart | ChartSet, query: str | None = None, *,
                 estimator: str = DEFAULT_ESTIMATOR, d: int = 5,
                 decay: float = 0.5, jsel_threshold: float = 0.2,
                 hysteresis: Hysteresis | PricedSwitch | None = None,
                 cost: Callable | None = None,
                 on_invalid: str = "raise", choice: str = "point", residuals: int = 20,
                 fallback: int | None = None, plan_costs: Callable | None = None,
                 switch_cost: Callable | None = None, off_chart: OffChart | None = None):
        """Start a query on its chart.

        Parameters
        ----------
        chart : QueryChart or ChartSet
            The query's chart, or a loaded chart set together with ``query``.
        query : str, optional
            The query's name in ``chart`` when that is a chart set.
        estimator : {"sample", "decay", "last", "ewma", "holt", "median", "kalman"}
            How a round's statistics are estimated. ``"sample"``, the default
            (:data:`~cqopt.runtime.estimators.DEFAULT_ESTIMATOR`, the CLI's too):
            the statistics :meth:`step` is given are the round's own, measured
            before it runs, and its plan is chosen at them (what ``charts.choose``
            gives there); a statistic a round does not give is predicted by OM's
            decay mean. The others forecast rates and selectivities from earlier
            rounds (OM's Algorithm 2; ``"decay"`` is OM's decay mean), join
            selectivities by OM's threshold histogram. ``d`` and ``decay`` are
            the decay mean's window and factor.
        hysteresis : Hysteresis or PricedSwitch, optional
            Keep the current plan until another wins by a margin (the
            default :class:`Hysteresis`), or until the saving over the next
            rounds pays for the switch's state handover (:class:`PricedSwitch`,
            needs ``switch_cost``); both need ``cost``.
        choice : {"point", "expected"}
            Run the chart's plan at the point estimate (OM), or the plan of
            lowest mean cost over the estimate moved by the last ``residuals``
            rounds' estimation errors (:class:`cqopt.runtime.choice.ExpectedChoice`;
            needs ``plan_costs``).
        fallback : int, optional
            A sliding window in rounds: while a fixed plan has cost less than
            the chart's plans over it, run that plan
            (:class:`cqopt.runtime.choice.RegretFallback`; needs ``plan_costs``).
        plan_costs : callable, optional
            ``stats -> array`` of every chart plan's utility, vectorized over
            arrays of statistics; :func:`cqopt.runtime.choice.chart_costing` makes
            it, and ``switch_cost`` ``(plan_a, plan_b, stats) -> utility``, from a
            catalog.
        off_chart : OffChart, optional
            Decides rounds the chart does not cover (an axis out of its range,
            a fixed statistic more than 2x off): every plan is costed at the
            estimate and the cheapest runs (:mod:`cqopt.runtime.offchart`).
        on_invalid : {"raise", "drop"}
            What :meth:`step` does with an observation that is no valid value
            (NaN, an infinite or negative rate, a selectivity outside [0, 1],
            no number): refuse the round (default), or leave the value out
            with a warning and list it in the round's ``dropped``.

        Raises
        ------
        CqoptError
            ``chart`` is neither a chart nor a chart set with a query name.
        """
        self.chart = _query_chart(chart, query)
        if on_invalid not in ("raise", "drop"):
            raise CqoptError(f"on_invalid={on_invalid!r}: expected 'raise' or 'drop'")
        self.on_invalid = on_invalid
        self.hysteresis = hysteresis
        self.cost = cost  # (plan, stats) -> utility, needed by the hysteresis only
        if hysteresis and cost is None:
            raise ValueError("hysteresis needs a cost function (plan, stats) -> utility")
        # Per statistic the largest valid value: step's check, and the estimates' bound.
        # A rate above MAX_RATE is refused, so no sum over a window can overflow.
        self._upper = {name: MAX_RATE if split_name(name)[0] == "rate" else 1.0
                       for name in self.statistics}
        if estimator != "sample" and estimator not in ESTIMATORS:
            raise CqoptError(f"estimator={estimator!r}: expected 'sample' (the default) or "
                             f"one of {', '.join(map(repr, ESTIMATORS))}")
        self.own_statistics = estimator == "sample"
        self._estimators("decay" if self.own_statistics else estimator, d, decay,
                         jsel_threshold)
        self._limits = tuple((name, self._upper[name]) for name in self._names)
        self._policies(choice, residuals, fallback, plan_costs, switch_cost)
        self.off_chart = off_chart
        self.rounds = self.moves = self.switches = self.off_chart_rounds = 0
        self.cell: tuple[int, ...] | None = None
        self.plan = None
        self._pending = 0  # rounds the chart has preferred another plan (hysteresis)

    @classmethod
    def costed(cls, chart: QueryChart | ChartSet, catalog, query: str | None = None,
               **options: Any) -> AdaptiveQuery:
        """An adaptive query whose policies cost plans with the chart's model on ``catalog``.

        The hysteresis, expected-cost choice, fallback, priced switches and
        off-chart choice need plan costs; this gives them the chart's own (its
        model, memory unit and weights), so any of :class:`AdaptiveQuery`'s
        options can be passed. Rounds the chart does not cover are costed at
        their point unless ``off_chart=False``.

        Parameters
        ----------
        chart, query :
            As :class:`AdaptiveQuery`.
        catalog : Catalog
            The catalog the chart was built with (``charts.catalog``).
        **options :
            :class:`AdaptiveQuery`'s keyword options (estimator, d, decay,
            hysteresis, choice, residuals, fallback, on_invalid, ...), and
            ``off_chart`` (bool, default True).

        Returns
        -------
        AdaptiveQuery
        """
        from cqopt.runtime.choice import chart_costing

        query_chart = _query_chart(chart, query)
        plan_costs, switch_cost, cost = chart_costing(query_chart, catalog)
        off_chart = OffChart(query_chart, catalog) if options.pop("off_chart", True) else None
        return cls(query_chart, cost=cost if options.get("hysteresis") else None,
                   plan_costs=plan_costs, switch_cost=switch_cost, off_chart=off_chart,
                   **options)

    @property
    def statistics(self) -> tuple[str, ...]:
        return tuple(a.statistic for a in self.chart.spec.axes) + tuple(self.chart.spec.fixed)

    def _estimators(self, kind: str, d: int, decay: float, jsel_threshold: float) -> None:
        """The statistics' estimators; with OM's decay mean, one window array for all.

        ``self._names`` orders the statistics as the estimators hold them (the
        decay means' first), and ``self._current`` is the next round's
        estimate of each, in that order: a step reads it and a round's
        observation brings it up to date.
        """
        statistics = self.statistics
        self.initial = self.chart.spec.centre()
        jsel = [n for n in statistics if split_name(n)[0] == "jsel"]
        others = [n for n in statistics if n not in jsel]
        means = others if kind == "decay" else []
        scalar = [n for n in others if n not in means]
        self._means = DecayMeans(len(means), d, decay, [self._upper[n] for n in means],
                                 [self.initial[n] for n in means])
        self._histograms = ThresholdHistograms(len(jsel), threshold=jsel_threshold,
                                               initial=[self.initial[n] for n in jsel])
        self._scalar = [make_estimator(kind, d=d, decay=decay) for n in scalar]
        self._names = (*means, *jsel, *scalar)
        self._n_means, self._n_vector = len(means), len(means) + len(jsel)
        self._current = [self.initial[n] for n in self._names]
        self._scalar_current = self._current[self._n_vector:]
        # The statistics the chart fixes, by their place in _current, and their last
        # values (see _choose).
        self._fixed_at = tuple((n, self._names.index(n)) for n in self.chart.spec.fixed
                               if n in self._names)
        # seeded with the chart's own value, half a window's worth: the prior
        self._levels = {n: collections.deque([self.chart.spec.fixed[n]] * (LEVEL_ROUNDS // 2),
                                             maxlen=LEVEL_ROUNDS - 1) for n, _ in self._fixed_at}
        axes = [self._names.index(a.statistic) for a in self.chart.spec.axes]
        self._axis_values = (operator.itemgetter(*axes) if len(axes) > 1 else
                             lambda current, i=axes[0]: (current[i],))

    @property
    def estimators(self) -> dict[str, Any]:
        """Each statistic's estimator (the decay means show as views of their shared array)."""
        k, m = self._n_means, self._n_vector
        found = {n: _View(self._means, i) for i, n in enumerate(self._names[:k])}
        found.update((n, _View(self._histograms, i)) for i, n in enumerate(self._names[k:m]))
        found.update(zip(self._names[m:], self._scalar))
        return {n: found[n] for n in self.statistics}

    def estimate(self) -> dict[str, float]:
        """The statistics expected for the next round."""
        return dict(zip(self._names, self._current))

    def _policies(self, choice: str, residuals: int, fallback: int | None,
                  plan_costs: Callable | None, switch_cost: Callable | None) -> None:
        """Set up the choice, fallback and switch-pricing policies (cqopt.runtime.choice)."""
        if choice not in ("point", "expected"):
            raise CqoptError(f"choice={choice!r}: expected 'point' or 'expected'")
        if fallback is not None and (isinstance(fallback, bool) or not fallback >= 1):
            raise CqoptError(f"fallback={fallback!r}: needs a window of >= 1 rounds")
        if (choice == "expected" or fallback) and plan_costs is None:
            raise CqoptError("choice='expected' and fallback need plan_costs (stats -> every "
                             "plan's cost); make it with cqopt.runtime.choice.chart_costing")
        if isinstance(self.hysteresis, PricedSwitch) and switch_cost is None:
            raise CqoptError("PricedSwitch needs switch_cost (plan_a, plan_b, stats) -> "
                             "utility; make it with cqopt.runtime.choice.chart_costing")
        self.choice_mode, self.plan_costs, self.switch_cost = choice, plan_costs, switch_cost
        self._position = {id(p): i for i, p in enumerate(self.chart.plans)}
        self.expected = None
        if choice == "expected":
            spec = self.chart.spec
            cells = plan_costs(spec.centroid_stats(np.arange(spec.n_cells)))
            self.expected = ExpectedChoice(self.chart, np.reshape(
                cells, (len(self.chart.plans), spec.n_cells)), residuals)
        self.fallback = None if not fallback else RegretFallback(len(self.chart.plans),
                                                                 int(fallback))
        self._observed = dict(self.initial)  # the last value seen of each statistic

    def choose(self, current: list[float] | None = None) -> tuple[dict[str, float], Any]:
        """The estimate (by default the next round's) and the chart's choice there."""
        estimate, choice, _ = self._choose(current)
        return estimate, choice

    def _choose(self, current: list[float] | None = None
                ) -> tuple[dict[str, float], Any, OffChartChoice | None]:
        """:meth:`choose`, and the off-chart decision when the chart did not cover it."""
        if current is None:
            current = self._current
        estimate = dict(zip(self._names, current))
        choice = self.chart.locate(self._axis_values(current))
        if self.off_chart is not None:
            # Whether a statistic the chart fixes left its cover is judged at its mean
            # over the last LEVEL_ROUNDS rounds, this one included, not at one round's
            # measure: a round's sample of a join selectivity of 0.001 is 0 more often
            # than not, which is sampling, not the chart's cover being left (a jump to
            # 0.1 still leaves it at once). Axes are judged at the round's own values;
            # the plans are costed at the round's values.
            judged = dict(estimate)
            for name, kept in self._levels.items():
                x = estimate[name]
                if x == x:
                    judged[name] = (sum(kept) + x) / (len(kept) + 1)
            decided = self.off_chart.choose(estimate, choice, judged)
            if decided.off_chart:  # costed at the point: the chart's cells say nothing here
                if decided.plan is not choice.plan:
                    choice = choice._replace(plan=decided.plan, plan_id=decided.plan_id)
                return estimate, choice, decided
        if self.expected is not None:
            index = self.expected.choose(estimate)
            if index is not None and self.chart.plans[index] is not choice.plan:
                plan = self.chart.plans[index]
                choice = choice._replace(plan=plan, plan_id=_id(plan))
        return estimate, choice, None

    def observe(self, actual: Mapping[str, float]) -> None:
        """Feed a round's observed statistics (valid values) to the estimators."""
        get, nan = actual.get, math.nan
        self._observe([nan if (v := get(n)) is None else float(v) for n in self._names])

    def _observe(self, values: list[float]) -> None:
        """Feed one value per statistic, in ``self._names``' order (NaN: not observed)."""
        k, m = self._n_means, self._n_vector
        means, histograms = self._means, self._histograms
        if k:
            means.observe(values[:k])
        if m > k:
            histograms.observe(values[k:m])
        current = self._scalar_current
        if current:
            upper = self._limits[m:]
            for i, (estimator, x) in enumerate(zip(self._scalar, values[m:])):
                if x == x:
                    estimator.observe(x)
                    forecast = estimator.estimate()
                    if forecast is not None:  # a trend may forecast past the range
                        current[i] = min(max(forecast, 0.0), upper[i][1])
        self._current = means.values + histograms.values + current

    def _learning(self, estimate: Mapping[str, float], chart_plan,
                  actual: Mapping[str, float]) -> Callable[[], None]:
        """What a round teaches the policies: scores every plan at its statistics now
        (``plan_costs`` may fail) and returns the update, which cannot."""
        observed = {**self._observed, **actual} if self.fallback is not None else None
        costs = np.ravel(self.plan_costs(observed)) if observed is not None else None

        def learn() -> None:
            if self.expected is not None:
                self.expected.record(estimate, actual)
            if observed is not None:
                self._observed = observed
                self.fallback.record(self._position[id(chart_plan)], costs)
        return learn

    def __repr__(self) -> str:
        plan = getattr(self.plan, "id", None)
        return (f"<AdaptiveQuery {self.chart.spec.name}: round {self.rounds}, plan "
                f"{plan if plan is not None else '(none yet)'}, {self.moves} moves, "
                f"{self.switches} switches>")

    def step(self, actual: Mapping[str, float], *,
             measured: Mapping[str, float] | bool | None = None) -> RoundOutcome:
        """Algorithm 2: estimate, look up, run one round, observe its statistics.

        ``actual`` is checked before anything changes: a statistic the query
        does not have is refused, and so is an invalid value unless
        ``on_invalid="drop"``; a refused round leaves the query as it was.

        Parameters
        ----------
        actual : mapping of str to float
            The round's observed statistics, fed to the estimators after the choice;
            with ``estimator="sample"`` (the default) and no ``measured``, the plan is
            chosen at them too.
        measured : mapping of str to float, optional
            The round's own statistics as the engine measured or sampled them
            before running it (a micro-batch engine holds the round when it
            chooses: RTStream's sampler plan). The plan is chosen at these, for
            the statistics they give, instead of at the prediction from earlier
            rounds; the others are predicted as usual. ``True``: ``actual`` itself
            was measured before the round ran (an engine that holds the round
            whole), checked once.

        Raises
        ------
        QueryError
            ``actual`` or ``measured`` names a statistic the query lacks, or holds an
            invalid value.

        Examples
        --------
        >>> from types import SimpleNamespace as Plan
        >>> from cqopt.charts.spec import Axis, ChartSpec
        >>> from cqopt.charts.lookup import QueryChart
        >>> spec = ChartSpec("q", "SELECT 1", (Axis("sel.S", 0.0, 1.0, 2),))
        >>> chart = QueryChart(spec, [Plan(id="A"), Plan(id="B")], np.array([0, 1]), None)
        >>> aq = AdaptiveQuery(chart, estimator="last")
        >>> aq.step({"sel.S": 0.2}).plan_id  # predicted: the axis middle, 0.5
        'B'
        >>> aq.step({"sel.S": 0.9}, measured={"sel.S": 0.85}).plan_id  # not the prediction 0.2
        'B'
        >>> aq.step({"sel.S": 0.1}, measured={"sel.S": 0.15}).plan_id  # not the prediction 0.9
        'A'
        >>> aq.step({"sel.S": 0.8}, measured=True).plan_id  # chosen at the round's own 0.8
        'B'
        """
        # Whatever can fail (the checks, a lookup, the cost functions a policy calls)
        # runs before anything changes: a failed step leaves the query as it was.
        values, dropped = self._checked(actual)
        current = self._current
        if measured is not None and measured is not False:
            now = values if measured is True else self._checked(measured)[0]
            current = [x if x == x else c for x, c in zip(now, current)]
        elif self.own_statistics:  # the round's own statistics are the ones given
            current = [x if x == x else c for x, c in zip(values, current)]
        estimate, choice, off_chart = self._choose(current)
        plan = choice.plan
        previous, cell = self.plan, choice.cell
        if self.fallback is not None and (fixed := self.fallback.plan()) is not None:
            plan = self.chart.plans[fixed]
        pending = 0
        if self.hysteresis and previous is not None and plan is not previous:
            plan, pending = self._hold(plan, estimate)
        learn = None
        if self.expected is not None or self.fallback is not None:
            learn = self._learning(estimate, choice.plan, {n: x for n, x in
                                                           zip(self._names, values) if x == x})
        move = self.cell is not None and cell != self.cell
        switch = previous is not None and plan is not previous
        # _make: tuple.__new__ without the named arguments' parsing, a third of the cost.
        chart_plan_id = choice.plan_id if off_chart is None else off_chart.chart_plan_id
        outcome = RoundOutcome._make((self.rounds, estimate, cell, plan,
                                      choice.plan_id if plan is choice.plan else _id(plan),
                                      chart_plan_id, move, switch, dropped,
                                      off_chart is not None,
                                      "" if off_chart is None else off_chart.reason))
        # From here on, float arithmetic on values within their bounds: nothing can fail.
        self._observe(values)
        for name, i in self._fixed_at:
            if values[i] == values[i]:
                self._levels[name].append(values[i])
        if learn is not None:
            learn()
        self._pending = pending
        self.moves += move
        self.switches += switch
        self.off_chart_rounds += off_chart is not None
        self.cell, self.plan = cell, plan
        self.rounds += 1
        return outcome

    def _checked(self, actual: Mapping[str, Any]) -> tuple[list[float], tuple[str, ...]]:
        """The round's values in ``self._names``' order (NaN where none is given or one
        was dropped), and the names of those dropped."""
        if not isinstance(actual, Mapping):
            raise CqoptError(f"step needs a mapping of statistic name to value, e.g. "
                             f"{{'rate.S': 120.0}}, got {type(actual).__name__}")
        values, given = [], 0
        get, append = actual.get, values.append
        for name, hi in self._limits:  # the common case, in floats: every value valid
            x = get(name, _ABSENT)
            if type(x) is not float:
                if x is _ABSENT:
                    append(math.nan)
                    continue
                if isinstance(x, (str, bytes, bool)):
                    break  # float() reads "1_0" as 10 and True as 1: check_value says no
                try:
                    x = float(x)
                except (TypeError, ValueError, OverflowError):
                    break  # the checks below say what is wrong
            if not 0.0 <= x <= hi:  # NaN fails it too
                break
            append(x)
            given += 1
        else:
            if given == len(actual):  # and no name the query lacks
                return values, ()
        where = f"query {self.chart.spec.name}"
        check_given(actual, self.statistics, where=where)
        good, dropped = {}, []
        for name, value in actual.items():
            try:
                good[name] = check_value(name, value)
            except QueryError as err:
                if self.on_invalid == "raise":
                    raise QueryError(f"{where}, round {self.rounds}: {err}; the round is "
                                     "refused and the query keeps its estimate (or pass "
                                     "on_invalid='drop')") from None
                warnings.warn(f"{where}, round {self.rounds}: {err}; dropped", stacklevel=3)
                dropped.append(name)
        return [good.get(n, math.nan) for n in self._names], tuple(dropped)

    def _hold(self, new_plan, estimate: dict[str, float]) -> tuple[Any, int]:
        """The plan to run instead of ``new_plan`` under the hysteresis, and the rounds
        the chart will then have preferred another plan (a read: step commits it)."""
        if isinstance(self.hysteresis, PricedSwitch):
            saving = self.cost(self.plan, estimate) - self.cost(new_plan, estimate)
            price = self.switch_cost(self.plan, new_plan, estimate)
            return (new_plan if saving * self.hysteresis.horizon > price else self.plan), 0
        current = self.cost(self.plan, estimate)
        better = self.cost(new_plan, estimate)
        gain = current / better - 1 if better > 0 else math.inf
        pending = self._pending + 1 if gain > self.hysteresis.margin else 0
        if pending >= self.hysteresis.rounds:
            return new_plan, 0
        return self.plan, pending


def _query_chart(chart: Any, query: str | None) -> QueryChart:
    """The QueryChart an AdaptiveQuery runs on, from a chart or a chart set and a name."""
    if isinstance(chart, ChartSet):
        if query is None:
            raise CqoptError(f"AdaptiveQuery needs the query's name with a chart set: "
                             f"AdaptiveQuery(charts, 'Q1'); the set has {', '.join(chart)}")
        return chart[query]
    if query is not None:
        raise CqoptError(f"AdaptiveQuery got query {query!r} but a single chart, not a "
                         "chart set; pass AdaptiveQuery(charts, name) or AdaptiveQuery(chart)")
    if not all(hasattr(chart, a) for a in ("spec", "choose", "plans")):
        raise CqoptError(f"AdaptiveQuery needs a QueryChart (charts['Q1']) or a ChartSet and a "
                         f"query name, got {type(chart).__name__}")
    return chart


class _View:
    """One statistic's estimate inside an estimator of several (``estimators[name]``)."""

    def __init__(self, estimators: DecayMeans | ThresholdHistograms, i: int):
        self._estimators, self._i = estimators, i

    def estimate(self) -> float | None:
        return self._estimators.values[self._i]


_ABSENT = object()  # a statistic the round does not give (None is a value, and refused)


def _id(plan) -> str:
    # Not getattr(plan, "id", str(plan)): the default is built on every call, and a
    # Plan's str walks its graph (60 µs a round).
    plan_id = getattr(plan, "id", None)
    return str(plan) if plan_id is None else plan_id

