"""A run's rounds: each complete round observed, its plan chosen, shed, run and logged.

For the rounds a micro-batch completes (:meth:`RoundRunner.run`):

1. the rounds' statistics are observed (:mod:`~cqopt.spark.run.observed`): for at most
   :data:`~cqopt.spark.run.staging.LOCAL_TUPLES` tuples, on the driver
   (:func:`~cqopt.spark.run.observed.local_statistics`, the offline definitions, every
   round at once); for more, with :func:`cqopt.spark.round_stats.round_statistics`,
   in one Spark job for every round;
2. an :class:`~cqopt.runtime.adaptive.AdaptiveQuery` estimates each round
   from the rounds before it (or, with ``estimator="sample"``, takes its own
   statistics) and looks the estimate up in the chart (Algorithm 2,
   section 4.5), counting moves and switches;
3. the overload bounds (:mod:`~cqopt.spark.run.overload`): with a memory
   budget, the windows of rounds whose plans would hold too much shrink; with
   a deadline, the engine model predicts the chosen plan's seconds and a round
   predicted to overrun keeps only the share of each stream's tuples that fits
   (:meth:`RoundRunner.shed`), or the share the queries negotiated; tuples on
   the driver are shed there, before Spark is handed the round;
4. the plan runs as a DataFrame (:func:`cqopt.spark.plan_frame.to_spark`) on
   the round's tuples and its result is written
   (:func:`cqopt.spark.run.sink.write_result`), its rows counted on the way:
   one Spark job per round. With ``shadow`` every candidate plan also runs
   on the round (``write.format("noop")``: executed, then discarded) and its
   time is logged. Rounds completed together without ``shadow`` or a
   deadline (a backlog) are grouped by the plan chosen for each, and each
   plan runs once over its rounds, the round a key of every join and
   grouping: one job per plan, each round's rows what it gives alone;
5. the round is logged (:class:`~cqopt.spark.run.roundlog.RoundLog`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cqopt.runtime.adaptive import AdaptiveQuery
from cqopt.spark.operator_metrics import (
    OperatorMetricsError,
    profiled,
    write_round_profiles,
)
from cqopt.spark.plan_frame import scaled_answers, to_spark
from cqopt.spark.run.concurrent import run_all
from cqopt.spark.run.driver_rows import sample_rows, window_rows
from cqopt.spark.run.observed import observed_rounds
from cqopt.spark.run.overload import (
    Due,
    bound_batch,
    is_finite_round,
    round_seconds,
    window_condition,
)
from cqopt.spark.run.roundlog import RoundLog, observed_statistics
from cqopt.spark.run.settings import RunContext
from cqopt.spark.run.sink import (
    adopt_round,
    remove,
    split_by_round,
    write_by_round,
    write_result,
)
from cqopt.spark.run.staging import Staging
from cqopt.spark.run.state import RunState
from cqopt.spark.session import driver_data_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from cqopt.spark.shared_work import SharedWork


# Rounds whose observations warm the adaptive query made on a rebuilt chart.
WARM_ROUNDS = 50


@dataclass
class Grouped:
    """Rounds whose plans are chosen and built (:meth:`RoundRunner.group`), not yet run.

    ``frames[i]`` gives the results of the rounds ``groups[i]`` (one plan's), its
    first column ``_round``; once written under :meth:`scratch` (``_round=R``
    folders) with ``seconds[i]`` each round's share of the time,
    :meth:`RoundRunner.finish` adopts and logs them.
    """

    outcomes: dict[int, Any]  # round -> its RoundOutcome, in round order
    observed: dict[int, dict[str, float]]
    groups: list[list[int]]
    frames: list[DataFrame]
    batch_id: int | None
    lags: dict[int, float]
    statistics_s: float
    folder: Path  # the scratch name's stem, in the results folder
    seconds: dict[int, float] = field(default_factory=dict)
    window: dict[str, Any] | None = None  # the memory budget's record of the rounds
    local: bool = False  # frames of tuples on the driver: run under DRIVER_DATA_CONF
    tuples: int | None = None  # how many tuples on the driver the frames read, when local
    plans: list[Any] = field(default_factory=list)  # each group's plan
    # Built without frames (a workload's joint job): each stream's tuples on the driver,
    # and each plan's columns once its result is written (write_rows).
    tables: dict[str, Any] | None = None
    schemas: dict[int, Any] = field(default_factory=dict)
    joint: int = 1  # the plans of the job that ran these (1: a job of their own)

    def scratch(self, index: int) -> Path:
        return self.folder.with_name(f"{self.folder.name}-{index}")

    def schema(self, index: int):
        """Plan ``index``'s result columns, ``_round`` left out."""
        if index in self.schemas:
            return self.schemas[index]
        return self.frames[index].drop("_round").schema

    def write_rows(self, index: int, table, schema, seconds: float, joint: int) -> None:
        """Plan ``index``'s rounds' results, computed by a job of ``joint`` plans (an Arrow
        table, ``_round`` first), written under :meth:`scratch`; ``seconds`` its share of
        that job's time per round."""
        remove(self.scratch(index))
        split_by_round(table, self.scratch(index))
        self.schemas[index], self.seconds[index], self.joint = schema, seconds, joint

    def write(self, index: int) -> None:
        """Run plan ``index`` (one Spark job) and write its rounds' results under
        :meth:`scratch`; ``seconds[index]`` its time over its rounds."""
        began = time.perf_counter()
        remove(self.scratch(index))
        write_by_round(self.frames[index], self.scratch(index))
        self.seconds[index] = (time.perf_counter() - began) / len(self.groups[index])

    def copy(self, index: int, other: Grouped, other_index: int) -> None:
        """Plan ``index``'s rounds' results are ``other``'s plan ``other_index``'s, already
        written (an equal query's plan over the same tuples): copied into :meth:`scratch`,
        its time that job's."""
        remove(self.scratch(index))
        if other.scratch(other_index).exists():  # a result of no row has no folder
            shutil.copytree(other.scratch(other_index), self.scratch(index))
        self.seconds[index] = other.seconds[other_index]

    def steps(self) -> list:
        """One :meth:`write` per plan, each a step for :func:`~cqopt.spark.run.concurrent.run_all`."""
        return [lambda index=index: self.write(index) for index in range(len(self.frames))]


class RoundRunner:
    """Runs a run's complete rounds in round order; holds the adaptive query."""

    def __init__(self, ctx: RunContext, state: RunState, staging: Staging, log: RoundLog):
        self.ctx, self.state, self.staging, self.log = ctx, state, staging, log
        self.adaptive = AdaptiveQuery.costed(ctx.chart, ctx.catalog,
                                             **ctx.settings.adaptive_options)
        self.engine = None
        if ctx.settings.deadline is not None:  # the model that predicts each round's seconds
            from cqopt.costmodel import make_model

            self.engine = make_model("engine", ctx.catalog)
        self.unreachable_said = False
        self.shared_said: set[str] = set()  # what was said once of shared segments
        # A workload's memo of one micro-batch's plans (cqopt.spark.shared_work), while
        # its plans are built; None in a run of its own.
        self.shared: SharedWork | None = None
        self.profiling = ctx.settings.shadow  # per-operator metrics of each timed plan
        self.refresher = self._refresher()
        # The logged rounds' observations bring the adaptive query to where it stopped.
        for record in log.records:
            self.choose(record["observed"])

    def _refresher(self):
        """``--refresh N``: the chart rebuilt in the background from the run's rounds
        (``adaptive_chart`` is the one rounds are chosen from, of ``generation``)."""
        self.adaptive_chart, self.generation = self.ctx.chart, 0
        if self.ctx.settings.refresh is None:
            return None
        from cqopt.runtime.refresh import ChartRefresher

        name = self.ctx.name
        return ChartRefresher(self.ctx.chart, self.ctx.catalog, every=self.ctx.settings.refresh,
                              say=lambda line: self.ctx.say(f"{name}: {line}"))

    def _swap(self) -> None:
        """Between rounds: take the refresher's newest chart, if its plans are the run's.

        A rebuilt chart with other candidate plans (an engine chart's strategies are
        chosen over its box) is not taken: the round log and the shadow timings
        compare the same plans in every round. The adaptive query is made anew on
        the new chart and warmed on the last rounds' observations, as on resumption.
        """
        new, generation = self.refresher.latest()  # one read: a chart and its number
        if generation == self.generation:
            return
        self.generation = generation
        if [p.id for p in new.plans] != [p.id for p in self.adaptive_chart.plans]:
            self.ctx.say(f"{self.ctx.name}: the chart rebuilt from the run's rounds has other "
                         "candidate plans; the run goes on with its chart")
            return
        self.adaptive_chart = new
        self.adaptive = AdaptiveQuery.costed(new, self.ctx.catalog,
                                             **self.ctx.settings.adaptive_options)
        for record in self.log.recent(WARM_ROUNDS):
            self.choose(record["observed"], refresh=False)
        changes = "; ".join(self.refresher.changes) or "no range changed"
        self.ctx.say(f"{self.ctx.name}: chart rebuilt from the run's rounds and swapped in "
                     f"(generation {self.generation}): {changes}")

    def run(self, tagged: DataFrame | None, batch_id: int | None, stop: int,
            local=None) -> None:
        """Run rounds ``next_round <= r < stop`` (up to ``max_rounds``).

        Their statistics come from their tuples on the driver when at most
        :data:`~cqopt.spark.run.staging.LOCAL_TUPLES` (else from one Spark job
        over all of them), and the chart chooses each round's plan in round
        order (Algorithm 2); the overload bounds decide what each keeps
        (:func:`~cqopt.spark.run.overload.bound_batch`). One round is one job:
        its plan's result written, its row count counted on the way (no
        re-read). Several rounds at once (a backlog, the end of a finite input)
        without ``shadow`` or a deadline are grouped by the plan chosen for
        each (:meth:`_run_grouped`).
        """
        due = self.prepare(tagged, batch_id, stop, local)
        if due is not None:
            bound_batch({self.ctx.name: self}, {self.ctx.name: due})
            self.run_due(due)

    def prepare(self, tagged: DataFrame | None, batch_id: int | None, stop: int,
                local=None) -> Due | None:
        """Rounds ``next_round <= r < stop`` (up to ``max_rounds``) observed and their plans
        chosen in round order, nothing run yet: their tuples (on the driver where few, no
        frame made of them yet), statistics, plans, lags, and what measuring them cost per
        round; None when no round is to run."""
        newest = stop - 1  # the newest complete round, which the lag is measured against
        settings = self.ctx.settings
        if settings.max_rounds is not None:
            stop = min(stop, settings.max_rounds)
        first = self.log.next_round
        if stop <= first:
            return None
        rows, tuples = self.staging.round_frames(tagged, local, first, stop, frames=False)
        # What measuring the rounds' statistics costs (RTStream's sampler cost), per round.
        began = time.perf_counter()
        observed = observed_rounds(self.ctx.query, rows, tuples, self.ctx.streams, first,
                                   stop, self.ctx.window_s, self.state.start)
        statistics_s = (time.perf_counter() - began) / (stop - first)
        lags = {r: (newest - r) * self.ctx.window_s for r in range(first, stop)}
        outcomes = {r: self.choose(observed[r]) for r in sorted(observed)}
        return Due(outcomes, observed, tuples, rows, batch_id, lags, statistics_s)

    def run_due(self, due: Due) -> None:
        """Run rounds prepared (and bounded): one by one with ``shadow`` or a deadline, or
        alone; else grouped by plan."""
        settings = self.ctx.settings
        if settings.shadow or settings.deadline is not None or len(due.outcomes) == 1:
            for r in due.outcomes:
                self._run_round(r, due)
            return
        self._run_grouped(self.group(due))

    def group(self, due: Due, frames: bool = True) -> Grouped:
        """Build, per plan chosen for the rounds ``due``, one DataFrame of its rounds'
        results, the round a key of every join and grouping (:func:`to_spark`'s
        ``round_column``), its first column ``_round``: nothing runs yet. A lone round's
        plan runs as a round alone does, its round added after. Without ``frames``
        (rounds on the driver, for a workload's joint job) no DataFrame is built: the
        groups, their plans, and each stream's tuples on the driver."""
        from pyspark.sql import functions as F

        outcomes = due.outcomes
        groups: dict[str, list[int]] = {}
        for r, outcome in outcomes.items():
            groups.setdefault(outcome.plan_id, []).append(r)
        plans = [outcomes[rounds[0]].plan for rounds in groups.values()]
        folder = self.ctx.out / "results" / f".tmp-group-{min(outcomes):06d}"
        if not frames:
            return Grouped(outcomes, due.observed, list(groups.values()), [], due.batch_id,
                           due.lags, due.statistics_s, folder, window=due.window,
                           local=True, tuples=due.driver_tuples, plans=plans,
                           tables=self.staging.tables_from(self._window_rows(due)))
        tuples = self._windowed(due)
        frames = []
        shared = self.shared
        for rounds in groups.values():
            plan = outcomes[rounds[0]].plan
            if shared is not None:  # whose plan: steps another plan also builds are shared
                shared.begin_part((self.ctx.name, plan.id))
            if len(outcomes) == 1:  # as _run_round runs it (an aggregate of no tuple: a row)
                alone = {s: self._derived(df, ("round", rounds[0]), lambda df=df: df.where(
                    F.col("_round") == rounds[0]).drop("_round")) for s, df in tuples.items()}
                frame = to_spark(plan, alone, query=self.ctx.query, shared=shared,
                                 one_partition=due.local)
                frame = self._derived(frame, ("with round", rounds[0]), lambda frame=frame:
                                      frame.select(F.lit(rounds[0]).cast("long")
                                                   .alias("_round"), "*"))
            else:  # one plan for every round: the frames hold its rounds and no other
                mine = tuples if len(groups) == 1 else {
                    s: self._derived(df, ("rounds", tuple(rounds)),
                                     lambda df=df: df.where(_in_rounds(rounds)))
                    for s, df in tuples.items()}
                frame = to_spark(plan, mine, query=self.ctx.query, round_column="_round",
                                 shared=shared, one_partition=due.local)
            if shared is not None:
                shared.end_part(frame)
            frames.append(frame)
        return Grouped(outcomes, due.observed, list(groups.values()), frames, due.batch_id,
                       due.lags, due.statistics_s, folder, window=due.window,
                       local=due.local, tuples=due.driver_tuples, plans=plans)

    def _window_rows(self, due: Due):
        """The rounds' tuples on the driver, each round cut to the last part of its window
        the memory budget leaves (all of it without one)."""
        kept_s = None if due.window is None else due.window["window_s"]
        if kept_s is None:
            return due.rows
        return window_rows(due.rows, self.state.start, self.ctx.window_s, kept_s)

    def _windowed(self, due: Due) -> dict[str, DataFrame]:
        """Each stream's frame of the rounds ``due``, each round cut to the last part of its
        window the memory budget leaves (all of it without one)."""
        kept_s = None if due.window is None else due.window["window_s"]
        start, window_s = self.state.start, self.ctx.window_s
        if due.local:
            return self.staging.frames_from(self._window_rows(due))
        if kept_s is None or kept_s >= window_s:
            return due.tuples
        inside = window_condition(start, window_s, kept_s)
        return {s: df.where(inside) for s, df in due.tuples.items()}

    def _derived(self, frame: DataFrame, signature: tuple, build) -> DataFrame:
        """``build()``, a filter of ``frame``: through the shared memo when there is one."""
        if self.shared is None:
            return build()
        return self.shared.derive(frame, signature, build, step=False)

    def _run_grouped(self, grouped: Grouped) -> None:
        """Run a backlog of rounds plan by plan: the rounds are grouped by the plan chosen
        for each, and each plan runs once over its rounds, the round a key of every join
        and grouping (:func:`to_spark`'s ``round_column``): one job per plan instead of one
        per round, each round's rows the same. The plans' jobs run side by side
        (:func:`~cqopt.spark.run.concurrent.run_all`); the first failure is raised once
        all have ended."""
        with driver_data_conf(self.ctx.spark, grouped.local, grouped.tuples):
            errors = run_all(grouped.steps())
        for error in errors:
            if error is not None:
                raise error
        self.finish(grouped)

    def finish(self, grouped: Grouped) -> None:
        """Move each round's written result into place and log it, in round order: a kill
        leaves a whole prefix. Every plan's rounds are written (:meth:`Grouped.scratch`)."""
        results = self.ctx.out / "results"
        written: dict[int, tuple[Path | None, float, int]] = {}  # part, seconds, group
        for index, rounds in enumerate(grouped.groups):
            for r in rounds:
                part = grouped.scratch(index) / f"_round={r}"
                written[r] = (part if part.exists() else None, grouped.seconds[index], index)
        for r, outcome in grouped.outcomes.items():
            part, seconds, index = written[r]
            # Only a round without rows needs its plan's schema (asking Spark is a round trip).
            schema = None if part is not None else grouped.schema(index)
            rows_out = adopt_round(part, results / f"round-{r:06d}.parquet", schema)
            self.log.append(self.log.record(
                r, self.state.start, outcome, grouped.observed[r], rows_out=rows_out,
                seconds=seconds, batch_id=grouped.batch_id, lag_s=grouped.lags[r],
                grouped=len(grouped.groups[index]), statistics_s=grouped.statistics_s,
                window=grouped.window, joint=grouped.joint))
        for index in range(len(grouped.groups)):
            remove(grouped.scratch(index))

    def choose(self, observed: Mapping[str, float | None], refresh: bool = True):
        """Algorithm 2's step for a round observed as ``observed``: its outcome.

        With ``sample`` (the round's own statistics), the plan is chosen at
        them; otherwise at the estimate from earlier rounds. A round without
        tuples defines no selectivity: the estimators see what was observed
        (as in :func:`cqopt.replay.replay.replay`).
        """
        if refresh and self.refresher is not None:
            self._swap()
        seen = observed_statistics(observed, self.adaptive.statistics)
        outcome = self.adaptive.step(seen, measured=self.ctx.settings.own_statistics)
        if refresh and self.refresher is not None:
            self.refresher.observe(seen)
        return outcome

    def _run_round(self, r: int, due: Due) -> None:
        """Run one round alone: shed to its deadline (or its negotiated share), run,
        shadowed, logged."""
        from pyspark import StorageLevel

        shadow = self.ctx.settings.shadow
        outcome, observed = due.outcomes[r], due.observed[r]
        share = 1.0 if due.window is None else due.window["window_s"] / self.ctx.window_s
        shed = due.shares.get(r) or self.shed(r, outcome.plan, observed, due.local, share)
        frames = self._round_frames(r, due, shed)
        if shadow:  # every candidate reads the round: read it once
            frames = {s: df.persist(StorageLevel.MEMORY_AND_DISK) for s, df in frames.items()}
        try:
            with driver_data_conf(self.ctx.spark, due.local, due.driver_tuples):
                rows_out, seconds, timed = self._run_frames(r, outcome, frames, shed,
                                                            due.local)
        finally:
            if shadow:
                for frame in frames.values():
                    frame.unpersist()
        self.log.append(self.log.record(
            r, self.state.start, outcome, observed, rows_out=rows_out, seconds=seconds,
            batch_id=due.batch_id, lag_s=due.lags[r], statistics_s=due.statistics_s,
            shadow=timed, shed=shed, window=due.window))

    def _run_frames(self, r: int, outcome, frames: dict[str, DataFrame],
                    shed: dict[str, Any], local: bool) -> tuple[int, float, dict[str, float]]:
        """Round ``r``'s plan over its ``frames`` (each one partition when ``local``), its
        answers scaled to what ``shed`` kept, written; its rows, its seconds, and the
        shadow plans' seconds (with ``shadow``)."""
        began = time.perf_counter()
        result = to_spark(outcome.plan, frames, query=self.ctx.query, one_partition=local)
        if 0.0 < shed["kept"] < 1.0:  # kept 0: the whole round shed, nothing to scale
            result = scaled_answers(result, outcome.plan, self.ctx.query, shed["kept"])
        rows_out = write_result(result, self.ctx.out / "results" / f"round-{r:06d}.parquet")
        seconds = time.perf_counter() - began
        return rows_out, seconds, (self._shadow(frames, r, local) if self.ctx.settings.shadow
                                   else {})

    def _round_frames(self, r: int, due: Due, shed: dict[str, Any]) -> dict[str, DataFrame]:
        """Round ``r``'s frames, its window cut by the memory budget, the share ``shed``
        keeps sampled at the inputs: on the driver before Spark is handed the round where
        its tuples are there (``shed`` then counts the tuples handed), else on Spark."""
        from pyspark.sql import functions as F

        kept = shed["kept"]
        if due.local:
            import pyarrow.compute as pc

            rows = due.kept_rows.get(r)  # shed already on a shared segment
            if rows is None:
                rows = due.rows.filter(pc.equal(due.rows["_round"], r))
                if due.window is not None:
                    rows = window_rows(rows, self.state.start, self.ctx.window_s,
                                       due.window["window_s"])
                rows = sample_rows(rows, kept, seed=r)
            if self.engine is not None:  # with a deadline: what Spark was handed
                shed.update(shed_on="driver", tuples_kept=rows.num_rows)
            return {s: df.drop("_round") for s, df in self.staging.frames_from(rows).items()}
        tuples = self._windowed(due)
        frames = {s: df.where(F.col("_round") == r).drop("_round") for s, df in tuples.items()}
        if kept < 1.0:  # random shedders at the inputs, after Spark reads them
            if self.engine is not None:
                shed["shed_on"] = "spark"
            frames = {s: df.sample(withReplacement=False, fraction=kept, seed=r)
                      for s, df in frames.items()}
        return frames

    def round_model(self, plan, observed: Mapping[str, float], local: bool, share: float = 1.0):
        """The engine model's seconds for a round of ``plan`` at ``observed``
        (:func:`~cqopt.spark.run.overload.round_seconds`): the tuples shed are scanned
        unless the round is shed on the driver (``local``); None when the model cannot
        price the round (a stream of it without tuples)."""
        if self.engine is None or not is_finite_round(self.engine, plan, observed):
            return None
        return round_seconds(self.engine, plan, observed, self.ctx.window_s,
                             scan=0.0 if local else self.ctx.catalog.engine.scan, share=share)

    def shed(self, r: int, plan, observed: Mapping[str, float], local: bool = False,
             share: float = 1.0) -> dict[str, Any]:
        """What the deadline asks of round ``r``: its predicted seconds at full input, the
        share kept (1: nothing shed) and the tuples that drops (see ``deadline``); its
        tuples on the driver (``local``) are shed before Spark reads them, and ``share``
        of them is what the round's window keeps."""
        settings, engine = self.ctx.settings, self.engine
        if engine is None:
            return {"kept": 1.0}
        from cqopt.runtime.overload.simulate import simulate_rounds

        model = self.round_model(plan, observed, local, share)
        if model is None:
            return {"kept": 1.0, "predicted_s": None}  # a stream without tuples: nothing to shed
        stats, predict = model
        run = simulate_rounds(stats, predict, settings.deadline, self.ctx.window_s,
                              min_kept=settings.min_kept)
        if run.unreachable[0] and not self.unreachable_said:
            self.unreachable_said = True
            least = (f"{settings.min_kept:.0%} of their input" if settings.min_kept > 0 else
                     "none of their input (whole rounds shed: --min-kept sets the least "
                     "share a round keeps)")
            self.ctx.say(f"{self.ctx.name}: round {r}: even keeping {settings.min_kept:.0%} of "
                         f"its input, {plan.id} is predicted at {run.predicted_after[0]:.3f} s, "
                         f"over the {settings.deadline:g} s deadline; such rounds run at the "
                         f"least share allowed, {least}, and count as misses (said once)")
        return {"kept": float(run.kept[0]), "predicted_s": float(run.predicted[0]),
                "predicted_after_s": float(run.predicted_after[0]),
                "dropped": float(run.dropped[0]), "unreachable": bool(run.unreachable[0])}

    def _shadow(self, frames: dict[str, DataFrame], r: int,
                local: bool = False) -> dict[str, float]:
        """Every candidate's wall time on the round, results discarded (Spark's noop sink).

        The order rotates by round, so no plan always runs first (cold) or last.
        """
        plans = list(self.ctx.chart.plans)
        shift = r % len(plans)
        times, profiles = {}, {}
        for plan in plans[shift:] + plans[:shift]:
            job = to_spark(plan, frames, query=self.ctx.query,
                           one_partition=local).write.format("noop").mode("overwrite")
            if not self.profiling:
                began = time.perf_counter()
                job.save()
                times[plan.id] = time.perf_counter() - began
                continue
            try:  # each operator's rows and seconds, for calibrate --from-run
                with profiled(self.ctx.spark) as profile:
                    began = time.perf_counter()
                    job.save()
                    times[plan.id] = time.perf_counter() - began
                profiles[plan.id] = profile.records
            except OperatorMetricsError as err:  # the timing stands; profiling stops
                self.profiling = False
                self.ctx.say(f"{self.ctx.name}: round {r}: Spark's operator metrics could not "
                             f"be read ({err}); plans are still timed whole, without them "
                             "(said once)")
        if profiles:
            write_round_profiles(self.ctx.out, r, profiles)
        return {p.id: times[p.id] for p in plans}


def _in_rounds(rounds: list[int]):
    """The condition that a tuple is of one of ``rounds`` (ascending): a range where they
    are one, else one SQL ``IN`` parsed by Spark (``Column.isin`` makes a literal per
    round, a JVM round trip each: 1.1 s of a 600-round backlog's three plans)."""
    from pyspark.sql import functions as F

    if rounds == list(range(rounds[0], rounds[-1] + 1)):
        return F.col("_round").between(rounds[0], rounds[-1])
    return F.expr(f"_round IN ({', '.join(str(int(r)) for r in rounds)})")
