"""Overload bounds across a run's queries, live: shedding on the driver, RTStream's
negotiation, PIPES' windows and Babcock's shedders on shared segments.

Per micro-batch, each query's complete rounds are first observed and their
plans chosen (:meth:`RoundRunner.prepare <cqopt.spark.run.rounds.RoundRunner.prepare>`
gives a :class:`Due`); then :func:`bound_batch` decides what the bounds ask of
every query's rounds together; then they run. ``cqopt run`` bounds one query
so, ``cqopt run --workload`` all of its queries due in the micro-batch.

1. **Memory** (``--memory-budget``; PIPES' resource manager, seed 002 §4.3,
   as :func:`~cqopt.replay.overload.memory_replay` replays it): each query
   holds the memory its chart's model predicts for its chosen plan at its
   round's statistics (:func:`~cqopt.replay.overload.chosen_memory`; the
   largest of its rounds due in the micro-batch), summed over the queries with
   rounds due. Over the budget, every window shrinks to the same fraction f
   of its range ``[window_min · W, W]``, the largest that fits
   (:func:`~cqopt.replay.overload.shrink_windows`), and a round runs on the
   tuples of the last ``w = window_min · W + f · (W − window_min · W)``
   seconds of its window only (:func:`~cqopt.spark.run.driver_rows.window_rows` on the driver,
   :func:`window_condition` on Spark). Answers are not scaled: a smaller
   window is a smaller window, not a sample. Under the budget nothing changes.
2. **Negotiation** (``--deadline`` with ``--negotiate``; RTStream §4.3,
   seed 000, :func:`~cqopt.runtime.overload.qos_negotiation.negotiate`):
   every round due is an instance whose seconds at a kept share are the
   engine model's for its chosen plan at its round's statistics, as
   :meth:`RoundRunner.shed <cqopt.spark.run.rounds.RoundRunner.shed>`
   predicts (:func:`round_seconds`). Readings: the i-th round due of a query
   (from 0, in round order) must finish ``(i + 1) · D`` after the micro-batch
   starts, the rounds of all queries sharing each deadline (a backlog of k
   rounds has k deadlines' time); a query's quality is the share it keeps,
   down to ``min_kept`` (its least QoS). The common level L that meets every
   deadline is found by the negotiation; every query keeps the share L of
   each stream's tuples of every round due. The level is logged per round.
3. **Shedding on the driver.** Where a round's tuples are on the driver (the
   micro-batch collected as Arrow, the rounds due holding at most
   :data:`~cqopt.spark.run.staging.LOCAL_FRAME_TUPLES`), what a deadline sheds is sampled there
   (:func:`~cqopt.spark.run.driver_rows.sample_rows`, Bernoulli per tuple, seeded by the round) before
   Spark is handed the round: Spark never reads a shed tuple, and the engine
   model's prediction has no term for scanning them. Rounds whose tuples are
   only on Spark are sampled there (``DataFrame.sample``), after Spark reads
   them. COUNT and SUM answers are scaled by ``1 / kept`` either way
   (:func:`~cqopt.spark.plan_frame.scaled_answers`).

4. **Shedders on shared segments** (``--deadline`` with ``--shed-shared``;
   Babcock, Datar and Motwani, seed 004 §3,
   :func:`~cqopt.spark.run.shared_shedding.shed_shared`): the rounds due of
   the COUNT and SUM queries over one stream whose tuples are on the driver
   form, per span of time, one data-flow diagram: a selection operator per
   distinct selection of a stream, shared by the queries with that selection,
   and each query's aggregate below it. With each query's error constant C_i
   from its contributing tuples, the largest λ = 1/ε_max meeting the load
   equation at capacity ``(D − the plans' fixed seconds) / W`` gives
   ``P_i = min(1, C_i·λ)``, and Algorithm 1 the shedders: a segment's tuples
   are sampled once, at the largest P_i of its queries, seeded by the round and
   the stream, then each query's by its own rate; answers are scaled by
   ``1/P_i``. The readings of t_i and of the capacity are that module's.
   The shedders placed, P_i and the bound ε_i are logged per round. Other
   queries, and rounds whose tuples are only on Spark, are shed by 3., each
   query at its own inputs, said once per query.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from cqopt.optimizer.query.statistics import rate_name
from cqopt.runtime.overload.simulate import scaled_rates

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from cqopt.spark.run.rounds import RoundRunner

# How far RTStream's common QoS level falls per try (as the replay negotiates).
NEGOTIATION_STEP = 0.01


@dataclass
class Due:
    """A query's complete rounds of one micro-batch, observed and their plans chosen, not
    yet run (:meth:`RoundRunner.prepare <cqopt.spark.run.rounds.RoundRunner.prepare>`).

    ``tuples`` are each stream's frame on Spark, or None where the rounds' tuples
    are on the driver (``rows``, an Arrow table: frames are made of what is kept
    of them). :func:`bound_batch` fills ``shares`` (round -> what the negotiation
    asks of it, as :meth:`RoundRunner.shed` gives it), ``window`` (the memory
    bound's record, the same for every round of the micro-batch) and, with
    shedders on shared segments, ``kept_rows`` (round -> the tuples kept).
    """

    outcomes: dict[int, Any]  # round -> its RoundOutcome, in round order
    observed: dict[int, dict[str, float]]
    tuples: dict[str, DataFrame] | None
    rows: Any
    batch_id: int | None
    lags: dict[int, float]
    statistics_s: float
    shares: dict[int, dict[str, Any]] = field(default_factory=dict)
    window: dict[str, Any] | None = None
    # round -> the tuples Spark is handed, already shed (Babcock's shared segments)
    kept_rows: dict[int, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        """Whether the rounds' frames are made on the driver, of the tuples kept."""
        return self.tuples is None

    @property
    def driver_tuples(self) -> int | None:
        """How many tuples the rounds hold on the driver (None: they are on Spark)."""
        return self.rows.num_rows if self.local else None


def window_condition(start: float, window_s: float, kept_s: float) -> Column:
    """:func:`~cqopt.spark.run.driver_rows.window_rows`'s rule as a Spark condition over ``ts`` and ``_round``.

    Parameters
    ----------
    start, window_s, kept_s : float
        As :func:`~cqopt.spark.run.driver_rows.window_rows`.

    Returns
    -------
    Column
        True for a tuple in the last ``kept_s`` seconds of its round.
    """
    from pyspark.sql import functions as F

    return F.col("ts") >= F.lit(start) + (F.col("_round") + 1) * F.lit(window_s) - F.lit(kept_s)


def round_seconds(engine, plan, observed: Mapping[str, float], window_s: float, *,
                  scan: float, share: float = 1.0
                  ) -> tuple[dict[str, np.ndarray], Callable[[Mapping[str, Any]], np.ndarray]]:
    """A round's statistics as its plan sees them, and the engine model's seconds for it.

    Parameters
    ----------
    engine : Engine
        The engine cost model (:func:`cqopt.costmodel.make_model` ``("engine", catalog)``).
    plan : Plan
        The round's chosen plan.
    observed : Mapping[str, float]
        The round's statistics (``rate.S`` in tuples per second).
    window_s : float
        The round's length W.
    scan : float
        Seconds per tuple Spark scans: the catalog's ``[engine] scan`` where
        Spark reads the round's tuples and samples them after (the tuples shed
        are still scanned), 0 where they are sampled on the driver first.
    share : float
        The share of the round's tuples its window keeps (1: all; PIPES' windows).

    Returns
    -------
    stats : dict of numpy.ndarray
        The statistics at ``share`` (one round).
    predict : callable
        ``predict(at)``: seconds at statistics ``at`` (``stats`` with its rates
        scaled by a share kept), what :func:`~cqopt.runtime.overload.simulate.simulate_rounds`
        asks for.
    """
    full = {k: np.array([v]) for k, v in observed.items()}
    stats = scaled_rates(full, share)
    rates = [rate_name(s) for s in plan.join_order]

    def predict(at: Mapping[str, Any]) -> np.ndarray:
        unread = sum(full[k] - at[k] for k in rates) * window_s  # read by Spark, not used
        return np.asarray(engine.seconds(plan, at)) + scan * unread

    return stats, predict


def bound_batch(runners: Mapping[str, RoundRunner], dues: Mapping[str, Due]) -> None:
    """What the memory budget, the negotiation and the shedders on shared segments ask of
    every query's rounds due in one micro-batch (see the module docstring).

    Parameters
    ----------
    runners : Mapping[str, RoundRunner]
        Each query's round runner (its context and engine model); every one has
        the same settings.
    dues : Mapping[str, Due]
        Each query's rounds due, by query: their ``window`` (with a memory
        budget), ``shares`` (with a negotiated deadline or shared shedders) and
        ``kept_rows`` (shared shedders) are filled in place.
    """
    if not dues:
        return
    settings = next(iter(runners.values())).ctx.settings
    if settings.memory_budget is not None:
        _shrink(runners, dues, settings.memory_budget, settings.window_min)
    if settings.negotiate:
        _negotiate(runners, dues)
    if settings.shared_shedding:
        from cqopt.spark.run.shared_shedding import shed_shared

        shed_shared(runners, dues)


def _query_memory(runner: RoundRunner, due: Due) -> float:
    """The memory a query holds in the micro-batch: the largest its chosen plans' chart
    model predicts at their rounds' statistics."""
    import pandas as pd

    from cqopt.replay.overload import chosen_memory
    from cqopt.replay.replay import actual_statistics

    chart, rounds = runner.ctx.chart, list(due.outcomes)
    position = {p.id: i for i, p in enumerate(chart.plans)}
    stats = actual_statistics(chart, pd.DataFrame([due.observed[r] for r in rounds]))
    chosen = np.array([position[due.outcomes[r].plan_id] for r in rounds], dtype=np.intp)
    return float(chosen_memory(chart, runner.ctx.catalog, stats, chosen).max())


def _shrink(runners: Mapping[str, RoundRunner], dues: Mapping[str, Due], budget: float,
            window_min: float) -> None:
    """PIPES' windows for the micro-batch: each query's due rounds get the record."""
    from cqopt.replay.overload import shrink_windows

    memory = {name: _query_memory(runners[name], due) for name, due in dues.items()}
    windows = {name: runners[name].ctx.window_s for name in dues}
    adapted = shrink_windows(memory, windows, budget, window_min)
    before = float(sum(memory.values()))
    for name, due in dues.items():
        due.window = {"fraction": adapted.window_fraction, "window_s": adapted.windows[name],
                      "memory_before": before, "memory_after": adapted.memory,
                      "query_memory": memory[name], "budget": budget, "met": adapted.met,
                      "queries": len(dues)}
    if adapted.changed:
        runners[next(iter(dues))].ctx.say(
            f"{', '.join(dues)}: {_when(dues)}: the chosen plans would hold "
            f"{before:,.0f} B, over the {budget:,.0f} B budget; windows shrink to "
            f"{adapted.window_fraction:.2f} of their range ({adapted.memory:,.0f} B"
            f"{'' if adapted.met else ', still over: every window at its least'})")


def _negotiate(runners: Mapping[str, RoundRunner], dues: Mapping[str, Due]) -> None:
    """RTStream's negotiation over every round due: one common level, each round's share."""
    from cqopt.runtime.overload.qos_negotiation import QualityTable, QueryInstance, negotiate

    instances, owners = [], []
    for name, due in dues.items():
        runner = runners[name]
        settings, least = runner.ctx.settings, runner.ctx.settings.min_kept
        share = 1.0 if due.window is None else due.window["window_s"] / runner.ctx.window_s
        for i, r in enumerate(due.outcomes):
            model = runner.round_model(due.outcomes[r].plan, due.observed[r], due.local,
                                       share)
            table = QualityTable.from_rows(f"{name} round {r}", [(least, 1.0 - least)])
            instances.append(QueryInstance(table, (i + 1) * settings.deadline,
                                           _instance_seconds(model)))
            owners.append((name, r, model))
    outcome = negotiate(instances, now=0.0, step=NEGOTIATION_STEP)
    level = float(outcome.level)
    for instance, (name, r, model) in zip(instances, owners):
        full, after = (instance.seconds_at(1.0), instance.seconds_at(level))
        tuples = 0.0 if model is None else float(sum(
            v[0] for k, v in model[0].items() if k.startswith("rate."))) * \
            runners[name].ctx.window_s
        dues[name].shares[r] = {
            "kept": level, "predicted_s": None if model is None else full,
            "predicted_after_s": None if model is None else after,
            "dropped": tuples * (1.0 - level), "unreachable": instance.name in outcome.misses,
            "level": level, "met": bool(outcome.met), "negotiated": len(instances)}
    _say_negotiated(runners, dues, outcome, len(instances))


def _instance_seconds(model) -> Callable[[np.ndarray], float]:
    """An instance's seconds at the kept share of its inputs (0 for a round whose plan
    cannot be priced: a stream of it without tuples, nothing to shed)."""
    if model is None:
        return lambda kept: 0.0
    stats, predict = model
    return lambda kept: float(np.asarray(predict(scaled_rates(stats, float(kept[0]))))[0])


def _say_negotiated(runners, dues, outcome, instances: int) -> None:
    """A line when the level falls below full QoS; once per query when it misses."""
    if outcome.level >= 1.0:
        return
    runners[next(iter(dues))].ctx.say(
        f"{', '.join(dues)}: {_when(dues)}: {instances} rounds negotiated to QoS level "
        f"{outcome.level:.2f} (each keeps {outcome.level:.0%} of its input)"
        + ("" if outcome.met else f"; even so {len(outcome.misses)} are predicted late"))
    for name in dues:
        runner = runners[name]
        if not outcome.met and not runner.unreachable_said:
            runner.unreachable_said = True
            runner.ctx.say(f"{name}: even at the least share kept "
                           f"({runner.ctx.settings.min_kept:.0%}) the negotiated rounds are "
                           "predicted to miss their deadlines; they run at it and count as "
                           "misses (said once)")


def _when(dues: Mapping[str, Due]) -> str:
    """Which micro-batch the rounds ``dues`` are of, in words."""
    batch_id = next(iter(dues.values())).batch_id
    return "the input's last rounds" if batch_id is None else f"micro-batch {batch_id}"


def is_finite_round(engine, plan, observed: Mapping[str, float]) -> bool:
    """Whether the engine model can price ``plan`` at ``observed``.

    Parameters
    ----------
    engine : Engine
    plan : Plan
    observed : Mapping[str, float]
        A round's statistics.

    Returns
    -------
    bool
        Every statistic the model reads of ``plan`` is a number (a stream without
        tuples defines no selectivity).
    """
    return all(math.isfinite(observed.get(k, math.nan)) for k in engine.statistics(plan))
